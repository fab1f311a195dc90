"""The `untraceable-effect` invariant of the deterministic simulation: every write a
replica sends is matched, the instant it is sent, to an effect its own journal holds as
issued. Checked here against a real journal file, and in a whole run with a defect put
back (a write no decision asked for). And `write-while-unreadable`, judged on the
write's answer."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from nicplug.adapters.core.executor.pods import PodPatches
from nicplug.adapters.kube.resources import VMOP_VMI_UID_ANNOTATION
from nicplug.adapters.simulation.invariants import USER_OPERATION, Spoiled, Watchman, effects_for
from nicplug.adapters.simulation.journal import issued_effects
from nicplug.adapters.simulation.run import simulate
from nicplug.adapters.simulation.schedule import Step, draw
from nicplug.engine.journal import Commit, EffectUpdate
from nicplug.engine.model import Cause, Key, StreamId
from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.machines.effects import PatchPodNetworks, SetVMCondition
from nicplug.simulator.apis import served_api
from nicplug.simulator.resources import VMIS, VMOPS, VMS
from nicplug.simulator.store import Store
from nicplug.simulator.watching import Change

POD = "virt-launcher-vm1-abcde"
POD_PATH = f"/api/v1/namespaces/ns1/pods/{POD}"
STATUS_PATH = "/apis/virtualization.deckhouse.io/v1alpha2/namespaces/ns1/virtualmachines/vm1/status"


def _untraceable(journal: Path, method: str, path: str) -> list[str]:
    watchman = Watchman(Store(), "deckhouse", ("nicplug-system", "nicplug"), lambda: 0.0)
    watchman.on_request("nicplug-a", True, method, path, lambda: issued_effects(journal))
    return [v.detail for v in watchman.violations if v.invariant == "untraceable-effect"]


async def _issue(path: Path, *effects: Any) -> tuple[SQLiteJournal, list[int]]:
    journal = await SQLiteJournal.open(path)
    stream = StreamId("uid1/Network/user-net/plug/1")
    appended = await journal.append(Commit(
        key=Key("ns1/vm1"), cause=Cause("observation", "test"), wall_time=1.0,
        logical_time=1.0, effects=tuple(e.request(stream) for e in effects)))
    return journal, [e.id for e in appended.effects]


def test_a_write_is_traced_only_to_an_issued_effect_of_its_object(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    assert _untraceable(path, "PATCH", POD_PATH), "no journal yet: nothing traces a write"

    async def scenario() -> None:
        journal, ids = await _issue(path, PatchPodNetworks("ns1", POD, "pod-uid", ()))
        try:
            assert _untraceable(path, "PATCH", POD_PATH) == []
            # the same effect type, another object; another effect type, the same VM
            assert _untraceable(path, "PATCH", "/api/v1/namespaces/ns1/pods/virt-launcher-vm2-x")
            assert _untraceable(path, "PATCH", STATUS_PATH)
            assert _untraceable(path, "DELETE", POD_PATH), "no effect deletes a pod"
            # once its outcome is recorded, the effect sends nothing more
            await journal.append(Commit(
                key=Key("ns1/vm1"), cause=Cause("effect", f"effect:{ids[0]}"),
                wall_time=2.0, logical_time=2.0,
                effect_updates=(EffectUpdate(ids[0], "succeeded", 1),)))
            assert _untraceable(path, "PATCH", POD_PATH)
        finally:
            await journal.close()

    asyncio.run(scenario())


def test_a_condition_write_traces_to_a_condition_effect(tmp_path: Path) -> None:
    path = tmp_path / "a.db"

    async def scenario() -> None:
        journal, _ = await _issue(path, SetVMCondition("ns1", "vm1", "T", "True", "R", "m"))
        await journal.close()

    asyncio.run(scenario())
    assert _untraceable(path, "PATCH", STATUS_PATH) == []
    assert _untraceable(path, "PATCH", STATUS_PATH.replace("/vm1/", "/vm2/"))


VM_PATH = "/apis/virtualization.deckhouse.io/v1alpha2/namespaces/ns1/virtualmachines/vm1"
KVVM_PATH = "/apis/kubevirt.io/v1/namespaces/ns1/virtualmachines/vm1"


def _with_vm1_malformed_at(version: int) -> Watchman:
    watchman = Watchman(Store(), "deckhouse", ("nicplug-system", "nicplug"), lambda: 0.0)
    watchman.malformed[("ns1", "vm1")] = [Spoiled(VMS, "vm1", version)]
    return watchman


def _unreadable(watchman: Watchman) -> list[str]:
    return [v.detail for v in watchman.violations if v.invariant == "write-while-unreadable"]


@pytest.mark.parametrize("path", [STATUS_PATH, VM_PATH])
def test_a_write_to_the_malformed_object_itself_counts_once_the_server_applies_it(
    path: str,
) -> None:
    """Whatever the replica had seen: its precondition must pin what it read, so that a
    write sent before it heard of the change fails at the server (seed 5044). Refused,
    or never handled (cut off while the server waited: seed 40729), it changed nothing."""
    watchman = _with_vm1_malformed_at(7)
    landed = watchman.on_request("nicplug-a", True, "PATCH", path)
    assert landed is not None
    assert _unreadable(watchman) == []  # not yet: judged on what the server does
    landed()
    assert _unreadable(watchman)
    assert watchman.on_request("nicplug-a", True, "GET", path) is None


@pytest.mark.parametrize(("seen", "counted"), [(None, False), (6, False), (7, True), (9, True)])
def test_a_write_to_another_object_of_the_vm_counts_once_the_replica_holds_the_malformed_one(
    seen: int | None, counted: bool,
) -> None:
    """A KVVM patch cannot pin the VM it does not address: sent before the replica's
    informers held the malformed VM (a stalled watch, the same instant: seeds 24435,
    41622), it is not a write while unreadable; sent after, held still was not still,
    and it counts when sent, whatever the server then does with it (refused or cut off
    for another reason, it still shows the fence let it leave)."""
    watchman = _with_vm1_malformed_at(7)
    landed = watchman.on_request("nicplug-a", True, "PATCH", KVVM_PATH,
                                 seen=lambda resource, ns, name: seen)
    assert landed is None  # nothing waits for the server's answer
    assert bool(_unreadable(watchman)) == counted


def test_what_a_replica_holds_is_asked_of_the_malformed_object() -> None:
    asked: list[tuple[str, str, str]] = []

    def seen(resource: Any, ns: str, name: str) -> int | None:
        asked.append((resource.plural, ns, name))
        return None

    _with_vm1_malformed_at(7).on_request("nicplug-a", True, "PATCH", POD_PATH, seen=seen)
    assert asked == [("virtualmachines", "ns1", "vm1")]


@pytest.mark.parametrize(("method", "path", "traced"), [
    ("PATCH", POD_PATH, ({"PatchPodNetworks"}, "ns1", POD)),
    ("POST", "/apis/kubevirt.io/v1/namespaces/ns1/virtualmachineinstancemigrations",
     ({"CreateMigration"}, "ns1", None)),
    ("POST", "/apis/events.k8s.io/v1/namespaces/ns1/events", ({"EmitEvent"}, "ns1", None)),
    ("PATCH", "/apis/virtualization.deckhouse.io/v1alpha2/namespaces/ns1/"
     "virtualmachineoperations/nicplug-vm1-0000abcd-stop", ({"RestartVM"}, "ns1", None)),
    ("DELETE", "/apis/kubevirt.io/v1/namespaces/ns1/virtualmachineinstances/vm1", None),
    ("PUT", "/apis/kubevirt.io/v1/namespaces/ns1/virtualmachines/vm1", None),
])
def test_each_write_names_the_effects_that_send_it(
    method: str, path: str, traced: tuple[set[str], str, str | None] | None,
) -> None:
    assert effects_for(method, path) == traced


def test_a_run_catches_a_write_no_decision_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a defect put back (patching a launcher pod also writes a condition on the
    VM, from no decision), the run stops at that write."""
    original = PodPatches._patch_pod

    async def and_a_condition(self: PodPatches, e: PatchPodNetworks, *rest: Any) -> Any:
        result = await original(self, e, *rest)
        vm = e.pod.removeprefix("virt-launcher-").rsplit("-", 1)[0]
        cluster = self._cluster
        await cluster.calls.patch_status(cluster.vm_kind, e.namespace, vm, {"status": {}})
        return result

    plug = draw(8).with_steps((Step(1.0, "add", 0, "user-net"),))
    assert plug.setup.dialect == "deckhouse"
    clean = simulate(plug)
    assert clean.violation is None, clean.violation.line()
    monkeypatch.setattr(PodPatches, "_patch_pod", and_a_condition)
    outcome = simulate(plug)
    assert outcome.violation is not None
    assert outcome.violation.invariant == "untraceable-effect", outcome.violation.line()
    assert "/status" in outcome.violation.detail


def test_a_failed_operation_whose_next_attempt_is_armed_is_worked_on() -> None:
    """`not-converged` asks that someone works on a difference between the guest and
    the user's ask: a live operation, or a failed one (a reason, the SDN's message)
    whose retry timer is armed (seeds 3174, 3513: an SDN entry in error outlasts every
    attempt, and the judgement fell between two). Without the timer nobody does."""
    from types import SimpleNamespace

    from nicplug.adapters.simulation.liveness import _converged

    failed = SimpleNamespace(view=SimpleNamespace(
        key="default/vm", stream="uid/ClusterNetwork/storage/plug/4", terminal=True,
        snapshot={"network": "ClusterNetwork/storage", "if_name": "veth_cnf092eeaa"}))
    world = {"default/vm": {"malformed": False, "running": True,
                            "desired": ["ClusterNetwork/storage"],
                            "names": {"ClusterNetwork/storage": "veth_cnf092eeaa"},
                            "attached": {"default"}}}
    assert _converged([failed], world, {"uid/ClusterNetwork/storage/plug/4"}) == []
    assert [p for p, _ in _converged([failed], world, set())] == ["not-converged"]


@pytest.mark.parametrize(("failed_at", "message", "lost"), [
    (300.0, "no attachment in 120s", True),  # the SDN had said it: the failure must carry it
    (300.0, "no attachment in 120s; pod-x: simulated: the bridge went away", False),
    (258.6, "no attachment in 120s", False),  # failed before the SDN began to say it
])
def test_an_sdn_error_is_lost_only_by_a_failure_after_it_began(
    failed_at: float, message: str, lost: bool,
) -> None:
    """Seed 81875 of the 100,000-schedule run: the plug of user-net timed out at 258.6 s
    with no SDN error anywhere (the VM never booted: another network's entry failed);
    the SDN reported an error for user-net at 271.5 s. A failure cannot say what the
    SDN began to say after it."""
    from types import SimpleNamespace

    from nicplug.adapters.simulation.liveness import _sdn_error_lost

    view = SimpleNamespace(stream="uid/Network/user-net/plug/1", state="Failed", snapshot={
        "if_name": "veth_n342bda1b", "reason": "AttachTimeout", "message": message})
    seen = {"sdn_errors": {"veth_n342bda1b": {"simulated: the bridge went away"}},
            "sdn_error_since": {"veth_n342bda1b": 271.5}}
    found = _sdn_error_lost(view, failed_at, seen)
    assert (found is not None and found[0] == "sdn-error-lost") is lost


def test_a_run_catches_a_write_sent_while_its_vm_is_held(monkeypatch: pytest.MonkeyPatch) -> None:
    """With held still put back to not still (no fence on a held VM, attempts not
    parked), seed 222 stops at a KVVM patch sent while the replica holds a malformed VM:
    the invariant judges a write to another object by what the replica had seen."""
    from nicplug.adapters.core import controller
    from nicplug.engine.outbox import EffectRunner

    assert simulate(draw(222)).violation is None
    original = EffectRunner.__init__

    def never_held(self: EffectRunner, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self._held = lambda key: False

    monkeypatch.setattr(controller, "_fence", lambda term, observing: term.check())
    monkeypatch.setattr(EffectRunner, "__init__", never_held)
    outcome = simulate(draw(222))
    assert outcome.violation is not None
    assert outcome.violation.invariant == "write-while-unreadable", outcome.violation.line()
    assert "/apis/kubevirt.io/v1/" in outcome.violation.detail


def test_the_watchman_knows_since_when_the_sdn_reports_each_error() -> None:
    """From the pod change that first carries it, through later changes that keep it,
    until a change without it (or the pod's deletion)."""
    from nicplug.simulator import networking as nw
    from nicplug.simulator.resources import PODS
    from nicplug.simulator.watching import Change, EventType

    clock = [10.0]
    watchman = Watchman(Store(), "deckhouse", ("nicplug-system", "nicplug"), lambda: clock[0])
    request = {"type": "Network", "name": "user-net", "ifName": "veth_n1"}

    def pod(error: str | None) -> dict[str, Any]:
        status = nw.dump_list([nw.deckhouse_status(request, mac="02:00:00:00:00:01",
                                                   error=error)])
        return {"metadata": {"name": "virt-launcher-vm-x", "namespace": "ns1", "uid": "p1",
                             "annotations": {nw.DECKHOUSE_STATUS: status}}}

    def change(kind: EventType, obj: dict[str, Any]) -> None:
        watchman.on_change(Change(1, PODS, kind, obj, obj))

    change("MODIFIED", pod(None))
    assert watchman.sdn_error_since == {}
    change("MODIFIED", pod("the bridge went away"))
    clock[0] = 20.0
    change("MODIFIED", pod("the bridge went away"))
    assert watchman.sdn_error_since == {("p1", "veth_n1"): 10.0}
    change("MODIFIED", pod(None))
    assert watchman.sdn_error_since == {}
    change("MODIFIED", pod("again"))
    change("DELETED", pod("again"))
    assert watchman.sdn_error_since == {}


def test_a_create_is_backed_by_one_issued_effect_of_its_own_vm() -> None:
    """A VirtualMachineOperation the controller creates needs an issued `RestartVM` of
    that VM, and one effect backs one create: a second create for it (a double write),
    or one for another VM, is untraceable, whatever else the namespace has issued."""
    from nicplug.simulator.resources import VMOPS
    from nicplug.simulator.watching import Change

    watchman = Watchman(Store(), "deckhouse", ("nicplug-system", "nicplug"), lambda: 0.0)
    watchman.journals["nicplug-a"] = lambda: [(7, "RestartVM", "ns1/vm1")]

    def created(name: str, vm: str) -> list[str]:
        watchman.on_change(Change(1, VMOPS, "ADDED", {
            "metadata": {"name": name, "namespace": "ns1"},
            "spec": {"type": "Stop", "virtualMachineName": vm}}, None))
        found = [v.detail for v in watchman.violations if v.invariant == "untraceable-effect"]
        watchman.violations.clear()
        return found

    assert created("nicplug-stop-vm2", "vm2"), "another VM's effect backs nothing of vm1's"
    assert created("nicplug-stop-vm1", "vm1") == []
    assert created("nicplug-stop-vm1-again", "vm1"), "one effect, two creates"


DECKHOUSE_KVVM_PATH = ("/apis/internal.virtualization.deckhouse.io/v1/namespaces/ns1/"
                       "internalvirtualizationvirtualmachines/vm1")


def test_a_write_to_deckhouses_renamed_kubevirt_is_judged_in_the_stores_names() -> None:
    """In the deckhouse world the server speaks Deckhouse's renamed KubeVirt: a KVVM
    patch there is the same write as upstream's, to the same VM's objects."""
    watchman = Watchman(Store(), "deckhouse", ("nicplug-system", "nicplug"), lambda: 0.0,
                        api=served_api("deckhouse"))
    watchman.malformed[("ns1", "vm1")] = [Spoiled(VMS, "vm1", 7)]
    asked: list[str] = []

    def seen(resource: Any, ns: str, name: str) -> int | None:
        asked.append(resource.plural)
        return 7

    watchman.on_request("nicplug-a", True, "PATCH", DECKHOUSE_KVVM_PATH, seen=seen)
    assert asked == ["virtualmachines"]
    assert _unreadable(watchman), "a write to the VM's KVVM while its VM is malformed"
    assert served_api("deckhouse").stored_path(DECKHOUSE_KVVM_PATH) == KVVM_PATH
    assert served_api("upstream").stored_path(DECKHOUSE_KVVM_PATH) == DECKHOUSE_KVVM_PATH


def _operation(name: str, type_: str, phase: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns1", "uid": name,
                     "annotations": {VMOP_VMI_UID_ANNOTATION: "vmi-1"}},
        "spec": {"type": type_, "virtualMachineName": "vm1"}}
    if phase is not None:
        body["status"] = {"phase": phase}
    return body


def _tell(watchman: Watchman, body: dict[str, Any], prev: dict[str, Any] | None = None,
          resource: Any = VMOPS) -> None:
    watchman.on_change(Change(0, resource, "ADDED" if prev is None else "MODIFIED", body,
                              prev))


def _watchman() -> Watchman:
    return Watchman(Store(), "deckhouse", ("nicplug-system", "nicplug"), lambda: 0.0)


def _found(watchman: Watchman, invariant: str) -> list[str]:
    return [v.detail for v in watchman.violations if v.invariant == invariant]


def test_a_start_after_the_users_stop_overrides_the_user_unless_deckhouse_refused_it() -> None:
    """`user-overridden` reads what the user asked as what Deckhouse ran: a `Stop`
    refused behind an unfinished operation (seed 733) asked nothing."""
    for phase, overridden in (("Failed", False), ("InProgress", True), ("Completed", True)):
        watchman = _watchman()
        stop = _operation(f"{USER_OPERATION}1", "Stop")
        _tell(watchman, stop)
        _tell(watchman, _operation(f"{USER_OPERATION}1", "Stop", phase), stop)
        _tell(watchman, _operation("nicplug-vm1-start", "Start"))
        assert bool(_found(watchman, "user-overridden")) == overridden, phase


def _stop(watchman: Watchman, name: str, vmi: str, phase: str = "InProgress") -> None:
    """nicplug's `Stop` of VMI `vmi` made, then Deckhouse's answer (`phase`)."""
    made = _operation(name, "Stop")
    made["metadata"]["annotations"] = {VMOP_VMI_UID_ANNOTATION: vmi}
    _tell(watchman, made)
    answered = _operation(name, "Stop", phase)
    answered["metadata"]["annotations"] = {VMOP_VMI_UID_ANNOTATION: vmi}
    _tell(watchman, answered, made)


def test_a_second_stop_for_one_change_is_a_repeated_restart() -> None:
    """nicplug stops a VM once per change of its networks: the user starting it again
    (from the older template) does not ask for another stop."""
    watchman = _watchman()
    _stop(watchman, "nicplug-vm1-a-stop", "vmi-1")
    assert _found(watchman, "restart-repeated") == []
    _stop(watchman, "nicplug-vm1-b-stop", "vmi-2")
    assert _found(watchman, "restart-repeated") == ["ns1/vm1: stopped 2 times for one change "
                                                    "of its networks (VMI vmi-2)"]
    watchman.changes["ns1/vm1"] += 1  # the user edits the networks: a new change
    before = len(watchman.violations)
    _stop(watchman, "nicplug-vm1-c-stop", "vmi-3")
    assert watchman.restarts_by_change[("ns1/vm1", 1)] == 1 and len(watchman.violations) == before


def test_a_stop_deckhouse_refused_stopped_nothing() -> None:
    """A `Stop` counts when Deckhouse runs it: one it refused (the VM stopped already by
    nicplug's Stop before, asked from a world that had not caught up; seed 3431) stopped
    nothing, and is no second stop for the change."""
    watchman = _watchman()
    _stop(watchman, "nicplug-vm1-a-stop", "vmi-1", "Completed")
    _stop(watchman, "nicplug-vm1-b-stop", "vmi-2", "Failed")
    assert _found(watchman, "restart-repeated") == []
    assert watchman.restarts_by_change[("ns1/vm1", 0)] == 1


def test_a_vm_nicplug_stopped_and_nobody_started_is_left_stopped() -> None:
    """`left-stopped`: nicplug's `Stop` completed and no VMI came back, nor did the
    user act; a VMI made since (nicplug's start, the user's) or a user's operation
    Deckhouse ran ends it."""
    for after, left in ((None, True), ("vmi", False), ("user", False), ("refused", True)):
        watchman = _watchman()
        stop = _operation("nicplug-vm1-stop", "Stop")
        _tell(watchman, stop)
        _tell(watchman, _operation("nicplug-vm1-stop", "Stop", "Completed"), stop)
        if after == "vmi":
            _tell(watchman, {"metadata": {"name": "vm1", "namespace": "ns1"}}, resource=VMIS)
        elif after in ("user", "refused"):
            start = _operation(f"{USER_OPERATION}1", "Start")
            _tell(watchman, start)
            _tell(watchman, _operation(f"{USER_OPERATION}1", "Start",
                                       "Failed" if after == "refused" else "InProgress"), start)
        assert bool(watchman.left_stopped()) == left, after
