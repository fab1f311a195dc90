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
from nicplug.machines.effects import PatchPodNetworks
from nicplug.machines.facts import facts_of
from nicplug.machines.guards import Context, change_written, guest_has_interface
from nicplug.machines.operation import Operation
from nicplug.machines.policy import MachineConfig
from nicplug.machines.targets import pod_patches
from nicplug.machines.world import (
    KVVM,
    VMI,
    DesiredVM,
    KVVMInterface,
    KVVMNetwork,
    LauncherPod,
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


def test_a_name_another_entry_still_holds_is_not_requested_twice() -> None:
    """Seed 30389 (simulation): user-net, added back, gets the MAC second-net took from
    it, while second-net's entry on the pod still bears that name: second-net waits for
    a MAC of its own (no name yet), so its entry is not rewritten. A pod patch listing
    one ifName twice is an annotation nobody can read: the SDN, and nicplug, which then
    never writes that pod again (both plugs failed SDNTimeout at every retry).
    user-net's entry waits for the name to be free."""
    networks = (NetworkSpec("Main"),
                NetworkSpec("Network", "user-net", 2, mac=MAC, named_by_mac=True),
                NetworkSpec("Network", "second-net", 3, named_by_mac=True))
    vm = DesiredVM("uid-1", "ns", "vm", "1", networks)
    interfaces = (KVVMInterface("default"),)
    nets = (KVVMNetwork("default"),)
    kvvm = KVVM("1", True, interfaces, nets, ())
    vmi = VMI("vmi-1", "1", "Running", interfaces, nets,
              (VMIInterfaceStatus("default", info_source=frozenset({"domain"})),),
              (), {"pod-1": "node-1"})
    pod = LauncherPod("ns", "virt-launcher-vm-1", "pod-1", "1", "Running", "node-1",
                      (SDNRequest("Network/second-net", NAME, 3),))
    facts = facts_of(World(vm, kvvm, vmi, (pod,)))
    assert facts.comparison is not None
    assert facts.comparison.desired_entry("Network/second-net").awaits_mac  # type: ignore[union-attr]
    ops = {
        ("Network/user-net", "plug"): Operation(
            StreamId("plug-u"), "ns/vm", "uid-1", "Network/user-net", NAME, "plug", 2),
        ("Network/second-net", "plug"): Operation(
            StreamId("plug-s"), "ns/vm", "uid-1", "Network/second-net", NAME, "plug", 1,
            state="AnnotationPatched"),
    }
    for _, patch in pod_patches(facts, ops, vm, facts.comparison):
        assert isinstance(patch, PatchPodNetworks)
        names = [e.if_name for e in patch.entries]
        assert len(names) == len(set(names)), names
