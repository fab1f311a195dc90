"""Reading a journal to answer people: filtered read-model rows, one stream's whole
record, counts.

The runtime never needs these; query commands and HTTP views do, often while a
controller writes the same journal. The filters are generic: columns of the read model
and top-level fields of a view's JSON snapshot, never a domain concept. A backend binds
every value as a parameter and builds its statements from fixed fragments only. Nothing
here writes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from nicplug.engine.journal import ArmedTimer, EffectStatus, StoredView
from nicplug.engine.model import Key, RecordedEvent, StreamId

Scalar = str | int | float | bool

_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_field(name: str) -> str:
    """A snapshot field name as filters accept it (a plain identifier)."""
    if not _FIELD.match(name):
        raise ValueError(f"not a snapshot field name: {name!r}")
    return name


@dataclass(frozen=True, slots=True)
class ViewQuery:
    """Which read-model rows to read; unset filters do not filter.

    `equal[f] = v`: the snapshot's field `f` equals `v`; `below[f] = x`: it is a number
    lower than `x`. Rows come in (key, stream) order.
    """

    key: Key | None = None
    stream: StreamId | None = None
    state: str | None = None
    terminal: bool | None = None
    equal: Mapping[str, Scalar] = field(default_factory=dict)
    below: Mapping[str, float] = field(default_factory=dict)
    limit: int | None = None

    def __post_init__(self) -> None:
        for name in (*self.equal, *self.below):
            check_field(name)
        if self.limit is not None and self.limit < 0:
            raise ValueError(f"limit must not be negative, got {self.limit}")


@dataclass(frozen=True, slots=True)
class EffectRecord:
    """An outbox row in full, with when it was enqueued and last updated."""

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
    created_wall: float
    created_logical: float
    updated_wall: float
    updated_logical: float


@dataclass(frozen=True, slots=True)
class StreamRecord:
    """Everything the journal holds about one stream, read in one snapshot.

    `last_observation` is the latest event caused by an observation on any stream of
    the same key (the last time the key's observed world moved something).
    """

    view: StoredView | None
    events: tuple[RecordedEvent, ...]
    effects: tuple[EffectRecord, ...]
    timers: tuple[ArmedTimer, ...]
    last_observation: RecordedEvent | None


@dataclass(frozen=True, slots=True)
class Census:
    """How much the journal holds, and its schema version."""

    schema_version: int
    events: int
    last_position: int
    streams: int
    live_streams: int
    effects: Mapping[str, int]
    timers: int


class JournalInspection(Protocol):
    """The read side a query needs; a backend offers it beside the `Journal` port."""

    async def find_views(self, query: ViewQuery) -> Sequence[StoredView]: ...

    async def stream_record(self, stream: StreamId) -> StreamRecord | None:
        """None when the journal has no such stream."""
        ...

    async def census(self) -> Census: ...

    async def integrity(self) -> list[str]:
        """The full integrity check's findings; `["ok"]` when healthy."""
        ...

    async def read_all(self, *, after: int = 0, limit: int = 1000) -> Sequence[RecordedEvent]: ...

    async def close(self) -> None: ...
