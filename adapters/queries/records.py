"""The answers of the journal queries, as the CLI's `--json` and the HTTP views print them.

Pydantic models with stable keys, built from what the journal holds: the read model
for summaries, a stream's events and outbox rows for timelines. Times are the logical
seconds the machines decided with (`*_at`, epoch seconds under the real clock) and the
wall time recorded beside them (`*_wall`, RFC 3339 UTC). Never reads the journal
itself and never decides anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from nicplug.engine.inspection import EffectRecord, StreamRecord
from nicplug.engine.journal import StoredView
from nicplug.engine.model import RecordedEvent
from nicplug.machines.effects import effect_from_payload
from nicplug.machines.operation import EFFECTS_ISSUED, MIGRATION_HELD
from nicplug.machines.targets import migration_slot_wait


def rfc3339(seconds: float) -> str:
    """Epoch seconds as RFC 3339 UTC with milliseconds."""
    moment = datetime.fromtimestamp(seconds, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Answer(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


class OperationSummary(Answer):
    """One operation as the read model holds it (the latest state, no log folding)."""

    id: str
    vm: str
    vm_uid: str
    network: str
    if_name: str
    direction: str
    flavour: str
    attempt: int
    mode: str = "drive"
    """`observe`: the platform wrote this operation's steps and nicplug followed them;
    `drive`: nicplug wrote them."""
    state: str
    terminal: bool
    reason: str | None
    message: str
    history: list[str]
    opened_at: float
    entered_at: float
    retry_at: float | None
    bypassed_vmi: str | None
    """The VMI that took the change live although vmRolloutStrategy is Stage."""
    waiting: str = ""
    """What the platform says the operation waits for (the SDN's "not yet")."""
    held: tuple[int, int] | None = None
    """(nicplug's migrations in flight cluster-wide, the cap) when the cap held back this
    operation's migration (`MigrationHeld`)."""
    updated_wall: str
    archived: str | None = None
    """The archive file holding this finished operation's events (retention moved them
    out of the journal; this summary is what stays)."""

    @classmethod
    def of(cls, stored: StoredView) -> OperationSummary:
        view, s = stored.view, stored.view.snapshot
        return cls(
            id=view.stream, vm=str(s.get("vm") or view.key), vm_uid=str(s.get("vm_uid", "")),
            network=str(s.get("network", "")), if_name=str(s.get("if_name", "")),
            direction=str(s.get("direction", "")), attempt=int(s.get("attempt", 0)),
            flavour=str(s.get("flavour", "deckhouse")), mode=_mode_of(s),
            state=view.state, terminal=view.terminal, reason=s.get("reason"),
            message=str(s.get("message", "")),
            history=[str(h) for h in s.get("history", (view.state,))],
            opened_at=float(s.get("opened_at", 0.0)), entered_at=float(s.get("entered_at", 0.0)),
            retry_at=s.get("retry_at"), bypassed_vmi=s.get("bypassed_vmi"),
            waiting=str(s.get("waiting", "")),
            held=tuple(s["held"]) if s.get("held") else None,
            updated_wall=rfc3339(stored.updated_wall), archived=stored.archived,
        )


def _mode_of(snapshot: Mapping[str, Any]) -> str:
    """The mode an operation was opened in: recorded when the platform wrote its steps;
    the kubevirt flavour always observes (KubeVirt writes the VMI and the pod)."""
    if "mode" in snapshot:
        return str(snapshot["mode"])
    return "observe" if snapshot.get("flavour", "deckhouse") != "deckhouse" else "drive"


def _message(type_: str, p: Mapping[str, Any]) -> str:
    if type_ == MIGRATION_HELD:
        return migration_slot_wait((int(p["in_flight"]), int(p["cap"])))
    return str(p.get("message") or "")


class Cause(Answer):
    kind: str
    ref: str


class Step(Answer):
    """One event of an operation: it opened, moved, or its grace period expired."""

    version: int
    position: int
    type: str
    source: str | None = Field(serialization_alias="from")
    to: str | None
    trigger: str | None
    reason: str | None
    message: str
    at: float
    wall: str
    cause: Cause

    @classmethod
    def of(cls, event: RecordedEvent) -> Step:
        p: Mapping[str, Any] = event.payload
        return cls(
            version=event.version, position=event.position, type=event.type,
            source=p.get("from"), to=p.get("to"), trigger=p.get("trigger"),
            reason=p.get("reason"), message=_message(event.type, p),
            at=event.logical_time, wall=rfc3339(event.wall_time),
            cause=Cause(kind=event.cause.kind, ref=event.cause.ref),
        )


Outcome = Literal["pending", "retrying", "succeeded", "failed"]


class EffectEntry(Answer):
    """An effect the operation issued and what became of it (from the outbox)."""

    id: int
    type: str
    target: str
    outcome: Outcome
    attempts: int
    last_error: str | None
    next_attempt_at: float | None
    issued_at: float
    issued_wall: str
    updated_at: float
    updated_wall: str

    @classmethod
    def of(cls, row: EffectRecord) -> EffectEntry:
        outcome: Outcome
        if row.status == "issued":
            outcome = "retrying" if row.attempts else "pending"
        else:
            outcome = row.status
        return cls(
            id=row.id, type=row.type, target=_target(row), outcome=outcome,
            attempts=row.attempts, last_error=row.last_error,
            next_attempt_at=row.next_attempt_at, issued_at=row.created_logical,
            issued_wall=rfc3339(row.created_wall), updated_at=row.updated_logical,
            updated_wall=rfc3339(row.updated_wall),
        )


def _target(row: EffectRecord) -> str:
    try:
        return effect_from_payload(row.type, row.payload).target
    except (KeyError, TypeError, ValueError):
        return ""  # a payload this version cannot read: the type still says what it was


class Timeline(Answer):
    """An operation, each step with its time and cause, each effect with its outcome."""

    operation: OperationSummary
    steps: list[Step]
    effects: list[EffectEntry]

    @classmethod
    def of(cls, record: StreamRecord) -> Timeline | None:
        if record.view is None:
            return None
        return cls(
            operation=OperationSummary.of(record.view),
            steps=[Step.of(e) for e in record.events if e.type != EFFECTS_ISSUED],
            effects=[EffectEntry.of(row) for row in record.effects],
        )
