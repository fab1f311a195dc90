"""An operation as a Kubernetes object, `NetworkInterfaceOperation` (`nicplug.io/v1alpha1`),
and back.

The object is the journal's projection, read by people with kubectl and by `kubectl
nicplug` under their own RBAC: `spec` names the operation (VM, network, interface,
direction, attempt), `status` says where it is (state, reason, message), what it waits
for (`waitingFor`: `explain`'s summary) and how it got there (`history`: one entry per
step, with its time and cause), and carries `explain --json`'s answer as it stood when
written (`status.explanation`), so the plugin prints what the CLI prints without a
second renderer. It is written on the operation's steps only (`PROJECTED`), so times
relative to now (time in state, timers' `due_in`) are computed again when read; the
effects' outcomes are the journal's alone (an object lists the effects pending at its
last step, never their later outcome). Pure: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
from typing import Any, get_args, get_origin

from pydantic import BaseModel

from nicplug.adapters.queries.explaining import Explanation, explain
from nicplug.adapters.queries.records import Cause, OperationSummary, Step, Timeline
from nicplug.engine.inspection import StreamRecord
from nicplug.machines.operation import (
    EFFECTS_ISSUED,
    INITIAL_STATE,
    NAMED,
    OPENED,
    TRANSITIONED,
    WAITING,
)

GROUP = "nicplug.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "NetworkInterfaceOperation"
PLURAL = "networkinterfaceoperations"
OPERATION_ANNOTATION = "nicplug.io/operation"
"""The journal's stream id of the operation an object shows."""
VERSION_ANNOTATION = "nicplug.io/journal-version"
"""The stream version the object was written from: a restart rewrites only the others."""
VM_LABEL = "nicplug.io/vm"
MANAGED_BY = {"app.kubernetes.io/managed-by": "nicplug"}

PROJECTED = frozenset({OPENED, TRANSITIONED, WAITING, NAMED})
"""The events that change what the object shows: it opened, moved, learned its
interface name, or what it waits for changed. Nothing else rewrites it."""

OWNERS = {
    "deckhouse": ("virtualization.deckhouse.io/v1alpha2", "VirtualMachine"),
    "kubevirt": ("kubevirt.io/v1", "VirtualMachine"),
}
"""The VM an operation belongs to, by flavour: the desired state's owner."""

Json = dict[str, Any]


def object_name(vm_name: str, direction: str, stream: str) -> str:
    """`<vm>-<direction>-<10 hex of the stream id>`: unique per operation (a VM made
    again under the same name has another uid, so other ids), a valid name."""
    digest = hashlib.sha256(stream.encode()).hexdigest()[:10]
    return f"{vm_name[:253 - len(direction) - 12]}-{direction}-{digest}"


def _history(steps: list[Step]) -> list[Json]:
    state = INITIAL_STATE
    entries = []
    for step in steps:
        state = step.to or state
        entries.append(_entry(step, state))
    return entries


def _entry(step: Step, state: str) -> Json:
    """One step: the state it left the operation in, when, and what caused it; then
    the rest of what `history --json` says of it."""
    return {"state": state, "time": step.wall, "cause": step.cause.ref,
            "causeKind": step.cause.kind, "from": step.source, "trigger": step.trigger,
            "reason": step.reason, "message": step.message, "type": step.type,
            "version": step.version, "position": step.position, "at": step.at}


def _step(entry: Json) -> Step:
    return Step(version=int(entry.get("version", 0)), position=int(entry.get("position", 0)),
                type=str(entry.get("type", "")), source=entry.get("from"),
                to=entry.get("state") if entry.get("type") == TRANSITIONED else None,
                trigger=entry.get("trigger"), reason=entry.get("reason"),
                message=str(entry.get("message") or ""), at=float(entry.get("at", 0.0)),
                wall=str(entry.get("time", "")),
                cause=Cause(kind=str(entry.get("causeKind", "")), ref=str(entry.get("cause", ""))))


def operation_object(record: StreamRecord, *, now: float) -> Json | None:
    """The object of the stream in `record` (None: the journal has no view of it)."""
    explained = explain(record, now=now)
    if explained is None or record.view is None:
        return None
    op = explained.operation
    namespace, _, vm_name = op.vm.partition("/")
    api_version, kind = OWNERS.get(op.flavour, OWNERS["deckhouse"])
    steps = [Step.of(e) for e in record.events if e.type != EFFECTS_ISSUED]
    metadata: Json = {
        "name": object_name(vm_name, op.direction, op.id), "namespace": namespace,
        "labels": {VM_LABEL: vm_name, "nicplug.io/direction": op.direction, **MANAGED_BY},
        "annotations": {OPERATION_ANNOTATION: op.id,
                        VERSION_ANNOTATION: str(record.view.version)},
    }
    if op.vm_uid:
        metadata["ownerReferences"] = [{"apiVersion": api_version, "kind": kind,
                                        "name": vm_name, "uid": op.vm_uid}]
    return {
        "apiVersion": API_VERSION, "kind": KIND, "metadata": metadata,
        "spec": {"operation": op.id, "virtualMachine": vm_name, "network": op.network,
                 "interface": op.if_name, "direction": op.direction, "attempt": op.attempt,
                 "flavour": op.flavour},
        "status": {"state": op.state, "reason": op.reason or "", "message": op.message,
                   "terminal": op.terminal, "waitingFor": explained.summary,
                   "history": _history(steps),
                   "explanation": explained.to_json()},
    }


def written_version(obj: Json) -> int:
    """The stream version an object was written from (-1: unknown)."""
    value = (obj.get("metadata", {}).get("annotations") or {}).get(VERSION_ANNOTATION, "")
    return int(value) if str(value).isdigit() else -1


def stream_of(obj: Json) -> str:
    return str((obj.get("metadata", {}).get("annotations") or {}).get(OPERATION_ANNOTATION, ""))


# -- reading an object back, for `kubectl nicplug` --------------------------------------


class NotAnOperation(ValueError):
    """An object without what nicplug writes (someone else's, or a newer shape)."""


def _explanation(obj: Json) -> Json:
    found = (obj.get("status") or {}).get("explanation")
    if not isinstance(found, dict):
        name = obj.get("metadata", {}).get("name", "?")
        raise NotAnOperation(f"{KIND} {name} carries no status.explanation")
    restored: Json = _nulls_restored(Explanation, found)
    return restored


def _nulls_restored(model: type[BaseModel], data: Any) -> Any:
    """`data` with None put back for every field of `model` (and of the models it holds)
    that allows None and is missing: a merge patch (RFC 7386) cannot write a null, it
    deletes the key, so an object patched after its create lost its nulls."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    for name, field in model.model_fields.items():
        key = field.alias or name
        args = get_args(field.annotation)
        if key not in out:
            if field.is_required() and type(None) in args:
                out[key] = None
            continue
        for inner in (field.annotation, *args):
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                out[key] = _nulls_restored(inner, out[key])
            elif get_origin(inner) is list and isinstance(out[key], list):
                (item,) = get_args(inner) or (None,)
                if isinstance(item, type) and issubclass(item, BaseModel):
                    out[key] = [_nulls_restored(item, x) for x in out[key]]
    return out


def summary_of(obj: Json) -> OperationSummary:
    return OperationSummary.model_validate(_explanation(obj)["operation"])


def explanation_of(obj: Json, *, now: float) -> Explanation:
    """The explanation as written, its times relative to `now`."""
    data = dict(_explanation(obj))
    op = OperationSummary.model_validate(data["operation"])
    data["in_state_for"] = max(0.0, now - op.entered_at)
    timers = [{**t, "due_in": t["deadline"] - now} for t in data.get("timers", [])]
    data["timers"] = timers
    data["next_timer"] = timers[0] if timers else None
    return Explanation.model_validate(data)


def timeline_of(obj: Json) -> Timeline:
    """The steps as the object holds them; effects stay in the journal."""
    history = (obj.get("status") or {}).get("history") or []
    steps = [_step(h) for h in history if isinstance(h, dict)]
    return Timeline(operation=summary_of(obj), steps=steps, effects=[])
