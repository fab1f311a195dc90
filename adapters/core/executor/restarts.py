"""Restarts and VM operations: a VM restarted the way the platform restarts it.

An interface that cannot be hot-plugged reaches the guest at its next boot. nicplug
never deletes a VMI: it halts and starts the KVVM as `virtctl stop` and `start` do (the
run strategy, or `running`, noted in an annotation to put back), each a JSON patch
testing what it changes; or, on Deckhouse, it creates the `VirtualMachineOperation`
`d8 v stop` / `start` / `restart` would, named by the VM, the VMI and the step, so that
a retry by any replica finds the one made before. A `Stop` is asked only of the VMI
the decision saw, once, and once per restart (its number). A 404 on a write to an
object just read (the KVVM, nicplug's own operation) is retried with backoff, not
decided again (`cluster.just_read`); on a create it is decided again (no namespace).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

from nicplug.adapters.core.executor.cluster import (
    JSON_PATCH,
    Cluster,
    Result,
    annotation_ops,
    just_read,
)
from nicplug.adapters.kube import errors as kube_errors
from nicplug.adapters.kube.resources import (
    MANAGED_BY_LABEL,
    VMOP_RESTART_AFTER_ANNOTATION,
    VMOP_RESTART_FOR_ANNOTATION,
    VMOP_RESTART_NUMBER_ANNOTATION,
    VMOP_VMI_UID_ANNOTATION,
)
from nicplug.engine.errors import PermanentError, RetryAfterObservation
from nicplug.engine.journal import PendingEffect
from nicplug.machines.effects import RestartVM
from nicplug.machines.world import RESTART_ANNOTATION, RUNNING


class Restarts:
    """Writes a `RestartVM`: by the run strategy, or by a VM operation."""

    def __init__(self, cluster: Cluster) -> None:
        self._calls = cluster.calls
        self._kinds = cluster.kinds
        self._read = cluster.read

    async def __call__(self, e: RestartVM, effect: PendingEffect) -> Result:
        """Halt (noting the strategy to put back) or start the KVVM, as `virtctl stop`
        and `start` do; each a JSON patch testing what it changes. Through Deckhouse's
        operations: `_restart_by_operation`."""
        if e.by == "operation":
            return await self._restart_by_operation(e)
        kvvm = await self._read(self._kinds.kvvms, e.namespace, e.name)
        metadata = kvvm.get("metadata") or {}
        spec = kvvm.get("spec") or {}
        noted = (metadata.get("annotations") or {}).get(RESTART_ANNOTATION)
        field = "running" if e.resumes == RUNNING else "runStrategy"
        if e.step == "halt":
            if noted is not None:
                return {"halted": False, "reason": "halted for a restart already"}
            try:
                vmi = await self._read(self._kinds.vmis, e.namespace, e.name)
            except kube_errors.NotFound:
                return {"halted": False, "reason": "no VMI"}
            if (vmi.get("metadata") or {}).get("uid") != e.vmi_uid:
                return {"halted": False, "reason": "the VMI was already replaced"}
            running, halted = (True, False) if field == "running" else (e.resumes, "Halted")
            value: str | None = e.resumes
        else:
            if noted != e.resumes:
                return {"started": False, "reason": "not halted by nicplug for this restart"}
            running, halted = (False, True) if field == "running" else ("Halted", e.resumes)
            value = None
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/resourceVersion",
             "value": metadata.get("resourceVersion")},
            {"op": "test", "path": f"/spec/{field}", "value": running},
            {"op": "replace", "path": f"/spec/{field}", "value": halted},
            *annotation_ops(kvvm, "/metadata", RESTART_ANNOTATION, value),
        ]
        if spec.get(field) != running:
            raise RetryAfterObservation(f"KVVM {e.target}: {field} is not {running!r} any more")
        with just_read("the KVVM"):  # its 404 is retried, not decided again (`just_read`)
            await self._calls.patch(
                self._kinds.kvvms, e.namespace, e.name, ops, content_type=JSON_PATCH
            )
        return {"halted" if e.step == "halt" else "started": True}

    async def _restart_by_operation(self, e: RestartVM) -> Result:
        """A `Stop` (step `halt`) or `Start` `VirtualMachineOperation`, as `d8 v stop` /
        `start` make them: Deckhouse deletes the VMI, and later starts the VM again.

        The name is fixed by the VM, the VMI whose restart it is, and the step, so a retry
        (after a timeout, a crash, a new leader) finds the one made before: it counts as
        made only when it is nicplug's, of the same type for the same VMI. A `Stop` is
        asked only while that VMI is the VM's; a `Start` only while no VMI runs."""
        kind = self._kinds.vm_operations
        if kind is None:
            raise PermanentError(
                f"VM {e.target}: this KubeVirt API flavour ({self._kinds.name}) has no "
                "VirtualMachineOperations to restart it with")
        type_ = {"halt": "Stop", "start": "Start", "restart": "Restart"}[e.step]
        try:
            vmi: Mapping[str, Any] | None = await self._read(self._kinds.vmis, e.namespace, e.name)
        except kube_errors.NotFound:
            vmi = None
        if type_ in ("Stop", "Restart"):
            if vmi is None:
                return {"stopped": False, "reason": "no VMI"}
            if (vmi.get("metadata") or {}).get("uid") != e.vmi_uid:
                return {"stopped": False, "reason": "the VMI was already replaced"}
        elif vmi is not None and (vmi.get("status") or {}).get("phase") not in (
                "Succeeded", "Failed"):
            raise RetryAfterObservation(f"VM {e.target} runs again: it is not nicplug's to start")
        name = vm_operation_name(e.name, e.vmi_uid, type_)
        if type_ == "Stop" and e.number:
            asked = await self._asked_already(kind, e)
            if asked is not None:
                return {"stopped": False, "reason": f"nicplug's Stop {asked} of this restart "
                        "was asked already, of the VMI before: Deckhouse stops whichever VMI runs"}
        spec = {"type": type_, "virtualMachineName": e.name}
        annotations = {VMOP_VMI_UID_ANNOTATION: e.vmi_uid}
        if e.for_streams:
            annotations[VMOP_RESTART_FOR_ANNOTATION] = ",".join(e.for_streams)
        if e.number:
            annotations[VMOP_RESTART_NUMBER_ANNOTATION] = str(e.number)
        if e.after:
            annotations[VMOP_RESTART_AFTER_ANNOTATION] = ",".join(e.after)
        try:
            # A 404 on the create is not retried: nothing was just read of the operation,
            # and the API server answers it when the namespace is gone (a missing VM is
            # Deckhouse's `Failed` operation, not a 404), so the VM and its objects leave
            # the informers too: decided again from that world, nicplug asks for nothing.
            await self._calls.create_vm_operation(
                kind, e.namespace, name, spec,
                labels={MANAGED_BY_LABEL: "nicplug"}, annotations=annotations)
        except kube_errors.AlreadyExists:
            # the server has just said it exists: a 404 (deleted since, or answered
            # amiss) retries this effect, which creates it again if it is gone
            with just_read(f"VirtualMachineOperation {e.namespace}/{name}"):
                found = await self._calls.get(kind, e.namespace, name)
            annotations = (found.get("metadata") or {}).get("annotations") or {}
            found_spec = found.get("spec") or {}
            mine = all(found_spec.get(k) == v for k, v in spec.items())
            if not mine or annotations.get(VMOP_VMI_UID_ANNOTATION) != e.vmi_uid:
                raise PermanentError(
                    f"VirtualMachineOperation {e.namespace}/{name} exists and is not "
                    f"nicplug's {type_} of VM {e.name} for VMI {e.vmi_uid}") from None
            await self._joined(kind, found, e)
            return {"operation": name, "created": False}
        return {"operation": name, "created": True}

    async def _asked_already(self, kind: Any, e: RestartVM) -> str | None:
        """The name of nicplug's `Stop` of the VM for another VMI carrying this halt's
        number or a later one, fresh from the server: the halt was decided from a world
        that had not seen it (the VMI replaced, by a crash, between that `Stop`'s decision
        and its creation). Deckhouse stops whatever VMI the VM runs, so that `Stop` is
        this restart: it names these operations too (`_joined`), and none is asked again
        (a second one would stop the VMI the user started since). A refused one stopped
        nothing: the next world, which holds it, asks with the next number."""
        for found in await self._calls.list_objects(
                kind, e.namespace, label_selector=f"{MANAGED_BY_LABEL}=nicplug"):
            metadata = found.get("metadata") or {}
            annotations = metadata.get("annotations") or {}
            spec = found.get("spec") or {}
            if (metadata.get("labels") or {}).get(MANAGED_BY_LABEL) != "nicplug" \
                    or spec.get("type") != "Stop" or spec.get("virtualMachineName") != e.name \
                    or annotations.get(VMOP_VMI_UID_ANNOTATION) == e.vmi_uid:
                continue
            number = str(annotations.get(VMOP_RESTART_NUMBER_ANNOTATION) or "")
            if not number.isdigit() or int(number) < e.number:
                continue
            if (found.get("status") or {}).get("phase") != "Failed":
                await self._joined(kind, found, e)
            return str(metadata.get("name"))
        return None

    async def _joined(self, kind: Any, found: Mapping[str, Any], e: RestartVM) -> None:
        """A `Stop` of the VMI made for other operations stops the VM for these too
        (a change replaced in the instant its restart was asked): it names them as well,
        so that a user who takes the VM back from it takes it back for them
        (`World.taken_back`), and nicplug does not stop the VM again for one change."""
        metadata = found.get("metadata") or {}
        said = str((metadata.get("annotations") or {}).get(VMOP_RESTART_FOR_ANNOTATION) or "")
        named = [s for s in said.split(",") if s]
        if not said or not e.for_streams or set(e.for_streams) <= set(named):
            return  # one made before restarts named their operations says nothing
        joined = ",".join(sorted({*named, *e.for_streams}))
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/resourceVersion",
             "value": metadata.get("resourceVersion")},
            *annotation_ops(found, "/metadata", VMOP_RESTART_FOR_ANNOTATION, joined),
        ]
        name = str(metadata.get("name"))
        # read from the server just now: a 404 is retried, the retry reads it afresh
        with just_read(f"VirtualMachineOperation {e.namespace}/{name}"):
            await self._calls.patch(kind, e.namespace, name, ops, content_type=JSON_PATCH)


def vm_operation_name(vm: str, vmi_uid: str, type_: str) -> str:
    """The name of nicplug's `type_` operation in the restart of VM `vm`'s VMI
    `vmi_uid`: the same on every attempt, by any replica."""
    return f"nicplug-{vm}-{zlib.crc32(vmi_uid.encode()):08x}-{type_.lower()}"
