"""Failover on a PostgreSQL journal with real processes: two `nicplug run` replicas
share one database; the leader is SIGKILLed (and, apart, SIGSTOPped) in the middle of
hot-plugs. The standby takes over within the Lease's duration plus 5 s, every
operation converges, no transition is lost, no effect is sent twice; a stopped leader
that wakes up again writes nothing (its term is over in the database).
`python -m bench failover` runs the same at 200 VMs, 20 times."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Literal

import pytest

from nicplug.simulator.cluster import SimulatedCluster
from tests.integration import postgres_view as pg
from tests.integration.failover import cluster_of, fail_over
from tests.integration.processes_support import FAST_LEASE, Launcher

pytestmark = pytest.mark.slow

LEASE_DURATION = float(FAST_LEASE[1])
VMS = 12
EVICT_AFTER = 1.0  # `PostgresJournal.lead`'s default


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[SimulatedCluster]:
    cluster = await cluster_of(tmp_path, VMS)
    try:
        yield cluster
    finally:
        await cluster.stop()


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGSTOP, "partition"],
                         ids=["SIGKILL", "SIGSTOP", "partition"])
async def test_the_standby_takes_over_mid_hotplug_and_loses_nothing(
    cluster: SimulatedCluster, launcher: Launcher, postgres_dsn: str,
    stop: signal.Signals | Literal["partition"],
) -> None:
    """`partition`: the leader is cut off from the API server but not from the
    database; it stops at its renew deadline, and once healed writes nothing more."""
    result = await fail_over(cluster, launcher, postgres_dsn, stop=stop)
    print(f"\nfailover ({getattr(stop, 'name', stop)}, {VMS} VMs): {result}")
    # a SIGSTOPped writer may hold the writers' lock: the new term waits EVICT_AFTER
    # for it before ending its session
    assert result.first_write <= LEASE_DURATION + 5 + (
        EVICT_AFTER if stop == signal.SIGSTOP else 0), result
    assert (result.twice, result.lost) == (0, 0), result
    assert [h for _, h in await pg.terms(postgres_dsn)] == ["ctl-a", "ctl-b"]
    if stop != signal.SIGKILL:
        before = await pg.events_of_term(postgres_dsn, 1)
        a = launcher.started[0]
        # woken after its term ended: the Lease check or the database refuses all
        # it tries; nothing of term 1 lands after term 2 began
        await launcher.started[1].terminate()
        assert a.running
        assert await pg.events_of_term(postgres_dsn, 1) == before
