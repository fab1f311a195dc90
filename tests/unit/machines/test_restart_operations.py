"""Restarts through Deckhouse's `VirtualMachineOperation`s (`restarts="operations"`):
a `Stop`, the change written to the stopped VM's KVVM, a `Start`; each once per VMI;
never under a run policy Deckhouse will not stop, whatever the KVVM's run strategy."""

from __future__ import annotations

from nicplug.machines.decider import HotplugDecider
from nicplug.machines.effects import CONDITION_RESTART
from nicplug.machines.policy import MachineConfig
from nicplug.machines.world import VMOperation
from tests.unit.machines.sim import MAIN, Driver, Sim, net

X = net("x", 2)
PLUG = ("Network/x", "plug")


def driver(sim: Sim, **config: object) -> Driver:
    decider = HotplugDecider(MachineConfig(restarts="operations", **config))  # type: ignore[arg-type]
    return Driver(decider, sim)


def deckhouse_vm(**kw: object) -> Sim:
    """A Deckhouse VM: its KVVM's runStrategy is Manual whatever its run policy."""
    base: dict[str, object] = dict(
        networks=(MAIN, X), strategy="Stage", approval="Automatic",
        run_strategy="Manual", run_policy="AlwaysOnUnlessStoppedManually")
    return Sim(**(base | kw))  # type: ignore[arg-type]


def steps(d: Driver) -> list[tuple[str, str, str]]:
    """(effect type, step or stopped, VMI uid) of the restarts and the KVVM writes."""
    out = []
    for e in d.effects:
        if e.type == "RestartVM":
            assert e.payload["by"] == "operation"
            out.append(("RestartVM", str(e.payload["step"]), str(e.payload["vmi_uid"])))
        elif e.type == "PatchVirtualMachine":
            out.append(("PatchVirtualMachine", "stopped" if e.payload["stopped"] else "live", ""))
    return out


def test_stop_write_start_under_deckhouses_manual_run_strategy() -> None:
    sim = deckhouse_vm()
    d = driver(sim)
    d.run(12)
    assert d.op(*PLUG).state == "Attached"
    assert list(d.op(*PLUG).history) == ["Requested", "RestartRequired", "VMIPatched", "Attached"]
    assert steps(d) == [("RestartVM", "halt", "vmi-1"),
                        ("PatchVirtualMachine", "stopped", ""),
                        ("RestartVM", "start", "vmi-1")]
    assert [(o.type, o.vmi_uid) for o in sim.vm_operations] == [("Stop", "vmi-1"),
                                                                ("Start", "vmi-1")]
    assert CONDITION_RESTART not in sim.vm_conditions  # removed once applied


def test_the_run_strategy_is_never_touched() -> None:
    sim = deckhouse_vm()
    d = driver(sim)
    d.run(12)
    assert sim.run_strategy == "Manual" and sim.resumes is None


def test_a_stop_is_asked_once_per_vmi_even_when_deckhouse_refuses_it() -> None:
    sim = deckhouse_vm(vmop_phase="Failed")
    d = driver(sim)
    d.run(40)
    assert steps(d) == [("RestartVM", "halt", "vmi-1")]
    assert d.op(*PLUG).state == "RestartRequired"
    message = sim.vm_conditions[CONDITION_RESTART].message
    assert "Deckhouse did not stop it" in message and "stop-vmi-1 Failed: refused" in message


def test_a_run_policy_deckhouse_will_not_stop_waits_for_the_user_and_says_why() -> None:
    sim = deckhouse_vm(run_policy="AlwaysOff")
    d = driver(sim)
    d.run(20)
    assert steps(d) == []
    assert sim.vmi_uid == "vmi-1"
    message = sim.vm_conditions[CONDITION_RESTART].message
    assert "runPolicy AlwaysOff" in message and "runStrategy" not in message


def test_an_always_on_vm_is_restarted_with_one_restart_operation() -> None:
    # Deckhouse refuses to Stop an AlwaysOn VM but runs a Restart (restart.go, stop.go)
    sim = deckhouse_vm(run_policy="AlwaysOn")
    d = driver(sim)
    d.run(12)
    assert d.op(*PLUG).state == "Attached"
    assert list(d.op(*PLUG).history) == ["Requested", "RestartRequired", "VMIPatched", "Attached"]
    assert steps(d) == [("RestartVM", "restart", "vmi-1"),
                        ("PatchVirtualMachine", "stopped", "")]
    assert [(o.type, o.vmi_uid) for o in sim.vm_operations] == [("Restart", "vmi-1")]


def test_manual_approval_stops_nothing() -> None:
    sim = deckhouse_vm(approval="Manual")
    d = driver(sim)
    d.run(20)
    assert steps(d) == [] and sim.vm_operations == []


def test_a_vm_stopped_for_a_restart_nobody_tracks_is_started_again() -> None:
    """The journal is lost while the VM is stopped by nicplug's Stop, the change already
    in the KVVM: a fresh decider adopts it and asks for the Start."""
    first = deckhouse_vm()
    d = driver(first)
    d.run(12)
    sim = deckhouse_vm()
    sim.networks = first.networks
    sim.kvvm_ifaces, sim.kvvm_nets, sim.template = (
        list(first.kvvm_ifaces), list(first.kvvm_nets), list(first.template))
    sim.stop()
    sim.running = False
    sim.vm_operations = [VMOperation("stop-vmi-1", "Stop", "vmi-1", "Completed")]
    fresh = driver(sim)
    fresh.run(12)
    assert [s for s in steps(fresh) if s[0] == "RestartVM"] == [("RestartVM", "start", "vmi-1")]
    assert sim.vmi_uid is not None
    assert fresh.op(*PLUG).state == "Attached"


def test_the_latest_stop_is_the_highest_numbered_not_the_latest_second() -> None:
    """Two of nicplug's Stops in one second (its Start of the first completed at once and
    the next change came in that second) tie on `creationTimestamp`, and their names are
    digests: the one whose name sorts last had its Start, so the VM the other stopped
    was never started again (seed 2356, `left-stopped`). Each Stop carries its number."""
    first = deckhouse_vm()
    d = driver(first)
    d.run(12)
    halts = [e for e in d.effects if e.type == "RestartVM" and e.payload["step"] == "halt"]
    assert [h.payload["number"] for h in halts] == [1]
    sim = deckhouse_vm()
    sim.networks = first.networks
    sim.kvvm_ifaces, sim.kvvm_nets, sim.template = (
        list(first.kvvm_ifaces), list(first.kvvm_nets), list(first.template))
    sim.stop()
    sim.running = False
    second = "2027-01-15T08:00:11Z"
    sim.vm_operations = [
        VMOperation("z-stop", "Stop", "vmi-0", "Completed", "", second, number=1),
        VMOperation("z-start", "Start", "vmi-0", "Completed", "", second),
        VMOperation("a-stop", "Stop", "vmi-1", "Completed", "", second, number=2)]
    fresh = driver(sim)
    fresh.run(12)
    assert [s for s in steps(fresh) if s[0] == "RestartVM"] == [("RestartVM", "start", "vmi-1")]
    assert sim.vmi_uid is not None
    assert fresh.op(*PLUG).state == "Attached"


def test_a_vm_the_user_stopped_is_not_started() -> None:
    sim = deckhouse_vm()
    sim.stop()
    sim.running = False
    d = driver(sim)
    d.run(12)
    assert [s for s in steps(d) if s[0] == "RestartVM"] == []
    assert sim.vmi_uid is None


def test_a_vm_the_user_started_and_stopped_after_nicplugs_stop_is_not_started() -> None:
    """nicplug stopped vmi-1 for a restart; the user started the VM before nicplug did
    (`d8 v start`), and stopped it later (`d8 v stop`). The old `Stop` has no `Start` of
    nicplug's, but the VM is the user's now: nicplug starts nothing."""
    sim = deckhouse_vm()
    sim.vm_operations = [VMOperation("stop-vmi-1", "Stop", "vmi-1", "Completed", "", "0000")]
    sim.user_vm_operations = [VMOperation("d8-start", "Start", "", "Completed", "", "0001"),
                              VMOperation("d8-stop", "Stop", "", "Completed", "", "0002")]
    sim.stop()
    sim.running = False
    d = driver(sim)
    d.run(12)
    assert [s for s in steps(d) if s[0] == "RestartVM"] == []
    assert sim.vmi_uid is None


def test_an_operation_of_the_users_that_deckhouse_refused_does_not_take_the_vm_back() -> None:
    """nicplug stopped vmi-1 for a restart; the user asked to restart the stopped VM
    (`d8 v restart`), which Deckhouse refused (a Restart applies to a running VM only):
    it asked nothing of the VM, which nicplug starts as its restart's second step."""
    sim = deckhouse_vm()
    sim.vm_operations = [VMOperation("stop-vmi-1", "Stop", "vmi-1", "Completed", "", "0000")]
    sim.user_vm_operations = [VMOperation("d8-restart", "Restart", "", "Failed",
                                          "not applicable in phase Stopped", "0001")]
    sim.stop()
    sim.running = False
    d = driver(sim)
    d.run(12)
    assert ("RestartVM", "start", "vmi-1") in steps(d)
    assert sim.vmi_uid is not None


def _taken_back(for_streams: tuple[str, ...] | None) -> tuple[Sim, Driver]:
    """A plug waits in RestartRequired; nicplug had stopped vmi-0 for a restart (for the
    operations `for_streams`, None: for this plug's), and the user started the VM again
    (vmi-1, from the template without the change) before nicplug did."""
    sim = deckhouse_vm(approval="Manual")
    d = driver(sim)
    d.run(6)
    assert d.op(*PLUG).state == "RestartRequired"
    streams = (str(d.op(*PLUG).stream),) if for_streams is None else for_streams
    sim.vm_operations = [VMOperation("stop-vmi-0", "Stop", "vmi-0", "Completed", "", "0000",
                                     streams)]
    sim.user_vm_operations = [VMOperation("d8-start", "Start", "", "Completed", "", "0001")]
    sim.approval = "Automatic"
    d.run(12)
    return sim, d


def test_nicplug_does_not_stop_again_for_one_change_a_vm_the_user_took_back() -> None:
    """The user started the VM in the middle of nicplug's restart for this plug: nicplug
    stops a VM once for one change, so it leaves the restart to the user and says so."""
    sim, d = _taken_back(None)
    assert [s for s in steps(d) if s[0] == "RestartVM"] == []
    assert d.op(*PLUG).state == "RestartRequired"
    message = sim.vm_conditions[CONDITION_RESTART].message
    assert "while nicplug restarted it for this change" in message
    assert "leaves the restart to you" in message


def test_a_change_the_taken_back_restart_was_not_for_restarts_the_vm() -> None:
    """The `Stop` the user took the VM back from was for other operations (an earlier
    change): this one is a change of its own, and nicplug restarts the VM for it."""
    _, d = _taken_back(("uid/Network/other/plug/1",))
    assert [s for s in steps(d) if s[0] == "RestartVM"][:1] == [("RestartVM", "halt", "vmi-1")]


def test_a_stop_the_user_overtook_does_not_hold_back_the_next_restart() -> None:
    """nicplug stopped vmi-1; the user started the VM themselves (vmi-2) before nicplug's
    Start: a later change restarts vmi-2 and starts it again."""
    sim = deckhouse_vm()
    sim.vm_operations = [VMOperation("stop-vmi-0", "Stop", "vmi-0", "Completed", "", "0000")]
    d = driver(sim)
    d.run(12)
    assert [s for s in steps(d) if s[0] == "RestartVM"] == [
        ("RestartVM", "halt", "vmi-1"), ("RestartVM", "start", "vmi-1")]
    assert d.op(*PLUG).state == "Attached"


def test_no_stop_while_an_operation_of_the_vms_is_unfinished() -> None:
    """nicplug's Start of its last restart is still `InProgress` (the new VMI not yet
    running) when the next change asks for a restart. A Stop made now, in the Start's
    second, can sort before it by its digest name in Deckhouse's order: it runs, the
    Start waits for ever, and Deckhouse refuses nicplug's next Start (seed 2356,
    `left-stopped`). nicplug waits for the Start to finish, then stops the VM."""
    sim = deckhouse_vm()
    second = "2027-01-15T08:00:11Z"
    sim.vm_operations = [
        VMOperation("stop-vmi-0", "Stop", "vmi-0", "Completed", "", second, number=1),
        VMOperation("start-vmi-0", "Start", "vmi-0", "InProgress", "", second)]
    d = driver(sim)
    d.run(12)
    assert [s for s in steps(d) if s[0] == "RestartVM"] == []
    assert d.op(*PLUG).state == "RestartRequired"
    sim.vm_operations[1] = VMOperation("start-vmi-0", "Start", "vmi-0", "Completed", "", second)
    d.run(12)
    assert [s for s in steps(d) if s[0] == "RestartVM"] == [
        ("RestartVM", "halt", "vmi-1"), ("RestartVM", "start", "vmi-1")]
    assert d.op(*PLUG).state == "Attached"


def test_no_stop_while_the_users_operation_is_unfinished() -> None:
    """The user's own operation (a migration they asked for) is `InProgress`: Deckhouse
    would let nicplug's Stop supersede it; nicplug waits for it instead."""
    sim = deckhouse_vm()
    # made before any operation of nicplug's (the simulated ones are made at "0000"...)
    sim.user_vm_operations = [VMOperation("d8-migrate", "Migrate", "", "InProgress", "", "")]
    d = driver(sim)
    d.run(12)
    assert [s for s in steps(d) if s[0] == "RestartVM"] == []
    said = sim.vm_conditions[CONDITION_RESTART]
    assert "waits for VirtualMachineOperation d8-migrate (Migrate) to finish" in said.message
    sim.user_vm_operations = [VMOperation("d8-migrate", "Migrate", "", "Completed", "", "")]
    d.run(12)
    assert d.op(*PLUG).state == "Attached"


def test_the_users_operation_before_nicplugs_stop_in_its_second_does_not_take_the_vm_back() -> None:
    """The user restarted the VM (`d8 v restart`, done) and the network was added in the
    same second: nicplug's Stop shares the Restart's `creationTimestamp`. The Restart
    came before the Stop, which names it, so the VM is not the user's: nicplug starts it
    again (seed 9409, `left-stopped`)."""
    sim = deckhouse_vm()
    sim.user_vm_operations = [VMOperation("d8-restart", "Restart", "", "Completed", "", "0000")]
    d = driver(sim)
    d.run(12)
    assert [s for s in steps(d) if s[0] == "RestartVM"] == [
        ("RestartVM", "halt", "vmi-1"), ("RestartVM", "start", "vmi-1")]
    assert sim.vm_operations[0].after == ("d8-restart",)
    assert d.op(*PLUG).state == "Attached"


def test_a_users_restart_nicplugs_stop_did_not_know_of_does_not_take_the_vm_back() -> None:
    """The user's Restart ran while nicplug asked for its Stop, in the same second, and
    nicplug had not seen it (the Stop names none). Deckhouse restarts only a VM that
    runs: the Restart acted before the Stop stopped the VM, which nicplug starts again
    (seed 7275, `left-stopped`). A user's Start since the Stop takes it back."""
    sim = deckhouse_vm()
    d = driver(sim)
    d.run(12)
    sim.stop()
    sim.running = False
    sim.vm_operations = [VMOperation("stop-vmi-1", "Stop", "vmi-1", "Completed", "", "0000")]
    sim.user_vm_operations = [VMOperation("d8-restart", "Restart", "", "Completed", "", "0000")]
    fresh = driver(sim)
    fresh.run(12)
    assert [s for s in steps(fresh) if s[0] == "RestartVM"] == [("RestartVM", "start", "vmi-1")]
    sim.stop()
    sim.running = False
    sim.vm_operations = [VMOperation("stop-vmi-2", "Stop", "vmi-2", "Completed", "", "0001")]
    sim.user_vm_operations = [VMOperation("d8-start", "Start", "", "Completed", "", "0001")]
    again = driver(sim)
    again.run(12)
    assert [s for s in steps(again) if s[0] == "RestartVM"] == []


def test_a_stop_deckhouse_refused_is_not_the_latest() -> None:
    """nicplug stopped vmi-1 (Deckhouse ran it on the VMI the user's restart had just
    made), and, from a world that had not caught up, asked for a Stop of that new VMI
    too, with the same number and second: Deckhouse refused it, the VM being stopped.
    The refused one stopped nothing: nicplug starts the VM (seed 3431, `left-stopped`)."""
    sim = deckhouse_vm()
    d = driver(sim)
    d.run(12)
    sim.stop()
    sim.running = False
    sim.vm_operations = [
        VMOperation("a-stop", "Stop", "vmi-1", "Completed", "", "0000", number=1),
        VMOperation("z-stop", "Stop", "vmi-2", "Failed", "phase Stopped", "0000", number=1)]
    fresh = driver(sim)
    fresh.run(12)
    assert [s for s in steps(fresh) if s[0] == "RestartVM"] == [("RestartVM", "start", "vmi-1")]


def test_a_later_changes_restart_is_not_journaled_under_an_operation_finished_before_it() -> None:
    """x is plugged with a restart and attached; then y is plugged, removed and plugged
    again, each with a restart of its own. The start and the cleared condition of each
    later restart belong to the change it was for: journaled under x's finished plug
    (the oldest operation), they made x's history tell of restarts it never asked for,
    and its effects grow with every later change (seed 25834: 5 `RemoveVMCondition`
    under a plug attached minutes before, `effects-unbounded`). And each restart's
    condition goes once it is applied: one removal of the condition looked like the
    last, issued already, and the VM said "restart" after its restart."""
    y = net("y", 3)
    sim = deckhouse_vm()
    d = driver(sim)
    d.run(12)
    assert d.op(*PLUG).state == "Attached"
    x_stream = d.op(*PLUG).stream
    done = len(d.effects)
    for networks in ((MAIN, X, y), (MAIN, X), (MAIN, X, y), (MAIN, X)):
        sim.networks = networks
        d.run(12)
        assert all(op.state in ("Attached", "Detached") for op in d.state.ops.values())
        assert CONDITION_RESTART not in sim.vm_conditions
    later = [(e.type, e.payload.get("step")) for e in d.effects[done:] if e.stream == x_stream]
    assert later == []
    cleared = [e.stream for e in d.effects if e.type == "RemoveVMCondition"]
    halted = [e.stream for e in d.effects if e.type == "RestartVM" and e.payload["step"] == "halt"]
    assert cleared == halted and len(halted) == 5  # each restart's, under its own change
