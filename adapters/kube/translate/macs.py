"""Which MAC address Deckhouse gives each additional network of a VM.

Deckhouse's VM controller creates one `VirtualMachineMACAddress` (VMMAC) per
additional network of a VM, labelled with the VM's uid and owned by it; its own
controller allocates the address into `status.address`. A VMMAC names no network:
the VM controller hands the addresses out (`pkg/common/network/mac_pool.go`,
`CreateNetworkSpec` in `pkg/common/network/spec.go`, deckhouse/virtualization):

* a network listed in the VM's `status.networks` with a MAC keeps it — matched by
  name alone, as Deckhouse matches it. Nothing else is held: `NewMacAddressPool` reads
  the status and the VMMACs only (its one caller, `CreateNetworkSpec`, is handed nothing
  more). A MAC a KVVM interface or a launcher pod's request is named after, which the
  status does not list yet, is free; when the pool then hands the network another one,
  Deckhouse rewrites the pod's `networks-spec` and the KVVM under the new name, and so
  does nicplug (a plug is named again while no KVVM or VMI holds its first name);
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

from nicplug.adapters.kube.translate.objects import VirtualMachineObject, VMMACObject
from nicplug.machines.world import identity_of


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


def macs_of(vm: VMNetworks, vmmacs: Iterable[MACAddress]) -> dict[str, str]:
    """identity → MAC of every additional network of `vm` that has one."""
    return assign(vm.spec, vm.status, in_deckhouse_order(vm, vmmacs))
