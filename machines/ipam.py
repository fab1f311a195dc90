"""Which additional networks Deckhouse's SDN is asked for, and with which IPAM fields.

Deckhouse's controller enriches every networks-spec it writes (`EnrichWithIPAM`,
`pkg/common/network/types.go` in deckhouse/virtualization): a network whose object
names an address pool (`spec.ipam.ipAddressPoolRef`) is requested with
`ipAssignmentMode: DHCP` and `ipAddressNames: [<its IPAddress>]` — the VM's automatic
one, or the one `ipAddressName` asks for — and left out while that IPAddress is missing
or not allocated; on a network without a pool an `ipAddressName` leaves the network out
(a configuration error the platform reports). nicplug, where it writes the pod's
annotation itself, must write that very list, or the two writers rewrite each other.
Pure: the facts (`pooled`, the allocated `address`) are read by the adapters.
"""

from __future__ import annotations

from dataclasses import replace

from nicplug.machines.world import NetworkSpec

DHCP = "DHCP"


def with_ipam(spec: NetworkSpec, *, pooled: bool, address: str | None) -> NetworkSpec:
    """`spec` as Deckhouse requests it: `pooled` says the network's object names a pool,
    `address` the IPAddress that is there, allocated, of this network and this VM's (the
    automatic one, or the static one the spec names); None while there is none."""
    if spec.type == "Main":
        return spec
    if not pooled:
        return replace(spec, awaits_address=bool(spec.ip_address_name))
    if address is None:
        return replace(spec, awaits_address=True)
    return replace(spec, ip_assignment_mode=DHCP, ip_address_names=(address,),
                   awaits_address=False)
