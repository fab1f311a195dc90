"""The simulated Deckhouse virtualization controller's part that runs VM operations.

A `VirtualMachineOperation` (`virtualization.deckhouse.io/v1alpha2`,
`crds/virtualmachineoperations.yaml`) asks Deckhouse to act on the VM named in
`spec.virtualMachineName`. As its power-state controller does
(`pkg/controller/vmop/powerstate/` in deckhouse/virtualization):

* a new operation is `Pending` (`Completed` Unknown); one the VM's older unfinished
  operation blocks ends `Failed` (`NotReadyToBeExecuted`; superseding is not simulated);
* `Stop` and `Start` apply only under the run policies `Manual` and
  `AlwaysOnUnlessStoppedManually` (the default), `Restart` under `AlwaysOn` too; `Stop`
  and `Restart` only to a VM that runs (or is starting), `Start` only to a stopped one;
  otherwise `Failed` (`NotApplicableForVirtualMachineRunPolicy` / `…Phase`), never run;
* it is then executed once and goes `InProgress` (`SignalSent` True): `Stop` deletes
  the VMI (with `force`, after zeroing its grace period); `Start` adds a `Start` state
  change request to the KVVM (Deckhouse's start annotation and the VM controller that
  acts on it, in one step); `Restart` a `Stop` of the running VMI and a `Start`;
* it is `Completed` when the VM reached the phase it asked for: `Stop` stopped (no VMI),
  `Start` running, `Restart` running a VMI other than the one it stopped.

KubeVirt under the `runStrategy: Manual` Deckhouse gives every VM does the rest
(`kubevirt.py`). The VM's phase is read from its KVVM and VMI as Deckhouse's VM
controller derives it. It never touches a VM no operation names.
"""

from __future__ import annotations

from nicplug.simulator import objects as ob
from nicplug.simulator.actors.reactor import Reactor, VMKey
from nicplug.simulator.clock import SimClock
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.networking import Json
from nicplug.simulator.resources import KVVMS, VMIS, VMOPS, VMS
from nicplug.simulator.store import Store

FINISHED = frozenset({"Completed", "Failed", "Superseded"})
APPLICABLE_POLICIES = {
    "Stop": frozenset({"Manual", "AlwaysOnUnlessStoppedManually"}),
    "Start": frozenset({"Manual", "AlwaysOnUnlessStoppedManually"}),
    "Restart": frozenset({"Manual", "AlwaysOnUnlessStoppedManually", "AlwaysOn"}),
}
APPLICABLE_PHASES = {
    "Stop": frozenset({"Running", "Starting", "Pending"}),
    "Start": frozenset({"Stopped"}),
    "Restart": frozenset({"Running", "Starting"}),
}
IN_PROGRESS = {"Stop": "StopInProgress", "Start": "StartInProgress",
               "Restart": "RestartInProgress"}
DEFAULT_RUN_POLICY = "AlwaysOnUnlessStoppedManually"  # the CRD's default


class VirtualMachineOperations(Reactor):
    watches = (VMOPS, KVVMS, VMIS)
    indexed = (VMOPS,)

    def __init__(self, store: Store, knobs: Knobs, clock: SimClock) -> None:
        super().__init__(store, knobs, clock)
        self._stopped: dict[str, str] = {}  # a Restart's uid → the VMI uid it stopped

    def reconcile(self, key: VMKey) -> None:
        operations = sorted(self.members(VMOPS, key), key=_age)
        for operation in operations:
            if ob.dig(operation, "status", "phase") in FINISHED:
                continue
            if ob.dig(operation, "status", "phase") == "InProgress":
                self._check_complete(key, operation)
                continue
            blocker = next((o for o in operations if _age(o) < _age(operation)
                            and ob.dig(o, "status", "phase") not in FINISHED), None)
            if blocker is not None:
                self._finish(operation, "Failed", "NotReadyToBeExecuted",
                             "VMOP cannot be executed now. Previously created operation "
                             "should finish first.")
                continue
            self._run(key, operation)

    def _phase(self, key: VMKey) -> str:
        """The VM's phase as Deckhouse's VM controller reports it."""
        vmi = self.find(VMIS, *key)
        if vmi is None:
            return "Stopped"
        phase = ob.dig(vmi, "status", "phase")
        if phase == "Running":
            return "Running"
        if phase in ("Succeeded", "Failed"):
            return "Stopped"
        return "Starting"

    def _run(self, key: VMKey, operation: Json) -> None:
        kind = str(ob.dig(operation, "spec", "type"))
        vm = self.find(VMS, *key)
        if vm is None:
            self._finish(operation, "Failed", "VirtualMachineNotFound", "VirtualMachine not found")
            return
        if kind not in APPLICABLE_POLICIES:
            self._finish(operation, "Failed", "OperationFailed",
                         f"the simulator runs only Start, Stop and Restart, not {kind}")
            return
        policy = ob.dig(vm, "spec", "runPolicy") or DEFAULT_RUN_POLICY
        if policy not in APPLICABLE_POLICIES[kind]:
            self._finish(operation, "Failed", "NotApplicableForVirtualMachineRunPolicy",
                         f"Operation type {kind} is not applicable for VirtualMachine with "
                         f"runPolicy {policy}")
            return
        phase = self._phase(key)
        if phase not in APPLICABLE_PHASES[kind]:
            self._finish(operation, "Failed", "NotApplicableForVirtualMachinePhase",
                         f"Operation type {kind} is not applicable for VirtualMachine in "
                         f"phase {phase}")
            return
        vmi = self.find(VMIS, *key)
        kvvm = self.find(KVVMS, *key)
        if kind == "Stop" and vmi is not None:
            if ob.dig(operation, "spec", "force"):
                vmi = self.edit(VMIS, vmi, lambda o: o.setdefault("spec", {}).update(
                    {"terminationGracePeriodSeconds": 0}))
            self.delete(VMIS, vmi)
        elif kind == "Start" and kvvm is not None:
            self._request(kvvm, [{"action": "Start"}])
        elif kind == "Restart" and kvvm is not None and vmi is not None:
            self._stopped[operation["metadata"]["uid"]] = vmi["metadata"]["uid"]
            self._request(kvvm, [{"action": "Stop", "uid": vmi["metadata"]["uid"]},
                                 {"action": "Start"}])
        operation = self._status(operation, "InProgress", [
            _condition("SignalSent", "True", "SignalSentSuccess", ""),
            _condition("Completed", "False", IN_PROGRESS[kind],
                       "Waiting for the operation to complete."),
        ])
        self._check_complete(key, operation)

    def _request(self, kvvm: Json, requests: list[Json]) -> None:
        def add(obj: Json) -> None:
            status = obj.setdefault("status", {})
            status["stateChangeRequests"] = [*(status.get("stateChangeRequests") or []),
                                             *requests]
        self.edit(KVVMS, kvvm, add, status=True)

    def _check_complete(self, key: VMKey, operation: Json) -> None:
        kind = ob.dig(operation, "spec", "type")
        phase = self._phase(key)
        if kind == "Stop":
            done = phase == "Stopped"
        elif kind == "Start":
            done = phase == "Running"
        else:
            vmi = self.find(VMIS, *key)
            stopped = self._stopped.get(operation["metadata"]["uid"])
            done = phase == "Running" and vmi is not None and vmi["metadata"]["uid"] != stopped
        if done:
            self._finish(operation, "Completed", "OperationCompleted", "")

    def _finish(self, operation: Json, phase: str, reason: str, message: str) -> None:
        status = "True" if phase == "Completed" else "False"
        self._status(operation, phase, [_condition("Completed", status, reason, message)])

    def _status(self, operation: Json, phase: str, conditions: list[Json]) -> Json:
        def update(obj: Json) -> None:
            status = obj.setdefault("status", {})
            status["phase"] = phase
            kept = [c for c in status.get("conditions") or []
                    if c.get("type") not in {c["type"] for c in conditions}]
            status["conditions"] = kept + conditions
        return self.edit(VMOPS, operation, update, status=True)


def _age(operation: Json) -> tuple[str, str]:
    meta = operation["metadata"]
    return (str(meta.get("creationTimestamp") or ""), str(meta["name"]))


def _condition(type_: str, status: str, reason: str, message: str) -> Json:
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": ob.wall_time()}
