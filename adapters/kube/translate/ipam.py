"""Which IPAddress each IPAM network of a Deckhouse VM is requested with, from the bodies.

Read as `EnrichWithIPAM` (`pkg/common/network/types.go`) and `FindSDNIPAddress` /
`GetSDNIPAddressStatus` (`pkg/common/network/ipaddress.go`, deckhouse/virtualization)
read them: a network is pooled when its Network/ClusterNetwork names a pool
(`spec.ipam.ipAddressPoolRef.name`); its address is the `ipAddressName` the spec asks
for, else the VM's automatic IPAddress (labelled with the VM's uid, `spec.networkRef`
naming the network); it counts once that IPAddress names this network and its
`Allocated` condition is True. The judgement is `machines/ipam.py`'s. Not read: a static
address another VM claims (the platform reports it; nicplug would request it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from nicplug.adapters.kube.resources import VM_UID_LABEL
from nicplug.machines.ipam import with_ipam
from nicplug.machines.world import DesiredVM

Body = Mapping[str, Any]


def _dig(body: object, *path: str) -> Any:
    for part in path:
        if not isinstance(body, Mapping):
            return None
        body = body.get(part)
    return body


def pooled_networks(networks: Iterable[Body], cluster_networks: Iterable[Body]) -> set[str]:
    """The identities whose object names an IPAM pool."""
    found: set[str] = set()
    for type_, bodies in (("Network", networks), ("ClusterNetwork", cluster_networks)):
        for body in bodies:
            if _dig(body, "spec", "ipam", "ipAddressPoolRef", "name"):
                found.add(f"{type_}/{_dig(body, 'metadata', 'name')}")
    return found


def _allocated(address: Body) -> bool:
    return any(isinstance(c, Mapping) and c.get("type") == "Allocated"
               and c.get("status") == "True"
               for c in _dig(address, "status", "conditions") or ())


def _of_network(address: Body, identity: str) -> bool:
    ref = _dig(address, "spec", "networkRef") or {}
    return isinstance(ref, Mapping) and f"{ref.get('kind')}/{ref.get('name')}" == identity


def address_for(identity: str, static: str, vm_uid: str, addresses: Iterable[Body]
                ) -> str | None:
    """The name of the allocated IPAddress `identity` is requested with (None: none)."""
    if static:
        found = [a for a in addresses if _dig(a, "metadata", "name") == static]
    else:
        found = sorted((a for a in addresses
                        if (_dig(a, "metadata", "labels") or {}).get(VM_UID_LABEL) == vm_uid),
                       key=lambda a: str(_dig(a, "metadata", "name")))
    for address in found:
        if _of_network(address, identity):
            return str(_dig(address, "metadata", "name")) if _allocated(address) else None
    return None


def with_addresses(vm: DesiredVM, pooled: set[str], addresses: Iterable[Body]) -> DesiredVM:
    """`vm` with each additional network as Deckhouse requests it (`machines/ipam.py`)."""
    if vm.networks is None:
        return vm
    listed = list(addresses)
    networks = tuple(
        n if n.type == "Main" else with_ipam(
            n, pooled=n.identity in pooled,
            address=address_for(n.identity, n.ip_address_name, vm.uid, listed)
            if n.identity in pooled else None)
        for n in vm.networks)
    return vm if networks == vm.networks else replace(vm, networks=networks)
