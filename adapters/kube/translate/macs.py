"""Which MAC address Deckhouse gives each additional network of a VM.

Deckhouse's VM controller creates one `VirtualMachineMACAddress` (VMMAC) per
additional network of a VM, labelled with the VM's uid and owned by it; its own
controller allocates the address into `status.address`. A VMMAC names no network:
the VM controller hands the addresses out (`pkg/common/network/mac_pool.go`,
`CreateNetworkSpec` in `pkg/common/network/spec.go`, deckhouse/virtualization):

* a network listed in the VM's `status.networks` with a MAC keeps it — matched by
  name alone, as Deckhouse matches it. Deckhouse copies that MAC from the KVVM's
  interface, so nicplug also counts as held the MAC of each KVVM interface its template
  request names (the interface named after that very MAC), before Deckhouse's status
  catches up, and likewise the MAC a launcher pod's SDN request is named after: a MAC
  handed out is never handed to another network (nor another MAC to the same network)
  before Deckhouse's status says so, which would rename an interface half-way;
* every other additional network, in `spec.networks` order, takes the next allocated
  address no `status.networks` entry holds, from the VMMACs in the order Deckhouse
  reads them (those `spec.networks[].virtualMachineMACAddressName` names first, in
  spec order, then those labelled with the VM's uid, as the API server lists them: by
  name);
* a network left without an address is not configured yet: Deckhouse leaves it out of
  the interfaces it builds, and nicplug waits.

The interface name follows from the address (`world.if_name_of_mac`). Pure: the same
bodies give the same addresses. It reads plain records (`VMNetworks`, `MACAddress`),
which the read memo keeps instead of the objects' pydantic models (~3 KB per VM).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from nicplug.adapters.kube.translate.objects import (
    KVVMObject,
    VirtualMachineObject,
    VMMACObject,
)
from nicplug.machines.world import SDNRequest, identity_of, if_name_of_mac


@dataclass(frozen=True, slots=True)
class MACAddress:
    """One VMMAC as the pool reads it: its name and allocated address (`""`: not yet)."""

    name: str
    address: str


def mac_address(vmmac: VMMACObject) -> MACAddress:
    return MACAddress(vmmac.metadata.name, vmmac.status.address)


@dataclass(frozen=True, slots=True)
class VMNetworks:
    """What the pool reads of a Deckhouse VM: `spec` its `spec.networks` as
    `(type, name)` in order, `mac_names` the VMMACs they name
    (`virtualMachineMACAddressName`, those set, in order), `status` name → MAC of the
    additional networks its `status.networks` gives an address (Deckhouse reserves an
    address by the network's name, whatever its type)."""

    spec: tuple[tuple[str, str], ...]
    mac_names: tuple[str, ...]
    status: Mapping[str, str]


def vm_networks(vm: VirtualMachineObject) -> VMNetworks:
    networks = vm.spec.networks or ()
    return VMNetworks(
        spec=tuple((n.type, n.name) for n in networks),
        mac_names=tuple(n.virtual_machine_mac_address_name for n in networks
                        if n.virtual_machine_mac_address_name),
        status={n.name: n.mac_address for n in vm.status.networks
                if n.type != "Main" and n.mac_address},
    )


def in_deckhouse_order(vm: VMNetworks, vmmacs: Iterable[MACAddress]) -> list[MACAddress]:
    """The VM's VMMACs in the order Deckhouse's VM controller reads them
    (`state.VirtualMachineMACAddresses`): named by the spec first, then the labelled
    ones by name; each once."""
    by_name = {m.name: m for m in vmmacs}
    ordered: list[MACAddress] = []
    seen: set[str] = set()
    for name in [*vm.mac_names, *sorted(by_name)]:
        found = by_name.get(name)
        if found is None or name in seen:
            continue
        seen.add(name)
        ordered.append(found)
    return ordered


def assign(
    spec: Sequence[tuple[str, str]],
    status: Mapping[str, str],
    pool: Sequence[MACAddress],
) -> dict[str, str]:
    """identity → MAC for the additional networks of `spec` (`(type, name)` in order)
    that get one, as Deckhouse's `MacAddressPool.Assign` hands them out; `status` maps
    a network's name to the MAC the VM's status gives it."""
    taken = set(status.values())
    available = [m.address for m in pool if m.address and m.address not in taken]
    assigned: dict[str, str] = {}
    for type_, name in spec:
        if type_ == "Main":
            continue
        mac = status.get(name)
        if mac is None and available:
            mac = available.pop(0)
        if mac:
            assigned[identity_of(type_, name)] = mac  # type: ignore[arg-type]
    return assigned


def kvvm_macs(kvvm: KVVMObject | None, requests: Iterable[SDNRequest]) -> dict[str, str]:
    """name → MAC of the KVVM's interfaces whose template request names them and whose
    name is derived from that MAC: written for that network."""
    if kvvm is None:
        return {}
    macs = {i.name: i.mac_address for i in kvvm.spec.template.spec.domain.devices.interfaces
            if i.mac_address}
    held: dict[str, str] = {}
    for request in requests:
        type_, _, name = request.identity.partition("/")
        mac = macs.get(request.if_name)
        if mac and type_ in ("Network", "ClusterNetwork") and if_name_of_mac(
                type_, mac) == request.if_name:  # type: ignore[arg-type]
            held[name] = mac
    return held


def requested_macs(requests: Iterable[SDNRequest], pool: Iterable[MACAddress]) -> dict[str, str]:
    """name → MAC of the SDN requests (on the launcher pods) named after one of the VM's
    allocated addresses: the name was handed out already, so its MAC stays held."""
    by_name: dict[str, str] = {}
    for mac in pool:
        if mac.address:
            by_name[if_name_of_mac("Network", mac.address)] = mac.address
            by_name[if_name_of_mac("ClusterNetwork", mac.address)] = mac.address
    held: dict[str, str] = {}
    for request in requests:
        found = by_name.get(request.if_name)
        if found is not None:
            held[request.identity.partition("/")[2]] = found
    return held


def macs_of(
    vm: VMNetworks,
    vmmacs: Iterable[MACAddress],
    written: Mapping[str, str] | None = None,
    requested: Iterable[SDNRequest] = (),
) -> dict[str, str]:
    """identity → MAC of every additional network of `vm` that has one; `written` the
    MACs the KVVM holds for networks (`kvvm_macs`) and `requested` the launcher pods'
    SDN requests, held as the status holds them."""
    pool = in_deckhouse_order(vm, vmmacs)
    held = {**requested_macs(requested, pool), **(written or {}), **vm.status}
    return assign(vm.spec, held, pool)
