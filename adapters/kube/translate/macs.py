"""Which MAC address Deckhouse gives each additional network of a VM.

Deckhouse's VM controller creates one `VirtualMachineMACAddress` (VMMAC) per
additional network of a VM, labelled with the VM's uid and owned by it; its own
controller allocates the address into `status.address`. A VMMAC names no network:
the VM controller hands the addresses out (`pkg/common/network/mac_pool.go`,
`CreateNetworkSpec` in `pkg/common/network/spec.go`, deckhouse/virtualization):

* a network listed in the VM's `status.networks` with a MAC keeps it — matched by
  name alone, as Deckhouse matches it;
* every other additional network, in `spec.networks` order, takes the next allocated
  address no `status.networks` entry holds, from the VMMACs in the order Deckhouse
  reads them (those `spec.networks[].virtualMachineMACAddressName` names first, in
  spec order, then those labelled with the VM's uid, as the API server lists them: by
  name);
* a network left without an address is not configured yet: Deckhouse leaves it out of
  the interfaces it builds, and nicplug waits.

The interface name follows from the address (`world.if_name_of_mac`). Pure: the same
bodies give the same addresses.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from nicplug.adapters.kube.translate.objects import VirtualMachineObject, VMMACObject
from nicplug.machines.world import identity_of


@dataclass(frozen=True, slots=True)
class MACAddress:
    """One VMMAC as the pool reads it: its name and allocated address (`""`: not yet)."""

    name: str
    address: str


def in_deckhouse_order(vm: VirtualMachineObject, vmmacs: Iterable[VMMACObject]) -> list[MACAddress]:
    """The VM's VMMACs in the order Deckhouse's VM controller reads them
    (`state.VirtualMachineMACAddresses`): named by the spec first, then the labelled
    ones by name; each once."""
    by_name = {m.metadata.name: m for m in vmmacs}
    ordered: list[MACAddress] = []
    seen: set[str] = set()
    named = [n.virtual_machine_mac_address_name for n in vm.spec.networks or ()]
    for name in [*(n for n in named if n), *sorted(by_name)]:
        found = by_name.get(name)
        if found is None or name in seen:
            continue
        seen.add(name)
        ordered.append(MACAddress(name, found.status.address))
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


def status_macs(vm: VirtualMachineObject) -> dict[str, str]:
    """name → MAC of the additional networks in the VM's `status.networks` (Deckhouse
    reserves an address by the network's name, whatever its type)."""
    return {n.name: n.mac_address for n in vm.status.networks
            if n.type != "Main" and n.mac_address}


def macs_of(vm: VirtualMachineObject, vmmacs: Iterable[VMMACObject]) -> dict[str, str]:
    """identity → MAC of every additional network of `vm` that has one."""
    spec = [(n.type, n.name) for n in vm.spec.networks or ()]
    return assign(spec, status_macs(vm), in_deckhouse_order(vm, vmmacs))
