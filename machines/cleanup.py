"""Which of the objects nicplug created in the cluster it deletes, and why it keeps the
others.

nicplug creates migrations (to carry a change to a running guest) and, on Deckhouse,
`VirtualMachineOperation`s (a restart's `Stop` and `Start`). It deletes one of its own
once (a) the platform reports it finished, (b) no live operation of the journal reads
it, and (c) it was created longer ago than the retention; and never one whose kind the
platform's own garbage collection handles better (upstream KubeVirt's migrations: it
keeps five finished ones per VMI and deletes each older one together with its defunct
launcher pod, which nicplug cannot do; `docs/decisions/cleanup.md`).

What reads a finished object, and so what (b) means per kind:

* a migration: only the operation it was created for (annotation
  `nicplug.io/operation`). Its name derives from that operation's stream, and a
  finished one of that name is what keeps the operation from asking for a second
  migration under it (`targets.migration_name`): deleted only once that operation has
  ended and will not be tried again.
* a VM operation: every operation of its VM (a restart's `Stop` without a `Start` says
  the VM waits to be started, `World.stopped_for_restart`). Deleted only while its VM
  has no live operation, and oldest first: a newer one never goes before an older one
  of the same VM is deleted, or an older `Stop` would read as the latest again.

Pure: the retention task lists the objects and the journal's live operations, this
decides, the task deletes (404 = done). Never decides anything else.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from nicplug.engine.model import StreamView
from nicplug.machines.operation import retrying

CreatedKind = Literal["migration", "vm-operation"]

MIGRATION_FINISHED = frozenset({"Succeeded", "Failed"})
"""KubeVirt's final phases of a migration (`IsFinal`)."""
VM_OPERATION_FINISHED = frozenset({"Completed", "Failed", "Superseded"})
"""Deckhouse's finished phases of a VM operation (`commonvmop.IsFinished`)."""


@dataclass(frozen=True, slots=True)
class CreatedObject:
    """One object nicplug created, as the retention task read it from the server.

    `vm` is the `namespace/name` of the VM it is for (a migration's `spec.vmiName`: the
    VMI has its VM's name); `created` its `creationTimestamp` in seconds since the
    epoch; `operation` the stream a migration names (empty when it names none)."""

    kind: CreatedKind
    namespace: str
    name: str
    uid: str
    vm: str
    created: float
    phase: str
    operation: str = ""

    @property
    def finished(self) -> bool:
        done = MIGRATION_FINISHED if self.kind == "migration" else VM_OPERATION_FINISHED
        return self.phase in done


@dataclass(frozen=True, slots=True)
class Verdict:
    """Delete `obj` (`kept` is None), or keep it, `kept` saying why."""

    obj: CreatedObject
    kept: str | None

    @property
    def delete(self) -> bool:
        return self.kept is None


def judge(
    objects: Iterable[CreatedObject], *, live_streams: Collection[str],
    live_vms: Collection[str], platform_collects: Collection[CreatedKind],
    retention: float, now: float, in_scope: Callable[[str], bool] = lambda _vm: True,
) -> list[Verdict]:
    """A verdict for each object, in the order given.

    `live_streams`: the operations not ended (or to be tried again); `live_vms` the VMs
    (`namespace/name`) that have one; `platform_collects` the kinds whose finished
    objects the platform deletes itself, better than nicplug would; `in_scope` whether
    this nicplug manages a VM (another one, scoped elsewhere, judges the rest against
    its own journal)."""
    given = list(objects)
    alone = {id(o): "its VM is outside this nicplug's scope" if not in_scope(o.vm) else
             _kept_alone(o, live_streams=live_streams, live_vms=live_vms,
                         platform_collects=platform_collects, retention=retention, now=now)
             for o in given}
    # VM operations go oldest first within their VM: one kept keeps every newer one
    by_vm: dict[str, list[CreatedObject]] = {}
    for o in given:
        if o.kind == "vm-operation":
            by_vm.setdefault(o.vm, []).append(o)
    for ops in by_vm.values():
        blocker: CreatedObject | None = None
        for o in sorted(ops, key=lambda o: (o.created, o.name)):
            if blocker is not None and alone[id(o)] is None:
                alone[id(o)] = (f"an older VM operation of its VM ({blocker.name}) is kept, "
                                "and they go oldest first")
            elif alone[id(o)] is not None and blocker is None:
                blocker = o
    return [Verdict(o, alone[id(o)]) for o in given]


def live_readers(views: Iterable[StreamView]) -> tuple[set[str], set[str]]:
    """The streams that may still read a created object, and their VMs' keys: every
    operation not ended, and every ended one that will be tried again (its next attempt
    decides from the same VM operations)."""
    live = [v for v in views if not v.terminal or retrying(v)]
    return {str(v.stream) for v in live}, {str(v.key) for v in live}


def to_delete(verdicts: Sequence[Verdict]) -> list[CreatedObject]:
    return [v.obj for v in verdicts if v.delete]


def _kept_alone(
    o: CreatedObject, *, live_streams: Collection[str], live_vms: Collection[str],
    platform_collects: Collection[CreatedKind], retention: float, now: float,
) -> str | None:
    """Why `o` is kept, judged on its own; None: it may go."""
    if o.kind in platform_collects:
        return "the platform's own garbage collection deletes these"
    if not o.finished:
        return f"not finished (phase {o.phase or 'none yet'!r})"
    if o.kind == "migration":
        if not o.operation:
            return "names no operation of nicplug's"
        if o.operation in live_streams:
            return f"its operation {o.operation} is live"
    elif o.vm in live_vms:
        return f"its VM {o.vm} has a live operation"
    age = now - o.created
    if age < retention:
        return f"created {age:.0f}s ago, within the retention ({retention:.0f}s)"
    return None
