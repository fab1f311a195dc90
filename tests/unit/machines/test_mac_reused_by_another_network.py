"""A network added with the VMMAC a removed one left: one interface name for both.

Deckhouse's pool (`pkg/common/network/mac_pool.go`) holds only the MACs the VM's
`status.networks` lists, so once a removed network leaves the status its VMMAC is free
and the next network added takes it, and with it the interface name (named after the
MAC). Until the removed network's unplug lets the interface go, the KVVM and the guest
carry that name for the removed network, not for the added one: the plug is not done
(seed 6693: a plug of user-net went Attached at once on second-net's interface and was
opened again at every decision, 93 times in an hour).
"""

from __future__ import annotations

from nicplug.engine.model import StreamId
from nicplug.machines.facts import facts_of
from nicplug.machines.guards import Context, change_written, guest_has_interface
from nicplug.machines.operation import Operation
from nicplug.machines.policy import MachineConfig
from nicplug.machines.world import (
    KVVM,
    VMI,
    DesiredVM,
    KVVMInterface,
    KVVMNetwork,
    NetworkSpec,
    SDNRequest,
    VMIInterfaceStatus,
    World,
    if_name_of_mac,
)

MAC = "02:00:00:00:00:01"
NAME = if_name_of_mac("Network", MAC)


def _context(carried_by: str) -> Context:
    networks = (NetworkSpec("Main"),
                NetworkSpec("Network", "user-net", 2, mac=MAC, named_by_mac=True))
    vm = DesiredVM("uid-1", "ns", "vm", "1", networks)
    interfaces = (KVVMInterface("default"), KVVMInterface(NAME))
    nets = (KVVMNetwork("default"), KVVMNetwork(NAME, f"ns/{carried_by}"))
    kvvm = KVVM("1", True, interfaces, nets,
                (SDNRequest(f"Network/{carried_by}", NAME, 3),))
    vmi = VMI("vmi-1", "1", "Running", interfaces, nets,
              (VMIInterfaceStatus("default", info_source=frozenset({"domain"})),
               VMIInterfaceStatus(NAME, info_source=frozenset({"domain"}))),
              (), {"pod-1": "node-1"})
    op = Operation(StreamId("op"), "ns/vm", "uid-1", "Network/user-net", NAME, "plug", 1,
                   state="VMIPatched")
    return Context(op, facts_of(World(vm, kvvm, vmi, ())), MachineConfig(), 0.0, "attach")


def test_the_interface_of_that_name_is_the_removed_networks_not_the_plugs() -> None:
    c = _context(carried_by="second-net")
    assert not guest_has_interface(c)
    assert not change_written(c)


def test_the_interface_of_that_name_carried_for_the_network_itself_is_its_plug_done() -> None:
    c = _context(carried_by="user-net")
    assert guest_has_interface(c)
    assert change_written(c)
