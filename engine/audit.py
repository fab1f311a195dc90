"""Holding the caches against the truth: every stream folded from its events and
compared with its read-model row, and the outbox and timers checked against the streams.

`nicplug journal verify` asks this after SQLite's own integrity check. Each finding
names the key (VM), the stream and the field, with what the journal stores and what
the events give. Pure: it gets the rows, never reads or writes a journal itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from nicplug.engine.journal import ArmedTimer, StoredView
from nicplug.engine.model import Cause, Decider, Key, RecordedEvent, StreamId, StreamView

S = TypeVar("S")
W = TypeVar("W")


@dataclass(frozen=True, slots=True)
class Mismatch:
    key: str
    stream: str
    field: str
    stored: str
    folded: str

    def line(self) -> str:
        return (f"{self.key} {self.stream}: {self.field}: the journal holds {self.stored}, "
                f"the events give {self.folded}")


@dataclass(frozen=True, slots=True)
class Issued:
    """An outbox row still waiting to be executed."""

    id: int
    stream: StreamId
    key: Key
    type: str


class Step(NamedTuple):
    """One event as an audit folds it: upcast, without its cause and times (a fold of
    nicplug's machines reads neither; a million of these cost a fraction of as many
    `RecordedEvent`s)."""

    position: int
    stream: StreamId
    key: Key
    version: int
    type: str
    schema_version: int
    payload: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Folded:
    """One stream as its events give it: its row (None: the fold gives none), its last
    event's version and how many events it has; or why it could not be folded."""

    view: StreamView | None
    version: int
    events: int
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class AuditInput:
    """Everything the audit compares, read in one snapshot of the journal: the stored
    rows, each stream folded from its events, the pending outbox, the timers."""

    rows: Sequence[StoredView]
    folded: Mapping[StreamId, Folded]
    issued: Sequence[Issued]
    timers: Sequence[ArmedTimer]


def fold_stream(
    decider: Decider[S, W], key: Key, stream: StreamId, steps: Sequence[Step]
) -> StreamView | None:
    """The read-model row of `stream` as its own events give it (None: they give none),
    through `decider.evolve` (events carry no cause or time here). Raises what the fold
    raises (`ValueError` for an event it cannot apply)."""
    state = decider.initial(key)
    for step in steps:
        state = decider.evolve(state, RecordedEvent(
            stream=step.stream, key=step.key, version=step.version, position=step.position,
            type=step.type, schema_version=step.schema_version, payload=step.payload,
            cause=_AUDIT, wall_time=0.0, logical_time=0.0,
        ))
    return next((v for v in decider.views(state) if v.stream == stream), None)


_AUDIT = Cause("command", "audit")

StreamFold = Callable[[Key, StreamId, Sequence[Step]], StreamView | None]
"""What a stream's own events give as its row: `fold_stream` over a decider, or a
machine's quicker fold of one stream that gives the same rows."""


def folder(fold_one: StreamFold) -> Callable[[Key, StreamId, Sequence[Step]], Folded]:
    """`fold_one` with its failure as data, for a reader that folds stream by stream."""

    def fold(key: Key, stream: StreamId, events: Sequence[Step]) -> Folded:
        try:
            view = fold_one(key, stream, events)
        except (ValueError, KeyError, TypeError) as error:
            return Folded(None, events[-1].version, len(events), f"no fold ({error})")
        return Folded(view, events[-1].version, len(events))

    return fold


def _shown(value: Any) -> str:
    return repr(value)


def audit(
    decider: Decider[S, W], given: AuditInput,
    retrying: Callable[[StreamView], bool] = lambda view: False,
) -> list[Mismatch]:
    """Every mismatch in `given`. `retrying(view)`: a finished stream that still keeps
    a timer by design (a failed operation to be tried again)."""
    found: list[Mismatch] = []
    finished: dict[StreamId, bool] = {}
    for row in given.rows:
        view = row.view
        key, stream = view.key, view.stream
        finished[stream] = view.terminal and not retrying(view)
        if row.archived is not None:
            continue  # its events are in the archive; the row is the summary
        result = given.folded.get(stream)
        if result is None:
            found.append(Mismatch(key, stream, "events", f"version {row.version}", "no events"))
            continue
        if result.problem is not None:
            found.append(Mismatch(key, stream, "events", "events", result.problem))
            continue
        if row.stored_schema != decider.snapshot_schema:
            found.append(Mismatch(key, stream, "snapshot_schema", str(row.stored_schema),
                                  f"{decider.snapshot_schema} (written by this nicplug)"))
        if result.version != row.version:
            found.append(Mismatch(key, stream, "version", str(row.version),
                                  str(result.version)))
        if row.through > row.version:
            found.append(Mismatch(key, stream, "snapshot_through", str(row.through),
                                  f"at most {row.version}"))
        folded = result.view
        if folded is None:
            found.append(Mismatch(key, stream, "state", _shown(view.state), "no row"))
            continue
        finished[stream] = folded.terminal and not retrying(folded)
        for name, stored, computed in (
            ("state", view.state, folded.state), ("terminal", view.terminal, folded.terminal),
        ):
            if stored != computed:
                found.append(Mismatch(key, stream, name, _shown(stored), _shown(computed)))
        snapshot, truth = view.snapshot, folded.snapshot
        for name in sorted(set(snapshot) | set(truth)):
            stored, computed = snapshot.get(name, "nothing"), truth.get(name, "nothing")
            if _comparable(stored) != _comparable(computed):
                found.append(Mismatch(key, stream, f"snapshot.{name}", _shown(stored),
                                      _shown(computed)))
    for effect in given.issued:
        if effect.stream not in finished:
            found.append(Mismatch(effect.key, effect.stream, "outbox",
                                  f"effect {effect.id} ({effect.type}) issued", "no operation"))
        elif finished[effect.stream]:
            found.append(Mismatch(effect.key, effect.stream, "outbox",
                                  f"effect {effect.id} ({effect.type}) issued",
                                  "a finished operation"))
    for timer in given.timers:
        if finished.get(timer.stream, True):
            found.append(Mismatch(timer.key, timer.stream, "timers",
                                  f"timer {timer.name} armed", "a finished or no operation"))
    return found


def _comparable(value: Any) -> Any:
    """JSON's view of a value: tuples and lists alike."""
    if isinstance(value, tuple | list):
        return [_comparable(v) for v in value]
    return value
