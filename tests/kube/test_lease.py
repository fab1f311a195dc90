"""Leader election against the simulated API server: one leader, failover on death.

kubernetes_asyncio's LeaderElection reads the wall clock and sleeps with asyncio.sleep
itself; it cannot take an injected clock. These tests use a 1 s lease renewed every
0.2 s so that a failover takes about a second of real time.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from nicplug.adapters.kube.client import ApiConnection
from nicplug.adapters.kube.lease import Leadership, LeaseTiming, Term
from nicplug.simulator import resources as sim
from tests.kube.conftest import ApiServer, eventually

FAST = LeaseTiming(lease_duration=1, renew_deadline=0.6, retry_period=0.2)


class Candidate:
    def __init__(
        self, connection: ApiConnection, identity: str, timing: LeaseTiming = FAST
    ) -> None:
        self.working = asyncio.Event()
        self.stopped = 0
        self.leadership = Leadership(
            connection, name="nicplug", namespace="kube-system", identity=identity,
            on_started=self._work, on_stopped=self._stop, timing=timing,
        )
        self.task = asyncio.create_task(self.leadership.run())

    async def _work(self, term: Term) -> None:
        self.term = term
        self.working.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.working.clear()

    async def _stop(self) -> None:
        self.stopped += 1

    async def kill(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


def holder(server: ApiServer) -> str:
    lease = server.store.get(sim.LEASES, "kube-system", "nicplug")
    return str(lease["spec"]["holderIdentity"])


@pytest.mark.timeout(20)
async def test_a_standby_takes_over_when_the_leader_dies(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    started = asyncio.get_running_loop().time()
    first = Candidate(connection, "first")
    await asyncio.wait_for(first.working.wait(), 2)
    second = Candidate(connection, "second")
    try:
        await asyncio.sleep(1.5)  # longer than the lease: renewals keep the leader
        assert first.leadership.leading
        assert not second.leadership.leading
        assert holder(api_server) == "first"

        loop = asyncio.get_running_loop()
        died = loop.time()
        await first.kill()  # no release: the lease simply stops being renewed
        assert not first.working.is_set()  # its work was cancelled with it
        await asyncio.wait_for(second.working.wait(), 3)
        took_over = loop.time() - died
        assert holder(api_server) == "second"
        assert FAST.lease_duration * 0.8 <= took_over <= FAST.lease_duration + 1.5
        assert second.leadership.terms == 1
    finally:
        await first.kill()
        await second.kill()
    # At most a read and a replace per retry period and candidate: no hot loop.
    elapsed = asyncio.get_running_loop().time() - started
    assert api_server.count(resource="leases") <= 2 * 2 * (elapsed / FAST.retry_period + 1)


def test_lease_timing_is_checked() -> None:
    with pytest.raises(ValueError, match="renew deadline"):
        LeaseTiming(lease_duration=2, renew_deadline=2, retry_period=0.2)
    with pytest.raises(ValueError, match=r"1\.2"):
        LeaseTiming(lease_duration=2, renew_deadline=1, retry_period=1)
    with pytest.raises(ValueError, match="positive"):
        LeaseTiming(lease_duration=0, renew_deadline=0.5, retry_period=0.1)


async def test_a_leader_that_cannot_renew_stops_working(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    only = Candidate(connection, "only")
    try:
        await asyncio.wait_for(only.working.wait(), 2)
        api_server.faults.fail_requests(500, resource="leases", times=1000)
        await eventually(lambda: not only.working.is_set(), within=3)
        assert only.stopped == 1
        api_server.faults.clear()
        await asyncio.wait_for(only.working.wait(), 3)  # and stands again
        assert only.leadership.terms == 2
    finally:
        await only.kill()


@pytest.mark.timeout(20)
async def test_a_released_lease_is_taken_over_without_waiting_it_out(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    slow = LeaseTiming(lease_duration=5, renew_deadline=0.6, retry_period=0.2)
    first = Candidate(connection, "first", timing=slow)
    await asyncio.wait_for(first.working.wait(), 2)
    second = Candidate(connection, "second", timing=slow)
    try:
        await asyncio.sleep(0.3)
        assert not second.leadership.leading
        await first.kill()
        assert await first.leadership.release()
        assert not await first.leadership.release()  # nothing of ours left to release
        loop = asyncio.get_running_loop()
        released = loop.time()
        await asyncio.wait_for(second.working.wait(), 2)
        assert loop.time() - released < slow.lease_duration / 2
        assert holder(api_server) == "second"
        assert not await first.leadership.release()  # never clears another's lease
        assert holder(api_server) == "second"
    finally:
        await first.kill()
        await second.kill()


async def test_a_failing_leaders_work_ends_the_term_and_is_raised(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    """A leader whose work fails (its journal refused) must not hold the lease idle."""
    stopped: list[str] = []

    async def refuse(_: Term) -> None:
        raise RuntimeError("journal refused")

    async def stop() -> None:
        stopped.append("stopped")

    leadership = Leadership(
        connection, name="nicplug", namespace="kube-system", identity="broken",
        on_started=refuse, on_stopped=stop, timing=FAST,
    )
    with pytest.raises(RuntimeError, match="journal refused"):
        await asyncio.wait_for(leadership.run(), 3)
    assert leadership.terms == 1
    assert stopped == ["stopped"]
    assert not leadership.leading
    renewals = api_server.count(resource="leases")
    await asyncio.sleep(3 * FAST.retry_period)  # the election really ended: no renewal
    assert api_server.count(resource="leases") == renewals


async def test_a_renewal_that_hangs_ends_the_term_at_its_deadline(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    """The API server stops answering the Lease: every call times out, and the term
    ends when its deadline passes, not when some request gives up."""
    only = Candidate(connection, "only")
    try:
        await asyncio.wait_for(only.working.wait(), 2)
        term = only.term
        api_server.faults.add_latency(60.0, resource="leases")
        loop = asyncio.get_running_loop()
        hung = loop.time()
        await eventually(lambda: not only.leadership.leading, within=3)
        assert loop.time() - hung <= FAST.renew_deadline + FAST.retry_period + 0.5
        assert not term.holds()
        await eventually(lambda: only.stopped == 1, within=1)
        assert not only.working.is_set()
        api_server.faults.clear()
        await asyncio.wait_for(only.working.wait(), 3)  # stands again, a new term
        assert only.term.number == 2 and only.term.holds()
    finally:
        await only.kill()


async def test_a_leader_renews_with_one_request_from_the_lease_it_last_wrote(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    """client-go's optimistic renewal: no read before each update while it holds it."""
    only = Candidate(connection, "only")
    try:
        await asyncio.wait_for(only.working.wait(), 2)
        reads, updates = api_server.count("get", "leases"), api_server.count("update", "leases")
        await eventually(lambda: api_server.count("update", "leases") >= updates + 3, within=2)
        assert api_server.count("get", "leases") == reads
        assert only.leadership.leading
    finally:
        await only.kill()


async def test_a_lease_written_by_another_is_read_again_before_renewing(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    """The renewal's resourceVersion no longer matches: a conflict, then a read, and the
    decision is made from what the read finds (here: another holds it)."""
    slow = LeaseTiming(lease_duration=5, renew_deadline=0.6, retry_period=0.2)
    only = Candidate(connection, "only", timing=slow)
    try:
        await asyncio.wait_for(only.working.wait(), 2)
        lease = api_server.store.get(sim.LEASES, "kube-system", "nicplug")
        api_server.store.patch(
            sim.LEASES, "kube-system", "nicplug",
            {"spec": {"holderIdentity": "usurper"}}, content_type="application/merge-patch+json",
        )
        assert lease["metadata"]["resourceVersion"] != api_server.store.get(
            sim.LEASES, "kube-system", "nicplug")["metadata"]["resourceVersion"]
        reads = api_server.count("get", "leases")
        await eventually(lambda: not only.working.is_set(), within=2)
        assert api_server.count("get", "leases") > reads
        assert holder(api_server) == "usurper"
    finally:
        await only.kill()


async def test_a_renewal_answered_after_the_deadline_ends_the_term(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    """The deadline passes while a renewal is being answered and the cancellation is
    swallowed on the way (a late event loop, a library that catches it): the answer
    must not extend a term whose deadline has passed, nor crash the election."""
    only = Candidate(connection, "only")
    try:
        await asyncio.wait_for(only.working.wait(), 2)

        async def late() -> bool:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(10 * FAST.renew_deadline)
            return True

        only.leadership._try = late  # type: ignore[method-assign]
        await eventually(lambda: not only.working.is_set(), within=3)
        assert not only.task.done()  # the election goes on: it stands again
        assert only.stopped == 1
    finally:
        await only.kill()
