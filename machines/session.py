"""The decision being built, and what it journals of the VM's time and memos.

A decision appends events one at a time and each is folded at once (`Session`), so the
walk, the openings and the effects that follow read the state the earlier events made;
the folds are kept (`Fold`) so the engine's `evolve` of those same events is free. The
bookkeeping a decision does besides walking — pausing and resuming the operations'
budgets with the VM's liveness, forgetting issued effects when one was refused, noting
a migration the cap held back — is here too: each only appends to the session. Pure:
no I/O, no clock (`now` is an argument).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nicplug.engine.model import EffectOutcome, NewEvent, StreamId, Trigger
from nicplug.machines.effects import CreateMigration
from nicplug.machines.operation import (
    EFFECTS_ISSUED,
    MIGRATION_HELD,
    OPENED,
    PAUSED,
    RESUMED,
    TRANSITIONED,
    Operation,
    VMState,
)
from nicplug.machines.versions import EVENT_SCHEMAS


@dataclass(slots=True)
class Fold:
    """`before.fold(stream, type, payload) is after`, as a decision computed it (one
    per event: not frozen, which is cheaper to build; never changed)."""

    before: VMState
    stream: StreamId
    type: str
    payload: Mapping[str, Any]
    after: VMState


class Session:
    """The decision being built: events are folded as they are appended."""

    def __init__(self, state: VMState, vm: str, vm_uid: str) -> None:
        self.state = state
        self.vm = vm
        self.vm_uid = vm_uid
        self.events: list[NewEvent] = []
        self.folds: list[Fold] = []
        self.paths: dict[StreamId, list[str]] = {}

    def append(self, stream: StreamId, type_: str, payload: Mapping[str, Any]) -> Operation:
        self.events.append(NewEvent(stream, type_, payload, EVENT_SCHEMAS[type_]))
        before = self.state
        self.state, op = before.fold_to(stream, type_, payload)
        self.folds.append(Fold(before, stream, type_, payload, self.state))
        assert op is not None, "an appended event always lands on a known stream"
        if type_ == TRANSITIONED:
            self.paths.setdefault(stream, [str(payload["from"])]).append(op.state)
        elif type_ in (OPENED, PAUSED, RESUMED):
            self.paths.setdefault(stream, [op.state])  # (its timers are looked at again)
        return op


def read_by_decision(trigger: Trigger) -> bool:
    """Does the decision read its input, not only the world and `now`? Only an
    effect's failure (`forget_refused`, the rejection guards) and a migration the cap
    held back (`note_held`); an observation, a timer or an effect done is a decision
    of the world at `now`."""
    return isinstance(trigger, EffectOutcome) and (
        not trigger.ok or bool(trigger.result.get("held"))
    )


def note_held(session: Session, trigger: Trigger, now: float) -> None:
    """The executor did not create the migration an operation asked for: nicplug's
    cluster-wide cap on concurrent migrations held it back. Journaled on the operation
    (`MigrationHeld`) when the count or the cap changed, so the condition, the Event and
    `explain` say what it waits for; the migration is asked for again with the
    operation's other effects (`effect_reissue_after`)."""
    if not (
        isinstance(trigger, EffectOutcome)
        and trigger.ok
        and trigger.type == CreateMigration.TYPE
        and trigger.result.get("held")
    ):
        return
    op = session.state.by_stream(trigger.stream)
    if op is None or op.state != "MigrationRequired":
        return  # it moved on meanwhile (another migration of the VMI runs, it ended...)
    held = (int(trigger.result["in_flight"]), int(trigger.result["cap"]))
    if held != op.held:
        payload = {"at": now, "in_flight": held[0], "cap": held[1]}
        session.append(op.stream, MIGRATION_HELD, payload)


def pause(session: Session, now: float) -> None:
    """The VM is not live: its operations' budgets stop counting (`Paused`)."""
    for op in list(session.state.ops.values()):
        if not op.terminal and op.paused_at is None:
            session.append(op.stream, PAUSED, {"at": now})


def resume(session: Session, now: float) -> None:
    """The VM is live again: the time it was not is credited to each budget."""
    for op in list(session.state.ops.values()):
        if not op.terminal and op.paused_at is not None:
            session.append(op.stream, RESUMED, {"at": now})


def forget_refused(session: Session, trigger: Trigger) -> None:
    """An effect refused for a failed precondition (a 409, a failed `test`, a 404) was
    decided from a world that is gone: forget what was issued, so this decision, taken
    from the newer world, asks again at once instead of `effect_reissue_after` later.

    Every operation's memo, not only the refused effect's owner's: a later decision may
    have asked for the same write (same key) under another owner while the refused one
    was still pending, and the outbox took that for the pending one.

    Not one refused because nicplug's own write landed and the informers do not show it
    yet (`unseen`): a decision from a world that does not show it asks the same request,
    refused the same way, at every observation of the VM's other objects (seed 91529: one
    pod patch 4 times in 5 s while the KVVM's watch re-listed). The same request waits
    for the blind re-issues' spacing (`timers.reissue_after`); what a world showing the
    write needs instead is another request, asked at once."""
    if (not isinstance(trigger, EffectOutcome) or trigger.ok or trigger.permanent
            or trigger.result.get("unseen")):
        return
    for op in list(session.state.ops.values()):
        if op.issued:
            session.append(op.stream, EFFECTS_ISSUED, {"digests": [], "at": op.issued_at})
