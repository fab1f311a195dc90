"""A VM's conditions: nicplug's own, set and removed on the status of the VM the user edits.

A condition is a read-modify-write of the VM's one `status.conditions` list, which the
platform's controller also writes: the write pins the resourceVersion it read, a 409
is someone else's write in between, and it is read afresh from the server and written
again a few times before the decision is asked again (`CONDITION_WRITE_ATTEMPTS`). A
404 on the write of a VM the read just found is retried with backoff, not decided again
(`_patch_status`). A condition unchanged is not written; `lastTransitionTime` moves only
with its status.
Where KubeVirt owns the VM's conditions (the kubevirt flavour) the decider asks for none.
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from nicplug.adapters.core.executor.cluster import Cluster, Reader, Result, just_read
from nicplug.adapters.kube import errors as kube_errors
from nicplug.adapters.kube.resources import KindRef
from nicplug.adapters.kube.translate.objects import (
    KVVMObject,
    MalformedObject,
    VirtualMachineObject,
    read,
)
from nicplug.engine.errors import RetryAfterObservation
from nicplug.engine.journal import PendingEffect
from nicplug.machines.effects import RemoveVMCondition, SetVMCondition

CONDITION_WRITE_ATTEMPTS: Final = 3
"""Reads and writes of a VM's conditions before a 409 goes back to the decider."""


class Conditions:
    """Writes `SetVMCondition` and `RemoveVMCondition`."""

    def __init__(self, cluster: Cluster, *, now: Callable[[], datetime.datetime]) -> None:
        self._cluster = cluster
        self._now = now

    async def _conditions_written(
        self, write: Callable[[Reader], Awaitable[Result]]
    ) -> Result:
        """A VM's conditions are a read-modify-write of one list that the platform's
        controller also writes (its status churns): a 409 means someone else wrote the
        status between the read and the patch, not that the condition is wrong, so it is
        read afresh from the server (the cache may not hold the newer write yet) and
        written again a few times before the decision is asked again. The fresh VM is
        read as the informers read it first (`_readable_vm`): one that turned malformed
        behind the cache is written nothing."""
        read: Reader = self._cluster.read
        for _ in range(CONDITION_WRITE_ATTEMPTS - 1):
            try:
                return await write(read)
            except kube_errors.Conflict:
                read = self._readable_vm
        return await write(read)

    async def _readable_vm(self, kind: KindRef, namespace: str, name: str) -> Mapping[str, Any]:
        """The VM read afresh from the server, if nicplug can read it. The cache's copy
        passed the informers' reading (a VM they find malformed is held still, and its
        effects are not sent); a copy from the server has not, and the server's may have
        turned malformed since the cache last heard of it (a watch stalled or behind):
        a write built on it would change a VM nicplug cannot read. So it is read with
        the model the observer reads it with, and a malformed one is
        `RetryAfterObservation`: the next world shows it, and holds the VM still."""
        with just_read("the VM"):  # it answered 409 to the write: it exists
            body = await self._cluster.calls.get(kind, namespace, name)
        model = KVVMObject if kind.name == self._cluster.kinds.kvvms.name else VirtualMachineObject
        try:
            read(model, body, kind=kind.kind)
        except MalformedObject as exc:
            raise RetryAfterObservation(f"read afresh: {exc}") from exc
        return body

    async def set(self, e: SetVMCondition, effect: PendingEffect) -> Result:
        return await self._conditions_written(lambda read: self._set_condition_once(e, read))

    async def remove(self, e: RemoveVMCondition, effect: PendingEffect) -> Result:
        return await self._conditions_written(lambda read: self._remove_condition_once(e, read))

    async def _set_condition_once(self, e: SetVMCondition, read: Reader) -> Result:
        vm = await read(self._cluster.vm_kind, e.namespace, e.name)
        status = vm.get("status") or {}
        conditions: list[dict[str, Any]] = [
            c for c in status.get("conditions") or () if isinstance(c, dict)
        ]
        current = next((c for c in conditions if c.get("type") == e.type), None)
        wanted = {"type": e.type, "status": e.status, "reason": e.reason, "message": e.message}
        if current is not None and all(current.get(k) == v for k, v in wanted.items()):
            return {"unchanged": True}
        stamp = self._now().strftime("%Y-%m-%dT%H:%M:%SZ")
        if current is not None and current.get("status") == e.status:
            stamp = current.get("lastTransitionTime", stamp)
        updated = {**wanted, "lastTransitionTime": stamp}
        conditions = [updated if c is current else c for c in conditions]
        if current is None:
            conditions.append(updated)
        version = (vm.get("metadata") or {}).get("resourceVersion")
        patch = {"metadata": {"resourceVersion": version}, "status": {"conditions": conditions}}
        await self._patch_status(e.namespace, e.name, patch)
        return {"condition": e.type, "status": e.status}

    async def _remove_condition_once(self, e: RemoveVMCondition, read: Reader) -> Result:
        vm = await read(self._cluster.vm_kind, e.namespace, e.name)
        status = vm.get("status") or {}
        conditions = [c for c in status.get("conditions") or () if isinstance(c, dict)]
        kept = [c for c in conditions if c.get("type") != e.type]
        if len(kept) == len(conditions):
            return {"unchanged": True}
        if e.message and any(c.get("message") != e.message
                             for c in conditions if c.get("type") == e.type):
            return {"unchanged": True, "set_anew": True}  # for a later change: kept
        version = (vm.get("metadata") or {}).get("resourceVersion")
        patch = {"metadata": {"resourceVersion": version}, "status": {"conditions": kept}}
        await self._patch_status(e.namespace, e.name, patch)
        return {"removed": e.type}

    async def _patch_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """The status write of a VM the read has just found (`just_read`: six writes of
        one condition in 31 s while the server answered 404 five times, seed 21075)."""
        with just_read("the VM"):
            await self._cluster.calls.patch_status(self._cluster.vm_kind, namespace, name, patch)
