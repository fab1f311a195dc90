"""virt-controller's `k8s.v1.cni.cncf.io/networks` annotation, generated as KubeVirt does.

On upstream KubeVirt the launcher pod's networks annotation is KubeVirt's: it is
generated from the VMI spec when the pod is created, and regenerated on the running
pod whenever an interface is plugged or unplugged (`pkg/network/pod/annotations/
generator.go`, `pkg/network/multus/annotation.go`, `pkg/network/namescheme`). This
module re-derives those rules from that source, byte for byte where it matters:

* one entry per secondary multus network of the VMI spec, in the spec's network
  order, whose interface is not `absent`: `name`, `namespace` (from `networkName`, or
  the VMI's), `mac` only from the interface's `macAddress`, `interface` — Go's field
  order of `NetworkSelectionElement`, compact JSON;
* the pod interface name is `pod` + 11 hex digits of sha256 of the network's name, or
  `net<i>` (the i-th secondary multus network) on a pod whose network-status already
  uses the older ordinal names;
* an interface with a network binding plugin that has a NAD adds the plugin's entry
  (`name`, `namespace`, `cni-args: {logicNetworkName}`), with no interface;
* nothing left is `""` on a running pod, and no annotation on a new one.

It also says whether KubeVirt calls a VMI live-migratable as far as its network goes
(`pkg/network/vmispec/interface.go`, `VerifyVMIMigratable`): the interface on the pod
network must use masquerade or passt, or bridge with the VMI annotation
`kubevirt.io/allow-pod-bridge-network-live-migration` (a binding plugin counts only
with a migration method, which the simulated bindings never declare).

Pure functions over plain JSON; never touches the store.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from nicplug.simulator import networking as nw
from nicplug.simulator.networking import Json

ORDINAL = re.compile(r"net[0-9]+")


def _secondary(network: Json) -> bool:
    multus = network.get("multus")
    return isinstance(multus, dict) and not multus.get("default")


def _nad(namespace: str, network_name: str) -> tuple[str, str]:
    nad_namespace, _, name = network_name.rpartition("/")
    return (nad_namespace or namespace), name


def ordinal_pod(pod: Json | None) -> bool:
    """Does the pod's network-status use ordinal secondary names (`net1`)?"""
    if pod is None:
        return False
    statuses = nw.parse_list(nw.annotations_of(pod).get(nw.MULTUS_STATUS)) or []
    return any(ORDINAL.fullmatch(str(s.get("interface") or "")) for s in statuses)


def generate(
    spec: Json,
    namespace: str,
    *,
    bindings: Mapping[str, str] | None = None,
    ordinal: bool = False,
) -> str:
    """The annotation value for the VMI `spec` (`""`: nothing to request).

    `bindings` maps a registered network binding plugin to its NAD (plugins without
    one are left out, as KubeVirt leaves them). An unregistered plugin raises
    `KeyError`: KubeVirt refuses to generate the annotation then.
    """
    interfaces = {str(i.get("name")): i for i in nw_interfaces(spec)}
    present = {n for n, i in interfaces.items() if i.get("state") != "absent"}
    networks = [n for n in spec.get("networks") or [] if str(n.get("name")) in present]
    secondary = [n for n in spec.get("networks") or [] if _secondary(n)]
    ordinals = {str(n.get("name")): f"net{i}" for i, n in enumerate(secondary, 1)}
    entries: list[Json] = []
    for network in networks:
        name = str(network.get("name"))
        iface = interfaces.get(name) or {}
        if _secondary(network):
            nad_namespace, nad = _nad(namespace, str(network["multus"].get("networkName")))
            entry: Json = {"name": nad, "namespace": nad_namespace}
            if iface.get("macAddress"):
                entry["mac"] = iface["macAddress"]
            entry["interface"] = ordinals[name] if ordinal else nw.multus_pod_interface(name)
            entries.append(entry)
        binding = iface.get("binding")
        if isinstance(binding, dict):
            plugin_nad = (bindings or {})[str(binding.get("name"))]
            if plugin_nad:
                nad_namespace, nad = _nad(namespace, plugin_nad)
                entries.append({"name": nad, "namespace": nad_namespace,
                                "cni-args": {"logicNetworkName": name}})
    return json.dumps(entries, separators=(",", ":")) if entries else ""


def change_required(spec: Json, status: Json) -> bool:
    """KubeVirt regenerates a running pod's annotation only when an interface waits to
    be plugged (not yet in the VMI status) or one is being unplugged (`absent`)."""
    reported = {str(e.get("name")) for e in status.get("interfaces") or []}
    for iface in nw_interfaces(spec):
        if iface.get("state") == "absent" or str(iface.get("name")) not in reported:
            return True
    return False


def nw_interfaces(spec: Json) -> list[Json]:
    devices = (spec.get("domain") or {}).get("devices") or {}
    return list(devices.get("interfaces") or [])


ALLOW_POD_BRIDGE_MIGRATION = "kubevirt.io/allow-pod-bridge-network-live-migration"
NOT_MIGRATABLE = (
    "cannot migrate VMI which does not use masquerade or a migratable plugin to connect to "
    "the pod network"
)


def network_migratable(vmi: Json) -> str | None:
    """None when the VMI's network allows a live migration; else KubeVirt's message."""
    spec = vmi.get("spec") or {}
    interfaces = nw_interfaces(spec)
    if not interfaces:
        return None
    pod_network = next((n for n in spec.get("networks") or [] if "pod" in n), None)
    if pod_network is None:
        return None
    primary = next((i for i in interfaces if i.get("name") == pod_network.get("name")), None)
    if primary is None:
        return f"no primary interface found for network {pod_network.get('name')}"
    if "masquerade" in primary or "passtBinding" in primary:
        return None
    annotations = (vmi.get("metadata") or {}).get("annotations") or {}
    if "bridge" in primary and ALLOW_POD_BRIDGE_MIGRATION in annotations:
        return None
    return NOT_MIGRATABLE
