"""How the simulated cluster names and annotates secondary networks.

The simulator re-derives these from the published conventions (DESIGN §2, KubeVirt's
multus naming) instead of sharing the controller's code, so a naming bug in the
controller shows up as a mismatch here rather than being agreed with. It holds pure
functions over plain JSON values; it never touches the store.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

NetworkType = Literal["Main", "Network", "ClusterNetwork"]

DECKHOUSE_REQUEST = "network.deckhouse.io/networks-spec"
DECKHOUSE_STATUS = "network.deckhouse.io/networks-status"
MULTUS_REQUEST = "k8s.v1.cni.cncf.io/networks"
MULTUS_STATUS = "k8s.v1.cni.cncf.io/network-status"

VM_NAME_LABEL = "vm.kubevirt.io/name"
CREATED_BY_LABEL = "kubevirt.io/created-by"
MIGRATION_LABEL = "kubevirt.io/migrationJobUID"
MAIN_IF_NAME = "default"

Json = dict[str, Any]


def if_name(type_: str, name: str) -> str:
    """`veth_n`/`veth_cn` + 8 hex digits of md5("<type>/<name>"); `default` for Main."""
    if type_ == "Main":
        return MAIN_IF_NAME
    prefix = "veth_n" if type_ == "Network" else "veth_cn"
    digest = hashlib.md5(f"{type_}/{name}".encode(), usedforsecurity=False).hexdigest()
    return prefix + digest[:8]


def mac_if_name(type_: str, mac: str) -> str:
    """Deckhouse's name for an additional network's interface: `veth_n`/`veth_cn` + 8 hex
    digits of md5 of its MAC address as written (`generateInterfaceName`)."""
    if type_ == "Main":
        return MAIN_IF_NAME
    prefix = "veth_n" if type_ == "Network" else "veth_cn"
    return prefix + hashlib.md5(mac.encode(), usedforsecurity=False).hexdigest()[:8]


def allocated_mac(namespace: str, vmmac: str) -> str:
    """The address the simulated Deckhouse allocates for the VirtualMachineMACAddress
    `namespace/vmmac`: stable, locally administered."""
    return mac_for(namespace, "vmmac", vmmac)


def multus_pod_interface(if_name_: str) -> str:
    """KubeVirt's pod-side interface name for a multus network: `pod` + 11 hex of sha256."""
    return "pod" + hashlib.sha256(if_name_.encode()).hexdigest()[:11]


def mac_for(namespace: str, vm: str, if_name_: str) -> str:
    """A stable, locally administered MAC for one interface of one VM."""
    digest = hashlib.sha256(f"{namespace}/{vm}/{if_name_}".encode()).digest()
    return "02:" + ":".join(f"{b:02x}" for b in digest[:5])


def parse_list(raw: str | None) -> list[Json] | None:
    """A JSON-array annotation as a list of objects; [] when absent, None when malformed."""
    if raw is None or raw == "":
        return []
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, list) or not all(isinstance(e, dict) for e in value):
        return None
    return value


def dump_list(entries: list[Json]) -> str:
    return json.dumps(entries, separators=(",", ":"))


def annotations_of(obj: Json) -> dict[str, str]:
    metadata = obj.get("metadata") or {}
    return dict(metadata.get("annotations") or {})


# --- the deckhouse dialect ---------------------------------------------------------


def deckhouse_request(type_: str, name: str, id_: int, *, mac: str) -> Json:
    return {"id": id_, "type": type_, "name": name, "ifName": mac_if_name(type_, mac),
            "uid": 64535, "gid": 64535}


def deckhouse_interface(type_: str, mac: str, id_: int) -> Json:
    """A KVVM interface as Deckhouse's `SetNetworkInterface` builds it."""
    return {"name": mac_if_name(type_, mac), "model": "virtio", "acpiIndex": id_,
            "binding": {"name": "bpfbridge"}, "macAddress": mac}


def deckhouse_status(request: Json, *, mac: str, error: str | None = None) -> Json:
    """The SDN agent's report for one request entry: configured, or not (yet) with
    `error` as its message. Shaped as the networks-status entries in deckhouse/
    virtualization's tests (`pkg/controller/vm/internal/network_test.go`): the
    interface's `mac`, `Configured`/`Negotiated` with their reasons and messages."""
    if error is None:
        conditions = [
            {"type": "Configured", "status": "True", "reason": "InterfaceConfiguredSuccessfully",
             "message": ""},
            {"type": "Negotiated", "status": "True", "reason": "Up", "message": ""},
        ]
    else:
        conditions = [
            {"type": "Configured", "status": "False", "reason": "ConfigurationError",
             "message": error},
            {"type": "Negotiated", "status": "False", "reason": "NoCarrier",
             "message": "the interface is not configured"},
        ]
    return {"type": request.get("type"), "name": request.get("name"),
            "ifName": request.get("ifName"), "mac": mac, "conditions": conditions}


def deckhouse_ready(entry: Json) -> bool:
    conditions = entry.get("conditions") or []
    return bool(conditions) and all(c.get("status") == "True" for c in conditions)


def deckhouse_taps(pod: Json) -> set[str]:
    """The ifNames whose link exists in the pod: reported ready by the SDN agent."""
    entries = parse_list(annotations_of(pod).get(DECKHOUSE_STATUS)) or []
    return {str(e.get("ifName")) for e in entries if deckhouse_ready(e)}


# --- the multus dialect ------------------------------------------------------------


def multus_request(namespace: str, name: str, if_name_: str, mac: str | None = None) -> Json:
    """One entry as KubeVirt writes it: Go's field order (`name`, `namespace`, `mac`,
    `interface`), `mac` only when one is asked for."""
    entry: Json = {"name": name, "namespace": namespace}
    if mac:
        entry["mac"] = mac
    entry["interface"] = multus_pod_interface(if_name_)
    return entry


def multus_default_status() -> Json:
    return {"name": "default-cni", "interface": "eth0", "default": True, "dns": {}}


def multus_status(request: Json, mac: str) -> Json:
    return {"name": f"{request.get('namespace', 'default')}/{request.get('name')}",
            "interface": request.get("interface"), "mac": request.get("mac") or mac,
            "dns": {}}


def multus_network_status(requests: list[Json], mac_of: dict[str, str]) -> list[Json]:
    """What multus reports for a pod with `requests`: the default network, then each
    attachment (a binding plugin's entry names no interface and is not one)."""
    return [multus_default_status()] + [
        multus_status(r, mac_of.get(str(r.get("interface")), "02:00:00:00:00:00"))
        for r in requests
        if r.get("interface")
    ]


def multus_listed(pod: Json) -> set[tuple[str, str]]:
    """(`<ns>/<nad>`, pod-side interface) pairs the pod's network-status lists."""
    entries = parse_list(annotations_of(pod).get(MULTUS_STATUS)) or []
    return {(str(e.get("name")), str(e.get("interface"))) for e in entries}


# --- KubeVirt's view ---------------------------------------------------------------


def kubevirt_network(dialect: str, type_: str, name: str, nad_namespace: str,
                     mac: str = "") -> Json:
    """The KVVM/VMI `spec.networks[]` entry of one network in `dialect` (deckhouse:
    named after its `mac`)."""
    if type_ == "Main":
        return {"name": MAIN_IF_NAME, "pod": {}}
    name_ = if_name(type_, name)
    if dialect == "deckhouse":
        name_ = mac_if_name(type_, mac)
        return {"name": name_, "pod": {}}
    return {"name": name_, "multus": {"networkName": f"{nad_namespace}/{name}"}}


def kubevirt_interface(type_: str, name: str) -> Json:
    return {"name": if_name(type_, name), "bridge": {}}
