"""The journal port: what the runtime asks of durable storage, whatever the backend.

One `append` is one `Commit`: the events of a decision with the expected version of
every stream they go to, the read-model rows derived from them, the effects to enqueue,
the timers to arm or cancel and effect outcomes to record — all or nothing. Readers get
events already upcast. Implementations (one module each) must never call back into the
runtime or a machine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from nicplug.engine.model import (
    Cause,
    EffectRequest,
    Key,
    NewEvent,
    RecordedEvent,
    StreamId,
    StreamView,
    TimerCancel,
    TimerRequest,
)
from nicplug.engine.records import quick_init

EffectStatus = Literal["issued", "succeeded", "failed"]


@quick_init
@dataclass(frozen=True, slots=True)
class EffectUpdate:
    """A change to an outbox row: an attempt that failed for now, or the final outcome."""

    effect_id: int
    status: EffectStatus
    attempts: int
    next_attempt_at: float | None = None
    last_error: str | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class Commit:
    """One atomic unit. `expected[stream]` is the version the stream must be at before
    the append (0 for a new stream); every stream in `events` needs one. When the
    cause's `dedup_key` is already journaled on one of the streams, the whole unit is
    a no-op (`Appended.duplicate`)."""

    key: Key
    cause: Cause
    wall_time: float
    logical_time: float
    events: tuple[NewEvent, ...] = ()
    expected: Mapping[StreamId, int] = field(default_factory=dict)
    views: tuple[StreamView, ...] = ()
    effects: tuple[EffectRequest, ...] = ()
    timers: tuple[TimerRequest, ...] = ()
    cancel_timers: tuple[TimerCancel, ...] = ()
    effect_updates: tuple[EffectUpdate, ...] = ()


@quick_init
@dataclass(frozen=True, slots=True)
class EnqueuedEffect:
    """The outbox row an `EffectRequest` landed in; `new=False` when one with the same
    idempotency key was already pending (and is being executed by whoever enqueued it)."""

    id: int
    new: bool


@quick_init
@dataclass(frozen=True, slots=True)
class Appended:
    """What a committed unit became. `events` are built on demand from the commit and
    the position of its first event (most appenders never look at them)."""

    commit: Commit | None = None
    first_position: int = 0
    effects: tuple[EnqueuedEffect, ...] = ()
    duplicate: bool = False

    @property
    def events(self) -> tuple[RecordedEvent, ...]:
        unit = self.commit
        if unit is None or self.duplicate:
            return ()
        versions = dict(unit.expected)
        recorded = []
        for offset, event in enumerate(unit.events, start=1):
            versions[event.stream] += 1
            recorded.append(RecordedEvent(
                stream=event.stream, key=unit.key, version=versions[event.stream],
                position=self.first_position + offset, type=event.type,
                schema_version=event.schema_version, payload=event.payload, cause=unit.cause,
                wall_time=unit.wall_time, logical_time=unit.logical_time,
            ))
        return tuple(recorded)


@quick_init
@dataclass(frozen=True, slots=True)
class StoredView:
    """A read-model row with what the journal adds to the machine's view.

    `version` is the stream's last event version; `through` the version its snapshot
    is folded through (older when the last events did not change the view, 0 when a
    journal of the first format wrote it); `stored_schema` the snapshot's schema as
    written, before any upcaster ran; `archived` the archive file holding the events
    of a finished operation the retention removed from the journal."""

    view: StreamView
    version: int
    updated_wall: float
    updated_logical: float
    through: int = 0
    stored_schema: int = 1
    archived: str | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class PendingEffect:
    """An outbox row, as the executor gets it."""

    id: int
    stream: StreamId
    key: Key
    type: str
    payload: Mapping[str, Any]
    idempotency_key: str
    status: EffectStatus
    attempts: int
    next_attempt_at: float | None
    last_error: str | None
    schema_version: int = 1


@quick_init
@dataclass(frozen=True, slots=True)
class ArmedTimer:
    stream: StreamId
    name: str
    key: Key
    deadline: float


class Journal(Protocol):
    async def append(self, commit: Commit) -> Appended:
        """Commit one unit; return after it is durable. Raises `JournalConflict` for a
        stale expected version, `JournalRefused` when the journal cannot write."""
        ...

    async def views(self, *, key: Key | None = None, live: bool = False) -> Sequence[StoredView]:
        """Read-model rows: of one key, or (`live=True`) of every key that has a
        non-terminal stream, or all. Rows of streams without a view are left out."""
        ...

    async def history(self, *, stream: StreamId) -> Sequence[RecordedEvent]:
        """The events of one stream, in version order."""
        ...

    async def read_all(self, *, after: int = 0, limit: int = 1000) -> Sequence[RecordedEvent]:
        """Events after a global position, in position order (tailing, export)."""
        ...

    async def tail(self, *, key: Key | None = None, live: bool = False) -> Sequence[RecordedEvent]:
        """The events each stored snapshot does not include yet (version above its
        `through`), of one key or of every key `views(live=True)` returns, in position
        order: what recovery folds onto the snapshots."""
        ...

    async def events_of(self, *, key: Key) -> Sequence[RecordedEvent]:
        """Every event of a key's streams, in position order (a rebuild's fold)."""
        ...

    async def outbox(
        self, *, stream: StreamId | None = None, pending_only: bool = True
    ) -> Sequence[PendingEffect]:
        """Effects in id order: pending ones, or every row of one stream."""
        ...

    async def timers(self, *, due_by: float | None = None) -> Sequence[ArmedTimer]:
        """Armed timers in deadline order, optionally only those due by a moment."""
        ...

    async def close(self) -> None: ...
