"""nicplug deletes what it created, over HTTP against the simulated cluster: the `Stop`
and `Start` of a restart it drove, and a migration of an ended operation, once the
retention has passed (the time given, never slept); a user's migration and VM operation
never; on upstream KubeVirt no migration at all (KubeVirt's own collection keeps five
per VMI and takes each one's defunct pod with it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from nicplug.adapters.core.created_objects import clean_created, delete_created
from nicplug.adapters.kube.calls import KubeCalls
from nicplug.adapters.kube.client import ClientSettings, connect
from nicplug.adapters.kube.flavour import DECKHOUSE, UPSTREAM
from nicplug.adapters.kube.resources import OPERATION_ANNOTATION
from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.machines.cleanup import CreatedObject
from nicplug.machines.versions import schemas
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.resources import VMIMS, VMOPS
from tests.integration.conftest import QUICK, eventually

VM = "default/vm-00000"
DAY = 86400.0
NICPLUG = {"app.kubernetes.io/managed-by": "nicplug"}


def _migration(name: str, phase: str, *, labels: dict[str, str] | None = None,
               operation: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "labels": labels or {}}
    if operation is not None:
        meta["annotations"] = {OPERATION_ANNOTATION: operation}
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": meta, "spec": {"vmiName": "vm-00000"}, "status": {"phase": phase}}


def _names(cluster: SimulatedCluster, res: Any) -> set[str]:
    return {o["metadata"]["name"] for o in cluster.store.list(res, "default")[0]}


def _deletes(cluster: SimulatedCluster) -> list[str]:
    return [r.resource for r in cluster.requests if r.verb == "delete"]


@pytest.fixture
async def calls(tmp_path: Path) -> AsyncIterator[Any]:
    opened: list[Any] = []

    async def make(cluster: SimulatedCluster) -> KubeCalls:
        connection = await connect(ClientSettings(kubeconfig=cluster.kubeconfig_path))
        opened.append(connection)
        return KubeCalls(connection)

    yield make
    for connection in opened:
        await connection.close()


async def test_a_drives_restart_and_an_ended_migration_go_after_the_retention(
    start_cluster, start_controller, user_of, calls, tmp_path
) -> None:
    cluster = await start_cluster(Knobs(dialect="deckhouse", delays=QUICK),
                                  Fixtures(vms=1, rollout_strategy="Stage"))
    journal_path = tmp_path / "journal.db"
    ctl = await start_controller(cluster, journal=journal_path)
    user = user_of(cluster)
    await user.set_approval(VM, "Automatic")
    await user.add_network(VM, "Network", "user-net")
    op = await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})
    assert op.state == "Attached"
    await ctl.stop()
    restart = _names(cluster, VMOPS)
    assert len(restart) == 2  # nicplug's Stop and Start, Completed
    # a migration nicplug created for the ended operation, one of the user's, and a
    # VM operation of the user's: all finished, all as old as nicplug's
    cluster.store.create(VMIMS, _migration("nicplug-vm-00000-0a1b2c3d", "Succeeded",
                                           labels=NICPLUG, operation=str(op.stream)))
    cluster.store.create(VMIMS, _migration("users-own", "Succeeded"))
    cluster.store.create(VMOPS, {
        "apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": "VirtualMachineOperation",
        "metadata": {"name": "users-restart", "namespace": "default"},
        "spec": {"type": "Restart", "virtualMachineName": "vm-00000"},
        "status": {"phase": "Completed"}})

    journal = await SQLiteJournal.open(journal_path, schemas=schemas())
    try:
        api = await calls(cluster)
        now = cluster.store.now()
        early = await clean_created(api, DECKHOUSE, journal, retention=DAY, now=now + DAY / 2)
        assert early.deleted == () and _deletes(cluster) == []
        assert all(v.kept and "within the retention" in v.kept for v in early.verdicts)

        done = await clean_created(api, DECKHOUSE, journal, retention=DAY, now=now + DAY + 5)
        assert {o.name for o in done.deleted} == restart | {"nicplug-vm-00000-0a1b2c3d"}
        assert _names(cluster, VMOPS) == {"users-restart"}
        assert _names(cluster, VMIMS) == {"users-own"}
        # a second run finds nothing of nicplug's left: nothing more is deleted
        again = await clean_created(api, DECKHOUSE, journal, retention=DAY, now=now + DAY + 5)
        assert again.deleted == () and len(_deletes(cluster)) == 3
    finally:
        await journal.close()


async def test_gone_meanwhile_is_done_and_made_again_meanwhile_is_spared(
    start_cluster, calls
) -> None:
    cluster = await start_cluster(Knobs(dialect="deckhouse", delays=QUICK))
    stale = cluster.store.create(VMIMS, _migration(
        "nicplug-gone", "Failed", labels=NICPLUG, operation="uid/Network/a/plug/1"))
    listed = CreatedObject(
        kind="migration", namespace="default", name="nicplug-gone",
        uid=stale["metadata"]["uid"], vm=VM, created=cluster.store.now() - 2 * DAY,
        phase="Failed", operation="uid/Network/a/plug/1")
    api = await calls(cluster)
    cluster.store.delete(VMIMS, "default", "nicplug-gone")  # the platform was first: 404
    assert await delete_created(api, DECKHOUSE.vmims, listed)
    cluster.store.create(VMIMS, _migration("nicplug-gone", "Failed", labels=NICPLUG,
                                           operation="uid/Network/a/plug/1"))
    # made again under the same name since it was listed: the uid spares the new one
    assert not await delete_created(api, DECKHOUSE.vmims, listed)
    assert _names(cluster, VMIMS) == {"nicplug-gone"}
    assert _deletes(cluster) == [DECKHOUSE.vmims.plural] * 2


async def test_upstream_kubevirts_migrations_are_left_to_kubevirt(
    start_cluster, calls, tmp_path
) -> None:
    cluster = await start_cluster(Knobs(dialect="multus", dynamic_networks_controller=True,
                                        delays=QUICK))
    cluster.store.create(VMIMS, _migration("nicplug-vm-00000-0a1b2c3d", "Succeeded",
                                           labels=NICPLUG, operation="uid/Network/a/plug/1"))
    journal = await SQLiteJournal.open(tmp_path / "journal.db", schemas=schemas())
    try:
        done = await clean_created(await calls(cluster), UPSTREAM, journal, retention=DAY,
                                   now=cluster.store.now() + 30 * DAY)
    finally:
        await journal.close()
    assert done.deleted == () and done.verdicts == ()
    assert _names(cluster, VMIMS) == {"nicplug-vm-00000-0a1b2c3d"}
    assert [r for r in cluster.requests if r.resource.endswith("migrations")] == []


async def test_the_leader_cleans_up_as_it_starts(start_cluster, start_controller) -> None:
    cluster = await start_cluster(Knobs(dialect="deckhouse", delays=QUICK))
    cluster.store.create(VMIMS, _migration("nicplug-vm-00000-0a1b2c3d", "Succeeded",
                                           labels=NICPLUG, operation="uid/Network/a/plug/1"))
    cluster.store.create(VMIMS, _migration("users-own", "Succeeded"))
    # a retention shorter than the time the controller takes to start: the first run,
    # at once, finds the finished one old enough
    await start_controller(cluster, created_objects_retention=0.001)
    await eventually(lambda: "nicplug-vm-00000-0a1b2c3d" not in _names(cluster, VMIMS),
                     what="nicplug's finished migration deleted")
    assert _names(cluster, VMIMS) == {"users-own"}
    assert _deletes(cluster) == [DECKHOUSE.vmims.plural]
