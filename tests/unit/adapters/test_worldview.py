"""The world index: which VMs a change touches, and the objects of one VM."""

from __future__ import annotations

from typing import Any

from nicplug.adapters.core.worldview import WorldIndex
from nicplug.adapters.kube import resources as kinds
from nicplug.adapters.kube.flavour import DECKHOUSE, UPSTREAM


def vm(namespace: str, name: str, *networks: tuple[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": name, "resourceVersion": "1"},
        "spec": {"networks": [{"type": "Main"}]
                 + [{"type": t, "name": n} for t, n in networks]},
    }


def network(name: str, namespace: str | None = None, *, rv: str = "1",
            ready: str = "True") -> dict[str, Any]:
    meta = {"name": name, "resourceVersion": rv}
    if namespace:
        meta["namespace"] = namespace
    return {"metadata": meta, "status": {"conditions": [{"type": "Ready", "status": ready}]}}


def kubevirt(*, rv: str, strategy: str = "LiveUpdate", phase: str = "Deployed",
             observed: str = "1") -> dict[str, Any]:
    return {
        "metadata": {"namespace": "kubevirt", "name": "kubevirt", "resourceVersion": rv},
        "spec": {"configuration": {"vmRolloutStrategy": strategy}},
        "status": {"phase": phase, "observedGeneration": observed},
    }


def index_of_three() -> WorldIndex:
    index = WorldIndex(UPSTREAM)
    index.apply(kinds.VIRTUAL_MACHINES, "ADDED", vm("a", "asks", ("Network", "user-net"),
                                                   ("ClusterNetwork", "storage")))
    index.apply(kinds.VIRTUAL_MACHINES, "ADDED", vm("b", "same-name-elsewhere",
                                                   ("Network", "user-net")))
    index.apply(kinds.VIRTUAL_MACHINES, "ADDED", vm("a", "main-only"))
    for ns in ("a", "b"):
        index.apply(kinds.NETWORKS, "ADDED", network("user-net", ns))
        index.apply(kinds.NETWORKS, "ADDED", network("unused", ns))
    index.apply(kinds.CLUSTER_NETWORKS, "ADDED", network("storage"))
    return index


def test_a_network_change_touches_only_the_vms_that_ask_for_it() -> None:
    index = index_of_three()
    assert index.apply(kinds.NETWORKS, "MODIFIED",
                       network("user-net", "a", rv="2", ready="False")) == {"a/asks"}
    assert index.apply(kinds.NETWORKS, "MODIFIED",
                       network("unused", "a", rv="2", ready="False")) == set()
    assert index.apply(kinds.CLUSTER_NETWORKS, "MODIFIED",
                       network("storage", rv="2", ready="False")) == {"a/asks"}
    assert index.apply(kinds.NETWORKS, "DELETED", network("user-net", "b")) \
        == {"b/same-name-elsewhere"}


def test_a_world_holds_only_the_networks_its_vm_asks_for() -> None:
    objects = index_of_three().objects_of("a/asks")
    assert [n["metadata"]["name"] for n in objects.networks] == ["user-net"]
    assert [n["metadata"].get("namespace") for n in objects.networks] == ["a"]
    assert [n["metadata"]["name"] for n in objects.cluster_networks] == ["storage"]
    nothing = index_of_three().objects_of("a/main-only")
    assert (list(nothing.networks), list(nothing.cluster_networks)) == ([], [])


def test_a_spec_change_moves_what_the_vm_is_touched_by() -> None:
    index = index_of_three()
    index.apply(kinds.VIRTUAL_MACHINES, "MODIFIED", vm("a", "asks", ("Network", "unused")))
    assert index.apply(kinds.NETWORKS, "MODIFIED",
                       network("user-net", "a", rv="3", ready="False")) == set()
    assert index.apply(kinds.NETWORKS, "MODIFIED",
                       network("unused", "a", rv="3", ready="False")) == {"a/asks"}
    index.apply(kinds.VIRTUAL_MACHINES, "DELETED", vm("a", "asks"))
    assert index.apply(kinds.NETWORKS, "MODIFIED", network("unused", "a", rv="4")) == set()
    assert index.moved() == set()  # asked for by no VM any more


def test_an_unreadable_spec_asks_for_nothing() -> None:
    index = WorldIndex(UPSTREAM)
    body = vm("a", "odd")
    body["spec"]["networks"] = "not a list"
    assert index.apply(kinds.VIRTUAL_MACHINES, "ADDED", body) == {"a/odd"}
    bad_entries = vm("a", "odd")
    bad_entries["spec"]["networks"] = [7, {"type": "Network"}, {"type": "Network", "name": 3}]
    assert index.apply(kinds.VIRTUAL_MACHINES, "MODIFIED", bad_entries) == {"a/odd"}
    assert list(index.objects_of("a/odd").networks) == []


def test_kubevirt_status_churn_touches_no_vm_but_what_nicplug_reads_touches_all() -> None:
    index = index_of_three()
    every = {"a/asks", "b/same-name-elsewhere", "a/main-only"}
    assert index.apply(UPSTREAM.kubevirts, "ADDED", kubevirt(rv="1")) == every
    assert index.apply(UPSTREAM.kubevirts, "MODIFIED", kubevirt(rv="2", observed="2")) == set()
    assert index.apply(UPSTREAM.kubevirts, "MODIFIED", kubevirt(rv="3", strategy="Stage")) == every
    assert index.apply(UPSTREAM.kubevirts, "MODIFIED",
                       kubevirt(rv="4", strategy="Stage", phase="Deploying")) == every
    assert index.apply(UPSTREAM.kubevirts, "DELETED", kubevirt(rv="5", strategy="Stage",
                                                            phase="Deploying")) == every


def test_a_vm_operation_belongs_to_the_vm_it_names() -> None:
    from nicplug.adapters.kube.flavour import DECKHOUSE

    index = WorldIndex(DECKHOUSE)
    vmops = kinds.VIRTUAL_MACHINE_OPERATIONS

    def vmop(name: str, vm: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": "ns", "uid": name},
                "spec": {"type": "Stop", "virtualMachineName": vm}}

    assert index.apply(vmops, "ADDED", vmop("stop-a", "a")) == {"ns/a"}
    assert index.apply(vmops, "ADDED", vmop("stop-b", "b")) == {"ns/b"}
    assert [o["metadata"]["name"] for o in index.objects_of("ns/a").vm_operations] == ["stop-a"]
    assert index.apply(vmops, "DELETED", vmop("stop-a", "a")) == {"ns/a"}
    assert list(index.objects_of("ns/a").vm_operations) == []
    assert list(WorldIndex(UPSTREAM).objects_of("ns/a").vm_operations) == []


def test_a_nad_touches_the_kubevirt_vms_whose_template_names_it_once_nads_are_known() -> None:
    index = WorldIndex(UPSTREAM)

    def kvvm(ns: str, name: str, *nads: str) -> dict[str, Any]:
        networks = [{"name": f"n{i}", "multus": {"networkName": n}} for i, n in enumerate(nads)]
        return {"metadata": {"namespace": ns, "name": name, "uid": name},
                "spec": {"template": {"spec": {"networks": networks}}}}

    def nad(ns: str, name: str) -> dict[str, Any]:
        return {"metadata": {"namespace": ns, "name": name, "uid": f"{ns}-{name}"}}

    index.apply(UPSTREAM.kvvms, "ADDED", kvvm("a", "web", "user-net", "shared/storage"))
    index.apply(UPSTREAM.kvvms, "ADDED", kvvm("b", "db", "user-net"))
    assert index.objects_of("a/web").nads is None  # not listed yet: unknown
    assert index.presence(kinds.NADS, True) == {"a/web", "b/db"}
    assert list(index.objects_of("a/web").nads or ()) == []  # known: none exists
    assert index.apply(kinds.NADS, "ADDED", nad("a", "user-net")) == {"a/web"}
    assert index.apply(kinds.NADS, "ADDED", nad("shared", "storage")) == {"a/web"}
    assert index.apply(kinds.NADS, "ADDED", nad("a", "unused")) == set()
    assert [address(n) for n in index.objects_of("a/web").nads or ()] == [
        ("a", "user-net"), ("shared", "storage")]
    index.apply(UPSTREAM.kvvms, "MODIFIED", kvvm("a", "web"))
    assert index.apply(kinds.NADS, "DELETED", nad("a", "user-net")) == set()
    assert index.presence(kinds.NADS, True) == set()
    assert index.presence(kinds.NADS, False) == {"b/db"}
    assert index.objects_of("b/db").nads is None


def address(body: dict[str, Any]) -> tuple[str, str]:
    return body["metadata"]["namespace"], body["metadata"]["name"]


def test_ip_addresses_are_known_once_listed_and_touch_the_vms_of_their_namespace() -> None:
    """IPAM's IPAddresses, an optional kind of the Deckhouse flavour: before they are
    listed (or on a cluster that serves none) a VM's world has none to judge by (None:
    no network is requested with an address); once listed, its namespace's."""
    index = WorldIndex(DECKHOUSE)
    index.apply(kinds.VIRTUAL_MACHINES, "ADDED", vm("a", "web", ("Network", "user-net")))
    index.apply(kinds.VIRTUAL_MACHINES, "ADDED", vm("b", "db", ("Network", "user-net")))

    def address(ns: str, name: str) -> dict[str, Any]:
        return {"metadata": {"namespace": ns, "name": name, "resourceVersion": "1"}}

    assert index.objects_of("a/web").ip_addresses is None  # not listed yet
    assert index.presence(kinds.IP_ADDRESSES, False) == set()  # not served: still none
    assert index.presence(kinds.IP_ADDRESSES, True) == {"a/web", "b/db"}
    assert list(index.objects_of("a/web").ip_addresses or ()) == []
    assert index.apply(kinds.IP_ADDRESSES, "ADDED", address("a", "web-x")) == {"a/web"}
    assert index.apply(kinds.IP_ADDRESSES, "ADDED", address("b", "db-x")) == {"b/db"}
    assert [m["metadata"]["name"] for m in index.objects_of("a/web").ip_addresses or ()] == [
        "web-x"]
    assert index.apply(kinds.IP_ADDRESSES, "DELETED", address("a", "web-x")) == {"a/web"}
    assert list(index.objects_of("a/web").ip_addresses or ()) == []
    assert index.presence(kinds.IP_ADDRESSES, False) == {"a/web", "b/db"}
    assert index.objects_of("a/web").ip_addresses is None
    assert WorldIndex(UPSTREAM).objects_of("a/web").ip_addresses is None  # not watched


def test_the_ip_address_kind_is_optional_and_watched_with_the_deckhouse_macs() -> None:
    assert kinds.IP_ADDRESSES.optional
    assert kinds.IP_ADDRESSES in DECKHOUSE.watched
    assert kinds.IP_ADDRESSES not in UPSTREAM.watched


def test_an_object_that_comes_back_as_it_is_held_touches_no_vm() -> None:
    index = index_of_three()
    again = vm("a", "asks", ("Network", "user-net"), ("ClusterNetwork", "storage"))
    assert index.apply(kinds.VIRTUAL_MACHINES, "MODIFIED", again) == set()
    assert index.apply(kinds.NETWORKS, "MODIFIED", network("user-net", "b")) == set()
    assert index.apply(kinds.NETWORKS, "ADDED", network("user-net", "b")) == set()
    assert index.moved() == set()
    assert index.apply(kinds.NETWORKS, "DELETED", network("user-net", "b")) \
        == {"b/same-name-elsewhere"}


def test_a_new_resource_version_alone_touches_no_vm_but_says_it_moved() -> None:
    index = index_of_three()
    moved = vm("a", "asks", ("Network", "user-net"), ("ClusterNetwork", "storage"))
    moved["metadata"]["resourceVersion"] = "2"
    assert index.apply(kinds.VIRTUAL_MACHINES, "MODIFIED", moved) == set()
    assert index.apply(kinds.NETWORKS, "MODIFIED", network("user-net", "b", rv="2")) == set()
    assert index.moved() == {"a/asks", "b/same-name-elsewhere"}
    assert index.moved() == set()  # told once
    assert index.vm_body("a/asks") == moved  # the newest version is the one held
    changed = vm("a", "asks", ("Network", "user-net"))
    changed["metadata"]["resourceVersion"] = "3"
    assert index.apply(kinds.VIRTUAL_MACHINES, "MODIFIED", changed) == {"a/asks"}
    assert index.apply(kinds.NETWORKS, "MODIFIED",
                       network("user-net", "b", rv="3", ready="False")) \
        == {"b/same-name-elsewhere"}
    assert index.moved() == set()


def test_a_mac_address_touches_its_vm_when_its_address_changes_not_its_phase() -> None:
    """Deckhouse writes a VirtualMachineMACAddress's `status.phase` (Bound, then
    Attached once the VM's status lists it) after its address: nothing a decision reads,
    so the informers' copy leaves it out and the write wakes no decision."""
    from nicplug.adapters.core.worldview import cache_projection
    from nicplug.adapters.kube.resources import VM_UID_LABEL

    index = WorldIndex(DECKHOUSE)
    asking = vm("a", "asks", ("Network", "user-net"))
    asking["metadata"]["uid"] = "vm-uid"
    index.apply(kinds.VIRTUAL_MACHINES, "ADDED", asking)
    projected = cache_projection(kinds.VM_MAC_ADDRESSES)
    assert projected is not None

    def vmmac(rv: str, status: dict[str, Any]) -> dict[str, Any]:
        return projected({"metadata": {"namespace": "a", "name": "asks-mac1",
                                       "resourceVersion": rv,
                                       "labels": {VM_UID_LABEL: "vm-uid"}},
                          "status": status})

    assert index.apply(kinds.VM_MAC_ADDRESSES, "ADDED", vmmac("1", {})) == {"a/asks"}
    allocated = {"address": "02:00:00:00:00:01", "phase": "Bound",
                 "virtualMachineName": "asks"}
    assert index.apply(kinds.VM_MAC_ADDRESSES, "MODIFIED", vmmac("2", allocated)) == {"a/asks"}
    assert index.apply(kinds.VM_MAC_ADDRESSES, "MODIFIED",
                       vmmac("3", {**allocated, "phase": "Attached"})) == set()
    assert index.moved() == {"a/asks"}
