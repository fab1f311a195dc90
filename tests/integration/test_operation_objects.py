"""Operations as `NetworkInterfaceOperation` objects: the journal's projection, written
on steps only, owned by the VM, rebuilt after a restart, deleted with the retention,
none at all with `--operation-objects off`; `kubectl get nicops -A` lists them."""

from __future__ import annotations

import asyncio
import os
import shutil
from typing import Any

import pytest

from nicplug.adapters.core.operation_objects import OperationObjects
from nicplug.adapters.core.retention import archive_finished
from nicplug.adapters.kube.calls import KubeCalls
from nicplug.adapters.kube.client import ClientSettings, connect
from nicplug.adapters.queries.operation_object import explanation_of, timeline_of
from nicplug.engine.clock import RealClock
from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.machines.versions import schemas
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.resources import OPERATIONS, VMS
from tests.integration.conftest import eventually
from tests.integration.journal_view import PLUG_PATHS

VM = "default/vm-00000"
KUBECTL = shutil.which("kubectl")


def _objects(cluster: SimulatedCluster) -> list[dict[str, Any]]:
    return cluster.store.list(OPERATIONS)[0]


def _writes(cluster: SimulatedCluster) -> list[str]:
    return [r.verb for r in cluster.requests
            if r.resource == OPERATIONS.plural and r.verb in ("create", "patch", "delete")]


async def _attached(cluster: SimulatedCluster) -> bool:
    return [o["status"]["state"] for o in _objects(cluster)] == ["Attached"]


async def test_a_hotplug_is_one_object_owned_by_its_vm(start_cluster, start_controller,
                                                       user_of) -> None:
    cluster = await start_cluster()
    ctl = await start_controller(cluster)
    await user_of(cluster).add_network(VM, "Network", "user-net")
    await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})
    await eventually(lambda: _attached(cluster), what="the object shows Attached")

    (obj,) = _objects(cluster)
    vm = cluster.store.get(VMS, "default", "vm-00000")
    assert obj["metadata"]["ownerReferences"] == [{
        "apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": "VirtualMachine",
        "name": "vm-00000", "uid": vm["metadata"]["uid"]}]
    assert (obj["spec"]["virtualMachine"], obj["spec"]["network"], obj["spec"]["direction"]) == (
        "vm-00000", "Network/user-net", "plug")
    assert obj["spec"]["interface"].startswith("veth_n")
    history = obj["status"]["history"]
    moves = [h["state"] for h in history if h["type"] in ("Opened", "Transitioned")]
    assert moves == list(PLUG_PATHS["deckhouse"])
    assert all(h["time"] and h["cause"] for h in history)
    assert obj["status"]["waitingFor"] == "done: Attached is terminal"
    assert explanation_of(obj, now=0).operation.state == "Attached"
    moved = [s.to for s in timeline_of(obj).steps if s.type == "Transitioned"]
    assert moved == list(PLUG_PATHS["deckhouse"])[1:]
    writes = _writes(cluster)
    assert writes[0] == "create" and set(writes[1:]) <= {"patch"}
    assert len(writes) <= len(PLUG_PATHS["deckhouse"])  # on steps only, some batched


async def test_off_writes_none(start_cluster, start_controller, user_of) -> None:
    cluster = await start_cluster()
    ctl = await start_controller(cluster, operation_objects=False)
    await user_of(cluster).add_network(VM, "Network", "user-net")
    await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})
    assert _objects(cluster) == [] and [
        r for r in cluster.requests if r.resource == OPERATIONS.plural] == []


async def test_rebuilt_after_a_restart_and_deleted_with_the_retention(
    start_cluster, start_controller, user_of, tmp_path
) -> None:
    cluster = await start_cluster()
    journal = tmp_path / "journal.db"
    ctl = await start_controller(cluster, journal=journal)
    await user_of(cluster).add_network(VM, "Network", "user-net")
    await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})
    await eventually(lambda: _attached(cluster), what="the object shows Attached")
    await ctl.stop()
    (obj,) = _objects(cluster)
    cluster.store.delete(OPERATIONS, "default", obj["metadata"]["name"])  # lost meanwhile

    again = await start_controller(cluster, journal=journal)
    await eventually(lambda: _attached(cluster), what="the object is written again")
    await again.stop()

    opened = await SQLiteJournal.open(journal, schemas=schemas())
    connection = await connect(ClientSettings(kubeconfig=cluster.kubeconfig_path))
    try:
        clock = RealClock()
        done = await archive_finished(opened, window=1.0, into=tmp_path,
                                      now=clock.now() + 86400)
        assert done is not None
        await OperationObjects(KubeCalls(connection), opened, clock).reconcile()
    finally:
        await connection.close()
        await opened.close()
    assert _objects(cluster) == []


async def _kubectl(cluster: SimulatedCluster, *args: str) -> str:
    assert KUBECTL is not None and cluster.kubeconfig_path is not None
    process = await asyncio.create_subprocess_exec(
        KUBECTL, "--kubeconfig", str(cluster.kubeconfig_path), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "KUBECACHEDIR": str(cluster.kubeconfig_path.parent / "kcache")})
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, err.decode()
    return out.decode()


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is missing: not installed on PATH")
async def test_kubectl_get_nicops_lists_every_operation_with_its_state(
    start_cluster, start_controller, user_of
) -> None:
    cluster = await start_cluster()
    ctl = await start_controller(cluster)
    await user_of(cluster).add_network(VM, "Network", "user-net")
    await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})
    await eventually(lambda: _attached(cluster), what="the object shows Attached")

    table = (await _kubectl(cluster, "get", "nicops", "-A")).splitlines()
    assert table[0].split() == ["NAMESPACE", "NAME", "VM", "INTERFACE", "NETWORK",
                                "DIRECTION", "STATE", "REASON", "AGE"]
    (row,) = table[1:]
    cells = row.split()
    assert cells[0] == "default" and cells[2] == "vm-00000"
    assert cells[4:7] == ["Network/user-net", "plug", "Attached"]
    assert "vm-00000-plug-" in (await _kubectl(cluster, "get", "nicplug", "-n", "default"))


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is missing: not installed on PATH")
async def test_kubectl_describe_vm_shows_nicplugs_events(start_cluster, start_controller,
                                                         user_of) -> None:
    cluster = await start_cluster()  # deckhouse: `vm` is the Deckhouse VM alone
    ctl = await start_controller(cluster)
    await user_of(cluster).add_network(VM, "Network", "user-net")
    await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})
    await eventually(lambda: bool(cluster.events(reason="PlugAttached")), what="the Event")

    described = await _kubectl(cluster, "describe", "vm", "vm-00000", "-n", "default")
    events = described.split("Events:", 1)[1]
    assert "PlugAttached" in events and "Network/user-net" in events
    listed = await _kubectl(cluster, "get", "events", "-n", "default",
                            "--field-selector", "involvedObject.name=vm-00000")
    assert "PlugAttached" in listed


async def test_the_object_goes_with_its_vm(start_cluster, start_controller, user_of) -> None:
    cluster = await start_cluster()
    ctl = await start_controller(cluster)
    await user_of(cluster).add_network(VM, "Network", "user-net")
    await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})
    await eventually(lambda: _attached(cluster), what="the object shows Attached")

    cluster.store.delete(VMS, "default", "vm-00000")
    await eventually(lambda: _objects(cluster) == [], what="the object collected with its VM")
