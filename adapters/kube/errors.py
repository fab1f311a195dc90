"""What a failed Kubernetes call means for the caller, decided in one place.

kubernetes_asyncio raises `ApiException` for HTTP errors and lets aiohttp's and
asyncio's errors through for transport failures. Nothing above this module should
look at an HTTP status: `translate` turns every failure into one of the types below,
each of which says what to do next (re-read, wait and retry, give up). The mapping
lives only in `translate`. Each type is also one of the engine's error types, so the
effect runtime decides from the type alone: `Temporary` is a `TemporaryError` (retry
after `delay` or the backoff), `Conflict` and `NotFound` are `RetryAfterObservation`
(the world moved: decide again from the next observed world; a failed JSON patch
`test` is a `TestFailed` conflict), `PatchRejected` is a `PermanentError`.

A refusal is never a conflict: a 403 (RBAC, or an admission policy with reason
`Forbidden`) and a 422 that is not the API server's answer to a failed `test` op (an
admission policy without a reason answers 422 Invalid: Deckhouse's
`virtualization-restricted-access-policy` does) stay `PatchRejected`, so the effect ends
at once with the server's message instead of being decided again and again.

This module never retries, sleeps or logs; it classifies.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio.client.exceptions import ApiException

from nicplug.engine.errors import PermanentError, RetryAfterObservation, TemporaryError


class KubeError(Exception):
    """A Kubernetes API call failed. `status` is the HTTP status (0 for transport)."""

    def __init__(
        self, message: str, *, status: int = 0, reason: str = "", server_message: str = "",
        causes: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason
        self.server_message = server_message
        """The `message` of the server's `Status` as sent ("" when it sent none)."""
        self.causes = causes
        """The messages of the Status' `details.causes` (an admission denial has one)."""


class Conflict(KubeError, RetryAfterObservation):
    """409: the object changed under us. Re-read the world and decide again."""


class AlreadyExists(Conflict):
    """409 AlreadyExists on create: the object is there (perhaps our own earlier try)."""


class TestFailed(Conflict):
    """A JSON patch's `test` op did not hold (422): the compare-and-swap lost the race."""

    __test__ = False  # not a pytest test class, whatever its name


class NotFound(KubeError, RetryAfterObservation):
    """404: the object (or its kind) does not exist."""


class Expired(KubeError, TemporaryError):
    """410 Gone / Expired: a resourceVersion or continue token is too old. Re-list."""


class Temporary(KubeError, TemporaryError):
    """Worth retrying: 429, 5xx, timeouts, broken connections.

    `delay` is the server's `Retry-After` in seconds when it gave one, else None
    (the caller picks its own backoff).
    """

    def __init__(
        self, message: str, *, status: int = 0, reason: str = "", delay: float | None = None
    ) -> None:
        super().__init__(message, status=status, reason=reason)
        self.delay = delay


class PatchRejected(KubeError, PermanentError):
    """400/403/415/422 and other client errors: retrying the same request cannot help."""


def translate(exc: BaseException, *, now: float | None = None) -> KubeError:
    """The project's error for a failure raised by kubernetes_asyncio or aiohttp.

    `now` (epoch seconds) is only used to turn an HTTP-date `Retry-After` into a delay.
    An exception that is neither an API nor a transport error is a programming error
    and is not translated: it is re-raised.
    """
    if isinstance(exc, KubeError):
        return exc
    if isinstance(exc, ApiException):
        return _from_status(
            int(exc.status or 0), str(exc.reason or ""), exc.body, exc.headers, now
        )
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return Temporary(f"request timed out: {exc!r}", reason="Timeout")
    if isinstance(exc, aiohttp.ClientError | ConnectionError | OSError):
        return Temporary(f"connection failed: {exc!r}", reason="ConnectionError")
    raise exc


PATCH_NOT_APPLIED = "the server rejected our request due to an error in our request"
"""The whole `message` of the API server's 422 when a JSON patch does not apply to the
object (a `test` op that does not hold, a path that is gone): `NewGenericServerResponse`
of k8s.io/apimachinery, which keeps the json-patch error out of the Status."""


def failed_test(error: KubeError) -> bool:
    """Is this 422 the API server's answer to a JSON patch that did not apply? Its Status
    says only `PATCH_NOT_APPLIED` (some servers add the json-patch library's words,
    "testing value /p failed: test failed"), with no causes. An admission denial names
    its policy and carries a cause; a schema error names the field: neither is a lost
    compare-and-swap."""
    if error.status != 422 or error.causes:
        return False
    said = error.server_message.strip()
    if said == PATCH_NOT_APPLIED or said.startswith(PATCH_NOT_APPLIED + " ("):
        return True
    return said.startswith("testing value ") and "failed" in said


def for_json_patch(error: KubeError, operations: Sequence[Mapping[str, Any]]) -> KubeError:
    """Refine the error of a JSON patch holding a `test` op: a 422 that is the server's
    answer to a patch that did not apply (`failed_test`) is the test failing
    (`TestFailed`, decide again from the next observed world). Any other 422 on it (an
    admission policy's denial, a schema error) stays a refusal (`PatchRejected`): the
    same request would be refused again."""
    has_test = any(op.get("op") == "test" for op in operations)
    if isinstance(error, PatchRejected) and has_test and failed_test(error):
        return TestFailed(error.message, status=error.status, reason=error.reason,
                          server_message=error.server_message)
    return error


def _from_status(
    status: int, reason: str, body: Any, headers: Mapping[str, str] | None, now: float | None
) -> KubeError:
    details = _status_body(body)
    reason = str(details.get("reason") or reason)
    said = str(details.get("message") or "")
    message = f"{status} {reason}: {said or _text(body)}".strip()
    if status == 409:
        if reason == "AlreadyExists":
            return AlreadyExists(message, status=status, reason=reason)
        return Conflict(message, status=status, reason=reason)
    if status == 404:
        return NotFound(message, status=status, reason=reason)
    if status == 410:
        return Expired(message, status=status, reason=reason)
    if status == 429 or status >= 500 or status in (0, 401, 408):
        # 401: credentials may be refreshed (a rotated token); 0: no response at all.
        delay = _retry_after(headers, now)
        return Temporary(message, status=status, reason=reason, delay=delay)
    return PatchRejected(message, status=status, reason=reason, server_message=said,
                         causes=_causes(details))


def _causes(details: Mapping[str, Any]) -> tuple[str, ...]:
    """The messages of a Status' `details.causes`."""
    inner = details.get("details")
    causes = inner.get("causes") if isinstance(inner, dict) else None
    if not isinstance(causes, list):
        return ()
    return tuple(str(c.get("message", "")) for c in causes if isinstance(c, dict))


def _status_body(body: Any) -> dict[str, Any]:
    """The `Status` object Kubernetes puts in error bodies, or {} if there is none."""
    if isinstance(body, dict):
        return body
    if isinstance(body, bytes | str) and body:
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return {}


def _text(body: Any) -> str:
    if isinstance(body, bytes):
        return body.decode("utf-8", "replace")[:200]
    return str(body or "")[:200]


def _retry_after(headers: Mapping[str, str] | None, now: float | None) -> float | None:
    """Seconds from a `Retry-After` header: delta-seconds or an HTTP-date."""
    if not headers:
        return None
    value = headers.get("Retry-After")
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    reference = time.time() if now is None else now
    return max(0.0, when.timestamp() - reference)
