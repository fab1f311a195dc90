"""Fixtures, restarts and stops of the simulated KubeVirt."""

from __future__ import annotations

from nicplug.simulator import networking as nw
from nicplug.simulator import objects as ob
from nicplug.simulator.clock import VirtualSimClock
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.errors import NotFound
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Delays, Knobs
from nicplug.simulator.resources import KUBEVIRTS, KVVMS, PODS, VMIS, VMS
from tests.simulator import driving as d

DELAYS = Delays(sdn_configure=0.5, attach=0.1, restart=1.0)


async def test_fixtures_create_running_vms_that_the_actors_leave_alone() -> None:
    for dialect in ("deckhouse", "multus"):
        knobs = Knobs(dialect=dialect)  # type: ignore[arg-type]
        fixtures = Fixtures(vms=40, namespaces=("ns-a", "ns-b"), rollout_strategy="Stage",
                            vm_networks=(("Network", "user-net"), ("ClusterNetwork", "storage")))
        cluster = SimulatedCluster(knobs, clock=VirtualSimClock(), serve=False, fixtures=fixtures)
        await cluster.start()
        store = cluster.store
        version = store.resource_version
        await cluster.advance(30.0)
        assert store.resource_version == version, "a consistent world needs no fixing"
        assert len(store.list(KVVMS)[0]) == 40
        # upstream KubeVirt has no Deckhouse VM: its users edit the KubeVirt VM itself
        assert len(store.list(VMS)[0]) == (40 if dialect == "deckhouse" else 0)
        assert len(store.list(VMIS, "ns-b")[0]) == 20 and len(store.list(PODS)[0]) == 40
        kv = store.get(KUBEVIRTS, "kubevirt", "kubevirt")
        assert kv["spec"]["configuration"]["vmRolloutStrategy"] == "Stage"
        assert kv["spec"]["workloadUpdateStrategy"]["workloadUpdateMethods"] == ["LiveMigrate"]
        for ns, vm in cluster.vms:
            assert d.attached(store, ns, vm, "Network", "user-net")
            assert d.attached(store, ns, vm, "ClusterNetwork", "storage")
            assert ob.condition(store.get(VMIS, ns, vm), "LiveMigratable") is not None
            assert d.active_pod(store, ns, vm)["metadata"]["labels"][nw.VM_NAME_LABEL] == vm
        assert cluster.actor_errors == []
        await cluster.stop()


async def test_a_restart_starts_the_vm_from_the_current_template() -> None:
    knobs = Knobs(dialect="deckhouse", delays=DELAYS, native_hotplug=False)  # edits the KVVM
    cluster = SimulatedCluster(knobs, clock=VirtualSimClock(), serve=False,
                               fixtures=Fixtures(vms=1))
    await cluster.start()
    store = cluster.store
    ns, vm = cluster.vms[0]
    old_pod = d.active_pod(store, ns, vm)
    d.plug_kvvm(store, knobs, ns, vm, "Network", "user-net")  # a staged change...
    d.plug_kvvm(store, knobs, ns, vm, "ClusterNetwork", "storage", 3)
    old = store.get(VMIS, ns, vm)
    d.restart(store, knobs, ns, vm)  # ...applied by a restart (`d8 v restart`)
    await cluster.advance(0.5)
    assert d.pods_of(store, ns, vm) == []
    await cluster.advance(0.5)
    new = store.get(VMIS, ns, vm)
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    (pod,) = d.pods_of(store, ns, vm)
    assert pod["metadata"]["name"] != old_pod["metadata"]["name"]
    assert [(e["type"], e["name"]) for e in d.request_of(knobs, pod)] == [
        ("Network", "user-net"), ("ClusterNetwork", "storage")]
    await cluster.advance(0.5)
    assert new["metadata"]["uid"] == store.get(VMIS, ns, vm)["metadata"]["uid"]
    assert d.attached(store, ns, vm, "Network", "user-net")
    assert d.attached(store, ns, vm, "ClusterNetwork", "storage")
    assert store.get(KVVMS, ns, vm)["status"]["printableStatus"] == "Running"
    assert cluster.link_not_found == [] and cluster.actor_errors == []
    await cluster.stop()


async def test_halting_stops_the_vm_and_always_starts_it_again() -> None:
    knobs = Knobs(dialect="multus", delays=DELAYS)
    cluster = SimulatedCluster(knobs, clock=VirtualSimClock(), serve=False,
                               fixtures=Fixtures(vms=1))
    await cluster.start()
    store = cluster.store
    ns, vm = cluster.vms[0]
    store.patch(KVVMS, ns, vm, {"spec": {"runStrategy": "Halted"}}, content_type=d.MERGE)
    await cluster.settle()
    try:
        store.get(VMIS, ns, vm)
        raise AssertionError("the VMI of a halted VM must go")
    except NotFound:
        pass
    assert d.pods_of(store, ns, vm) == []
    assert store.get(KVVMS, ns, vm)["status"]["printableStatus"] == "Stopped"
    store.patch(KVVMS, ns, vm, {"spec": {"runStrategy": "Always"}}, content_type=d.MERGE)
    await cluster.advance(1.0)
    assert store.get(VMIS, ns, vm)["status"]["phase"] == "Running"
    assert len(d.pods_of(store, ns, vm)) == 1
    assert cluster.actor_errors == []
    await cluster.stop()


async def test_malformed_annotations_are_ignored_not_crashed_on() -> None:
    for knobs in (Knobs(dialect="deckhouse"), Knobs(dialect="multus",
                                                    dynamic_networks_controller=True)):
        cluster = SimulatedCluster(knobs, clock=VirtualSimClock(), serve=False,
                                   fixtures=Fixtures(vms=1))
        await cluster.start()
        store = cluster.store
        ns, vm = cluster.vms[0]
        pod = d.active_pod(store, ns, vm)
        for raw in ("{not json", '{"an": "object"}', '[1, 2]', '[{"name": 7}]'):
            store.patch(PODS, ns, pod["metadata"]["name"], {"metadata": {"annotations": {
                ob.request_annotation(knobs.dialect): raw}}}, content_type=d.MERGE)
            kvvm = store.get(KVVMS, ns, vm)
            kvvm["spec"]["template"]["metadata"]["annotations"] = {
                ob.request_annotation(knobs.dialect): raw}
            store.update(KVVMS, kvvm)
            await cluster.advance(5.0)
        d.restart(store, knobs, ns, vm)  # a restart with a malformed template annotation
        await cluster.advance(5.0)
        assert cluster.actor_errors == []
        assert store.get(VMIS, ns, vm)["status"]["phase"] == "Running"
        await cluster.stop()


async def test_the_default_interface_is_never_unplugged() -> None:
    cluster = SimulatedCluster(Knobs(), clock=VirtualSimClock(), serve=False,
                               fixtures=Fixtures(vms=1))
    await cluster.start()
    store = cluster.store
    ns, vm = cluster.vms[0]
    kvvm = store.get(KVVMS, ns, vm)
    kvvm["spec"]["template"]["spec"]["domain"]["devices"]["interfaces"][0]["state"] = "absent"
    store.update(KVVMS, kvvm)
    await cluster.advance(5.0)
    (iface,) = ob.interfaces_of(store.get(VMIS, ns, vm)["spec"])
    assert iface["name"] == nw.MAIN_IF_NAME and "state" not in iface
    assert [e["name"] for e in store.get(VMIS, ns, vm)["status"]["interfaces"]] == ["default"]
    await cluster.stop()
