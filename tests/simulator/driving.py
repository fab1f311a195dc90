"""What a controller does to the simulated cluster, written against the store directly.

Deliberately small and independent of nicplug's own adapters: the behaviour tests check
the simulator, not the controller.
"""

from __future__ import annotations

import contextlib
from typing import Any

from nicplug.simulator import networking as nw
from nicplug.simulator import objects as ob
from nicplug.simulator.errors import NotFound
from nicplug.simulator.fixtures import fixture_mac, request_entry, vmmac_name
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.resources import KVVMS, PODS, VMIMS, VMIS, VMMACS, VMOPS, VMS
from nicplug.simulator.store import Store

MERGE = "application/merge-patch+json"
Json = dict[str, Any]


def restart(store: Store, knobs: Knobs, ns: str, vm: str, name: str = "user-restart") -> None:
    """A user's restart: on Deckhouse (runStrategy Manual, where deleting the VMI stops
    the VM for good) a `Restart` VirtualMachineOperation, as `d8 v restart` makes it;
    upstream, the VMI deleted (`virtctl restart`)."""
    if knobs.dialect == "deckhouse":
        store.create(VMOPS, {
            "apiVersion": VMOPS.api_version, "kind": VMOPS.kind,
            "metadata": {"name": name, "namespace": ns},
            "spec": {"type": "Restart", "virtualMachineName": vm}})
    else:
        store.delete(VMIS, ns, vm)


def pods_of(store: Store, ns: str, vm: str) -> list[Json]:
    items, _ = store.list(PODS, ns, label_selector=f"{nw.VM_NAME_LABEL}={vm}")
    return items


def active_pod(store: Store, ns: str, vm: str) -> Json:
    active = ob.dig(store.get(VMIS, ns, vm), "status", "activePods") or {}
    (pod,) = [p for p in pods_of(store, ns, vm) if p["metadata"]["uid"] in active]
    return pod


def request_of(knobs: Knobs, pod: Json) -> list[Json]:
    raw = nw.annotations_of(pod).get(ob.request_annotation(knobs.dialect))
    return nw.parse_list(raw) or []


def set_pod_request(store: Store, knobs: Knobs, pod: Json, entries: list[Json]) -> None:
    value = nw.dump_list(entries) if entries else None
    store.patch(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"],
                {"metadata": {"annotations": {ob.request_annotation(knobs.dialect): value}}},
                content_type=MERGE)


def plug_pod(store: Store, knobs: Knobs, ns: str, vm: str, type_: str, name: str,
             id_: int = 2) -> None:
    """Step one of the right order: add the entry to the running pod's SDN request."""
    pod = active_pod(store, ns, vm)
    entries = [*request_of(knobs, pod), request_entry(knobs, ns, vm, type_, name, id_)]
    set_pod_request(store, knobs, pod, entries)


def if_name_of(knobs: Knobs, ns: str, vm: str, type_: str, name: str, id_: int = 2) -> str:
    """The network's interface name: deckhouse names it after its MAC (the fixture VMMAC
    of that id), multus after its type and name."""
    if knobs.dialect == "deckhouse":
        return nw.mac_if_name(type_, fixture_mac(ns, vm, id_))
    return nw.if_name(type_, name)


def stored_if_name(store: Store, ns: str, vm: str, type_: str, name: str) -> str:
    """The interface name of a VM's network, as the store's objects give it: the KVVM
    template's deckhouse request entry, else the MAC of the fixture VMMAC of the
    network (deckhouse), else type and name (multus)."""
    kvvm = store.get(KVVMS, ns, vm)
    template = ob.dig(kvvm, "spec", "template", "metadata", "annotations") or {}
    for entry in nw.parse_list(template.get(nw.DECKHOUSE_REQUEST)) or []:
        if (entry.get("type"), entry.get("name")) == (type_, name):
            return str(entry.get("ifName"))
    spec = ob.dig(store.peek(VMS, ns, vm), "spec", "networks") or []  # none: upstream
    id_ = next((n.get("id") for n in spec if (n.get("type"), n.get("name")) == (type_, name)),
               None)
    if isinstance(id_, int):
        with contextlib.suppress(NotFound):
            vmmac = store.get(VMMACS, ns, vmmac_name(vm, id_))
            return nw.mac_if_name(type_, str(ob.dig(vmmac, "status", "address")))
    return nw.if_name(type_, name)


def unplug_pod(store: Store, knobs: Knobs, ns: str, vm: str, type_: str, name: str,
               id_: int = 2) -> None:
    pod = active_pod(store, ns, vm)
    if_name = if_name_of(knobs, ns, vm, type_, name, id_)
    key = "ifName" if knobs.dialect == "deckhouse" else "interface"
    gone = if_name if knobs.dialect == "deckhouse" else nw.multus_pod_interface(if_name)
    set_pod_request(store, knobs, pod, [e for e in request_of(knobs, pod) if e.get(key) != gone])


def plug_kvvm(store: Store, knobs: Knobs, ns: str, vm: str, type_: str, name: str,
              id_: int = 2) -> None:
    """Add the interface and network to the KVVM template (and, deckhouse, its request
    annotation)."""
    kvvm = store.get(KVVMS, ns, vm)
    template = kvvm["spec"]["template"]
    nad_ns = ns if type_ == "Network" else knobs.cluster_network_nad_namespace
    deckhouse = knobs.dialect == "deckhouse"
    mac = fixture_mac(ns, vm, id_) if deckhouse else ""
    template["spec"]["networks"].append(
        nw.kubevirt_network(knobs.dialect, type_, name, nad_ns, mac))
    template["spec"]["domain"]["devices"]["interfaces"].append(
        nw.deckhouse_interface(type_, mac, id_) if deckhouse
        else nw.kubevirt_interface(type_, name))
    if knobs.dialect == "deckhouse":  # multus: KubeVirt generates the pods' own
        annotations = template.setdefault("metadata", {}).setdefault("annotations", {})
        key = ob.request_annotation(knobs.dialect)
        entries = nw.parse_list(annotations.get(key)) or []
        annotations[key] = nw.dump_list([*entries, request_entry(knobs, ns, vm, type_, name,
                                                                 id_)])
    store.update(KVVMS, kvvm)


def mark_absent(store: Store, ns: str, vm: str, type_: str, name: str) -> None:
    kvvm = store.get(KVVMS, ns, vm)
    for iface in kvvm["spec"]["template"]["spec"]["domain"]["devices"]["interfaces"]:
        if iface["name"] == stored_if_name(store, ns, vm, type_, name):
            iface["state"] = "absent"
    store.update(KVVMS, kvvm)


def vmi_interface(store: Store, ns: str, vm: str, type_: str, name: str) -> Json | None:
    entries = ob.dig(store.get(VMIS, ns, vm), "status", "interfaces") or []
    if_name = stored_if_name(store, ns, vm, type_, name)
    return next((e for e in entries if e["name"] == if_name), None)


def attached(store: Store, ns: str, vm: str, type_: str, name: str) -> bool:
    entry = vmi_interface(store, ns, vm, type_, name)
    return entry is not None and "domain" in entry["infoSource"]


def migrate(store: Store, ns: str, vm: str, name: str = "mig-1") -> None:
    store.create(VMIMS, {"apiVersion": "kubevirt.io/v1",
                         "kind": "VirtualMachineInstanceMigration",
                         "metadata": {"name": name, "namespace": ns},
                         "spec": {"vmiName": vm}})


def migration_phase(store: Store, ns: str, name: str = "mig-1") -> str | None:
    phase = ob.dig(store.get(VMIMS, ns, name), "status", "phase")
    return phase if isinstance(phase, str) else None


def condition(store: Store, ns: str, vm: str, type_: str) -> tuple[str, str] | None:
    found = ob.condition(store.get(VMIS, ns, vm), type_)
    return None if found is None else (found["status"], found["reason"])
