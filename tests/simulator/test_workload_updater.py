"""The simulated workload updater: with `LiveMigrate` it migrates every live-migratable
VMI whose `MigrationRequired` is True, one migration per VMI, at most
`parallelMigrationsPerCluster` running at once, and tries again when its random name
is taken (a collision once left a VMI unmigrated for good)."""

from __future__ import annotations

from typing import Any

import pytest

from nicplug.simulator import objects as ob
from nicplug.simulator.actors import workload_updater
from nicplug.simulator.clock import VirtualSimClock
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Delays, Knobs
from nicplug.simulator.resources import VMIMS
from nicplug.simulator.store import Store
from nicplug.simulator.watching import Change
from tests.simulator import driving as d

DELAYS = Delays(sdn_configure=0.2, attach=0.1, migration=2.0, workload_update=1.0)


async def test_kubevirt_migrates_each_vmi_once_within_its_parallel_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    knobs = Knobs(dialect="multus", delays=DELAYS, migration_required_grace=1.0)
    cluster = SimulatedCluster(
        knobs, clock=VirtualSimClock(), serve=False,
        fixtures=Fixtures(vms=6, workload_update_methods=("LiveMigrate",),
                          parallel_migrations=2))
    await cluster.start()
    store: Store = cluster.store
    taken = iter(["kubevirt-workload-update-dup", "kubevirt-workload-update-dup"])
    real_create = store.create

    def colliding(res: Any, obj: Any, **kwargs: Any) -> Any:
        meta = obj.get("metadata") or {}
        if res is VMIMS and meta.get("generateName") and (name := next(taken, None)):
            obj = {**obj, "metadata": {**meta, "name": name}}
        return real_create(res, obj, **kwargs)

    monkeypatch.setattr(store, "create", colliding)
    running: set[str] = set()
    most = [0]

    def tapped(change: Change) -> None:
        if change.resource is not VMIMS:
            return
        name = change.obj["metadata"]["name"]
        if ob.dig(change.obj, "status", "phase") in ("Scheduling", "Running"):
            running.add(name)
        else:
            running.discard(name)
        most[0] = max(most[0], len(running))

    store.tap(tapped)
    for ns, vm in cluster.vms:
        d.plug_kvvm(store, knobs, ns, vm, "Network", "user-net")
    await cluster.advance(60.0)
    migrations = store.list(VMIMS)[0]
    assert sorted(m["spec"]["vmiName"] for m in migrations) == sorted(v for _, v in cluster.vms)
    assert all(workload_updater.ANNOTATION in m["metadata"]["annotations"] for m in migrations)
    assert all(m["status"]["phase"] == "Succeeded" for m in migrations)
    for ns, vm in cluster.vms:
        assert d.attached(store, ns, vm, "Network", "user-net")
    assert most[0] <= 2
    assert cluster.actor_errors == []
    await cluster.stop()
