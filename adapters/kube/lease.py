"""Leader election on a coordination.k8s.io/v1 Lease, so that only one controller acts.

Built on kubernetes_asyncio's `LeaderElection` and `LeaseLock`, with three things that
library leaves to its caller:

* it runs one term and returns when the lease is lost, and lets transport errors
  escape (its lock catches only `ApiException`): `Leadership.run` stands again as a
  candidate after every term or failure, for as long as it runs;
* its `Config` refuses periods under one second; `LeaseTiming` checks the same
  ordering (lease > renew deadline > 1.2 × retry period) without that floor, so a
  test can fail over in about a second;
* the leader's work is a task it creates and forgets when the caller is cancelled:
  here the work is always cancelled and `on_stopped` always awaited when the term
  ends — the lease lost, the API unreachable, or `run` cancelled;
* an exception of the leader's work is lost in that forgotten task, and the leader
  goes on renewing the lease with nothing running: here it ends the term and `run`
  raises it.

It never releases the lease on cancellation: a dead controller cannot either, and the
standby must take over after the lease duration in both cases. A controller that
shuts down cleanly calls `release` after cancelling `run`: it clears the holder (a
compare-and-swap, so it never clears another's), and a standby takes over at its next
retry instead of waiting out the lease. The library reads the wall clock and sleeps
for real; it cannot take an injected clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client import CoordinationV1Api
from kubernetes_asyncio.leaderelection.electionconfig import Config
from kubernetes_asyncio.leaderelection.leaderelection import LeaderElection
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

from nicplug.adapters.kube.calls import JSON_PATCH, compare_and_swap
from nicplug.adapters.kube.client import ApiConnection
from nicplug.adapters.kube.errors import Conflict, KubeError, NotFound
from nicplug.adapters.kube.wire import fetch_object

log = logging.getLogger(__name__)

_JITTER = 1.2  # the library's factor between the renew deadline and the retry period


@dataclass(frozen=True, slots=True)
class LeaseTiming:
    """How long a lease lasts, how long the leader tries to renew it, how often.

    `lease_duration` is whole seconds: the Lease stores `leaseDurationSeconds`.
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


class _ElectionConfig(Config):
    """The library's Config with `LeaseTiming`'s checks instead of its 1 s floor."""

    def __init__(
        self, lock: LeaseLock, timing: LeaseTiming, lead: Callable[[], Coroutine[Any, Any, None]]
    ) -> None:
        self.jitter_factor = _JITTER
        self.lock = lock
        self.lease_duration = timing.lease_duration
        self.renew_deadline = timing.renew_deadline
        self.retry_period = timing.retry_period
        self.onstarted_leading = lead
        self.onstopped_leading = _term_ended  # Leadership ends every term itself


async def _term_ended() -> None:
    return None


class Leadership:
    """Stand for leadership of `namespace/name` as `identity`, for as long as `run` runs.

    `on_started` is the leader's work: it runs while this candidate leads and is
    cancelled when the term ends; `on_stopped` is awaited after that.
    """

    def __init__(
        self,
        connection: ApiConnection,
        *,
        name: str,
        namespace: str,
        identity: str,
        on_started: Callable[[], Awaitable[None]],
        on_stopped: Callable[[], Awaitable[None]] | None = None,
        timing: LeaseTiming = LeaseTiming(),
    ) -> None:
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.timing = timing
        self.terms = 0
        self._connection = connection
        self._on_started = on_started
        self._on_stopped = on_stopped
        self._work: asyncio.Task[None] | None = None
        self._standing = False
        self._failure: asyncio.Future[Exception] | None = None

    @property
    def leading(self) -> bool:
        return self._work is not None

    async def run(self) -> None:
        """Stand, lead, lose, stand again — until cancelled, or until the leader's work
        fails: then the term ends and `run` raises the work's exception. A controller
        that cannot do its work (its journal refused) must stop and say why, not hold
        the lease while doing nothing."""
        loop = asyncio.get_running_loop()
        while True:
            self._standing = True
            failure: asyncio.Future[Exception] = loop.create_future()
            self._failure = failure
            lock = LeaseLock(self.name, self.namespace, self.identity, self._connection.client)
            election = asyncio.ensure_future(
                LeaderElection(_ElectionConfig(lock, self.timing, self._lead)).run()
            )
            try:
                either: set[asyncio.Future[Any]] = {election, failure}
                await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
                if not failure.done():
                    election.result()
                    log.info("%s lost the lease %s/%s", self.identity, self.namespace, self.name)
            except Exception as exc:  # the library lets transport errors through
                log.warning("%s: leader election failed: %r", self.identity, exc)
            finally:
                self._standing = False
                if not election.done():
                    election.cancel()
                    await asyncio.gather(election, return_exceptions=True)
                await self._end_term()
            if failure.done():
                raise failure.result()
            await asyncio.sleep(self.timing.retry_period)

    async def _lead(self) -> None:
        """The task the library starts when the lease is acquired."""
        if not self._standing:  # the term ended before this task got to run
            return
        self._work = asyncio.current_task()
        self.terms += 1
        log.info("%s leads (lease %s/%s)", self.identity, self.namespace, self.name)
        try:
            await self._on_started()
        except Exception as exc:  # handed to `run`, which raises it; nobody awaits this task
            log.error("%s: the leader's work failed: %s", self.identity, exc)
            if self._failure is not None and not self._failure.done():
                self._failure.set_result(exc)

    async def _end_term(self) -> None:
        work, self._work = self._work, None
        if work is None:
            return
        if not work.done():
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)
        if self._on_stopped is not None:
            await self._on_stopped()

    async def release(self) -> bool:
        """Hand the lease over now, if this candidate holds it; call after `run` ended.

        True when it was released. Losing the race to another holder, or finding no
        lease, is not an error: there is nothing of ours to release.
        """
        if self._work is not None:
            raise RuntimeError("cancel run() before releasing the lease")
        api = CoordinationV1Api(self._connection.client)
        options: dict[str, Any] = {
            "_preload_content": False, "_request_timeout": self._connection.request_timeout,
        }
        try:
            lease = await fetch_object(
                api.read_namespaced_lease(self.name, self.namespace, **options))
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return False
            await fetch_object(api.patch_namespaced_lease(
                self.name, self.namespace,
                compare_and_swap("/spec/holderIdentity", self.identity, ""),
                **{**options, "_content_type": JSON_PATCH}))
        except (Conflict, NotFound):
            return False
        except KubeError as exc:
            if exc.status == 422:  # the test op failed: someone else holds it now
                return False
            raise
        log.info("%s released the lease %s/%s", self.identity, self.namespace, self.name)
        return True
