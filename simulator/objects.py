"""The Kubernetes objects the simulated KubeVirt makes, and how it reads its own kinds.

Shared by the KubeVirt actor (a VMI starting, a migration target) and the fixtures (10k
VMs created straight into the store), so both produce identical shapes. Pure functions
over JSON values; nothing here writes to the store.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nicplug.simulator import networking as nw
from nicplug.simulator.documents import deep_copy
from nicplug.simulator.networking import Json
from nicplug.simulator.pod_networks import network_migratable
from nicplug.simulator.resources import VMS, Resource


def wall_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def owner(res: Resource, obj: Json) -> Json:
    meta = obj["metadata"]
    return {"apiVersion": res.api_version, "kind": res.kind, "name": meta["name"],
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}


def dig(obj: Json | None, *path: str) -> Any:
    """`obj[path...]`, or None where any step is missing or not an object."""
    value: Any = obj
    for step in path:
        if not isinstance(value, dict):
            return None
        value = value.get(step)
    return value


def interfaces_of(spec: Json | None) -> list[Json]:
    """`domain.devices.interfaces` of a VMI spec or KVVM template spec."""
    found = dig(spec, "domain", "devices", "interfaces")
    return [i for i in found if isinstance(i, dict)] if isinstance(found, list) else []


def networks_of(spec: Json | None) -> list[Json]:
    found = dig(spec, "networks")
    return [n for n in found if isinstance(n, dict)] if isinstance(found, list) else []


def set_interfaces(spec: Json, interfaces: list[Json]) -> None:
    spec.setdefault("domain", {}).setdefault("devices", {})["interfaces"] = interfaces


def wants_running(kvvm: Json) -> bool:
    """`spec.runStrategy` (Always / RerunOnFailure / Once run; Halted / Manual do not),
    else `spec.running`."""
    strategy = dig(kvvm, "spec", "runStrategy")
    if isinstance(strategy, str):
        return strategy in ("Always", "RerunOnFailure", "Once")
    return dig(kvvm, "spec", "running") is True


def condition(obj: Json | None, type_: str) -> Json | None:
    conditions = dig(obj, "status", "conditions") or []
    return next((c for c in conditions if isinstance(c, dict) and c.get("type") == type_), None)


def set_condition(status: Json, type_: str, state: str, reason: str, message: str = "") -> None:
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != type_]
    old = next((c for c in status.get("conditions") or [] if c.get("type") == type_), None)
    since = old.get("lastTransitionTime") if old and old.get("status") == state else None
    conditions.append({"type": type_, "status": state, "reason": reason, "message": message,
                       "lastProbeTime": None, "lastTransitionTime": since or wall_time()})
    status["conditions"] = conditions


SYNC_IGNORED = ("Ready", "Failure", "RestartRequired")
"""VM conditions KubeVirt's `syncConditions` neither copies from the VMI nor removes."""


def sync_conditions(status: Json, vmi: Json) -> None:
    """KubeVirt's `syncConditions` for a VM that has a VMI: the VMI's conditions copied
    onto the VM (a condition of that type already there is replaced only when its
    status or reason differ, as its `UpdateCondition` does), every other condition
    removed but those of `SYNC_IGNORED`."""
    copied = [c for c in dig(vmi, "status", "conditions") or []
              if isinstance(c, dict) and c.get("type") not in SYNC_IGNORED]
    by_type = {c.get("type"): c for c in copied}
    kept: list[Json] = []
    for cond in status.get("conditions") or []:
        type_ = cond.get("type") if isinstance(cond, dict) else None
        if type_ in SYNC_IGNORED:
            kept.append(cond)
        elif type_ in by_type:
            new = by_type.pop(type_)
            same = (cond.get("status"), cond.get("reason")) == (new.get("status"),
                                                                new.get("reason"))
            kept.append(cond if same else _vm_condition(new))
    kept += [_vm_condition(c) for c in copied if c.get("type") in by_type]
    if kept:
        status["conditions"] = kept
    else:
        status.pop("conditions", None)


def _vm_condition(cond: Json) -> Json:
    fields = ("type", "status", "reason", "message", "lastProbeTime", "lastTransitionTime")
    return {k: deep_copy(cond[k]) for k in fields if k in cond}


def drop_condition(status: Json, type_: str) -> None:
    status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != type_]


def request_annotation(dialect: str) -> str:
    return nw.DECKHOUSE_REQUEST if dialect == "deckhouse" else nw.MULTUS_REQUEST


def vmi_for(kvvm: Json, kvvm_res: Resource) -> Json:
    """A new VMI from the KVVM's current template (status is set separately)."""
    meta = kvvm["metadata"]
    template = deep_copy(dig(kvvm, "spec", "template") or {})
    tmeta = template.get("metadata") or {}
    labels = dict(tmeta.get("labels") or {}) | {nw.VM_NAME_LABEL: meta["name"]}
    return {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": labels,
                     "annotations": dict(tmeta.get("annotations") or {}),
                     "ownerReferences": [owner(kvvm_res, kvvm)]},
        "spec": template.get("spec") or {},
    }


def launcher_pod(
    vmi: Json, vmi_res: Resource, *, name: str, node: str, dialect: str,
    request: str | None, migration_uid: str | None = None,
) -> Json:
    """A running virt-launcher pod for `vmi`, carrying the SDN `request` annotation.

    In the multus dialect the CNI reports every requested network when the pod starts,
    so the pod is born with its `network-status`.
    """
    meta = vmi["metadata"]
    vm = meta["name"]
    labels = {"kubevirt.io": "virt-launcher", nw.VM_NAME_LABEL: vm,
              nw.CREATED_BY_LABEL: meta["uid"]}
    if migration_uid:
        labels[nw.MIGRATION_LABEL] = migration_uid
    annotations = {"kubevirt.io/domain": vm}
    if request is not None:
        annotations[request_annotation(dialect)] = request
    if dialect == "multus":
        requests = nw.parse_list(request) or []
        macs = {str(r.get("interface")): nw.mac_for(meta["namespace"], vm, str(r.get("interface")))
                for r in requests}
        annotations[nw.MULTUS_STATUS] = nw.dump_list(nw.multus_network_status(requests, macs))
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": meta["namespace"], "labels": labels,
                     "annotations": annotations, "ownerReferences": [owner(vmi_res, vmi)]},
        "spec": {"nodeName": node, "containers": [{"name": "compute", "image": "virt-launcher"}]},
        "status": {"phase": "Running", "hostIP": "192.0.2.1", "podIP": "10.0.0.1",
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def domain_pod(vmi: Json | None, pods: list[Json]) -> Json | None:
    """The launcher pod the VMI's domain runs in: the active pod on the VMI's node.

    KubeVirt lists every pod the VMI controls in `status.activePods`, a migration's
    target from its creation on; the domain moves to the target (and `status.nodeName`
    with it) only when the migration completes.
    """
    active = dig(vmi, "status", "activePods") or {}
    node = dig(vmi, "status", "nodeName")
    mine = [p for p in pods if p["metadata"].get("uid") in active]
    if node is None:  # not scheduled yet: at most one pod to speak of
        return mine[0] if len(mine) == 1 else None
    # the domain's own pod gone (a migration target alone left): the domain has none
    return next((p for p in mine if dig(p, "spec", "nodeName") == node), None)


def set_migratable(status: Json, vmi: Json, dialect: str) -> None:
    """`LiveMigratable` as upstream KubeVirt's virt-handler computes it from the network
    (multus); Deckhouse's KubeVirt migrates its pod-network VMs."""
    why = network_migratable(vmi) if dialect == "multus" else None
    if why is None:
        set_condition(status, "LiveMigratable", "True", "")
    else:
        set_condition(status, "LiveMigratable", "False", "InterfaceNotLiveMigratable", why)


def attached_interface(name: str, index: int, mac: str, *, multus: bool) -> Json:
    """A VMI `status.interfaces[]` entry of an interface libvirt has attached."""
    sources = "domain, guest-agent, multus-status" if multus else "domain, guest-agent"
    return {"name": name, "interfaceName": f"eth{index}", "mac": mac, "infoSource": sources,
            "queueCount": 1}


def event(involved: Json, res: Resource, *, reason: str, message: str, component: str,
          seq: int, type_: str = "Warning") -> Json:
    meta = involved["metadata"]
    now = wall_time()
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{seq:016x}", "namespace": meta["namespace"]},
        "involvedObject": {"apiVersion": res.api_version, "kind": res.kind,
                           "name": meta["name"], "namespace": meta["namespace"],
                           "uid": meta.get("uid")},
        "reason": reason, "message": message, "type": type_,
        "source": {"component": component}, "reportingComponent": component,
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    }


def links_in(pod: Json | None, spec: Json, dialect: str) -> dict[str, str]:
    """Interface name → MAC of each VMI interface whose link (the tap) exists in `pod`.

    The pod network always exists. Deckhouse: the SDN agent reported the ifName ready.
    Multus: the pod's network-status lists KubeVirt's pod-side name.
    """
    if pod is None:
        return {}
    meta = pod["metadata"]
    vm = (meta.get("labels") or {}).get(nw.VM_NAME_LABEL, meta["name"])
    annotations = nw.annotations_of(pod)
    found: dict[str, str] = {}
    if dialect == "deckhouse":
        ready = nw.deckhouse_taps(pod)
        requests = nw.parse_list(annotations.get(nw.DECKHOUSE_REQUEST)) or []
        macs = {str(r.get("ifName")): str(r["mac"]) for r in requests if r.get("mac")}
    else:
        # KubeVirt finds a network's link by its pod interface name alone
        statuses = nw.parse_list(annotations.get(nw.MULTUS_STATUS)) or []
        listed = {str(s.get("interface")): str(s.get("mac") or "") for s in statuses}
    for net in networks_of(spec):
        name = str(net.get("name"))
        if "pod" in net and (dialect == "multus" or name == nw.MAIN_IF_NAME):
            found[name] = nw.mac_for(meta["namespace"], vm, name)
        elif dialect == "deckhouse" and name in ready:
            found[name] = macs.get(name) or nw.mac_for(meta["namespace"], vm, name)
        elif dialect == "multus" and "multus" in net:
            interface = nw.multus_pod_interface(name)
            if interface in listed:
                found[name] = listed[interface] or nw.mac_for(meta["namespace"], vm, name)
    return found


VM_UID_LABEL = "virtualization.deckhouse.io/virtual-machine-uid"
"""Deckhouse's label on a VirtualMachineMACAddress: the uid of the VM it was made for."""


def vm_mac_address(vm: Json, name: str | None, address: str = "", *,
                   phase: str = "Pending") -> Json:
    """A VirtualMachineMACAddress as Deckhouse's VM controller creates it for `vm`
    (`netmanager.MACManager.CreateMACAddress`: labelled with the VM's uid, owned by the
    VM, `generateName: <vm>-`); with an `address`, as its controller then allocates it."""
    meta = vm["metadata"]
    metadata: Json = {"namespace": meta["namespace"],
                      "labels": {VM_UID_LABEL: meta["uid"]},
                      "ownerReferences": [owner(VMS, vm)]}
    if name:
        metadata["name"] = name
    else:
        metadata["generateName"] = f"{meta['name']}-"
    obj: Json = {"apiVersion": "virtualization.deckhouse.io/v1alpha2",
                 "kind": "VirtualMachineMACAddress", "metadata": metadata, "spec": {}}
    if address:
        obj["status"] = {"address": address, "phase": phase,
                         "virtualMachineName": meta["name"]}
    return obj
