"""The simulated Deckhouse virtualization controller's part that runs VM operations.

A `VirtualMachineOperation` (`virtualization.deckhouse.io/v1alpha2`,
`crds/virtualmachineoperations.yaml`) asks Deckhouse to act on the VM named in
`spec.virtualMachineName`. Only `type: Restart` is simulated: the running VMI is
deleted and KubeVirt starts the VM again (the way Deckhouse restarts a VM whatever its
run policy; a client deleting the VMI itself under `runStrategy: Manual` would stop it
for good). The operation then reports `status.phase: Completed`; any other type,
or a VM that is not running, ends `Failed` with a message. It never touches a VM no
operation names.
"""

from __future__ import annotations

from nicplug.simulator import objects as ob
from nicplug.simulator.actors.reactor import Reactor, VMKey
from nicplug.simulator.networking import Json
from nicplug.simulator.resources import VMIS, VMOPS

FINISHED = frozenset({"Completed", "Failed"})


class VirtualMachineOperations(Reactor):
    watches = (VMOPS,)
    indexed = (VMOPS,)

    def reconcile(self, key: VMKey) -> None:
        for operation in self.members(VMOPS, key):
            if ob.dig(operation, "status", "phase") in FINISHED:
                continue
            self._run(key, operation)

    def _run(self, key: VMKey, operation: Json) -> None:
        kind = ob.dig(operation, "spec", "type")
        if kind != "Restart":
            self._finish(operation, "Failed", f"the simulator runs only Restart, not {kind}")
            return
        vmi = self.find(VMIS, *key)
        if vmi is None:
            self._finish(operation, "Failed", f"virtual machine {key[1]} is not running")
            return
        self.delete(VMIS, vmi)
        self._finish(operation, "Completed", "")

    def _finish(self, operation: Json, phase: str, message: str) -> None:
        status = {"phase": phase}
        if message:
            status["message"] = message
        self.edit(VMOPS, operation, lambda o: o.setdefault("status", {}).update(status),
                  status=True)
