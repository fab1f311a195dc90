"""Faults the HTTP layer injects on demand: the failures nicplug must survive.

* `fail_requests`: answer the next N matching requests with 409, 429 (+ Retry-After),
  500, 503... instead of serving them;
* `add_latency`: delay matching requests;
* `drop_watches`: close matching watch streams after N more events;
* `stall_watches`: stop sending on matching watch streams, keeping them open, until
  `resume_watches`;
* `expire_resumptions`: answer the next N watches that resume from a resourceVersion
  with an ERROR 410 event.

A filter names a verb (get, list, watch, create, update, patch, delete) and/or a
resource (plural, `plural.group`, or `plural/status`); None matches all. Controlled
from Python or over HTTP (`POST /_sim/faults` with one `FaultSpec` or a list). Faults live only in
the HTTP layer: in-process actors use the store directly and never see them.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter

from nicplug.simulator.errors import (
    ApiError,
    Conflict,
    InternalError,
    TooManyRequests,
)


@dataclass(frozen=True, slots=True)
class Target:
    """What a request or stream is: its verb and the names its resource goes by."""

    verb: str
    names: frozenset[str]  # plural, plural.group, plural/status...


@dataclass
class _Filter:
    verb: str | None
    resource: str | None

    def matches(self, target: Target) -> bool:
        return (self.verb is None or self.verb == target.verb) and (
            self.resource is None or self.resource in target.names
        )


@dataclass
class _Failure(_Filter):
    code: int
    remaining: int
    retry_after: int


@dataclass
class _Latency(_Filter):
    seconds: float


@dataclass
class _Drop(_Filter):
    after_events: int
    remaining: int | None  # streams still to drop; None: every matching stream
    seen: dict[int, int] = field(default_factory=dict)  # stream id -> events since armed


@dataclass
class _Expire(_Filter):
    remaining: int


class ServiceUnavailable(ApiError):
    code = 503
    reason = "ServiceUnavailable"


_ERRORS: dict[int, type[ApiError]] = {
    409: Conflict,
    429: TooManyRequests,
    500: InternalError,
    503: ServiceUnavailable,
}


class Faults:
    """The injected faults; the HTTP layer asks it before and while serving."""

    def __init__(self) -> None:
        self._failures: list[_Failure] = []
        self._latencies: list[_Latency] = []
        self._drops: list[_Drop] = []
        self._stalls: list[_Filter] = []
        self._expiries: list[_Expire] = []
        self._listeners: set[Callable[[], None]] = set()
        self._changed = asyncio.Event()
        self._stream_ids = itertools.count(1)

    # ------------------------------------------------------------ arming (API)

    def fail_requests(
        self,
        code: int,
        *,
        times: int = 1,
        verb: str | None = None,
        resource: str | None = None,
        retry_after: int = 1,
    ) -> None:
        if code not in _ERRORS:
            raise ValueError(f"cannot inject HTTP {code}: choose one of {sorted(_ERRORS)}")
        if times < 1 or retry_after < 0:
            raise ValueError("times must be >= 1 and retry_after >= 0")
        self._failures.append(_Failure(verb, resource, code, times, retry_after))

    def add_latency(
        self, seconds: float, *, verb: str | None = None, resource: str | None = None
    ) -> None:
        if seconds < 0:
            raise ValueError("latency cannot be negative")
        self._latencies.append(_Latency(verb, resource, seconds))

    def drop_watches(
        self, *, after_events: int = 0, times: int | None = 1, resource: str | None = None
    ) -> None:
        if after_events < 0 or (times is not None and times < 1):
            raise ValueError("after_events must be >= 0 and times >= 1")
        self._drops.append(_Drop("watch", resource, after_events, times))
        self._notify()

    def stall_watches(self, *, resource: str | None = None) -> None:
        self._stalls.append(_Filter("watch", resource))
        self._notify()

    def resume_watches(self) -> None:
        self._stalls.clear()
        self._notify()

    def expire_resumptions(self, *, times: int = 1, resource: str | None = None) -> None:
        if times < 1:
            raise ValueError("times must be >= 1")
        self._expiries.append(_Expire("watch", resource, times))

    def clear(self) -> None:
        for rules in (self._failures, self._latencies, self._drops, self._stalls):
            rules.clear()
        self._expiries.clear()
        self._notify()

    def describe(self) -> dict[str, Any]:
        """The armed faults, as the admin endpoint shows them."""
        return {
            "failures": [
                {"code": f.code, "remaining": f.remaining, "verb": f.verb,
                 "resource": f.resource, "retry_after": f.retry_after}
                for f in self._failures
            ],
            "latencies": [
                {"seconds": x.seconds, "verb": x.verb, "resource": x.resource}
                for x in self._latencies
            ],
            "drops": [
                {"after_events": d.after_events, "remaining": d.remaining,
                 "resource": d.resource}
                for d in self._drops
            ],
            "stalls": [{"resource": s.resource} for s in self._stalls],
            "expiries": [
                {"remaining": e.remaining, "resource": e.resource} for e in self._expiries
            ],
        }

    # ---------------------------------------------------- consulting (HTTP layer)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()
        for listener in list(self._listeners):
            listener()

    def latency(self, target: Target) -> float:
        return sum(x.seconds for x in self._latencies if x.matches(target))

    def failure(self, target: Target) -> tuple[ApiError, int] | None:
        """The error to answer instead of serving (and its Retry-After), consuming it."""
        for rule in self._failures:
            if rule.matches(target):
                rule.remaining -= 1
                if rule.remaining <= 0:
                    self._failures.remove(rule)
                error = _ERRORS[rule.code](
                    f"injected fault: HTTP {rule.code} for {target.verb}",
                    details={"retryAfterSeconds": rule.retry_after} if rule.code == 429 else None,
                )
                return error, rule.retry_after
        return None

    def expires(self, target: Target) -> bool:
        """Whether a watch resuming from a resourceVersion must get 410 (consumes it)."""
        for rule in self._expiries:
            if rule.matches(target):
                rule.remaining -= 1
                if rule.remaining <= 0:
                    self._expiries.remove(rule)
                return True
        return False

    def open_stream(self, listener: Callable[[], None]) -> int:
        """Register a watch stream; `listener` is called whenever the faults change."""
        self._listeners.add(listener)
        return next(self._stream_ids)

    def close_stream(self, stream: int, listener: Callable[[], None]) -> None:
        self._listeners.discard(listener)
        for rule in self._drops:
            rule.seen.pop(stream, None)

    def stalled(self, target: Target) -> bool:
        return any(rule.matches(target) for rule in self._stalls)

    async def changed(self) -> None:
        """Returns at the next change of the armed faults."""
        await self._changed.wait()

    def drops(self, stream: int, target: Target, *, sent: bool) -> bool:
        """Whether stream must close now; `sent` counts one more event delivered."""
        for rule in self._drops:
            if not rule.matches(target):
                continue
            count = rule.seen.get(stream, 0) + (1 if sent else 0)
            rule.seen[stream] = count
            if count >= rule.after_events:
                if rule.remaining is not None:
                    rule.remaining -= 1
                    if rule.remaining <= 0:
                        self._drops.remove(rule)
                return True
        return False


# ------------------------------------------------------------- the admin endpoint


class _Fail(BaseModel):
    action: Literal["fail"]
    code: int
    times: int = 1
    verb: str | None = None
    resource: str | None = None
    retry_after: int = 1


class _Latent(BaseModel):
    action: Literal["latency"]
    seconds: float
    verb: str | None = None
    resource: str | None = None


class _DropRequest(BaseModel):
    action: Literal["drop_watches"]
    after_events: int = 0
    times: int | None = 1
    resource: str | None = None


class _Stall(BaseModel):
    action: Literal["stall_watches"]
    resource: str | None = None


class _Resume(BaseModel):
    action: Literal["resume_watches"]


class _Expiry(BaseModel):
    action: Literal["expire_resumptions"]
    times: int = 1
    resource: str | None = None


class _Clear(BaseModel):
    action: Literal["clear"]


FaultSpec = Annotated[
    _Fail | _Latent | _DropRequest | _Stall | _Resume | _Expiry | _Clear,
    Field(discriminator="action"),
]
"""One fault as `POST /_sim/faults` takes it, e.g. `{"action": "fail", "code": 429}`."""

FAULT_SPECS: TypeAdapter[list[FaultSpec]] = TypeAdapter(list[FaultSpec])


def arm(faults: Faults, spec: FaultSpec) -> None:
    """Apply one admin-endpoint fault to `faults`."""
    if isinstance(spec, _Fail):
        faults.fail_requests(
            spec.code, times=spec.times, verb=spec.verb, resource=spec.resource,
            retry_after=spec.retry_after,
        )
    elif isinstance(spec, _Latent):
        faults.add_latency(spec.seconds, verb=spec.verb, resource=spec.resource)
    elif isinstance(spec, _DropRequest):
        faults.drop_watches(
            after_events=spec.after_events, times=spec.times, resource=spec.resource
        )
    elif isinstance(spec, _Stall):
        faults.stall_watches(resource=spec.resource)
    elif isinstance(spec, _Resume):
        faults.resume_watches()
    elif isinstance(spec, _Expiry):
        faults.expire_resumptions(times=spec.times, resource=spec.resource)
    else:
        faults.clear()
