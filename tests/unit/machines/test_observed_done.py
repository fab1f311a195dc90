"""A change the platform finished before nicplug decided on it is recorded all the same:
KubeVirt with a dynamic-networks controller plugs (or unplugs) on its own, and a busy
nicplug may first see the template's change together with the VMI that has it attached.
The operation goes straight to its end and says it was observed done; a change already
done in the first world a process assembles of the VM is not guessed at (the simulation's
`first_sight` stands for what the observing side remembers)."""

from __future__ import annotations

from dataclasses import replace

from nicplug.engine.model import Cause, Observed
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.operation import VMState
from nicplug.machines.policy import MachineConfig
from nicplug.machines.world import KVVMInterface, SDNRequest, SDNStatus
from tests.unit.machines.sim import MAIN, Driver, Sim, net

NET = ("Network/fancy-net", "plug")


def driver(sim: Sim) -> Driver:
    return Driver(HotplugDecider(MachineConfig(dialect_kind="multus")), sim, multus=True)


def done_unseen(d: Driver, steps: int = 8) -> None:
    """The platform works on while nicplug decides nothing (a backlog elsewhere)."""
    for _ in range(steps):
        d.sim.world()  # (the simulation learns the template's network names from it)
        d.sim.settle()
        d.now += 1.0


def test_a_plug_seen_only_once_attached_is_recorded_as_observed_done() -> None:
    sim = Sim(in_template=True, kubevirt_owns_pod=True)
    d = driver(sim)
    d.run(2)
    assert d.state.ops == {}
    sim.user_plugs("fancy-net", "fancy-net")
    done_unseen(d)
    assert "fancy-net" in sim.attached  # the spec change and the attach in one world
    d.observe()
    plug = d.op(*NET)
    assert (plug.state, plug.reason) == ("Attached", None)
    assert list(plug.history) == ["Requested", "Attached"]
    assert plug.message.startswith("observed done: the platform plugged it")
    assert {e.type for e in d.effects} <= {"EmitEvent"}
    d.run(3)
    assert d.op(*NET).attempt == 1  # once


def test_an_unplug_seen_only_once_gone_is_recorded_as_observed_done() -> None:
    sim = Sim(in_template=True, kubevirt_owns_pod=True)
    d = driver(sim)
    d.run(1)
    sim.user_plugs("fancy-net", "fancy-net")
    d.run(10)
    assert d.op(*NET).state == "Attached"
    sim.user_unplugs("fancy-net")
    done_unseen(d)
    assert [i.name for i in sim.kvvm_ifaces] == ["default"]  # KubeVirt dropped it
    d.observe()
    unplug = d.op("Network/fancy-net", "unplug")
    assert list(unplug.history) == ["Requested", "Detached"]
    assert "unplugged it before nicplug saw it in flight" in unplug.message


def test_a_replug_after_an_observed_unplug_is_a_new_attempt() -> None:
    sim = Sim(in_template=True, kubevirt_owns_pod=True)
    d = driver(sim)
    d.run(1)
    sim.user_plugs("fancy-net", "fancy-net")
    done_unseen(d)
    d.observe()
    sim.user_unplugs("fancy-net")
    done_unseen(d)
    d.observe()
    sim.user_plugs("fancy-net", "fancy-net")
    done_unseen(d)
    d.observe()
    plug = d.op(*NET)
    assert (plug.attempt, plug.state, list(plug.history)) == (2, "Attached",
                                                              ["Requested", "Attached"])


def test_what_the_first_sight_shows_done_opens_nothing() -> None:
    """Already attached when nicplug first sees the VM (after a start, no journal of
    it): whether it happened before nicplug ran cannot be told, and nothing is recorded."""
    sim = Sim(in_template=True, kubevirt_owns_pod=True)
    d = driver(sim)
    sim.world()  # the VM as created, then edited before nicplug looks
    sim.user_plugs("fancy-net", "fancy-net")
    done_unseen(d)
    assert "fancy-net" in sim.attached
    sim.first_sight = None  # nicplug starts: the first world it assembles is this one
    d.run(3)
    assert d.state.ops == {}


def test_a_restart_forgets_the_first_sight_but_not_the_journal() -> None:
    """After a restart the state is restored from the journal's rows: a network whose
    last operation there is an unplug, attached now, was plugged again while nicplug
    was away, and is recorded; a network the journal never mentions is not."""
    sim = Sim(in_template=True, kubevirt_owns_pod=True)
    d = driver(sim)
    d.run(1)
    sim.user_plugs("fancy-net", "fancy-net")
    d.run(10)
    sim.user_unplugs("fancy-net")
    d.run(10)
    assert d.op("Network/fancy-net", "unplug").state == "Detached"
    restored = VMState.restore(d.state.key, d.decider.views(d.state))
    sim.user_plugs("fancy-net", "fancy-net")
    sim.user_plugs("other-net", "other-net")
    done_unseen(d)
    d.decider = HotplugDecider(d.decider.config)  # a new process, its state from the journal
    d.state = restored
    sim.first_sight = None
    d.observe()
    plug = d.op(*NET)
    assert (plug.attempt, list(plug.history)) == (2, ["Requested", "Attached"])
    assert ("Network/other-net", "plug") not in d.state.ops


def test_an_earlier_vm_of_the_same_name_says_nothing_of_this_one() -> None:
    """The VM was deleted and created again without the network: the operations of the
    first one (same name, other uid) do not make its absence an unplug."""
    sim = Sim(in_template=True, kubevirt_owns_pod=True)
    d = driver(sim)
    d.run(1)
    sim.user_plugs("fancy-net", "fancy-net")
    d.run(10)
    assert d.op(*NET).state == "Attached"
    sim.user_unplugs("fancy-net")
    done_unseen(d)
    world = sim.world()
    assert world.vm is not None
    again = replace(world, vm=replace(world.vm, uid="uid-2"), first_seen=())
    d.feed(Observed(Cause("observation", "the new VM")), world=again)
    assert ("Network/fancy-net", "unplug") not in d.state.ops


def test_a_nad_swap_finished_unseen_is_no_plug() -> None:
    """The interface stays, only its NAD changed (KubeVirt's workload updater migrated
    the VM onto it unseen): not a plug of the new network."""
    sim = Sim(in_template=True, kubevirt_owns_pod=True, workload_update=True)
    d = driver(sim)
    d.run(1)
    sim.user_plugs("fancy-net", "fancy-net")
    d.run(10)
    assert d.op(*NET).state == "Attached"
    sim.user_swaps("fancy-net", "other-net")
    done_unseen(d, 20)
    assert [r.identity for r in sim.requested] == ["Network/other-net"]  # the new pod's
    d.observe()
    assert ("Network/other-net", "plug") not in d.state.ops


def test_a_clock_that_went_back_opens_no_operation_after_operation() -> None:
    """The unplug was opened by a replica whose clock read earlier than the one that
    opened the plug (a restarted process, a stepped clock): which is newer is what the
    unplug says it follows, not the times. Before, the plug looked newer at every
    observation, and a new "observed done" unplug opened at each one."""
    sim = Sim(in_template=True, kubevirt_owns_pod=True)
    d = driver(sim)
    d.now = 1000.0
    d.run(1)
    sim.user_plugs("fancy-net", "fancy-net")
    d.run(10)
    assert d.op(*NET).state == "Attached"
    d.now = 100.0  # the next replica's clock reads 15 minutes earlier
    sim.user_unplugs("fancy-net")
    done_unseen(d)
    d.run(10)
    unplug = d.op("Network/fancy-net", "unplug")
    assert unplug.state == "Detached" and unplug.opened_at < d.op(*NET).opened_at
    assert unplug.attempt == 1 and unplug.after == d.op(*NET).stream


# -- an id change Deckhouse applies to the running VM at once (observe mode) -------------

X = "Network/x"


def deckhouse_vm(id_: int) -> Driver:
    """A Deckhouse VM observed with `Network/x` plugged under `id_` from the start."""
    spec = net("x", id_)
    sim = Sim(networks=(MAIN, spec))
    deckhouse_applies(sim, id_)
    sim.kvvm_ifaces = [KVVMInterface("default"), KVVMInterface(spec.if_name)]
    sim.vmi_ifaces = list(sim.kvvm_ifaces)
    sim.attached = {"default", spec.if_name}
    sim.reported = [SDNStatus(X, spec.if_name, True)]
    return Driver(HotplugDecider(MachineConfig(mode="observe")), sim)


def deckhouse_applies(sim: Sim, id_: int) -> None:
    """The user's new id, and Deckhouse's KVVM and networks-spec carrying it."""
    spec = net("x", id_)
    sim.networks = (MAIN, spec)
    sim.template = [SDNRequest(X, spec.if_name, id_)]
    sim.requested = [SDNRequest(X, spec.if_name, id_)]


def test_an_id_change_seen_only_once_applied_is_recorded_as_observed_done() -> None:
    d = deckhouse_vm(2)
    d.observe()
    assert d.state.ops == {}  # the first sight: nothing to do
    deckhouse_applies(d.sim, 7)  # the edit and Deckhouse's KVVM in one world
    d.observe()
    update = d.op(X, "update")
    assert (update.state, update.reason) == ("Attached", None)
    assert list(update.history) == ["Requested", "Attached"]
    assert update.target == "observed-done:id=7;pos=1"
    assert update.message.startswith("observed done: the platform applied the new id of it")
    assert {e.type for e in d.effects} <= {"EmitEvent"}
    d.observe()
    assert d.op(X, "update").attempt == 1  # once


def test_the_id_an_update_recorded_is_what_the_next_change_is_told_from() -> None:
    d = deckhouse_vm(2)
    d.observe()
    d.sim.networks = (MAIN, net("x", 7))  # seen in flight: an update of its own
    d.observe()
    assert d.op(X, "update").state == "Requested"
    deckhouse_applies(d.sim, 7)
    d.observe()
    d.observe()
    assert d.op(X, "update").state == "Attached"
    assert "Attached" in d.op(X, "update").history
    deckhouse_applies(d.sim, 9)  # then one done unseen
    d.observe()
    update = d.op(X, "update")
    assert (update.attempt, update.target) == (2, "observed-done:id=9;pos=1")
    assert list(update.history) == ["Requested", "Attached"]


def test_an_id_change_done_before_the_first_sight_is_not_guessed_at() -> None:
    d = deckhouse_vm(2)
    d.observe()
    deckhouse_applies(d.sim, 7)
    d.sim.first_sight = None  # nicplug starts: the first world it assembles is this one
    d.observe()
    assert d.state.ops == {}


def test_the_id_a_plug_was_opened_for_is_what_an_id_change_is_told_from() -> None:
    d = deckhouse_vm(2)
    plugged = d.sim
    d.sim = Sim(networks=(MAIN,))  # first seen without X, then plugged in flight
    d.observe()
    d.sim.networks = (MAIN, net("x", 2))
    d.observe()
    assert d.op(X, "plug").state == "Requested"
    d.sim, plugged.first_sight = plugged, d.sim.first_sight  # Deckhouse plugs it
    for _ in range(4):
        d.observe()
    plug = d.op(X, "plug")
    assert (plug.state, plug.target) == ("Attached", "id=2")
    deckhouse_applies(d.sim, 7)  # done unseen
    d.observe()
    update = d.op(X, "update")
    assert (update.state, update.target) == ("Attached", "observed-done:id=7;pos=1")
    assert list(update.history) == ["Requested", "Attached"]


def test_the_id_a_plug_observed_done_says_is_what_an_id_change_is_told_from() -> None:
    d = deckhouse_vm(2)
    plugged = d.sim
    d.sim = Sim(networks=(MAIN,))  # first seen without X
    d.observe()
    d.sim, plugged.first_sight = plugged, d.sim.first_sight  # plugged unseen
    d.observe()
    plug = d.op(X, "plug")
    assert (plug.state, plug.target) == ("Attached", "observed-done:id=2")
    deckhouse_applies(d.sim, 7)  # done unseen as well
    d.observe()
    update = d.op(X, "update")
    assert (update.state, update.target) == ("Attached", "observed-done:id=7;pos=1")


def test_a_plug_adopted_half_way_says_its_id_too() -> None:
    d = deckhouse_vm(2)
    plugged = d.sim
    d.sim = Sim(networks=(MAIN,))  # first seen without X
    d.observe()
    plugged.first_sight = d.sim.first_sight
    plugged.attached = {"default"}  # Deckhouse wrote the KVVM; the guest has yet to attach
    d.sim = plugged
    d.observe()
    assert d.op(X, "plug").target == "id=2"
    plugged.attached = {"default", net("x", 2).if_name}
    d.observe()
    assert d.op(X, "plug").state == "Attached"
    deckhouse_applies(d.sim, 7)  # done unseen
    d.observe()
    assert d.op(X, "update").target == "observed-done:id=7;pos=1"
