"""The multus dialect: with no dynamic-networks controller a hot-plug needs a migration."""

from __future__ import annotations

import pytest

from nicplug.simulator import networking as nw
from nicplug.simulator import objects as ob
from nicplug.simulator.clock import VirtualSimClock
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Delays, Failures, Knobs
from nicplug.simulator.resources import KVVMS, PODS, VMIMS, VMIS
from tests.simulator import driving as d

NS, VM = "default", "vm-00000"
DELAYS = Delays(sdn_configure=0.5, attach=0.1, migration=2.0, restart=1.0)


async def started(knobs: Knobs) -> SimulatedCluster:
    cluster = SimulatedCluster(knobs, clock=VirtualSimClock(), serve=False,
                               fixtures=Fixtures(vms=1))
    await cluster.start()
    return cluster


async def test_without_the_controller_a_plug_raises_migration_required_and_a_migration_plugs(
) -> None:
    knobs = Knobs(dialect="multus", delays=DELAYS)
    cluster = await started(knobs)
    store = cluster.store
    source = d.active_pod(store, NS, VM)
    d.plug_pod(store, knobs, NS, VM, "Network", "user-net")
    await cluster.advance(1.0)
    listed = nw.multus_listed(d.active_pod(store, NS, VM))
    assert ("default/user-net", nw.multus_pod_interface(nw.if_name("Network", "user-net"))) \
        not in listed  # nobody updates network-status of a running pod
    d.plug_kvvm(store, knobs, NS, VM, "Network", "user-net")
    await cluster.advance(0.5)
    assert not d.attached(store, NS, VM, "Network", "user-net")  # virt-handler waits
    assert d.condition(store, NS, VM, "MigrationRequired") == ("False", "AutoMigrationPending")
    await cluster.advance(14.0)
    assert d.condition(store, NS, VM, "MigrationRequired") == ("False", "AutoMigrationPending")
    await cluster.advance(1.0)
    assert d.condition(store, NS, VM, "MigrationRequired") == (
        "True", "AutoMigrationDueToLiveUpdate")
    assert cluster.link_not_found == []

    d.migrate(store, NS, VM)
    await cluster.settle()
    assert d.migration_phase(store, NS) == "Running"
    source_uid = source["metadata"]["uid"]
    target = [p for p in d.pods_of(store, NS, VM) if p["metadata"]["uid"] != source_uid]
    assert [e["name"] for e in d.request_of(knobs, target[0])] == ["user-net"]
    await cluster.advance(2.0)
    assert d.migration_phase(store, NS) == "Succeeded"
    assert d.attached(store, NS, VM, "Network", "user-net")
    assert "multus-status" in (d.vmi_interface(store, NS, VM, "Network", "user-net") or {})[
        "infoSource"]
    assert d.condition(store, NS, VM, "MigrationRequired") is None
    (pod,) = d.pods_of(store, NS, VM)
    assert pod["metadata"]["uid"] == target[0]["metadata"]["uid"]
    vmi = store.get(VMIS, NS, VM)
    assert vmi["status"]["activePods"] == {pod["metadata"]["uid"]: pod["spec"]["nodeName"]}
    assert vmi["status"]["migrationState"]["completed"] is True
    assert cluster.actor_errors == []
    await cluster.stop()


async def test_without_the_controller_an_unplug_detaches_and_a_migration_unplumbs() -> None:
    knobs = Knobs(dialect="multus", delays=DELAYS)
    cluster = SimulatedCluster(knobs, clock=VirtualSimClock(), serve=False,
                               fixtures=Fixtures(vms=1, vm_networks=(("Network", "user-net"),)))
    await cluster.start()
    store = cluster.store
    d.mark_absent(store, NS, VM, "Network", "user-net")
    await cluster.advance(0.1)
    # out of the guest at once, as virt-launcher does; the pod keeps its link
    assert not d.attached(store, NS, VM, "Network", "user-net")
    entry = d.vmi_interface(store, NS, VM, "Network", "user-net")
    assert entry is not None and entry["infoSource"] == "multus-status"
    assert d.condition(store, NS, VM, "MigrationRequired") == ("False", "AutoMigrationPending")
    await cluster.advance(15.0)
    assert d.condition(store, NS, VM, "MigrationRequired") == (
        "True", "AutoMigrationDueToLiveUpdate")

    # virt-controller generates the target pod's networks from the VMI, without it
    d.migrate(store, NS, VM)
    await cluster.advance(3.0)
    assert d.migration_phase(store, NS) == "Succeeded"
    assert d.vmi_interface(store, NS, VM, "Network", "user-net") is None
    assert d.condition(store, NS, VM, "MigrationRequired") is None
    names = [i["name"] for i in ob.interfaces_of(store.get(KVVMS, NS, VM)["spec"]["template"][
        "spec"])]
    assert names == [nw.MAIN_IF_NAME]  # KubeVirt drops the unplugged interface
    assert cluster.actor_errors == []
    await cluster.stop()


async def test_with_the_controller_network_status_follows_and_virt_handler_attaches() -> None:
    knobs = Knobs(dialect="multus", dynamic_networks_controller=True, delays=DELAYS)
    cluster = await started(knobs)
    store = cluster.store
    d.plug_pod(store, knobs, NS, VM, "ClusterNetwork", "storage")
    await cluster.advance(0.5)
    status = nw.parse_list(nw.annotations_of(d.active_pod(store, NS, VM))[nw.MULTUS_STATUS])
    assert status is not None
    assert status[0] == {"name": "default-cni", "interface": "eth0", "default": True, "dns": {}}
    assert status[1]["name"] == "default/storage"
    if_name = nw.if_name("ClusterNetwork", "storage")
    assert status[1]["interface"] == nw.multus_pod_interface(if_name)
    d.plug_kvvm(store, knobs, NS, VM, "ClusterNetwork", "storage")
    await cluster.advance(0.1)
    assert d.attached(store, NS, VM, "ClusterNetwork", "storage")
    assert d.condition(store, NS, VM, "MigrationRequired") is None

    d.mark_absent(store, NS, VM, "ClusterNetwork", "storage")
    await cluster.advance(0.1)
    # out of the guest at once; still reported while the pod is plumbed for it
    entry = d.vmi_interface(store, NS, VM, "ClusterNetwork", "storage")
    assert entry is not None and entry["infoSource"] == "multus-status"
    d.unplug_pod(store, knobs, NS, VM, "ClusterNetwork", "storage")
    await cluster.advance(0.5)
    status = nw.parse_list(nw.annotations_of(d.active_pod(store, NS, VM))[nw.MULTUS_STATUS])
    assert [e["name"] for e in status or []] == ["default-cni"]
    assert d.vmi_interface(store, NS, VM, "ClusterNetwork", "storage") is None
    assert d.condition(store, NS, VM, "MigrationRequired") is None  # in place: no migration
    assert cluster.actor_errors == []
    await cluster.stop()


@pytest.mark.parametrize("why", ["not migratable", "knobs"])
async def test_a_migration_fails_when_the_vmi_cannot_move(why: str) -> None:
    knobs = Knobs(dialect="multus", delays=DELAYS,
                  failures=Failures(migrations=why == "knobs"))
    cluster = await started(knobs)
    store = cluster.store
    if why == "not migratable":
        vmi = store.get(VMIS, NS, VM)
        ob.set_condition(vmi["status"], "LiveMigratable", "False", "InterfaceNotLiveMigratable")
        store.update(VMIS, vmi, subresource="status")
    d.migrate(store, NS, VM)
    await cluster.advance(3.0)
    assert d.migration_phase(store, NS) == "Failed"
    assert len(d.pods_of(store, NS, VM)) == 1
    assert cluster.actor_errors == []
    await cluster.stop()


async def test_a_migration_failed_by_someone_else_ends_on_the_vmi() -> None:
    """Someone deletes a running migration's target pod and the migration ends Failed:
    virt-controller marks it failed on the VMI (`handleMarkMigrationFailedOnVMI`,
    pkg/virt-controller/watch/migration/migration.go), so the VMI no longer reads as
    migrating and KubeVirt's evaluator asks again for the migration a plug still needs
    (a VMI left migrating for ever kept `MigrationRequired` False: seed 20752)."""
    knobs = Knobs(dialect="multus", delays=DELAYS, migration_required_grace=5.0)
    cluster = await started(knobs)
    store = cluster.store
    d.migrate(store, NS, VM)
    await cluster.advance(0.5)
    assert d.migration_phase(store, NS) == "Running"
    migration = store.get(VMIMS, NS, "mig-1")
    uid = migration["metadata"]["uid"]
    for pod in d.pods_of(store, NS, VM):
        if (pod["metadata"].get("labels") or {}).get(nw.MIGRATION_LABEL) == uid:
            store.delete(PODS, NS, pod["metadata"]["name"])
    store.patch(VMIMS, NS, "mig-1", {"status": {"phase": "Failed"}},
                content_type="application/merge-patch+json", subresource="status")
    d.plug_kvvm(store, knobs, NS, VM, "Network", "user-net")
    await cluster.advance(10.0)
    state = ob.dig(store.get(VMIS, NS, VM), "status", "migrationState")
    assert (state["migrationUid"], state["failed"], state["completed"]) == (uid, True, True)
    assert state["endTimestamp"] and state["failureReason"] == "Target pod is down"
    assert d.condition(store, NS, VM, "MigrationRequired") == (
        "True", "AutoMigrationDueToLiveUpdate")
    assert cluster.actor_errors == []
    await cluster.stop()


def _vm_conditions(store: object, ns: str = NS, vm: str = VM) -> dict[str, tuple[str, str]]:
    kvvm = store.get(KVVMS, ns, vm)  # type: ignore[attr-defined]
    return {c["type"]: (c["status"], c.get("reason", ""))
            for c in ob.dig(kvvm, "status", "conditions") or []}


async def test_the_vm_controller_keeps_only_the_vmis_conditions_and_its_own_three() -> None:
    """KubeVirt's `syncConditions` (pkg/virt-controller/watch/vm/vm.go): at every sync
    of a VM that has a VMI, the VMI's conditions are copied onto the VM and every other
    one is removed but Ready, Failure and RestartRequired; a write to the VM's status
    is such a sync. A VM without a VMI keeps what it has."""
    knobs = Knobs(dialect="multus", delays=DELAYS)
    cluster = await started(knobs)
    store = cluster.store
    synced = _vm_conditions(store)
    assert synced["LiveMigratable"][0] == "True" and "Ready" not in synced  # (VMI's Ready)
    kvvm = store.get(KVVMS, NS, VM)
    status = kvvm.get("status") or {}
    for type_ in ("NetworkHotplugAwaitingMigration", "RestartRequired", "Failure"):
        ob.set_condition(status, type_, "True", "Someone")
    store.update(KVVMS, kvvm | {"status": status}, subresource="status")
    await cluster.advance(0.1)
    after = _vm_conditions(store)
    assert "NetworkHotplugAwaitingMigration" not in after  # removed at once
    assert after["RestartRequired"] == after["Failure"] == ("True", "Someone")
    assert after["LiveMigratable"] == synced["LiveMigratable"]
    # a VMI condition that changes is copied again
    d.plug_kvvm(store, knobs, NS, VM, "Network", "user-net")
    await cluster.advance(30.0)
    assert _vm_conditions(store).get("MigrationRequired", ("", ""))[0] == "True"

    # stopped: no VMI, nothing removed
    store.patch(KVVMS, NS, VM, {"spec": {"runStrategy": "Halted"}},
                content_type="application/merge-patch+json")
    await cluster.advance(1.0)
    assert store.peek(VMIS, NS, VM) is None
    kvvm = store.get(KVVMS, NS, VM)
    status = kvvm.get("status") or {}
    ob.set_condition(status, "NetworkHotplugFailed", "True", "Someone")
    store.update(KVVMS, kvvm | {"status": status}, subresource="status")
    await cluster.advance(1.0)
    assert _vm_conditions(store)["NetworkHotplugFailed"] == ("True", "Someone")
    assert cluster.actor_errors == []
    await cluster.stop()


async def test_with_the_controller_kubevirt_raises_the_grace_and_clears_it_in_place() -> None:
    """KubeVirt's evaluator raises `MigrationRequired=False` (`AutoMigrationPending`) for
    a plugged interface the pod does not link yet, controller or not
    (`pkg/network/migration/evaluator.go`); the dynamic-networks controller links it
    within the grace, and the condition goes without ever turning `True`."""
    knobs = Knobs(dialect="multus", dynamic_networks_controller=True,
                  delays=Delays(sdn_configure=5.0, attach=0.1, migration=2.0, restart=1.0))
    cluster = await started(knobs)
    store = cluster.store
    d.plug_kvvm(store, knobs, NS, VM, "Network", "user-net")
    await cluster.advance(1.0)
    assert d.condition(store, NS, VM, "MigrationRequired") == ("False", "AutoMigrationPending")
    await cluster.advance(6.0)
    assert d.attached(store, NS, VM, "Network", "user-net")
    assert d.condition(store, NS, VM, "MigrationRequired") is None
    await cluster.advance(20.0)
    assert d.condition(store, NS, VM, "MigrationRequired") is None
    assert cluster.actor_errors == []
    await cluster.stop()


async def test_an_sriov_interface_is_hot_plugged_and_asks_for_a_migration_at_once() -> None:
    """KubeVirt hot-plugs SR-IOV interfaces into the VMI (`vm.go`) and its evaluator asks
    for their migration at once, with no grace (`shouldMigrateOnIfaceHotplug`); an
    interface bound by a plugin it does not hot-plug (passt) never reaches the VMI."""
    knobs = Knobs(dialect="multus", dynamic_networks_controller=True, delays=DELAYS)
    cluster = await started(knobs)
    store = cluster.store
    kvvm = store.get(KVVMS, NS, VM)
    spec = kvvm["spec"]["template"]["spec"]
    spec["networks"] += [{"name": "vf1", "multus": {"networkName": "default/sriov-net"}},
                         {"name": "pt1", "multus": {"networkName": "default/user-net"}}]
    spec["domain"]["devices"]["interfaces"] += [{"name": "vf1", "sriov": {}},
                                                 {"name": "pt1", "binding": {"name": "passt"}}]
    store.update(KVVMS, kvvm)
    await cluster.advance(0.1)
    vmi = store.get(VMIS, NS, VM)
    names = [i["name"] for i in ob.interfaces_of(vmi["spec"])]
    assert "vf1" in names and "pt1" not in names
    assert d.condition(store, NS, VM, "MigrationRequired") == (
        "True", "AutoMigrationDueToLiveUpdate")
    assert cluster.actor_errors == []
    await cluster.stop()
