"""The kubevirt flavour: the desired state is the KubeVirt VM's template, edited by the
user as KubeVirt's user guide documents; nicplug follows what KubeVirt, multus and the
dynamic-networks controller do, step by step, and writes nothing of the VM or its pods
(the simulation's invariants fail any such effect)."""

from __future__ import annotations

from dataclasses import replace

from nicplug.machines.decider import HotplugDecider
from nicplug.machines.policy import MachineConfig, Timeouts
from tests.unit.machines.sim import Driver, Sim

NET = ("Network/fancy-net", "plug")


def driver(sim: Sim, **config: object) -> Driver:
    decider = HotplugDecider(MachineConfig(dialect_kind="multus", **config))  # type: ignore[arg-type]
    return Driver(decider, sim, multus=True)


def events(d: Driver, reason: str) -> list[dict[str, object]]:
    return [dict(e.payload) for e in d.effects
            if e.type == "EmitEvent" and e.payload["reason"] == reason]


def condition_writes(d: Driver) -> list[str]:
    """KubeVirt removes any condition of nicplug's from a VM that has a VMI at once
    (`syncConditions`): nicplug writes none there, so it never loops with KubeVirt."""
    return [e.type for e in d.effects if e.type in ("SetVMCondition", "RemoveVMCondition")]


def test_a_plug_and_an_unplug_the_user_wrote_are_followed_in_kubevirts_order() -> None:
    sim = Sim(in_template=True, kubevirt_owns_pod=True)
    d = driver(sim)
    d.run(2)
    assert d.state.ops == {}  # the template asks for nothing new
    sim.user_plugs("fancy-net", "dyniface1")  # the user's own interface name
    d.run(10)
    plug = d.op(*NET)
    assert plug.if_name == "dyniface1"
    assert list(plug.history) == ["Requested", "VMIPatched", "AnnotationPatched", "SDNReady",
                                  "Attached"]  # fmt: skip
    sim.user_unplugs("dyniface1")
    d.run(10)
    unplug = d.op("Network/fancy-net", "unplug")
    assert list(unplug.history) == ["Requested", "VMIPatched", "AnnotationPatched",
                                    "GuestDetached", "SDNReleased", "Detached"]  # fmt: skip
    assert [i.name for i in sim.kvvm_ifaces] == ["default"]  # KubeVirt dropped it
    assert {e.type for e in d.effects} <= {"EmitEvent"}  # nothing written but Events


def test_under_stage_kubevirt_applies_it_live_and_the_bypass_is_reported() -> None:
    sim = Sim(in_template=True, kubevirt_owns_pod=True, strategy="Stage")
    d = driver(sim)  # the default gating: rollout-strategy, which has no say here
    d.run(1)
    sim.user_plugs("fancy-net", "fancy-net")
    d.run(10)
    plug = d.op(*NET)
    assert plug.state == "Attached" and "RestartRequired" not in plug.history
    (said,) = events(d, "RolloutBypassed")
    assert said["type"] == "Warning" and "restart the VM" in str(said["message"])
    assert condition_writes(d) == []


def test_without_dynamic_networks_nicplug_migrates_an_opted_in_vm() -> None:
    sim = Sim(in_template=True, kubevirt_owns_pod=True, dynamic_networks=False,
              kvvm_labels={"nicplug.io/migrations": "true"})
    d = driver(sim, migrations="opt-in")
    d.run(1)
    sim.user_plugs("fancy-net", "fancy-net")
    d.run(12)
    plug = d.op(*NET)
    assert list(plug.history) == ["Requested", "VMIPatched", "AnnotationPatched",
                                  "MigrationRequired", "Migrating", "Attached"]  # fmt: skip
    assert [e.type for e in d.effects].count("CreateMigration") == 1
    sim.user_unplugs("fancy-net")
    d.run(14)
    unplug = d.op("Network/fancy-net", "unplug")
    assert unplug.state == "Detached"
    assert "MigrationRequired" in unplug.history and "Migrating" in unplug.history
    assert [e.type for e in d.effects].count("CreateMigration") == 2


def test_without_dynamic_networks_an_opted_out_vm_says_why_it_waits() -> None:
    sim = Sim(in_template=True, kubevirt_owns_pod=True, dynamic_networks=False)
    d = driver(sim, migrations="opt-in")
    d.run(1)
    sim.user_plugs("fancy-net", "fancy-net")
    d.run(12)
    assert d.op(*NET).state == "MigrationRequired"
    (said,) = events(d, "PlugMigrationRequired")
    assert said["type"] == "Warning" and "has not opted in" in str(said["message"])
    assert "restart the VM" in str(said["message"])
    assert not any(e.type == "CreateMigration" for e in d.effects)
    assert condition_writes(d) == []


def test_a_long_wait_writes_no_condition_and_repeats_no_event() -> None:
    """An opted-out VM waits in MigrationRequired for good: however many times the
    effects are looked at again, nothing is written to the VM (KubeVirt would remove
    a condition at once) and its Warning Event is emitted once."""
    sim = Sim(in_template=True, kubevirt_owns_pod=True, dynamic_networks=False)
    d = driver(sim, migrations="opt-in", timeouts=Timeouts(effect_reissue_after=2))
    d.run(1)
    sim.user_plugs("fancy-net", "fancy-net")
    d.run(200)
    assert d.op(*NET).state == "MigrationRequired"
    assert condition_writes(d) == []
    assert len(events(d, "PlugMigrationRequired")) == 1
    assert [e.type for e in d.effects] == ["EmitEvent"]


def test_the_user_taking_the_interface_back_mid_flight_cancels_the_plug() -> None:
    sim = Sim(in_template=True, kubevirt_owns_pod=True, sdn_silent=frozenset({NET[0]}))
    d = driver(sim)
    d.run(1)
    sim.user_plugs("fancy-net", "fancy-net")
    d.run(4)
    assert d.op(*NET).state == "AnnotationPatched"
    sim.user_unplugs("fancy-net")
    d.run(8)
    plug = d.op(*NET)
    assert (plug.state, plug.reason) == ("Cancelled", "Reverted")


def test_an_unplug_taken_back_after_kubevirt_took_it_is_plugged_again_after_a_migration() -> None:
    """Without a dynamic-networks controller the user marks the interface absent, then
    takes that back once KubeVirt has unplugged it from the guest. KubeVirt never takes
    an unplug back: the VMI keeps it absent while the old pod keeps its link, and asks
    for a migration; only once the migration left the link behind does KubeVirt plug it
    anew from the template, and that takes another. The plug drives both (the
    simulation's seed 3513: it waited in Requested for a sync KubeVirt never makes,
    failing SDNTimeout attempt after attempt)."""
    sim = Sim(in_template=True, kubevirt_owns_pod=True, dynamic_networks=False)
    d = driver(sim)
    d.run(1)
    sim.user_plugs("fancy-net", "fancy-net")
    d.run(12)
    assert d.op(*NET).state == "Attached"
    sim.user_unplugs("fancy-net")
    d.run(1)
    assert [i.absent for i in sim.vmi_ifaces if i.name == "fancy-net"] == [True]
    assert "fancy-net" not in sim.attached
    sim.user_plugs("fancy-net", "fancy-net")
    d.run(20)
    assert d.op("Network/fancy-net", "unplug").state == "Cancelled"
    plug = d.op(*NET)
    assert plug.attempt == 2 and plug.state == "Attached" and "fancy-net" in sim.attached
    assert list(plug.history)[:3] == ["Requested", "MigrationRequired", "Migrating"]
    assert list(plug.history).count("Requested") == 2  # plugged anew after the migration
    assert [e.type for e in d.effects].count("CreateMigration") == 3


def test_a_migration_seen_to_succeed_before_its_target_pod_is_not_a_replug() -> None:
    """The informers can show nicplug's migration `Succeeded` while the VMI and the pod
    the VM runs in are still the source's, which never had the link: the VMI's spec
    holds the interface (not absent), so the migration brings it, and the plug waits in
    `Migrating` instead of starting over (it once did, and created a second migration)."""
    sim = Sim(in_template=True, kubevirt_owns_pod=True, dynamic_networks=False,
              migration_stuck=True)
    d = driver(sim)
    d.run(1)
    sim.user_plugs("fancy-net", "fancy-net")
    d.run(12)
    assert d.op(*NET).state == "Migrating" and "fancy-net" not in sim.attached
    running = list(sim.migrations)
    sim.migrations[:] = [replace(m, phase="Succeeded") for m in running]
    d.observe()  # the migration's end seen before the VMI and the pods move
    assert d.op(*NET).state == "Migrating"
    sim.migrations[:] = running
    sim.migration_stuck = False
    d.run(6)
    plug = d.op(*NET)
    assert plug.state == "Attached" and plug.attempt == 1
    assert list(plug.history).count("Requested") == 1
    assert [e.type for e in d.effects].count("CreateMigration") == 1
