"""Leader election on a coordination.k8s.io/v1 Lease, so that at most one controller acts.

A `Term` is one stretch of leadership. It holds until `renew_deadline` after the
last renewal *sent* (not answered): the Lease says `leaseDurationSeconds`, longer
than the renew deadline, so no other candidate can take it before this one has
stopped. The deadline is enforced by a timer that cancels whatever the renew loop is
doing, and `Term.holds()` reads the clock itself, so readiness, the leader metric and
the fencing check before every effect all flip at the deadline even when a request
hangs or the loop is late to notice.

kubernetes_asyncio's `LeaderElection` could not give that: its lock sends requests
without a timeout, so a renewal that hangs never reaches the deadline check, and it
shares the caller's connection pool. Here every call has a timeout shorter than the
renew deadline (`lease_calls`) and the Lease has a connection of its own.

The leader's work runs while the term holds and is cancelled when it ends; its
`on_stopped` is awaited after that. An exception of the work ends the term and `run`
raises it: a controller that cannot do its work must not hold the Lease idle. It never
releases the Lease on cancellation (a dead controller cannot either); a controller that
stops cleanly calls `release` after `run` ended, so a standby takes over at its next
retry instead of waiting the Lease out.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from nicplug.adapters.kube.client import ApiConnection
from nicplug.adapters.kube.errors import KubeError
from nicplug.adapters.kube.lease_calls import LeaseCalls
from nicplug.engine.errors import Deposed

log = logging.getLogger(__name__)

_JITTER = 1.2  # client-go's factor between the renew deadline and the retry period


@dataclass(frozen=True, slots=True)
class LeaseTiming:
    """How long a lease lasts, how long the leader tries to renew it, how often.

    `lease_duration` is whole seconds: the Lease stores `leaseDurationSeconds`. Each
    request of the election times out after `call_timeout`, half the renew deadline,
    so a hung call leaves time for another try within the deadline.
    """

    lease_duration: int = 15
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if self.lease_duration < 1 or self.renew_deadline <= 0 or self.retry_period <= 0:
            raise ValueError("lease timing must be positive (lease duration ≥ 1 s)")
        if self.lease_duration <= self.renew_deadline:
            raise ValueError("the lease duration must exceed the renew deadline")
        if self.renew_deadline <= _JITTER * self.retry_period:
            raise ValueError("the renew deadline must exceed 1.2 × the retry period")

    @property
    def call_timeout(self) -> float:
        return self.renew_deadline / 2


class Term:
    """One term of leadership: it holds until its deadline passes or it is ended.

    `holds()` reads the clock, so it is right at any instant, however late the event
    loop is; `check()` is the fencing check an effect makes just before it is sent.
    """

    def __init__(self, number: int, *, until: float, now: Callable[[], float]) -> None:
        self.number = number
        self.until = until
        self._now = now
        self._ended = False

    def holds(self) -> bool:
        return not self._ended and self._now() < self.until

    def check(self) -> None:
        if not self.holds():
            raise Deposed(f"term {self.number} of leadership has ended")

    def extend(self, until: float) -> None:
        self.until = max(self.until, until)

    def end(self) -> None:
        self._ended = True


class Leadership:
    """Stand for leadership of `namespace/name` as `identity`, for as long as `run` runs.

    `connection` must be the election's own: its pool serves nothing else. `on_started`
    is the leader's work, given its `Term`; `on_stopped` is awaited after the work of a
    term was cancelled.
    """

    def __init__(
        self,
        connection: ApiConnection,
        *,
        name: str,
        namespace: str,
        identity: str,
        on_started: Callable[[Term], Coroutine[Any, Any, None]],
        on_stopped: Callable[[], Awaitable[None]] | None = None,
        timing: LeaseTiming = LeaseTiming(),
        wall: Callable[[], datetime.datetime] | None = None,
    ) -> None:
        """`wall` stamps the Lease's times for people reading it (default: the system's
        clock; a simulation on virtual time passes its own)."""
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.timing = timing
        self.terms = 0
        self._now = asyncio.get_running_loop().time
        self._calls = LeaseCalls(
            connection, name=name, namespace=namespace, identity=identity,
            lease_duration=timing.lease_duration, call_timeout=timing.call_timeout,
            now=self._now, wall=wall,
        )
        self._on_started = on_started
        self._on_stopped = on_stopped
        self._term: Term | None = None
        self._last_failure = ""

    @property
    def leading(self) -> bool:
        """Whether a term holds at this instant."""
        return self._term is not None and self._term.holds()

    @property
    def term(self) -> Term | None:
        return self._term

    async def run(self) -> None:
        """Stand, lead, lose, stand again — until cancelled, or until the leader's work
        fails: then the term ends and `run` raises the work's exception."""
        try:
            while True:
                term = await self._acquire()
                failure = await self._serve(term)
                if failure is not None:
                    raise failure
                await asyncio.sleep(self.timing.retry_period)
        finally:
            if self._term is not None:
                self._term.end()

    async def _try(self) -> bool:
        """One try; a failure of any kind is a failed try (the deadline decides)."""
        try:
            return await self._calls.acquire_or_renew()
        except KubeError as exc:
            self._last_failure = str(exc)
            log.debug("%s: a try on the lease failed: %s", self.identity, exc)
        except Exception as exc:  # a body the client cannot read, say: never end the loop
            self._last_failure = repr(exc)
            log.warning("%s: a try on the lease failed: %r", self.identity, exc)
        return False

    async def _acquire(self) -> Term:
        while True:
            sent = self._now()
            if await self._try():
                self.terms += 1
                term = Term(self.terms, until=sent + self.timing.renew_deadline, now=self._now)
                self._term = term
                log.info("%s leads (lease %s/%s, term %d)", self.identity, self.namespace,
                         self.name, term.number)
                return term
            await asyncio.sleep(self.timing.retry_period)

    async def _serve(self, term: Term) -> BaseException | None:
        """Work and renew until the term ends; the work's exception, if it failed."""
        work = asyncio.create_task(self._on_started(term), name=f"term {term.number}")
        renewal = asyncio.create_task(self._renew(term), name=f"renew term {term.number}")
        failure: BaseException | None = None
        try:
            await asyncio.wait({work, renewal}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # Lost, or the work failed: the term ends before the work is cancelled, so
            # nothing more is sent. Stopped from outside (a clean stop): the term holds
            # until its deadline while the work winds down, then ends.
            if work.done() or renewal.done():
                term.end()
            for task in (renewal, work):
                task.cancel()
            await asyncio.gather(renewal, work, return_exceptions=True)
            term.end()
            if work.done() and not work.cancelled() and work.exception() is not None:
                failure = work.exception()
                log.error("%s: the leader's work failed: %s", self.identity, failure)
            if self._on_stopped is not None:
                await self._on_stopped()
        if renewal.done() and not renewal.cancelled():
            log.warning("%s lost the lease %s/%s (term %d): %s; stopped at once", self.identity,
                        self.namespace, self.name, term.number, renewal.result())
        return failure

    async def _renew(self, term: Term) -> str:
        """Renew every retry period; return why the term ended once its deadline passed
        (the timer cancels a request still hanging) or another holds the Lease."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout_at(term.until) as deadline:
                while True:
                    await asyncio.sleep(self.timing.retry_period)
                    sent = self._now()
                    if await self._try():
                        if deadline.expired():
                            # answered after the deadline, its cancellation swallowed
                            # on the way (the event loop was late): the term has ended
                            return "renewed only after the renew deadline had passed"
                        term.extend(sent + self.timing.renew_deadline)
                        deadline.reschedule(term.until)
                    elif self._calls.holder not in ("", self.identity):
                        return f"{self._calls.holder} holds it now"
        except TimeoutError:
            late = loop.time() - term.until
            why = f"; last failure: {self._last_failure}" if self._last_failure else ""
            return (f"not renewed within the renew deadline of {self.timing.renew_deadline:g}s"
                    f"{why}" + (f" (noticed {late:.1f}s late)" if late > 0.5 else ""))

    async def release(self) -> bool:
        """Hand the lease over now, if this candidate holds it; call after `run` ended.

        True when it was released. Losing the race to another holder, or finding no
        lease, is not an error: there is nothing of ours to release.
        """
        if self.leading:
            raise RuntimeError("cancel run() before releasing the lease")
        released = await self._calls.release()
        if released:
            log.info("%s released the lease %s/%s", self.identity, self.namespace, self.name)
        return released
