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

from collections.abc import Callable, Mapping, Sequence
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


def desired(kvvm: Body, *, cluster_nad_namespace: str) -> list[str]:
    """The identities of the secondary networks the template asks for (not `absent`),
    in its order."""
    namespace = str((kvvm.get("metadata") or {}).get("namespace") or "")
    interfaces, networks = _template(kvvm)
    by_name = {str(n.get("name")): n for n in networks}
    found = []
    for interface in interfaces:
        network = by_name.get(str(interface.get("name")))
        multus = network.get("multus") if network is not None else None
        if interface.get("state") == "absent" or not isinstance(multus, Mapping):
            continue
        identity = nad_identity(str(multus.get("networkName") or ""), namespace,
                                cluster_nad_namespace, str(interface.get("name")))
        if identity is not None:
            found.append(identity)
    return found


def set_networks(
    kvvm: Body,
    identities: Sequence[str],
    *,
    cluster_nad_namespace: str,
    name_of: Callable[[str, str], str],
) -> Patch | None:
    """One edit that leaves the template asking for exactly `identities` (secondary
    networks, `Network/<n>` or `ClusterNetwork/<n>`): the missing ones plugged under
    `name_of(type, name)`, the others marked `absent`."""
    current = desired(kvvm, cluster_nad_namespace=cluster_nad_namespace)
    body: Body = kvvm
    patch: Patch | None = None
    for identity in identities:
        if identity in current:
            continue
        type_, _, name = identity.partition("/")
        network = nad_name(body, type_, name, cluster_nad_namespace=cluster_nad_namespace)
        patch = plug(body, interface=name_of(type_, name), network_name=network) or patch
        body = _applied(body, patch)
    for identity in current:
        if identity in identities:
            continue
        interface = interface_of(body, identity, cluster_nad_namespace=cluster_nad_namespace)
        if interface is not None:
            patch = unplug(body, interface=interface) or patch
            body = _applied(body, patch)
    return patch


def _applied(kvvm: Body, patch: Patch | None) -> Body:
    """`kvvm` with `patch` (one of these functions' merge patches) applied."""
    if patch is None:
        return kvvm
    spec = dict(kvvm.get("spec") or {})
    template = dict(spec.get("template") or {})
    template_spec = dict(template.get("spec") or {})
    edited = patch["spec"]["template"]["spec"]
    domain = dict(template_spec.get("domain") or {})
    domain["devices"] = {**(domain.get("devices") or {}), **edited["domain"]["devices"]}
    template_spec.update(domain=domain, networks=edited["networks"])
    template["spec"] = template_spec
    spec["template"] = template
    return {**kvvm, "spec": spec}
