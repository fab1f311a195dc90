"""The plug machine: one test per state and per observation that moves it, and every
branch (restart, migration, failure, cancel), driven through the simulated world."""

from __future__ import annotations

from nicplug.engine.model import EffectOutcome, EffectRequest
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.effects import CONDITION_FAILED, CONDITION_MIGRATION, CONDITION_RESTART
from nicplug.machines.policy import MachineConfig, Timeouts
from nicplug.machines.world import SDNRequest, SDNStatus, VMIInterfaceStatus
from tests.unit.machines.sim import MAIN, Driver, Sim, net

X = net("x", 2)
PLUG = ("Network/x", "plug")
HAPPY = ["Requested", "AnnotationPatched", "SDNReady", "VMIPatched", "Attached"]


def driver(sim: Sim | None = None, **config: object) -> Driver:
    return Driver(HotplugDecider(MachineConfig(**config)), sim or Sim(networks=(MAIN, X)))  # type: ignore[arg-type]


def types(d: Driver) -> list[str]:
    return [e.type for e in d.effects if e.type != "EmitEvent"]


def test_happy_path_walks_every_state_in_order() -> None:
    d = driver()
    d.run(8)
    op = d.op(*PLUG)
    assert list(op.history) == HAPPY
    assert types(d) == ["PatchPodNetworks", "PatchVirtualMachine"]
    assert op.stream == "uid-1/Network/x/plug/1"


def test_each_observation_moves_one_state() -> None:
    d = driver()
    d.answer = lambda r: EffectOutcome(0, r.stream, r.type, True)  # executed by hand below
    d.observe()  # desired gains X: Requested, the pod patch is issued
    assert d.op(*PLUG).state == "Requested"
    patch = d.effects[-1]
    assert patch.type == "PatchPodNetworks"
    assert [e["identity"] for e in patch.payload["entries"]] == ["Network/x"]
    d.observe()  # the world did not move: nothing issued twice
    assert types(d) == ["PatchPodNetworks"]
    d.sim.execute(patch)
    d.observe()
    assert d.op(*PLUG).state == "AnnotationPatched"
    assert types(d) == ["PatchPodNetworks"]  # nothing while waiting for the SDN
    d.sim.reported = [SDNStatus("Network/x", X.if_name, ready=False)]
    d.observe()
    assert d.op(*PLUG).state == "AnnotationPatched"
    d.sim.reported = [SDNStatus("Network/x", X.if_name, ready=True)]
    d.observe()
    assert d.op(*PLUG).state == "SDNReady"
    assert types(d)[-1] == "PatchVirtualMachine"
    d.observe()  # the KVVM patch has not landed yet
    assert d.op(*PLUG).state == "SDNReady"
    d.sim.execute(next(e for e in d.effects if e.type == "PatchVirtualMachine"))
    d.observe()
    assert d.op(*PLUG).state == "VMIPatched"
    d.sim.vmi_ifaces = list(d.sim.kvvm_ifaces)
    d.observe()
    assert d.op(*PLUG).state == "VMIPatched"
    d.sim.attached.add(X.if_name)
    d.observe()
    assert d.op(*PLUG).state == "Attached"
    assert d.op(*PLUG).terminal
    assert types(d) == ["PatchPodNetworks", "PatchVirtualMachine"]


def test_guest_agent_only_is_not_attached() -> None:
    d = driver()
    d.run(8)
    world = d.sim.world()
    assert world.vmi is not None
    assert VMIInterfaceStatus("n", info_source=frozenset({"guest-agent"})).attached is False


def test_sdn_never_ready_times_out_then_retries_with_backoff() -> None:
    sim = Sim(networks=(MAIN, X), sdn_silent=frozenset({"Network/x"}))
    d = driver(sim, timeouts=Timeouts(sdn_ready_timeout=10, backoff_base=4))
    d.run(14)
    op = d.op(*PLUG)
    assert (op.state, op.reason) == ("Failed", "SDNTimeout")
    assert "AnnotationPatched" in op.message
    assert "PatchVirtualMachine" not in types(d)  # deckhouse never skips SDNReady
    assert d.sim.vm_conditions[CONDITION_FAILED].status == "True"
    sim.sdn_silent = frozenset()
    d.run(10)
    op = d.op(*PLUG)
    assert (op.attempt, op.state) == (2, "Attached")
    assert d.sim.vm_conditions[CONDITION_FAILED].status == "False"


def test_sdn_error_fails_the_plug() -> None:
    d = driver(Sim(networks=(MAIN, X), sdn_fails=frozenset({"Network/x"})))
    d.run(4)
    op = d.op(*PLUG)
    assert (op.state, op.reason) == ("Failed", "SDNError")
    assert "link setup failed" in op.message


def test_attach_timeout() -> None:
    d = driver(Sim(networks=(MAIN, X), handler_stuck=True), timeouts=Timeouts(attach_timeout=5))
    d.run(12)
    assert d.failures()[0] == ("uid-1/Network/x/plug/1", "AttachTimeout")
    assert d.op(*PLUG).attempt == 2  # retried: the desired state still asks


def test_an_attach_timeout_says_what_the_sdn_says_since_the_kvvm_patch() -> None:
    """Issue 12, defect 8 (seed 4814 of the simulation): the Deckhouse SDN turns the
    entry to not-ready (a `False` condition: "not yet" to Deckhouse) after the KVVM
    patch, and virt-handler never attaches: the AttachTimeout carries the SDN's words."""
    d = driver(Sim(networks=(MAIN, X), handler_stuck=True), timeouts=Timeouts(attach_timeout=5))
    d.run(3)
    assert d.op(*PLUG).state == "VMIPatched"
    d.sim.sdn_silent = frozenset({"Network/x"})  # what it says now stays
    d.sim.reported = [SDNStatus("Network/x", X.if_name, False,
                                message="Configured=False (ConfigurationError: no bridge)")]
    d.run(8)
    assert d.failures()[0] == ("uid-1/Network/x/plug/1", "AttachTimeout")
    (failed,) = [o for o in d.state.ops.values() if o.reason == "AttachTimeout"]
    assert "the SDN says" in failed.message and "no bridge" in failed.message


def test_patch_rejected() -> None:
    def reject(request: EffectRequest) -> EffectOutcome | None:
        if request.type != "PatchVirtualMachine":
            return None
        return EffectOutcome(1, request.stream, request.type, False, True, "admission denied")

    d = driver()
    d.answer = reject
    d.run(5)
    op = d.op(*PLUG)
    assert (op.state, op.reason, op.message) == ("Failed", "PatchRejected", "admission denied")


def test_stage_defers_to_restart_and_manual_waits_for_the_user() -> None:
    sim = Sim(networks=(MAIN, X), strategy="Stage")
    d = driver(sim)
    d.run(5)
    op = d.op(*PLUG)
    assert op.state == "RestartRequired"
    condition = sim.vm_conditions[CONDITION_RESTART]
    assert (condition.status, condition.reason) == ("True", "ChangesPendingRestart")
    assert "Network/x" in condition.message
    assert "RestartVM" not in types(d) and "PatchPodNetworks" not in types(d)
    sim.restart()  # the user restarts the VM
    d.run(6)
    op = d.op(*PLUG)
    assert list(op.history) == ["Requested", "RestartRequired", "VMIPatched", "Attached"]
    assert CONDITION_RESTART not in sim.vm_conditions  # removed once applied
    assert [r.identity for r in sim.requested] == ["Network/x"]  # the new pod has it


def test_automatic_approval_restarts_the_vm() -> None:
    sim = Sim(networks=(MAIN, X), strategy="Stage", approval="Automatic")
    d = driver(sim)
    d.run(8)
    steps = [e.payload["step"] for e in d.effects if e.type == "RestartVM"]
    assert steps == ["halt", "start"]  # halt, write the change, start
    assert d.op(*PLUG).state == "Attached"


def test_always_live_ignores_stage() -> None:
    d = driver(Sim(networks=(MAIN, X), strategy="Stage"), gating="always-live")
    d.run(8)
    assert list(d.op(*PLUG).history) == HAPPY


def test_gating_flip_back_to_live_goes_on_in_place() -> None:
    sim = Sim(networks=(MAIN, X), strategy="Stage")
    d = driver(sim)
    d.run(2)
    sim.strategy = "LiveUpdate"
    d.run(8)
    assert list(d.op(*PLUG).history) == ["Requested", "RestartRequired", *HAPPY]


def test_migration_required_is_driven_to_completion() -> None:
    sim = Sim(networks=(MAIN, X), dynamic_networks=False)
    d = driver(sim)
    d.run(12)
    op = d.op(*PLUG)
    assert list(op.history) == [*HAPPY[:4], "MigrationRequired", "Migrating", "Attached"]
    assert types(d).count("CreateMigration") == 1
    assert op.migration and op.migration.startswith("nicplug-vm-")


def test_a_migration_the_cap_holds_back_is_journaled_said_and_asked_for_again() -> None:
    """The executor holds a migration back while nicplug's cap is reached: the operation
    journals it once per count (`MigrationHeld`), the VM's condition and a Warning Event
    say so, and the migration is asked for again with the other effects until a slot
    frees up."""
    sim = Sim(networks=(MAIN, X), dynamic_networks=False)
    d = driver(sim, timeouts=Timeouts(effect_reissue_after=10))
    slots = {"free": False}

    def answer(r: EffectRequest) -> EffectOutcome | None:
        if r.type != "CreateMigration" or slots["free"]:
            return None
        return EffectOutcome(0, r.stream, r.type, True,
                             result={"created": False, "held": True, "in_flight": 1, "cap": 1})

    d.answer = answer
    d.run(40)
    op = d.op(*PLUG)
    assert op.state == "MigrationRequired" and op.held == (1, 1)
    asked = types(d).count("CreateMigration")
    assert asked >= 3  # asked again every effect_reissue_after
    held = [e for _, dec in d.log for e in dec.events if e.type == "MigrationHeld"]
    assert len(held) == 1 and held[0].payload["in_flight"] == held[0].payload["cap"] == 1
    condition = sim.vm_conditions[CONDITION_MIGRATION]
    assert (condition.status, condition.reason) == ("True", "WaitingForMigrationSlot")
    assert "1 of nicplug's migrations are in flight" in condition.message
    assert "at most 1 run at once (--max-migrations)" in condition.message
    events = [e.payload for e in d.effects if e.type == "EmitEvent"
              and e.payload["reason"] == "PlugWaitingForMigrationSlot"]
    assert len(events) == 1 and events[0]["type"] == "Warning"

    slots["free"] = True
    d.run(20)
    op = d.op(*PLUG)
    assert list(op.history)[-3:] == ["MigrationRequired", "Migrating", "Attached"]
    assert op.held is None
    assert sim.vm_conditions[CONDITION_MIGRATION].status == "False"


def test_running_migration_is_adopted_not_duplicated() -> None:
    from nicplug.machines.world import Migration

    sim = Sim(networks=(MAIN, X), dynamic_networks=False)
    sim.migrations = [Migration("user-made", "u", "Pending")]
    d = driver(sim)
    d.observe()
    sim.migrations = []
    d.run(12)
    assert d.op(*PLUG).state == "Attached"


def test_manual_migrations_stay_and_say_so() -> None:
    sim = Sim(networks=(MAIN, X), dynamic_networks=False)
    d = driver(sim, migrations="manual")
    d.run(10)
    assert d.op(*PLUG).state == "MigrationRequired"
    condition = sim.vm_conditions[CONDITION_MIGRATION]
    assert condition.status == "True" and "--migrations=manual" in condition.message
    assert "CreateMigration" not in types(d)


def test_not_live_migratable_stays_and_says_so() -> None:
    sim = Sim(networks=(MAIN, X), dynamic_networks=False, live_migratable=False)
    d = driver(sim)
    d.run(10)
    assert d.op(*PLUG).state == "MigrationRequired"
    assert "not LiveMigratable" in sim.vm_conditions[CONDITION_MIGRATION].message


def _waiting_message(d: Driver) -> str:
    events = [e for e in d.effects if e.type == "EmitEvent"
              and str(e.payload.get("reason")).endswith("MigrationRequired")]  # fmt: skip
    assert events, "no Event for the wait"
    assert events[-1].payload["type"] == "Warning"
    return str(events[-1].payload["message"])


def test_opt_in_migrates_only_labelled_vms_and_says_what_to_do() -> None:
    sim = Sim(networks=(MAIN, X), dynamic_networks=False)
    d = driver(sim, migrations="opt-in")
    d.run(10)
    assert d.op(*PLUG).state == "MigrationRequired"
    assert "not opted in" in d.op(*PLUG).message  # journaled: explain tells it
    condition = sim.vm_conditions[CONDITION_MIGRATION]
    assert "nicplug.io/migrations=true" in condition.message
    assert "virtctl migrate" in condition.message and "restart the VM" in condition.message
    assert "not opted in" in _waiting_message(d)
    assert not any(e.type == "CreateMigration" for e in d.effects)

    sim.kvvm_labels["nicplug.io/migrations"] = "true"
    d.run(10)
    assert d.op(*PLUG).state == "Attached"
    assert sum(e.type == "CreateMigration" for e in d.effects) == 1
    assert sim.vm_conditions[CONDITION_MIGRATION].status == "False"


def test_never_and_an_eviction_strategy_of_none_are_honoured() -> None:
    for config, sim in (
        ({"migrations": "never"}, Sim(networks=(MAIN, X), dynamic_networks=False)),
        ({}, Sim(networks=(MAIN, X), dynamic_networks=False, eviction_strategy="None")),
    ):
        d = driver(sim, **config)
        d.run(10)
        assert d.op(*PLUG).state == "MigrationRequired"
        assert not any(e.type == "CreateMigration" for e in d.effects)
        message = sim.vm_conditions[CONDITION_MIGRATION].message
        assert ("--migrations=never" in message) != ("evictionStrategy is None" in message)


def test_not_live_migratable_names_kubevirts_reason() -> None:
    sim = Sim(networks=(MAIN, X), dynamic_networks=False, live_migratable=False,
              live_migratable_reason="InterfaceNotLiveMigratable")
    d = driver(sim)
    d.run(10)
    assert "InterfaceNotLiveMigratable" in sim.vm_conditions[CONDITION_MIGRATION].message
    assert "InterfaceNotLiveMigratable" in _waiting_message(d)


def test_a_change_applied_live_under_stage_is_reported() -> None:
    """always-live gating under Stage: the NIC goes in live; the VM is told a restart
    brings it in line with its strategy, until the VM restarts."""
    sim = Sim(networks=(MAIN, X), strategy="Stage")
    d = driver(sim, gating="always-live")
    d.run(10)
    op = d.op(*PLUG)
    assert op.state == "Attached" and op.bypassed_vmi == "vmi-1"
    bypassed = [e for _, dec in d.log for e in dec.events if e.type == "RolloutBypassed"]
    assert len(bypassed) == 1 and bypassed[0].payload["strategy"] == "Stage"
    condition = sim.vm_conditions["NetworkChangeBypassedRollout"]
    assert condition.status == "True" and "restart the VM" in condition.message
    events = [e for e in d.effects if e.type == "EmitEvent"
              and e.payload["reason"] == "RolloutBypassed"]  # fmt: skip
    assert len(events) == 1 and events[0].payload["type"] == "Warning"
    sim.restart()
    d.run(6)
    assert sim.vm_conditions["NetworkChangeBypassedRollout"].status == "False"


def test_no_bypass_under_live_update_or_when_nicplug_defers() -> None:
    for strategy, gating in (("LiveUpdate", "always-live"), ("Stage", "rollout-strategy")):
        sim = Sim(networks=(MAIN, X), strategy=strategy)
        d = driver(sim, gating=gating)
        d.run(10)
        assert d.op(*PLUG).bypassed_vmi is None
        assert "NetworkChangeBypassedRollout" not in sim.vm_conditions


def test_failed_migration() -> None:
    sim = Sim(networks=(MAIN, X), dynamic_networks=False, migration_fails=True)
    d = driver(sim)
    d.run(10)
    assert d.failures()[0] == ("uid-1/Network/x/plug/1", "MigrationFailed")
    said = [e.payload["message"] for e in d.effects if e.type == "SetVMCondition"
            and e.payload["type"] == CONDITION_FAILED and e.payload["status"] == "True"]
    assert said and "virtctl migrate" in said[0]


def test_user_reverts_mid_flight_and_the_reverse_cleans_up() -> None:
    sim = Sim(networks=(MAIN, X), sdn_silent=frozenset({"Network/x"}))
    d = driver(sim)
    d.run(3)
    assert d.op(*PLUG).state == "AnnotationPatched"
    sim.networks = (MAIN,)
    d.run(6)
    plug, unplug = d.op(*PLUG), d.op("Network/x", "unplug")
    assert (plug.state, plug.reason) == ("Cancelled", "Reverted")
    assert unplug.state == "Detached"
    assert sim.requested == []


def test_vm_deleted_cancels() -> None:
    sim = Sim(networks=(MAIN, X), sdn_silent=frozenset({"Network/x"}))
    d = driver(sim)
    d.run(2)
    sim.vm_deleted = True
    d.run(1)
    assert (d.op(*PLUG).state, d.op(*PLUG).reason) == ("Cancelled", "VMDeleted")


def test_lost_effect_is_issued_again_after_the_reissue_delay() -> None:
    d = driver(timeouts=Timeouts(effect_reissue_after=5))
    dropped: list[EffectRequest] = []

    def drop_first(request: EffectRequest) -> EffectOutcome | None:
        if request.type == "PatchPodNetworks" and not dropped:
            dropped.append(request)
            return EffectOutcome(1, request.stream, request.type, True)  # "done", yet lost
        return None

    d.answer = drop_first
    d.run(3)
    assert d.op(*PLUG).state == "Requested"
    assert types(d) == ["PatchPodNetworks"]
    d.run(8)
    assert types(d)[:2] == ["PatchPodNetworks", "PatchPodNetworks"]
    assert d.effects[0].idempotency_key == next(
        e.idempotency_key for e in d.effects[1:] if e.type == "PatchPodNetworks"
    )
    assert d.op(*PLUG).state == "Attached"


def test_adoption_mid_way_skips_what_the_world_already_did() -> None:
    sim = Sim(networks=(MAIN, X))
    sim.requested = [SDNRequest("Network/x", X.if_name, 2)]
    sim.reported = [SDNStatus("Network/x", X.if_name, True)]
    d = driver(sim)
    d.observe()
    op = d.op(*PLUG)
    assert list(op.history) == HAPPY[:3]
    assert types(d) == ["PatchVirtualMachine"]


def test_nothing_to_do_opens_nothing() -> None:
    d = driver(Sim(networks=None))
    d.run(3)
    assert d.state.ops == {} and d.effects == []


def test_one_pod_patch_carries_every_entry() -> None:
    y = net("y", 3, "ClusterNetwork")
    d = driver(Sim(networks=(MAIN, X, y)))
    d.observe()
    patches = [e for e in d.effects if e.type == "PatchPodNetworks"]
    assert len(patches) == 1
    assert [e["identity"] for e in patches[0].payload["entries"]] == [
        "Network/x",
        "ClusterNetwork/y",
    ]
    d.run(8)
    assert d.states() == {PLUG: "Attached", ("ClusterNetwork/y", "plug"): "Attached"}
    assert [i.name for i in d.sim.kvvm_ifaces] == ["default", X.if_name, y.if_name]


def test_a_kvvm_that_lost_an_attached_interface_gets_it_back_in_one_attempt() -> None:
    """The guest still has it, the KVVM no longer does (a stale patch, a hand edit):
    the reopened plug must write the KVVM, not call itself Attached from the VMI and
    reopen again at the next decision, for ever."""
    d = driver()
    d.run(8)
    assert d.op(*PLUG).state == "Attached"
    d.sim.kvvm_ifaces = [i for i in d.sim.kvvm_ifaces if i.name != X.if_name]
    d.sim.kvvm_nets = [n for n in d.sim.kvvm_nets if n.name != X.if_name]
    d.run(6)
    op = d.op(*PLUG)
    assert (op.attempt, op.state) == (2, "Attached")
    assert X.if_name in {i.name for i in d.sim.kvvm_ifaces}
    assert types(d)[-1] == "PatchVirtualMachine"


def test_events_say_where_operations_ended_not_each_step() -> None:
    """One Event when the plug attaches (its note in an operator's words, not the
    machine's), none for the steps between; two networks asked for in one edit that
    attach together share it."""
    d = driver()
    d.run(8)
    events = [e.payload for e in d.effects if e.type == "EmitEvent"]
    assert [(e["reason"], e["type"]) for e in events] == [("PlugAttached", "Normal")]
    assert events[0]["message"] == ("Adding Network/x is done: the running VM has it. "
                                    "Every step: nicplug explain ns/vm")
    assert not any(state in events[0]["message"] for state in HAPPY)

    y = net("y", 3, type_="ClusterNetwork")
    both = driver(Sim(networks=(MAIN, X, y)))
    both.run(8)
    events = [e.payload for e in both.effects if e.type == "EmitEvent"]
    assert [e["reason"] for e in events] == ["PlugAttached"]
    assert events[0]["message"].removesuffix(". Every step: nicplug explain ns/vm").split(
        "; ") == ["Adding ClusterNetwork/y is done: the running VM has it",
                  "Adding Network/x is done: the running VM has it"]
