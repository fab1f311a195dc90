"""Today's Deckhouse hot-plugs by itself: a VM's spec changes over HTTP, nobody else acts."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from kubernetes_asyncio import client, config

from nicplug.simulator import admission_policy
from nicplug.simulator import deckhouse_networks as dn
from nicplug.simulator import networking as nw
from nicplug.simulator import objects as ob
from nicplug.simulator.actors.deckhouse_hotplug import IDENTITY
from nicplug.simulator.clock import VirtualSimClock
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.identity import DEFAULT_USER
from nicplug.simulator.knobs import Delays, Failures, Knobs
from nicplug.simulator.resources import IP_ADDRESSES, KVVMS, VMIS, VMMACS, VMS
from tests.simulator import driving as d

NS, VM = "default", "vm-00000"
DELAYS = Delays(sdn_configure=0.5, attach=0.1, restart=1.0, mac_allocate=0.2, ip_allocate=0.2)
VMS_API = ("virtualization.deckhouse.io", "v1alpha2", NS, "virtualmachines")
Json = dict[str, Any]


async def _cluster(knobs: Knobs | None = None, **fixtures: Any) -> SimulatedCluster:
    cluster = SimulatedCluster(knobs or Knobs(dialect="deckhouse", delays=DELAYS),
                               clock=VirtualSimClock(),
                               fixtures=Fixtures(vms=1, **fixtures))
    await cluster.start()
    return cluster


@pytest.fixture
async def cluster() -> AsyncIterator[SimulatedCluster]:
    c = await _cluster()
    yield c
    assert c.actor_errors == [] and c.link_not_found == []
    await c.stop()


async def _set_networks(cluster: SimulatedCluster, networks: list[Json]) -> None:
    """What a user does: the VM's spec.networks replaced over HTTP (merge patch)."""
    assert cluster.kubeconfig_path is not None
    api = await config.new_client_from_config(str(cluster.kubeconfig_path))
    async with api:
        await client.CustomObjectsApi(api).patch_namespaced_custom_object(
            *VMS_API, VM, {"spec": {"networks": networks}},
            _content_type="application/merge-patch+json")


def _pod_spec(cluster: SimulatedCluster) -> str | None:
    return nw.annotations_of(d.active_pod(cluster.store, NS, VM)).get(nw.DECKHOUSE_REQUEST)


def _kvvm_interfaces(cluster: SimulatedCluster) -> list[Json]:
    return ob.interfaces_of(ob.dig(cluster.store.get(KVVMS, NS, VM), "spec", "template", "spec"))


def _vmi_attached(cluster: SimulatedCluster) -> set[str]:
    vmi = cluster.store.get(VMIS, NS, VM)
    return {str(i["name"]) for i in ob.dig(vmi, "status", "interfaces") or []
            if "domain" in str(i.get("infoSource"))}


def _mac(cluster: SimulatedCluster, name: str) -> str:
    (entry,) = [n for n in cluster.store.get(VMS, NS, VM)["status"]["networks"]
                if n.get("name") == name]
    return str(entry["macAddress"])


def _events(cluster: SimulatedCluster) -> list[tuple[str, str, str]]:
    return [(e["type"], e["reason"], e["message"]) for e in cluster.events()
            if e["involvedObject"]["kind"] == "VirtualMachine"]


MAIN = {"type": "Main", "id": 1}
USER_NET = {"type": "Network", "name": "user-net", "id": 2}


async def test_a_network_added_to_the_spec_is_hot_plugged_in_deckhouses_order(
    cluster: SimulatedCluster,
) -> None:
    await _set_networks(cluster, [MAIN, USER_NET])
    await cluster.advance(0.2)  # the MAC is allocated: the pod asks the SDN, the KVVM waits
    value = _pod_spec(cluster)
    assert value is not None
    (entry,) = json.loads(value)
    if_name = entry["ifName"]
    assert value == (f'[{{"id":2,"type":"Network","name":"user-net","ifName":"{if_name}",'
                     f'"uid":64535,"gid":64535}}]')
    assert [i["name"] for i in _kvvm_interfaces(cluster)] == ["default"]
    vm = cluster.store.get(VMS, NS, VM)
    applied = ob.condition(vm, "ConfigurationApplied")
    assert applied is not None and applied["message"] == (
        "Waiting for SDN to configure network interfaces.")
    await cluster.advance(0.5)  # the SDN reports the link: the KVVM, then the VMI
    await cluster.advance(0.2)
    kvvm = cluster.store.get(KVVMS, NS, VM)
    (added,) = [i for i in _kvvm_interfaces(cluster) if i["name"] == if_name]
    mac = _mac(cluster, "user-net")
    assert added == {"name": nw.mac_if_name("Network", mac), "model": "virtio", "acpiIndex": 2,
                     "binding": {"name": "bpfbridge"}, "macAddress": mac}
    template = kvvm["spec"]["template"]["metadata"]["annotations"]
    assert template[nw.DECKHOUSE_REQUEST] == value
    assert template[dn.TAP_PROVISION] == "true"
    assert json.loads(kvvm["metadata"]["annotations"][dn.LAST_APPLIED])["networks"] == [
        MAIN, USER_NET]
    assert if_name in _vmi_attached(cluster)
    assert ob.condition(cluster.store.get(VMS, NS, VM), "ConfigurationApplied") is None
    assert _events(cluster) == [
        ("Normal", "ChangesApplied", "Apply changes without restart"),
        ("Normal", "ChangesApplied", "Waiting for SDN to configure network interfaces"),
        ("Normal", "VirtualMachineSynced", "The virtual machine configuration successfully synced"),
    ]
    # nobody but the user asked the API server for anything
    assert {r.username for r in cluster.requests} == {DEFAULT_USER}
    assert [(r.verb, r.resource) for r in cluster.requests] == [("patch", "virtualmachines")]


async def test_a_network_removed_leaves_the_pod_first_then_the_kvvm_and_the_vmi() -> None:
    cluster = await _cluster(vm_networks=(("Network", "user-net"),))
    try:
        if_name = nw.mac_if_name("Network", _mac(cluster, "user-net"))
        assert if_name in _vmi_attached(cluster)
        await _set_networks(cluster, [MAIN])
        await cluster.settle()
        assert _pod_spec(cluster) == "[]"
        (gone,) = [i for i in _kvvm_interfaces(cluster) if i["name"] == if_name]
        assert gone["state"] == "absent"  # without waiting for the SDN to let the link go
        await cluster.advance(0.5)
        assert if_name not in _vmi_attached(cluster)
        assert [i["name"] for i in _kvvm_interfaces(cluster)] == ["default"]
        template = cluster.store.get(KVVMS, NS, VM)["spec"]["template"]["metadata"]
        assert nw.DECKHOUSE_REQUEST not in template["annotations"]
        assert dn.TAP_PROVISION not in template["annotations"]
        assert cluster.actor_errors == [] and cluster.link_not_found == []
    finally:
        await cluster.stop()


async def test_an_unallocated_ip_address_keeps_the_network_out_of_the_pods_request() -> None:
    knobs = Knobs(dialect="deckhouse", delays=replace(DELAYS, ip_allocate=3.0))
    cluster = await _cluster(knobs, ipam_networks=("user-net",))
    try:
        await _set_networks(cluster, [MAIN, USER_NET])
        await cluster.advance(1.0)  # MAC allocated, the IPAddress not yet
        assert _pod_spec(cluster) == "[]"
        assert [i["name"] for i in _kvvm_interfaces(cluster)] == ["default"]
        (address,) = cluster.store.list(IP_ADDRESSES, NS)[0]
        assert address["spec"] == {"networkRef": {"kind": "Network", "name": "user-net"},
                                   "type": "Auto"}
        await cluster.advance(2.5)  # allocated: requested with IPAM's fields, then plugged
        name = address["metadata"]["name"]
        (entry,) = json.loads(_pod_spec(cluster) or "")
        assert _pod_spec(cluster) == (
            f'[{{"id":2,"type":"Network","name":"user-net","ifName":"{entry["ifName"]}",'
            f'"uid":64535,"gid":64535,"ipAssignmentMode":"DHCP","ipAddressNames":["{name}"]}}]')
        await cluster.advance(1.0)
        assert entry["ifName"] in _vmi_attached(cluster)
        assert cluster.actor_errors == [] and cluster.link_not_found == []
    finally:
        await cluster.stop()


async def test_an_exhausted_pool_keeps_the_sdn_waited_for_with_no_end() -> None:
    knobs = Knobs(dialect="deckhouse", delays=DELAYS,
                  failures=Failures(ip_pools_exhausted=frozenset({"Network/user-net"})))
    cluster = await _cluster(knobs, ipam_networks=("user-net",))
    try:
        await _set_networks(cluster, [MAIN, USER_NET])
        await cluster.advance(30.0)
        assert _pod_spec(cluster) == "[]"
        assert [i["name"] for i in _kvvm_interfaces(cluster)] == ["default"]
        applied = ob.condition(cluster.store.get(VMS, NS, VM), "ConfigurationApplied")
        assert applied is not None and applied["reason"] == "ConfigurationNotApplied"
    finally:
        await cluster.stop()


async def test_a_foreign_awaiting_restart_condition_is_removed(
    cluster: SimulatedCluster,
) -> None:
    vm = cluster.store.get(VMS, NS, VM)
    ob.set_condition(vm["status"], "AwaitingRestartToApplyConfiguration", "True",
                     "RestartRequired", "set by someone else")
    cluster.store.update(VMS, vm, subresource="status")
    await cluster.settle()
    assert ob.condition(cluster.store.get(VMS, NS, VM),
                        "AwaitingRestartToApplyConfiguration") is None


async def test_removing_main_waits_for_a_restart_and_an_id_change_does_not() -> None:
    cluster = await _cluster(vm_networks=(("Network", "user-net"),))
    try:
        before = cluster.store.get(KVVMS, NS, VM)["spec"]
        await _set_networks(cluster, [{**USER_NET, "id": 5}])  # Main removed
        await cluster.settle()
        assert cluster.store.get(KVVMS, NS, VM)["spec"] == before
        awaiting = ob.condition(cluster.store.get(VMS, NS, VM),
                                "AwaitingRestartToApplyConfiguration")
        assert awaiting is not None and (awaiting["status"], awaiting["reason"]) == (
            "True", "ChangesPendingRestart")
        assert awaiting["message"] == ("Waiting for the user to restart in order to apply the "
                                       "configuration changes. ")
        assert ("Normal", "RestartAwaitingChanges",
                "The virtual machine configuration successfully synced") in _events(cluster)
        await _set_networks(cluster, [MAIN, {**USER_NET, "id": 5}])  # Main back, id only
        await cluster.settle()
        vm = cluster.store.get(VMS, NS, VM)
        assert ob.condition(vm, "AwaitingRestartToApplyConfiguration") is None
        if_name = nw.mac_if_name("Network", _mac(cluster, "user-net"))
        (iface,) = [i for i in _kvvm_interfaces(cluster) if i["name"] == if_name]
        assert iface["acpiIndex"] == 5
        assert json.loads(_pod_spec(cluster) or "")[0]["id"] == 5
        assert cluster.store.get(VMIS, NS, VM)["status"]["phase"] == "Running"
    finally:
        await cluster.stop()


async def test_without_native_hotplug_the_change_is_left_unapplied() -> None:
    cluster = await _cluster(Knobs(dialect="deckhouse", delays=DELAYS, native_hotplug=False))
    try:
        pod_before = _pod_spec(cluster)
        await _set_networks(cluster, [MAIN, USER_NET])
        await cluster.advance(10.0)
        assert _pod_spec(cluster) == pod_before
        assert [i["name"] for i in _kvvm_interfaces(cluster)] == ["default"]
        assert _vmi_attached(cluster) == {"default"}
    finally:
        await cluster.stop()


def test_the_platforms_identity_is_one_the_policy_admits() -> None:
    assert admission_policy.admitted(IDENTITY)


async def test_a_reorder_of_additional_networks_is_applied_without_a_restart() -> None:
    """The platform's source over the issue's word: only Main added or removed needs a
    restart (`isOnlyNonMainNetworksChanged`)."""
    cluster = await _cluster(vm_networks=(("Network", "user-net"), ("ClusterNetwork", "storage")))
    try:
        storage = {"type": "ClusterNetwork", "name": "storage", "id": 3}
        await _set_networks(cluster, [MAIN, storage, USER_NET])
        await cluster.settle()
        vm = cluster.store.get(VMS, NS, VM)
        assert ob.condition(vm, "AwaitingRestartToApplyConfiguration") is None
        assert [e["name"] for e in json.loads(_pod_spec(cluster) or "")] == ["storage", "user-net"]
        last = json.loads(cluster.store.get(KVVMS, NS, VM)["metadata"]["annotations"][
            dn.LAST_APPLIED])
        assert last["networks"] == [MAIN, storage, USER_NET]
        assert cluster.store.get(VMIS, NS, VM)["status"]["phase"] == "Running"
        assert cluster.actor_errors == []
    finally:
        await cluster.stop()


async def test_a_restart_applies_what_waited_for_it() -> None:
    cluster = await _cluster(vm_networks=(("Network", "user-net"),))
    try:
        await _set_networks(cluster, [USER_NET])  # Main removed: waits for a restart
        await cluster.settle()
        old = cluster.store.get(VMIS, NS, VM)["metadata"]["uid"]
        d.restart(cluster.store, cluster.knobs, NS, VM)
        await cluster.advance(5.0)
        vmi = cluster.store.get(VMIS, NS, VM)
        assert vmi["metadata"]["uid"] != old and vmi["status"]["phase"] == "Running"
        names = [i["name"] for i in ob.interfaces_of(vmi["spec"])]
        assert names == [nw.mac_if_name("Network", _mac(cluster, "user-net"))]
        vm = cluster.store.get(VMS, NS, VM)
        assert ob.condition(vm, "AwaitingRestartToApplyConfiguration") is None
        assert cluster.actor_errors == [] and cluster.link_not_found == []
    finally:
        await cluster.stop()


async def test_a_static_address_is_requested_once_allocated_and_refused_without_a_pool() -> None:
    cluster = await _cluster(ipam_networks=("user-net",))
    try:
        cluster.store.create(IP_ADDRESSES, {
            "apiVersion": IP_ADDRESSES.api_version, "kind": IP_ADDRESSES.kind,
            "metadata": {"name": "my-ip", "namespace": NS},
            "spec": {"networkRef": {"kind": "Network", "name": "user-net"}, "type": "Static"}})
        await _set_networks(cluster, [MAIN, {**USER_NET, "ipAddressName": "my-ip"}])
        await cluster.advance(6.0)
        (entry,) = json.loads(_pod_spec(cluster) or "")
        assert (entry["ipAssignmentMode"], entry["ipAddressNames"]) == ("DHCP", ["my-ip"])
        assert entry["ifName"] in _vmi_attached(cluster)
        assert len(cluster.store.list(IP_ADDRESSES, NS)[0]) == 1  # no automatic one
        storage = {"type": "ClusterNetwork", "name": "storage", "id": 3, "ipAddressName": "x"}
        await _set_networks(cluster, [MAIN, {**USER_NET, "ipAddressName": "my-ip"}, storage])
        await cluster.advance(6.0)  # no pool on storage: an address named is left out
        assert [e["name"] for e in json.loads(_pod_spec(cluster) or "")] == ["user-net"]
        assert cluster.actor_errors == []
    finally:
        await cluster.stop()


async def test_an_sdn_that_never_configures_the_network_is_waited_for_forever() -> None:
    """What the platform alone does: a Normal Event, `ConfigurationApplied` False, no
    deadline, no failure — the gap a controller beside it fills."""
    knobs = Knobs(dialect="deckhouse", delays=DELAYS,
                  failures=Failures(sdn_networks=frozenset({"Network/user-net"})))
    cluster = await _cluster(knobs)
    try:
        await _set_networks(cluster, [MAIN, USER_NET])
        await cluster.advance(600.0)
        (status,) = json.loads(nw.annotations_of(d.active_pod(cluster.store, NS, VM))[
            nw.DECKHOUSE_STATUS])
        assert not nw.deckhouse_ready(status)
        assert [i["name"] for i in _kvvm_interfaces(cluster)] == ["default"]
        applied = ob.condition(cluster.store.get(VMS, NS, VM), "ConfigurationApplied")
        assert applied is not None and applied["message"] == (
            "Waiting for SDN to configure network interfaces.")
        assert [e for e in _events(cluster) if e[0] == "Warning"] == []
        assert ("Normal", "ChangesApplied",
                "Waiting for SDN to configure network interfaces") in _events(cluster)
        assert cluster.actor_errors == [] and cluster.link_not_found == []
    finally:
        await cluster.stop()


async def test_a_network_the_platform_plugged_survives_a_migration(
    cluster: SimulatedCluster,
) -> None:
    await _set_networks(cluster, [MAIN, USER_NET])
    await cluster.advance(2.0)
    if_name = nw.mac_if_name("Network", _mac(cluster, "user-net"))
    assert if_name in _vmi_attached(cluster)
    before = d.active_pod(cluster.store, NS, VM)["metadata"]["name"]
    d.migrate(cluster.store, NS, VM)
    await cluster.advance(5.0)
    assert d.migration_phase(cluster.store, NS) == "Succeeded"
    pod = d.active_pod(cluster.store, NS, VM)
    assert pod["metadata"]["name"] != before
    assert json.loads(nw.annotations_of(pod)[nw.DECKHOUSE_REQUEST])[0]["ifName"] == if_name
    assert if_name in _vmi_attached(cluster)


async def test_the_status_reads_the_kvvm_by_the_name_the_pool_gives_from_the_status_alone(
) -> None:
    """`UpdateNetworkStatus` (`network.go`) lists each network with the MAC of the KVVM
    interface named after the MAC `NewMacAddressPool` gives it, and that pool holds
    `status.networks` alone (`mac_pool.go`): a KVVM interface written for `b` before the
    status names it, with `a` put before `b` since, is read as `a`'s — the pool hands
    the first VMMAC to `a` — and `b` has no MAC yet, as the real controller has it."""
    cluster = await _cluster(Knobs(dialect="deckhouse", delays=DELAYS, native_hotplug=False))
    try:
        a, b = {"type": "Network", "name": "a", "id": 2}, {"type": "Network", "name": "b", "id": 3}
        await _set_networks(cluster, [MAIN, a, b])
        await cluster.advance(1.0)  # both VMMACs allocated, no KVVM interface for either
        vmmacs = [m for m in cluster.store.list(VMMACS, NS)[0] if ob.dig(m, "status", "address")]
        assert len(vmmacs) == 2
        by_name = [str(m["status"]["address"]) for m in sorted(
            vmmacs, key=lambda m: str(m["metadata"]["name"]))]
        assert all("macAddress" not in n for n in cluster.store.get(VMS, NS, VM)["status"][
            "networks"])
        written = nw.mac_if_name("Network", by_name[0])
        kvvm = cluster.store.get(KVVMS, NS, VM)
        spec = kvvm["spec"]["template"]["spec"]
        spec["networks"] = [*spec["networks"], {"name": written, "pod": {}}]
        spec["domain"]["devices"]["interfaces"] = [
            *spec["domain"]["devices"]["interfaces"],
            {"name": written, "bridge": {}, "macAddress": by_name[0]}]
        kvvm["spec"]["template"].setdefault("metadata", {}).setdefault("annotations", {})[
            nw.DECKHOUSE_REQUEST] = json.dumps([{"id": 3, "type": "Network", "name": "b",
                                                 "ifName": written, "uid": 64535,
                                                 "gid": 64535}])
        cluster.store.update(KVVMS, kvvm)
        await cluster.advance(1.0)
        networks = {n.get("name"): n.get("macAddress")
                    for n in cluster.store.get(VMS, NS, VM)["status"]["networks"]
                    if n.get("type") != "Main"}
        assert networks == {"a": by_name[0], "b": None}
    finally:
        await cluster.stop()
