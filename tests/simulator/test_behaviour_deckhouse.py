"""The deckhouse dialect: the plug order decides between a hot-plug and a crash."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from nicplug.simulator import networking as nw
from nicplug.simulator import objects as ob
from nicplug.simulator.clock import VirtualSimClock
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Delays, Failures, Knobs
from nicplug.simulator.resources import KVVMS, PODS, VMIS
from nicplug.simulator.store import Store
from tests.simulator import driving as d

NS, VM = "default", "vm-00000"
# these tests drive the hotplug by hand: a release without the platform's own
KNOBS = Knobs(dialect="deckhouse", delays=Delays(sdn_configure=0.5, attach=0.1, restart=1.0),
              native_hotplug=False)


async def started(knobs: Knobs = KNOBS, **fixtures: object) -> SimulatedCluster:
    cluster = SimulatedCluster(knobs, clock=VirtualSimClock(), serve=False,
                               fixtures=Fixtures(vms=1, **fixtures))  # type: ignore[arg-type]
    await cluster.start()
    return cluster


@pytest.fixture
async def cluster() -> AsyncIterator[SimulatedCluster]:
    c = await started()
    yield c
    assert c.actor_errors == []
    await c.stop()


async def test_a_naive_controller_that_patches_the_kvvm_first_crashes_the_vmi(
    cluster: SimulatedCluster,
) -> None:
    store, knobs = cluster.store, cluster.knobs
    d.plug_pod(store, knobs, NS, VM, "Network", "user-net")
    d.plug_kvvm(store, knobs, NS, VM, "Network", "user-net")  # without waiting for the SDN
    await cluster.advance(0.2)
    (crash,) = cluster.link_not_found
    assert (crash.namespace, crash.vmi, crash.interface) == (
        NS, VM, d.if_name_of(knobs, NS, VM, "Network", "user-net"))
    assert store.get(VMIS, NS, VM)["status"]["phase"] == "Failed"
    (event,) = cluster.events(reason="SyncFailed")
    assert "Link not found" in event["message"] and event["type"] == "Warning"
    assert event["involvedObject"]["name"] == VM


async def test_the_right_order_waits_for_the_sdn_and_attaches(cluster: SimulatedCluster) -> None:
    store, knobs = cluster.store, cluster.knobs
    d.plug_pod(store, knobs, NS, VM, "Network", "user-net")
    await cluster.advance(0.4)
    assert nw.DECKHOUSE_STATUS not in nw.annotations_of(d.active_pod(store, NS, VM))
    await cluster.advance(0.1)
    (status,) = nw.parse_list(
        nw.annotations_of(d.active_pod(store, NS, VM))[nw.DECKHOUSE_STATUS]) or []
    assert status["ifName"] == d.if_name_of(knobs, NS, VM, "Network", "user-net")
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "Configured": "True", "Negotiated": "True"}
    d.plug_kvvm(store, knobs, NS, VM, "Network", "user-net")
    await cluster.settle()
    vmi = store.get(VMIS, NS, VM)
    names = [i["name"] for i in ob.interfaces_of(vmi["spec"])]
    assert d.if_name_of(knobs, NS, VM, "Network", "user-net") in names
    assert not d.attached(store, NS, VM, "Network", "user-net")  # libvirt takes its time
    await cluster.advance(0.1)
    assert d.attached(store, NS, VM, "Network", "user-net")
    assert cluster.link_not_found == []
    assert store.get(VMIS, NS, VM)["status"]["phase"] == "Running"


async def test_a_crashed_vmi_restarts_from_the_template_and_boots_with_the_interface(
    cluster: SimulatedCluster,
) -> None:
    store, knobs = cluster.store, cluster.knobs
    old_uid = store.get(VMIS, NS, VM)["metadata"]["uid"]
    d.plug_kvvm(store, knobs, NS, VM, "Network", "user-net")
    await cluster.advance(0.1)
    assert len(cluster.link_not_found) == 1
    await cluster.advance(1.0)  # the restart
    vmi = store.get(VMIS, NS, VM)
    assert vmi["metadata"]["uid"] != old_uid and vmi["status"]["phase"] == "Scheduled"
    (pod,) = d.pods_of(store, NS, VM)
    assert [e["name"] for e in d.request_of(knobs, pod)] == ["user-net"]
    await cluster.advance(0.5)  # the SDN configures the new pod before the domain boots
    assert store.get(VMIS, NS, VM)["status"]["phase"] == "Running"
    assert d.attached(store, NS, VM, "Network", "user-net")
    assert len(cluster.link_not_found) == 1


async def test_unplug_detaches_the_guest_then_the_sdn_releases() -> None:
    cluster = await started(vm_networks=(("Network", "user-net"),))
    store, knobs = cluster.store, cluster.knobs
    if_name = d.if_name_of(knobs, NS, VM, "Network", "user-net")
    assert d.attached(store, NS, VM, "Network", "user-net")
    d.mark_absent(store, NS, VM, "Network", "user-net")
    await cluster.settle()
    absent = [i for i in ob.interfaces_of(store.get(VMIS, NS, VM)["spec"]) if i["name"] == if_name]
    assert [(i["name"], i["binding"], i["state"]) for i in absent] == [
        (if_name, {"name": "bpfbridge"}, "absent")]
    await cluster.advance(0.1)
    assert d.vmi_interface(store, NS, VM, "Network", "user-net") is None
    for spec in (store.get(VMIS, NS, VM)["spec"],
                 store.get(KVVMS, NS, VM)["spec"]["template"]["spec"]):
        assert if_name not in [i["name"] for i in ob.interfaces_of(spec)]
        assert if_name not in [n["name"] for n in ob.networks_of(spec)]
    d.unplug_pod(store, knobs, NS, VM, "Network", "user-net")
    await cluster.settle()
    pod = d.active_pod(store, NS, VM)
    assert nw.DECKHOUSE_STATUS in nw.annotations_of(pod)
    await cluster.advance(0.5)
    assert nw.DECKHOUSE_STATUS not in nw.annotations_of(d.active_pod(store, NS, VM))
    assert cluster.actor_errors == [] and cluster.link_not_found == []
    await cluster.stop()


async def test_the_sdn_fails_a_network_it_is_told_to_fail() -> None:
    knobs = Knobs(dialect="deckhouse", delays=Delays(sdn_configure=0.5),
                  failures=Failures(sdn_networks=frozenset({"ClusterNetwork/storage"})))
    cluster = await started(knobs)
    store = cluster.store
    d.plug_pod(store, knobs, NS, VM, "Network", "user-net", 2)
    d.plug_pod(store, knobs, NS, VM, "ClusterNetwork", "storage", 3)
    await cluster.advance(0.5)
    raw = nw.annotations_of(d.active_pod(store, NS, VM))[nw.DECKHOUSE_STATUS]
    by_name = {e["name"]: e for e in json.loads(raw)}
    assert nw.deckhouse_ready(by_name["user-net"])
    configured = by_name["storage"]["conditions"][0]
    assert configured["status"] == "False" and configured["reason"] == "ConfigurationError"
    assert "ClusterNetwork/storage" in configured["message"]
    await cluster.stop()


async def test_a_failure_rate_fails_the_same_entries_for_the_same_seed() -> None:
    async def outcome(seed: int) -> list[bool]:
        knobs = Knobs(dialect="deckhouse", seed=seed, failures=Failures(sdn_rate=0.5),
                      delays=Delays(sdn_configure=0))
        cluster = await started(knobs, networks=tuple(f"net-{i}" for i in range(12)))
        for i in range(12):
            d.plug_pod(cluster.store, knobs, NS, VM, "Network", f"net-{i}", i + 2)
        await cluster.settle()
        raw = nw.annotations_of(d.active_pod(cluster.store, NS, VM))[nw.DECKHOUSE_STATUS]
        await cluster.stop()
        return [nw.deckhouse_ready(e) for e in json.loads(raw)]

    first = await outcome(7)
    assert first == await outcome(7)
    assert True in first and False in first


def _printable(store: Store) -> str:
    return str(ob.dig(store.get(KVVMS, NS, VM), "status", "printableStatus"))


async def test_a_migration_waits_for_the_sdn_on_the_target_pod() -> None:
    """And the VM reads `Migrating` meanwhile, as KubeVirt's VM controller reports it
    (`isVirtualMachineStatusMigrating`): a KVVM patch read before the migration began
    and landing after fails its resourceVersion test (simulation seeds 45270, 95822:
    it attached an interface on a target pod created from the older template)."""
    knobs = Knobs(dialect="deckhouse", delays=Delays(sdn_configure=0.5, migration=2.0))
    cluster = await started(knobs, vm_networks=(("Network", "user-net"),))
    store = cluster.store
    source = d.active_pod(store, NS, VM)
    assert _printable(store) == "Running"
    d.migrate(store, NS, VM)
    await cluster.settle()
    assert d.migration_phase(store, NS) == "Scheduling"
    assert _printable(store) == "Migrating"
    await cluster.advance(0.5)
    assert d.migration_phase(store, NS) == "Running"
    assert _printable(store) == "Migrating"
    await cluster.advance(2.0)
    assert d.migration_phase(store, NS) == "Succeeded"
    assert _printable(store) == "Running"
    target = d.active_pod(store, NS, VM)
    assert target["metadata"]["uid"] != source["metadata"]["uid"]
    assert target["spec"]["nodeName"] != source["spec"]["nodeName"]
    assert d.attached(store, NS, VM, "Network", "user-net")
    assert len(d.pods_of(store, NS, VM)) == 1
    await cluster.stop()


async def test_a_migration_fails_when_the_sdn_fails_the_target() -> None:
    knobs = Knobs(dialect="deckhouse", delays=Delays(sdn_configure=0.5),
                  failures=Failures(sdn_networks=frozenset({"Network/user-net"})))
    cluster = await started(knobs, vm_networks=(("Network", "user-net"),))
    store = cluster.store
    source = d.active_pod(store, NS, VM)
    d.migrate(store, NS, VM)
    await cluster.advance(1.0)
    assert d.migration_phase(store, NS) == "Failed"
    assert _printable(store) == "Running"
    assert [p["metadata"]["uid"] for p in d.pods_of(store, NS, VM)] == [source["metadata"]["uid"]]
    assert store.get(VMIS, NS, VM)["status"]["phase"] == "Running"
    await cluster.stop()


async def test_a_target_pod_deleted_by_someone_else_leaves_the_vmis_active_pods() -> None:
    """virt-controller sets `activePods` to the pods the VMI owns at every sync
    (`setActivePods`): a migration target deleted mid-flight (not by KubeVirt's own
    failure path) is not listed for ever (a KVVM patch checking that the VMI still runs
    in the pods its decision read refused itself for ever: simulation seed 3977)."""
    knobs = Knobs(dialect="deckhouse", delays=Delays(sdn_configure=0.5, migration=2.0))
    cluster = await started(knobs, vm_networks=(("Network", "user-net"),))
    store = cluster.store
    source = d.active_pod(store, NS, VM)
    d.migrate(store, NS, VM)
    await cluster.settle()
    assert d.migration_phase(store, NS) == "Scheduling"
    assert len(store.get(VMIS, NS, VM)["status"]["activePods"]) == 2
    (target,) = [p for p in d.pods_of(store, NS, VM)
                 if p["metadata"]["uid"] != source["metadata"]["uid"]]
    store.delete(PODS, NS, target["metadata"]["name"])
    await cluster.settle()
    assert set(store.get(VMIS, NS, VM)["status"]["activePods"]) == {source["metadata"]["uid"]}
    assert cluster.actor_errors == []
    await cluster.stop()
