"""What a failed Kubernetes call means for the caller, decided in one place.

kubernetes_asyncio raises `ApiException` for HTTP errors and lets aiohttp's and
asyncio's errors through for transport failures. Nothing above this module should
look at an HTTP status: `translate` turns every failure into one of the types below,
each of which says what to do next (re-read, wait and retry, give up). The mapping
lives only in `translate`, so pointing these types at the engine's own error types
later is a change to this file alone.

This module never retries, sleeps or logs; it classifies.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio.client.exceptions import ApiException


class KubeError(Exception):
    """A Kubernetes API call failed. `status` is the HTTP status (0 for transport)."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason


class Conflict(KubeError):
    """409: the object changed under us. Re-read the world and decide again."""


class AlreadyExists(Conflict):
    """409 AlreadyExists on create: the object is there (perhaps our own earlier try)."""


class NotFound(KubeError):
    """404: the object (or its kind) does not exist."""


class Expired(KubeError):
    """410 Gone / Expired: a resourceVersion or continue token is too old. Re-list."""


class Temporary(KubeError):
    """Worth retrying: 429, 5xx, timeouts, broken connections.

    `delay` is the server's `Retry-After` in seconds when it gave one, else None
    (the caller picks its own backoff).
    """

    def __init__(
        self, message: str, *, status: int = 0, reason: str = "", delay: float | None = None
    ) -> None:
        super().__init__(message, status=status, reason=reason)
        self.delay = delay


class PatchRejected(KubeError):
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


def _from_status(
    status: int, reason: str, body: Any, headers: Mapping[str, str] | None, now: float | None
) -> KubeError:
    details = _status_body(body)
    reason = str(details.get("reason") or reason)
    message = f"{status} {reason}: {details.get('message') or _text(body)}".strip()
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
    return PatchRejected(message, status=status, reason=reason)


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
