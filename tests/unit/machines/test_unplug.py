"""The unplug machine and the restart-only changes (Main, id change, reorder, invalid)."""

from __future__ import annotations

from nicplug.engine.model import Cause, EffectOutcome, Observed
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.effects import CONDITION_FAILED, CONDITION_RESTART
from nicplug.machines.policy import MachineConfig, Timeouts
from nicplug.machines.world import KVVMInterface, SDNRequest, SDNStatus
from tests.unit.machines.sim import MAIN, Driver, Sim, net

X = net("x", 2)
Y = net("y", 3, "ClusterNetwork")
UNPLUG = ("Network/x", "unplug")
HAPPY = ["Requested", "VMIPatched", "GuestDetached", "AnnotationPatched", "SDNReleased"]
HAPPY += ["Detached"]


def plugged(*specs: object, **config: object) -> Driver:
    """A driver whose VM already runs with `specs` attached."""
    sim = Sim(networks=(MAIN, *specs))  # type: ignore[arg-type]
    d = Driver(HotplugDecider(MachineConfig(**config)), sim)  # type: ignore[arg-type]
    d.run(8)
    assert all(op.state == "Attached" for op in d.state.ops.values())
    return d


def types(d: Driver, since: int = 0) -> list[str]:
    return [e.type for e in d.effects[since:] if e.type != "EmitEvent"]


def test_happy_unplug_detaches_the_guest_before_the_sdn_entry() -> None:
    d = plugged(X)
    mark = len(d.effects)
    d.sim.networks = (MAIN,)
    d.run(8)
    assert list(d.op(*UNPLUG).history) == HAPPY
    assert types(d, mark) == ["PatchVirtualMachine", "PatchPodNetworks"]
    absent = d.effects[mark].payload["networks"][-1]
    assert (absent["if_name"], absent["absent"]) == (X.if_name, True)
    assert d.sim.requested == [] and [i.name for i in d.sim.kvvm_ifaces] == ["default"]


def test_a_link_only_a_migration_releases_is_migrated_away() -> None:
    """Multus without a dynamic-networks controller: KubeVirt takes the interface out of
    the guest at once, but the pod keeps (and reports) the link until a new pod replaces
    it, so it asks for a migration after the guest has let go."""
    d = plugged(X)
    d.sim.dynamic_networks, d.sim.pod_keeps_links = False, True
    mark = len(d.effects)
    d.sim.networks = (MAIN,)
    d.run(14)
    assert list(d.op(*UNPLUG).history) == [
        "Requested", "VMIPatched", "GuestDetached", "AnnotationPatched", "MigrationRequired",
        "Migrating", "GuestDetached", "AnnotationPatched", "SDNReleased", "Detached",
    ]
    assert types(d, mark) == ["PatchVirtualMachine", "PatchPodNetworks", "CreateMigration"]
    assert d.sim.reported == [] and [i.name for i in d.sim.kvvm_ifaces] == ["default"]


def test_each_observation_moves_one_state() -> None:
    d = plugged(X)
    d.answer = lambda r: EffectOutcome(0, r.stream, r.type, True)  # executed by hand below
    d.sim.networks = (MAIN,)
    d.observe()
    assert d.op(*UNPLUG).state == "Requested"
    patch = d.effects[-2] if d.effects[-1].type == "EmitEvent" else d.effects[-1]
    assert patch.type == "PatchVirtualMachine"
    d.sim.execute(patch)
    d.observe()  # the KVVM says absent, the VMI not yet
    assert d.op(*UNPLUG).state == "Requested"
    d.sim.vmi_ifaces = list(d.sim.kvvm_ifaces)
    d.observe()
    assert d.op(*UNPLUG).state == "VMIPatched"
    before = len(d.effects)
    d.observe()
    assert len(d.effects) == before  # nothing while libvirt detaches
    d.sim.attached.discard(X.if_name)
    d.observe()
    assert d.op(*UNPLUG).state == "GuestDetached"
    pod_patch = next(e for e in d.effects[before:] if e.type == "PatchPodNetworks")
    assert pod_patch.payload["entries"] == []
    d.sim.execute(pod_patch)
    d.observe()
    assert d.op(*UNPLUG).state == "AnnotationPatched"
    d.sim.reported = []
    d.observe()
    assert d.op(*UNPLUG).state == "SDNReleased"
    final = [e for e in d.effects if e.type == "PatchVirtualMachine"][-1]
    assert [n["if_name"] for n in final.payload["networks"]] == ["default"]
    d.sim.execute(final)
    d.observe()
    assert d.op(*UNPLUG).state == "SDNReleased"  # the VMI spec still lists it
    d.sim.vmi_ifaces = list(d.sim.kvvm_ifaces)
    d.observe()
    assert d.op(*UNPLUG).state == "Detached"


def test_detach_timeout_keeps_the_sdn_entry() -> None:
    d = plugged(X, timeouts=Timeouts(detach_timeout=5))
    d.sim.handler_stuck = True  # Deckhouse's KubeVirt detaches no bpfbridge NIC live
    d.sim.networks = (MAIN,)
    d.run(10)
    op = d.op(*UNPLUG)
    assert (op.state, op.reason) == ("Failed", "GuestKeepsInterface")
    assert [r.identity for r in d.sim.requested] == ["Network/x"]
    assert d.sim.vm_conditions[CONDITION_FAILED].status == "True"


def test_stage_defers_an_unplug_to_the_restart() -> None:
    d = plugged(X)
    d.sim.strategy = "Stage"
    d.sim.networks = (MAIN,)
    d.run(3)
    assert d.op(*UNPLUG).state == "RestartRequired"
    assert [r.identity for r in d.sim.requested] == ["Network/x"]
    d.sim.restart()
    d.run(6)
    assert d.op(*UNPLUG).state == "Detached"
    assert d.sim.requested == [] and X.if_name not in d.sim.attached


def test_reverting_an_unplug_cancels_it_and_plugs_again() -> None:
    d = plugged(X)
    d.sim.handler_stuck = True
    d.sim.networks = (MAIN,)
    d.run(2)
    assert d.op(*UNPLUG).state == "VMIPatched"
    d.sim.handler_stuck = False
    d.sim.networks = (MAIN, X)
    d.run(6)
    assert (d.op(*UNPLUG).state, d.op(*UNPLUG).reason) == ("Cancelled", "Reverted")
    plug = d.op("Network/x", "plug")
    assert (plug.attempt, plug.state) == (2, "Attached")
    assert [i for i in d.sim.kvvm_ifaces if i.name == X.if_name] == [KVVMInterface(X.if_name)]


def test_a_lingering_annotation_is_cleaned_up() -> None:
    d = plugged()
    d.sim.requested = [SDNRequest("Network/old", "veth_nold", 9)]
    d.run(4)
    op = d.op("Network/old", "unplug")
    assert op.state == "Detached" and d.sim.requested == []


def test_removing_main_needs_a_restart() -> None:
    d = plugged(X)
    d.sim.networks = (X,)
    d.run(2)
    op = d.op("Main", "unplug")
    assert op.state == "RestartRequired" and op.message == "Main removed"
    assert "Main (Main removed)" in d.sim.vm_conditions[CONDITION_RESTART].message
    d.sim.restart()
    d.run(6)
    assert d.op("Main", "unplug").state == "Detached"
    assert [i.name for i in d.sim.kvvm_ifaces] == [X.if_name]


def test_adding_main_needs_a_restart() -> None:
    sim = Sim(networks=(X,), kvvm_ifaces=[KVVMInterface(X.if_name)], vmi_ifaces=[])
    sim.template = sim.requested = [SDNRequest("Network/x", X.if_name, 2)]
    sim.reported = [SDNStatus("Network/x", X.if_name, True)]
    sim.attached = {X.if_name}
    d = Driver(HotplugDecider(), sim)
    sim.networks = (MAIN, X)
    d.run(2)
    assert d.op("Main", "plug").state == "RestartRequired"
    sim.restart()
    d.run(6)
    assert d.op("Main", "plug").state == "Attached"


def test_reorder_and_id_change_are_updates_applied_at_restart() -> None:
    d = plugged(X, Y)
    d.sim.networks = (MAIN, Y, net("x", 7))
    d.run(2)
    x, y = d.op("Network/x", "update"), d.op("ClusterNetwork/y", "update")
    assert (x.state, y.state) == ("RestartRequired", "RestartRequired")
    assert x.message == "id 2 → 7, reordered"
    d.sim.restart()
    d.run(6)
    assert d.op("Network/x", "update").state == "Attached"
    assert [i.name for i in d.sim.kvvm_ifaces] == ["default", Y.if_name, X.if_name]
    assert [(r.identity, r.id) for r in d.sim.template] == [
        ("ClusterNetwork/y", 3),
        ("Network/x", 7),
    ]
    assert CONDITION_RESTART not in d.sim.vm_conditions  # removed once applied


def test_an_update_reverted_before_the_restart_is_cancelled() -> None:
    d = plugged(X, Y)
    d.sim.networks = (MAIN, Y, X)
    d.run(2)
    assert d.op("Network/x", "update").state == "RestartRequired"
    d.sim.networks = (MAIN, X, Y)
    d.run(2)
    op = d.op("Network/x", "update")
    assert (op.state, op.reason) == ("Cancelled", "Reverted")


def test_an_id_only_change_is_written_to_the_running_vm_without_a_restart() -> None:
    # Deckhouse's comparator: only adding or removing Main restarts; an id change of an
    # additional network is applied at once (to the KVVM, for the next boot)
    d = plugged(X)
    mark = len(d.effects)
    d.sim.networks = (MAIN, net("x", 7))
    d.run(4)
    op = d.op("Network/x", "update")
    assert op.state == "Attached"
    assert "RestartRequired" not in op.history
    assert "RestartVM" not in types(d, mark)
    assert [(r.identity, r.id) for r in d.sim.template] == [("Network/x", 7)]
    assert CONDITION_RESTART not in d.sim.vm_conditions


def test_an_invalid_spec_applies_nothing_and_says_why() -> None:
    d = plugged(X)
    mark = len(d.effects)
    d.sim.networks = (MAIN, X, net("z", 2))
    d.run(3)
    op = d.op("Network/z", "update")
    assert (op.state, op.reason) == ("Failed", "InvalidSpec")
    assert "duplicate id 2" in op.message and op.retry_at is None
    assert types(d, mark) == ["SetVMCondition"]
    assert d.sim.vm_conditions[CONDITION_FAILED].reason == "InvalidSpec"
    d.sim.networks = (MAIN, X, net("z", 3))
    d.run(8)
    assert d.op("Network/z", "plug").state == "Attached"
    assert d.sim.vm_conditions[CONDITION_FAILED].status == "False"


def test_a_stopped_vm_is_patched_directly() -> None:
    d = plugged()
    d.sim.running = False
    d.sim.stop()
    d.sim.networks = (MAIN, X)
    d.run(2)
    op = d.op("Network/x", "plug")
    assert list(op.history) == ["Requested", "VMIPatched"]
    assert "RestartVM" not in types(d)
    # a write for the next boot holds only while the VM stays stopped
    writes = [e for e in d.effects if e.type == "PatchVirtualMachine"]
    assert writes[-1].payload["stopped"] is True
    d.sim.running = True
    d.run(4)
    assert d.op("Network/x", "plug").state == "Attached"


def test_an_unplug_that_saw_the_guest_detached_from_a_stale_world_keeps_the_sdn_entry() -> None:
    """The user removes x just after nicplug's KVVM patch attaching it landed, before the
    informers show it (seeds 3107, 3408, 2575 of the simulation): from a world whose KVVM
    and VMI lack x the unplug goes to GuestDetached at once and asks for the pod entry
    to go (the executor refuses that write). Once the world shows the KVVM and the VMI
    spec carrying x (not yet attached by virt-handler), the entry must stay until x is
    marked absent again: a release now would leave the VMI asking for a link that is
    being torn down ("Link not found")."""
    d = plugged(X)
    sim = d.sim
    shown = (list(sim.kvvm_ifaces), list(sim.vmi_ifaces), set(sim.attached))
    sim.kvvm_ifaces = [i for i in sim.kvvm_ifaces if i.name != X.if_name]
    sim.vmi_ifaces = [i for i in sim.vmi_ifaces if i.name != X.if_name]
    sim.attached.discard(X.if_name)
    sim.networks = (MAIN,)
    stale = sim.world()
    release = d.feed(Observed(Cause("observation", "stale")), world=stale, execute=False)
    assert d.op(*UNPLUG).state == "GuestDetached"
    (refused,) = [r for r in release.effects if r.type == "PatchPodNetworks"]
    assert refused.payload["entries"] == []

    sim.kvvm_ifaces, sim.vmi_ifaces, _ = shown  # the landed write shows; not attached yet
    # the executor refused the release (the world moved): decided again from this world
    decision = d.feed(EffectOutcome(1, refused.stream, refused.type, ok=False,
                                    error="the KVVM carries it"), execute=False)
    assert [r.type for r in decision.effects if r.type != "EmitEvent"] == [
        "PatchVirtualMachine"]  # x marked absent again; the pod entry stays
    kvvm = decision.effects[0]
    assert [(n["if_name"], n["absent"]) for n in kvvm.payload["networks"]] == [
        ("default", False), (X.if_name, True)]
