"""The edits of a KubeVirt VirtualMachine that hot-plug and hot-unplug a NIC, as users
make them (`kubevirt/user-guide` `docs/network/hotplug/interfaces.md`).

In the kubevirt flavour the VM's template is the desired state, and nicplug never
writes it: a user (or a tool) adds an interface with its network (`bridge` binding,
`multus.networkName`) to plug, and sets the interface `state: absent` to unplug;
KubeVirt does the rest. The demo, the deterministic simulation and the tests play
that user with these functions. Each returns the JSON merge patch of
`spec.template.spec` that makes the edit (merge patches replace lists whole, as
`kubectl patch --type merge` does), or None when the template already says it.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nicplug.machines.world import nad_identity

Body = Mapping[str, Any]
Patch = dict[str, Any]


def _template(kvvm: Body) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    spec = ((kvvm.get("spec") or {}).get("template") or {}).get("spec") or {}
    devices = (spec.get("domain") or {}).get("devices") or {}
    interfaces = [dict(i) for i in devices.get("interfaces") or () if isinstance(i, Mapping)]
    networks = [dict(n) for n in spec.get("networks") or () if isinstance(n, Mapping)]
    return interfaces, networks


def _patch(interfaces: list[dict[str, Any]], networks: list[dict[str, Any]]) -> Patch:
    return {"spec": {"template": {"spec": {
        "domain": {"devices": {"interfaces": interfaces}}, "networks": networks}}}}


def plug(kvvm: Body, *, interface: str, network_name: str, mac: str | None = None) -> Patch | None:
    """Add `interface` (bridge binding) on the multus network `network_name`; an
    interface of that name marked `absent` is asked for again."""
    interfaces, networks = _template(kvvm)
    current = next((i for i in interfaces if i.get("name") == interface), None)
    if current is not None:
        if current.get("state") != "absent":
            return None
        current.pop("state")
    else:
        entry: dict[str, Any] = {"name": interface, "bridge": {}}
        if mac is not None:
            entry["macAddress"] = mac
        interfaces.append(entry)
    if not any(n.get("name") == interface for n in networks):
        networks.append({"name": interface, "multus": {"networkName": network_name}})
    return _patch(interfaces, networks)


def interface_of(kvvm: Body, identity: str, *, cluster_nad_namespace: str) -> str | None:
    """The name of the template's interface on the network `identity` (`Main`: the pod
    network; `Network/<n>`, `ClusterNetwork/<n>`), as nicplug reads the template; None
    when there is none."""
    namespace = str((kvvm.get("metadata") or {}).get("namespace") or "")
    _, networks = _template(kvvm)
    for network in networks:
        if identity == "Main" and isinstance(network.get("pod"), Mapping):
            return str(network.get("name"))
        multus = network.get("multus")
        if not isinstance(multus, Mapping):
            continue
        found = nad_identity(str(multus.get("networkName") or ""), namespace,
                             cluster_nad_namespace, str(network.get("name") or ""))
        if found == identity:
            return str(network.get("name"))
    return None


def unplug(kvvm: Body, *, interface: str) -> Patch | None:
    """Mark `interface` `state: absent`: KubeVirt unplugs it, then removes it."""
    interfaces, networks = _template(kvvm)
    current = next((i for i in interfaces if i.get("name") == interface), None)
    if current is None or current.get("state") == "absent":
        return None
    current["state"] = "absent"
    return _patch(interfaces, networks)


def nad_name(kvvm: Body, type_: str, name: str, *, cluster_nad_namespace: str) -> str:
    """The `networkName` of the NAD behind a Network (the VM's namespace) or a
    ClusterNetwork (the ClusterNetworks' NAD namespace)."""
    namespace = str((kvvm.get("metadata") or {}).get("namespace") or "")
    return f"{namespace if type_ == 'Network' else cluster_nad_namespace}/{name}"
