"""A network the MAC pool names anew while it is plugged, as Deckhouse follows it.

Deckhouse's pool (`pkg/common/network/mac_pool.go`) holds only the MACs the VM's
`status.networks` lists. Two networks added together whose VMMACs are allocated out of
name order, or a network put before one still being plugged, change which MAC (and so
which interface name) an unlisted network gets. Deckhouse then writes the whole
`networks-spec` again from the pool, and updates the KVVM only once the pod asks for the
names it derived and the SDN reports them (`patchPodNetworkAnnotation`,
`isNetworkReadyOnPod`, `sync_kvvm.go`). nicplug in drive mode does the same: the pod's
entry is rewritten under the new name, the plug follows it, and the KVVM waits.

A network the pool names anew once its first interface is in the KVVM (a revert to
Main alone empties `status.networks`; added again, it may take another VMMAC): the
platform's KVVM rebuild marks the old interface absent and adds the new one
(`setNetwork`, `kvbuilder/kvvm_utils.go`). nicplug unplugs the old one, in its own
order (the guest lets go before the SDN), then plugs the network under the new name.
"""

from __future__ import annotations

from dataclasses import replace

from nicplug.engine.model import Cause, Input, Observed, RecordedEvent, StreamId
from nicplug.machines.comparator import compare
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.facts import facts_of
from nicplug.machines.guards import goal_shown_for
from nicplug.machines.operation import Operation, VMState
from nicplug.machines.policy import MachineConfig
from nicplug.machines.targets import kvvm_patch, pod_patches
from nicplug.machines.walking import _written_anywhere
from nicplug.machines.world import (
    KVVM,
    VMI,
    ClusterConfig,
    DesiredVM,
    KVVMInterface,
    KVVMNetwork,
    LauncherPod,
    NetworkSpec,
    SDNRequest,
    SDNStatus,
    VMIInterfaceStatus,
    World,
    if_name_of_mac,
)
from tests.unit.machines.sim import MAIN, Driver, Sim

FIRST, SECOND = "02:00:00:00:00:01", "02:00:00:00:00:02"
OLD_B = if_name_of_mac("Network", FIRST)  # b's name when it was requested
NEW_B = if_name_of_mac("Network", SECOND)  # b's name now that a takes FIRST


def _world(reported_as: str) -> World:
    networks = (NetworkSpec("Main"),
                NetworkSpec("Network", "a", 2, mac=FIRST, named_by_mac=True),
                NetworkSpec("Network", "b", 3, mac=SECOND, named_by_mac=True))
    vm = DesiredVM("uid-1", "ns", "vm", "1", networks)
    default = (KVVMInterface("default"),)
    kvvm = KVVM("1", True, default, (KVVMNetwork("default"),))
    vmi = VMI("vmi-1", "1", "Running", default, (KVVMNetwork("default"),),
              (VMIInterfaceStatus("default", info_source=frozenset({"domain"})),),
              (), {"pod-1": "node-1"})
    pod = LauncherPod("ns", "virt-launcher-vm-1", "pod-1", "1", "Running", "node-1",
                      (SDNRequest("Network/b", OLD_B, 3),),
                      (SDNStatus("Network/b", reported_as, True),))
    return World(vm, kvvm, vmi, (pod,))


def _ops(b_name: str) -> dict[tuple[str, str], Operation]:
    b = Operation(StreamId("op-b"), "ns/vm", "uid-1", "Network/b", b_name, "plug", 1,
                  state="SDNReady")
    a = Operation(StreamId("op-a"), "ns/vm", "uid-1", "Network/a", "", "plug", 1)
    return {("Network/b", "plug"): b, ("Network/a", "plug"): a}


def test_the_pods_entry_is_rewritten_under_the_name_the_pool_gives_now() -> None:
    world = _world(reported_as=OLD_B)
    facts = facts_of(world)
    assert facts.comparison is not None and world.vm is not None
    ((owner, patch),) = pod_patches(facts, _ops(OLD_B), world.vm, facts.comparison)
    assert owner.network == "Network/b"
    assert [(r.identity, r.if_name) for r in patch.entries] == [
        ("Network/a", OLD_B), ("Network/b", NEW_B)]


def test_the_kvvm_waits_until_the_pod_asks_for_the_new_name() -> None:
    """The SDN reports b ready under its old name: the KVVM must not get the new one
    (KubeVirt would find no link for it) until the pod asks for it and it is ready."""
    world = _world(reported_as=OLD_B)
    facts = facts_of(world)
    assert facts.comparison is not None and world.vm is not None
    assert kvvm_patch(facts, _ops(NEW_B), world.vm, facts.comparison) == []


def test_a_plug_follows_the_new_name_while_no_kvvm_or_vmi_holds_the_first() -> None:
    facts = facts_of(_world(reported_as=OLD_B))
    assert not _written_anywhere(OLD_B, facts)  # the pod's request does not pin it


def _storage(mac: str | None) -> NetworkSpec:
    return NetworkSpec("ClusterNetwork", "storage", 2, mac=mac, named_by_mac=True)


OLD_S, NEW_S = _storage(FIRST).if_name, _storage(SECOND).if_name


def test_a_carried_network_named_anew_is_an_unplug_of_its_old_name() -> None:
    kvvm = KVVM("1", True, (KVVMInterface("default"), KVVMInterface(OLD_S)),
                (KVVMNetwork("default"), KVVMNetwork(OLD_S)),
                (SDNRequest("ClusterNetwork/storage", OLD_S, 2),))
    (change,) = compare((MAIN, _storage(SECOND)), kvvm).changes
    assert (change.identity, change.if_name, change.direction, change.restart) == (
        "ClusterNetwork/storage", OLD_S, "unplug", False)
    assert NEW_S in change.why
    # no MAC handed to it yet: nothing to rename it to, the interface stays
    assert compare((MAIN, _storage(None)), kvvm).changes == ()
    assert compare((MAIN, _storage(FIRST)), kvvm).changes == ()


def test_a_network_renamed_while_attached_is_unplugged_under_its_old_name_then_plugged() -> None:
    sim = Sim(networks=(MAIN, _storage(FIRST)))
    d = Driver(HotplugDecider(MachineConfig()), sim)
    d.run(8)
    assert d.sim.attached == {"default", OLD_S}
    mark = len(d.effects)
    d.sim.networks = (MAIN, _storage(SECOND))  # the pool hands it the other VMMAC
    d.run(14)
    unplug, plug = d.op("ClusterNetwork/storage", "unplug"), d.op("ClusterNetwork/storage", "plug")
    assert (unplug.if_name, unplug.state) == (OLD_S, "Detached")
    assert list(unplug.history) == ["Requested", "VMIPatched", "GuestDetached",
                                    "AnnotationPatched", "SDNReleased", "Detached"]
    assert unplug.message.startswith(f"{OLD_S} is replaced: Deckhouse's MAC pool names "
                                     f"ClusterNetwork/storage {NEW_S} now")
    assert (plug.if_name, plug.state, plug.attempt) == (NEW_S, "Attached", 2)
    assert list(plug.history) == ["Requested", "AnnotationPatched", "SDNReady", "VMIPatched",
                                  "Attached"]
    assert d.sim.attached == {"default", NEW_S}
    assert [i.name for i in d.sim.kvvm_ifaces] == ["default", NEW_S]
    assert [(r.identity, r.if_name) for r in d.sim.template] == [
        ("ClusterNetwork/storage", NEW_S)]
    # the old interface marked absent first, its link let go, then the new one asked for
    assert [e.type for e in d.effects[mark:] if e.type != "EmitEvent"] == [
        "PatchVirtualMachine", "PatchPodNetworks", "PatchPodNetworks", "PatchVirtualMachine"]
    assert d.failures() == []


def test_the_kvvm_keeps_the_request_of_an_interface_under_its_own_name() -> None:
    """A KVVM write for another change (an id-only update, applied with no restart),
    while the renamed interface waits for a restart (`vmRolloutStrategy: Stage`): its
    template request stays under its own name (else the comparison would no longer
    know the interface, and nothing would ever unplug it)."""
    sim = Sim(networks=(MAIN, _storage(FIRST), NetworkSpec("Network", "x", 3)))
    d = Driver(HotplugDecider(MachineConfig()), sim)
    d.run(8)
    d.sim.strategy = "Stage"
    mark = len(d.effects)
    d.sim.networks = (MAIN, _storage(SECOND), NetworkSpec("Network", "x", 4))
    d.run(3)
    assert d.op("ClusterNetwork/storage", "unplug").state == "RestartRequired"
    (patch, *_) = [e for e in d.effects[mark:] if e.type == "PatchVirtualMachine"]
    requests = [(r["identity"], r["if_name"], r["id"])
                for r in patch.payload["template_requests"]]
    assert requests == [("ClusterNetwork/storage", OLD_S, 2),
                        ("Network/x", NetworkSpec("Network", "x", 4).if_name, 4)]


def _shared_name_world() -> tuple[World, str]:
    """Seed 816's world: second-net was removed and user-net added in one edit while a
    Stage rollout defers both; the pool handed user-net the MAC second-net had (no
    longer in `status.networks`), so the KVVM still carries, for second-net, the very
    interface name user-net is given, and the guest has it."""
    user = NetworkSpec("Network", "user-net", 2, mac=FIRST, named_by_mac=True)
    shared = user.if_name
    vm = DesiredVM("uid-1", "ns", "vm", "1", (NetworkSpec("Main"), user))
    ifaces = (KVVMInterface("default"), KVVMInterface(shared))
    nets = (KVVMNetwork("default"), KVVMNetwork(shared))
    kvvm = KVVM("1", True, ifaces, nets, (SDNRequest("Network/second-net", shared, 3),))
    vmi = VMI("vmi-1", "1", "Running", ifaces, nets,
              (VMIInterfaceStatus("default", info_source=frozenset({"domain"})),
               VMIInterfaceStatus(shared, info_source=frozenset({"domain"}))),
              (), {"pod-1": "node-1"})
    pod = LauncherPod("ns", "virt-launcher-vm-1", "pod-1", "1", "Running", "node-1",
                      (SDNRequest("Network/second-net", shared, 3),),
                      (SDNStatus("Network/second-net", shared, True),))
    return World(vm, kvvm, vmi, (pod,), cluster=ClusterConfig("Stage")), shared


def test_a_name_the_kvvm_carries_for_another_network_is_not_the_plug_written() -> None:
    """The plug of user-net found its interface name in the KVVM and the guest and ended
    Attached at once, while the KVVM still carried second-net: the comparison asked for
    the plug again at every observation (seed 816: seven plugs in a second). It waits
    for the restart instead, as the unplug of second-net does."""
    world, shared = _shared_name_world()
    decider = HotplugDecider(MachineConfig())
    state = VMState("ns/vm", {})
    position = 0
    for step in range(5):
        trigger = Observed(Cause("observation", f"sim@{step}"))
        decision = decider.decide(state, Input("ns/vm", world, trigger), float(step))
        for e in decision.events:
            position += 1
            state = decider.evolve(state, RecordedEvent(
                e.stream, "ns/vm", position, position, e.type, e.schema_version,
                e.payload, Cause("observation", "sim"), float(step), float(step)))
    plug = state.ops[("Network/user-net", "plug")]
    assert (plug.if_name, plug.attempt, plug.state) == (shared, 1, "RestartRequired")
    assert state.ops[("Network/second-net", "unplug")].state == "RestartRequired"
    # nor does the world show the plug done (an observed-done plug, a failed one's retry)
    assert not goal_shown_for("plug", "Network/user-net", shared, facts_of(world))
    assert world.kvvm is not None
    restarted = replace(world, kvvm=replace(world.kvvm, template_requests=(
        SDNRequest("Network/user-net", shared, 2),)))
    assert goal_shown_for("plug", "Network/user-net", shared, facts_of(restarted))


def test_a_plug_named_after_a_mac_the_pool_then_gave_another_network_is_named_again() -> None:
    """Seed 25409: user-net was added before second-net in `spec.networks` while the VM
    was stopped and second-net's MAC was not yet in `status.networks`; the pool handed
    that MAC to user-net, whose plug took second-net's interface name. Second-net's own
    KVVM write then landed under that name, and user-net got the next VMMAC. The first
    name is in the KVVM, but for second-net: user-net's plug takes its new name and is
    written for the next boot (it waited in `Requested` for ever under the old one)."""
    user = NetworkSpec("Network", "user-net", 2, mac=SECOND, named_by_mac=True)
    second = NetworkSpec("Network", "second-net", 3, mac=FIRST, named_by_mac=True)
    vm = DesiredVM("uid-1", "ns", "vm", "1", (NetworkSpec("Main"), user, second))
    names = ("default", user.if_name, second.if_name)
    kvvm = KVVM("1", False, tuple(KVVMInterface(n) for n in names),
                tuple(KVVMNetwork(n) for n in names),
                (SDNRequest("Network/user-net", user.if_name, 2),
                 SDNRequest("Network/second-net", second.if_name, 3)))
    world = World(vm, kvvm, None, ())
    assert second.if_name == OLD_B and _written_anywhere(OLD_B, facts_of(world))
    plug = Operation(StreamId("op-u"), "ns/vm", "uid-1", "Network/user-net", OLD_B, "plug", 1,
                     paused_at=0.0)
    state = VMState("ns/vm", {("Network/user-net", "plug"): plug})
    decider = HotplugDecider(MachineConfig())
    decision = decider.decide(state, Input("ns/vm", world, Observed(Cause("observation", "sim"))),
                              1.0)
    for position, e in enumerate(decision.events, start=1):
        state = decider.evolve(state, RecordedEvent(
            e.stream, "ns/vm", position, position, e.type, e.schema_version,
            e.payload, Cause("observation", "sim"), 1.0, 1.0))
    plug = state.ops[("Network/user-net", "plug")]
    assert (plug.if_name, plug.state) == (user.if_name, "VMIPatched")
