"""Deckhouse's VirtualMachineOperations and KubeVirt under `runStrategy: Manual`, as the
simulated platform runs them (`pkg/controller/vmop/powerstate/` in
deckhouse/virtualization)."""

from __future__ import annotations

from nicplug.simulator import objects as ob
from nicplug.simulator.clock import VirtualSimClock
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Delays, Knobs
from nicplug.simulator.resources import KVVMS, VMIS, VMOPS, VMS
from nicplug.simulator.store import Store
from tests.simulator import driving as d

# the tests write KVVMs by hand: a release without the platform's own hotplug
KNOBS = Knobs(dialect="deckhouse", delays=Delays(sdn_configure=0.5, attach=0.1, restart=1.0),
              native_hotplug=False)


async def _cluster() -> SimulatedCluster:
    cluster = SimulatedCluster(KNOBS, clock=VirtualSimClock(), serve=False,
                               fixtures=Fixtures(vms=1))
    await cluster.start()
    return cluster


def _operate(store: Store, ns: str, vm: str, type_: str, name: str, **spec: object) -> None:
    store.create(VMOPS, {"apiVersion": VMOPS.api_version, "kind": VMOPS.kind,
                         "metadata": {"name": name, "namespace": ns},
                         "spec": {"type": type_, "virtualMachineName": vm, **spec}})


def _ended(store: Store, ns: str, name: str) -> tuple[str, str, str]:
    op = store.get(VMOPS, ns, name)
    completed = ob.condition(op, "Completed") or {}
    return (op["status"]["phase"], completed.get("reason", ""), completed.get("message", ""))


def _vmi(store: Store, ns: str, vm: str) -> dict[str, object] | None:
    return store.peek(VMIS, ns, vm)


async def test_deckhouse_vms_run_under_manual_and_a_deleted_vmi_stops_them_for_good() -> None:
    cluster = await _cluster()
    store = cluster.store
    ns, vm = cluster.vms[0]
    assert store.get(KVVMS, ns, vm)["spec"]["runStrategy"] == "Manual"
    assert store.get(VMS, ns, vm)["spec"]["runPolicy"] == "AlwaysOnUnlessStoppedManually"
    store.delete(VMIS, ns, vm)
    await cluster.advance(10.0)
    assert _vmi(store, ns, vm) is None and d.pods_of(store, ns, vm) == []
    assert store.get(KVVMS, ns, vm)["status"]["printableStatus"] == "Stopped"
    assert cluster.actor_errors == []
    await cluster.stop()


async def test_stop_then_start() -> None:
    cluster = await _cluster()
    store = cluster.store
    ns, vm = cluster.vms[0]
    old = store.get(VMIS, ns, vm)["metadata"]["uid"]
    _operate(store, ns, vm, "Stop", "stop-1")
    await cluster.advance(5.0)
    assert _vmi(store, ns, vm) is None
    assert _ended(store, ns, "stop-1") == ("Completed", "OperationCompleted", "")
    d.plug_kvvm(store, KNOBS, ns, vm, "Network", "user-net")  # written while stopped
    _operate(store, ns, vm, "Start", "start-1")
    await cluster.advance(0.5)
    assert store.get(VMOPS, ns, "start-1")["status"]["phase"] == "InProgress"
    await cluster.advance(5.0)
    vmi = store.get(VMIS, ns, vm)
    assert vmi["metadata"]["uid"] != old and vmi["status"]["phase"] == "Running"
    assert _ended(store, ns, "start-1") == ("Completed", "OperationCompleted", "")
    assert "stateChangeRequests" not in store.get(KVVMS, ns, vm)["status"]
    assert d.attached(store, ns, vm, "Network", "user-net")
    assert cluster.link_not_found == [] and cluster.actor_errors == []
    await cluster.stop()


async def test_what_deckhouse_refuses() -> None:
    cluster = await _cluster()
    store = cluster.store
    ns, vm = cluster.vms[0]
    _operate(store, ns, vm, "Start", "start-running")
    await cluster.advance(1.0)
    assert _ended(store, ns, "start-running")[:2] == (
        "Failed", "NotApplicableForVirtualMachinePhase")
    store.patch(VMS, ns, vm, {"spec": {"runPolicy": "AlwaysOn"}}, content_type=d.MERGE)
    _operate(store, ns, vm, "Stop", "stop-always-on")
    await cluster.advance(1.0)
    phase, reason, message = _ended(store, ns, "stop-always-on")
    assert (phase, reason) == ("Failed", "NotApplicableForVirtualMachineRunPolicy")
    assert "runPolicy AlwaysOn" in message
    assert _vmi(store, ns, vm) is not None  # still running
    _operate(store, ns, vm, "Stop", "stop-missing", virtualMachineName="nobody")
    await cluster.advance(1.0)
    assert _ended(store, ns, "stop-missing")[:2] == ("Failed", "VirtualMachineNotFound")
    assert cluster.actor_errors == []
    await cluster.stop()


async def test_an_operation_waits_for_none_an_older_unfinished_one_blocks() -> None:
    cluster = await _cluster()
    store = cluster.store
    ns, vm = cluster.vms[0]
    store.create(VMOPS, {"apiVersion": VMOPS.api_version, "kind": VMOPS.kind,
                         "metadata": {"name": "a-older", "namespace": ns},
                         "spec": {"type": "Stop", "virtualMachineName": vm},
                         "status": {"phase": "InProgress"}}, )
    _operate(store, ns, vm, "Restart", "b-newer")
    await cluster.advance(1.0)
    assert _ended(store, ns, "b-newer")[:2] == ("Failed", "NotReadyToBeExecuted")
    await cluster.stop()
