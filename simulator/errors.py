"""The simulated API server's errors, each carrying its HTTP code and Kubernetes reason.

The store raises them; the HTTP layer turns them into `Status` objects unchanged, so a
client sees the same code and reason whether the error came from the store or the wire.
Nothing here knows about HTTP requests or the store's internals.
"""

from __future__ import annotations

from typing import Any, ClassVar


class ApiError(Exception):
    """An error a real API server would answer with a `Status` object."""

    code: ClassVar[int] = 500
    reason: ClassVar[str] = "InternalError"

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}

    def status(self) -> dict[str, Any]:
        """The Kubernetes `Status` body of this error."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


class BadRequest(ApiError):
    code = 400
    reason = "BadRequest"


class NotFound(ApiError):
    code = 404
    reason = "NotFound"


class MethodNotAllowed(ApiError):
    code = 405
    reason = "MethodNotAllowed"


class AlreadyExists(ApiError):
    code = 409
    reason = "AlreadyExists"


class Conflict(ApiError):
    code = 409
    reason = "Conflict"


class Expired(ApiError):
    code = 410
    reason = "Expired"


class RequestEntityTooLarge(ApiError):
    code = 413
    reason = "RequestEntityTooLarge"


class UnsupportedMediaType(ApiError):
    code = 415
    reason = "UnsupportedMediaType"


class Invalid(ApiError):
    code = 422
    reason = "Invalid"


class TooManyRequests(ApiError):
    code = 429
    reason = "TooManyRequests"


class InternalError(ApiError):
    code = 500
    reason = "InternalError"


def object_details(kind: str, name: str, group: str = "") -> dict[str, Any]:
    """The `details` of a Status about one object, as clients parse them."""
    details: dict[str, Any] = {"name": name, "kind": kind}
    if group:
        details["group"] = group
    return details
