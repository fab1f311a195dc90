"""Regressions of the orderings a review against real clusters found (one test each).

Each test drives the world simulation of `sim.py` into the ordering that broke a rule
and checks the rule: deadlines count only time the VM was live, a world that shows the
goal completes the operation, a restart is the platform's and happens once, a refused
effect is decided again at once, an SDN error keeps the SDN's message.
"""

from __future__ import annotations

import zlib

from nicplug.engine.model import EffectOutcome, EffectRequest
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.policy import MachineConfig, Timeouts
from nicplug.machines.world import Migration, SDNStatus
from tests.unit.machines.sim import MAIN, Driver, Sim, net

X = net("x", 2)


def driver(sim: Sim, **config: object) -> Driver:
    return Driver(HotplugDecider(MachineConfig(**config)), sim)  # type: ignore[arg-type]


def test_a_refused_patch_is_asked_again_at_once_not_after_the_reissue_delay() -> None:
    refused: list[EffectRequest] = []

    def answer(request: EffectRequest) -> EffectOutcome | None:
        if request.type == "PatchPodNetworks" and not refused:
            refused.append(request)  # a 409 / failed test: the world moved under it
            return EffectOutcome(1, request.stream, request.type, False, False, "conflict")
        return None

    d = driver(Sim(networks=(MAIN, X)))
    d.answer = answer
    d.observe()

    assert refused
    assert [e.type for e in d.effects].count("PatchPodNetworks") == 2
    assert [r.identity for r in d.sim.requested] == ["Network/x"]
    assert d.now == 0.0


def test_an_sdn_error_after_the_kvvm_patch_fails_the_plug_with_the_sdn_message() -> None:
    d = driver(Sim(networks=(MAIN, X), handler_stuck=True))
    d.run(3)
    assert d.op("Network/x", "plug").state == "VMIPatched"

    d.sim.reported = [SDNStatus("Network/x", X.if_name, False, "negotiation failed")]
    d.run(2)

    op = d.op("Network/x", "plug")
    assert (op.state, op.reason) == ("Failed", "SDNError")
    assert "negotiation failed" in op.message
    assert d.now < 10  # not the attach timeout, minutes later


def boot(d: Driver) -> None:
    """The VM boots from its KVVM, and is observed once before its SDN and the guest
    have caught up (the launcher pod is new: nothing reported, nothing attached yet)."""
    d.sim.running = True
    d.sim.start()
    booted = (list(d.sim.reported), set(d.sim.attached))
    d.sim.reported, d.sim.attached = [], {"default"}
    d.observe()
    d.sim.reported, d.sim.attached = booted


def test_a_plug_waiting_for_the_sdn_does_not_time_out_for_the_minutes_the_vm_was_stopped() -> None:
    d = driver(Sim(networks=(MAIN, X), sdn_silent=frozenset({"Network/x"})))
    d.run(2)
    assert d.op("Network/x", "plug").state == "AnnotationPatched"
    d.sim.running = False
    d.sim.stop()
    d.run(3)
    d.now += 600  # stopped for ten minutes
    d.fire_due()

    boot(d)
    d.run(3)

    assert d.failures() == []
    assert d.op("Network/x", "plug").history == (
        "Requested", "AnnotationPatched", "VMIPatched", "Attached")


def test_a_plug_written_to_a_stopped_vm_waits_for_the_boot_and_attaches() -> None:
    d = driver(Sim(networks=(MAIN, X), running=False, vmi_uid=None))
    d.run(2)
    assert d.op("Network/x", "plug").state == "VMIPatched"
    d.now += 600
    d.fire_due()

    boot(d)
    d.run(3)

    assert d.failures() == []
    assert not [e for e in d.effects if e.payload.get("reason") == "PlugFailed"]
    assert d.op("Network/x", "plug").state == "Attached"


def test_a_kubevirt_plug_whose_vm_stops_half_way_waits_for_the_boot_and_attaches() -> None:
    """Upstream KubeVirt: the user's template holds the NIC, so a VM stopped while the
    plug waits for multus boots with it: the plug waits for the boot in `VMIPatched`
    (its deadline paused), not for a pod annotation no running VM will ever show."""
    sim = Sim(networks=(MAIN, X), sdn_silent=frozenset({"Network/x"}),
              kubevirt_owns_pod=True, in_template=True)
    d = driver(sim, dialect_kind="multus")
    d.multus = True
    d.run(3)
    assert d.op("Network/x", "plug").state == "AnnotationPatched"
    d.sim.running = False
    d.sim.stop()
    d.run(2)
    op = d.op("Network/x", "plug")
    assert (op.state, op.paused_at is not None) == ("VMIPatched", True)
    d.now += 600
    d.fire_due()

    boot(d)
    d.run(6)

    assert d.failures() == []
    assert d.op("Network/x", "plug").state == "Attached"
    assert not [e for e in d.effects if e.type != "EmitEvent"]  # nothing of the VM written


def test_a_plug_failed_by_its_deadline_completes_when_the_nic_attaches_after_all() -> None:
    d = driver(Sim(networks=(MAIN, X), handler_stuck=True), timeouts=Timeouts(backoff_base=900))
    d.run(130)
    assert d.failures() == [(d.op("Network/x", "plug").stream, "AttachTimeout")]

    d.sim.handler_stuck = False  # virt-handler catches up: the guest has the NIC
    d.run(2)

    op = d.op("Network/x", "plug")
    assert (op.attempt, op.state) == (2, "Attached")
    assert d.sim.vm_conditions["NetworkHotplugFailed"].status == "False"


def migrations_created(d: Driver) -> list[str]:
    return [str(e.payload["migration"]) for e in d.effects if e.type == "CreateMigration"]


def test_a_migration_failed_before_it_was_first_seen_is_not_asked_for_again_by_name() -> None:
    d = driver(Sim(networks=(MAIN, X), dynamic_networks=False))
    name = f"nicplug-vm-{zlib.crc32(b'uid-1/Network/x/plug/1'):08x}"
    d.sim.migrations = [Migration(name, "old", "Failed")]  # ended before nicplug looked
    d.run(40, dt=30)

    # it counts as the attempt's failed migration: the next attempt, a backoff later,
    # asks for its own (it was once asked for again as `-2` at every observation)
    assert name not in migrations_created(d)
    assert [reason for _, reason in d.failures()] == ["MigrationFailed"]
    op = d.op("Network/x", "plug")
    assert (op.state, op.attempt, op.migrations_failed) == ("Attached", 2, 1)
    assert len(migrations_created(d)) == 1


def test_migration_required_has_a_deadline() -> None:
    d = driver(Sim(networks=(MAIN, X), dynamic_networks=False))

    def vanish(request: EffectRequest) -> EffectOutcome | None:
        if request.type != "CreateMigration":
            return None  # accepted, and nothing ever runs it
        return EffectOutcome(1, request.stream, request.type, True, False, None)

    d.answer = vanish
    d.run(22, dt=30)  # the 600 s budget, and a little more

    assert [reason for _, reason in d.failures()] == ["MigrationTimeout"]
    assert len(set(migrations_created(d))) == 1


def test_a_migration_nicplug_may_not_drive_is_waited_for_with_its_reason() -> None:
    d = driver(Sim(networks=(MAIN, X), dynamic_networks=False), migrations="manual")
    d.run(40, dt=30)

    assert d.failures() == []
    assert d.op("Network/x", "plug").state == "MigrationRequired"
    assert "manual" in d.sim.vm_conditions["NetworkHotplugAwaitingMigration"].message


def restarts(d: Driver) -> list[tuple[str, str]]:
    """(step, VMI uid) of every restart effect: a delete of the VMI has no step."""
    return [(str(e.payload.get("step", "delete")), str(e.payload["vmi_uid"]))
            for e in d.effects if e.type == "RestartVM"]


def test_a_restart_raced_by_kubevirt_recreating_the_vmi_is_not_repeated() -> None:
    sim = Sim(networks=(MAIN, X), strategy="Stage", approval="Automatic",
              recreate_at_once=True)  # fmt: skip
    d = driver(sim)
    d.run(40)

    halts = [uid for step, uid in restarts(d) if step != "start"]
    assert halts == ["vmi-1"]  # one restart, of the VMI that was running
    assert d.op("Network/x", "plug").state == "Attached"
    assert d.sim.run_strategy == "Always" and d.sim.resumes is None  # as the user had it


def test_a_manual_run_strategy_vm_is_never_stopped_by_nicplug() -> None:
    sim = Sim(networks=(MAIN, X), strategy="Stage", approval="Automatic",
              run_strategy="Manual")  # fmt: skip
    d = driver(sim)
    d.run(20)

    assert restarts(d) == []
    assert d.sim.vmi_uid == "vmi-1"  # still running
    assert d.op("Network/x", "plug").state == "RestartRequired"
    message = d.sim.vm_conditions["NetworkHotplugRestartRequired"].message
    assert "runStrategy Manual" in message


def test_an_unplug_failed_by_its_deadline_completes_when_the_guest_lets_go_after_all() -> None:
    d = driver(Sim(networks=(MAIN, X)), timeouts=Timeouts(backoff_base=900))
    d.run(8)
    d.sim.networks, d.sim.handler_stuck = (MAIN,), True  # the guest holds on to it
    d.run(130)
    # (Deckhouse's KubeVirt detaches no bpfbridge NIC from a running domain: said so)
    assert [reason for _, reason in d.failures()] == ["GuestKeepsInterface"]

    d.sim.handler_stuck = False
    d.sim.restart()  # the user restarts the VM: the new pod and VMI come without it
    d.run(6)

    op = d.op("Network/x", "unplug")
    assert (op.attempt, op.state) == (2, "Detached")


def test_an_sdn_status_left_from_an_earlier_interface_name_is_not_the_plugs_link() -> None:
    """A network removed and added again gets a new MAC, so a new interface name; the
    SDN answers the changed request later, and until then its status still reports the
    old name ready. That is no link for the new name: the KVVM waits for the SDN to
    report the name the pod requests."""
    d = driver(Sim(networks=(MAIN, X), sdn_silent=frozenset({"Network/x"})))
    d.sim.reported = [SDNStatus("Network/x", "veth_nstale", True)]
    d.observe()

    assert [r.if_name for r in d.sim.requested] == [X.if_name]
    assert X.if_name not in {i.name for i in d.sim.kvvm_ifaces}
    d.observe()
    assert d.op("Network/x", "plug").state == "AnnotationPatched"
    assert X.if_name not in {i.name for i in d.sim.kvvm_ifaces}

    d.sim.reported = [SDNStatus("Network/x", X.if_name, True)]
    d.observe()
    d.observe()
    assert X.if_name in {i.name for i in d.sim.kvvm_ifaces}
