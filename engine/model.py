"""The engine's vocabulary: what a machine returns and what the runtime feeds it.

A machine (a `Decider`) is pure. It owns the streams of one aggregate key (for nicplug
a VM; each interface operation is one stream) and answers every input with a
`Decision`: events to append, effects to execute after the commit, timers to arm or
disarm. The runtime journals the decision, then executes it. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, NewType, Protocol, TypeVar

from nicplug.engine.records import quick_init

StreamId = NewType("StreamId", str)
"""One operation's stream; unique across the journal."""

Key = NewType("Key", str)
"""The aggregate key: the unit serialised by dispatch (one worker per key at a time)."""

CauseKind = Literal["observation", "timer", "effect", "command"]


@quick_init
@dataclass(frozen=True, slots=True)
class Cause:
    """Why events were appended: the observation, timer or effect result behind them.

    `ref` is human-readable (`VirtualMachine/ns/name@1234`, `timer:sdn-deadline`,
    `effect:17`). `dedup_key`, when set, is never applied twice to the same stream:
    replaying an observation that was already journaled appends nothing.
    """

    kind: CauseKind
    ref: str
    dedup_key: str | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event a decision wants appended to `stream`."""

    stream: StreamId
    type: str
    payload: Mapping[str, Any]
    schema_version: int = 1


@quick_init
@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """An event as the journal holds it (after upcasting to the current schema)."""

    stream: StreamId
    key: Key
    version: int
    position: int
    type: str
    schema_version: int
    payload: Mapping[str, Any]
    cause: Cause
    wall_time: float
    logical_time: float


@quick_init
@dataclass(frozen=True, slots=True)
class EffectRequest:
    """Something the runtime must do in the world after the commit.

    Effects are idempotent. `idempotency_key` identifies the effect: while one with
    the same key is pending in the outbox, asking again does not enqueue a second.
    """

    stream: StreamId
    type: str
    payload: Mapping[str, Any]
    idempotency_key: str
    schema_version: int = 1


@quick_init
@dataclass(frozen=True, slots=True)
class TimerRequest:
    """Arm (or re-arm, replacing) the durable timer `name` of `stream` at `deadline`.

    Deadlines are in the clock's logical seconds (`Clock.now()`).
    """

    stream: StreamId
    name: str
    deadline: float


@quick_init
@dataclass(frozen=True, slots=True)
class TimerCancel:
    stream: StreamId
    name: str


@quick_init
@dataclass(frozen=True, slots=True)
class Decision:
    events: tuple[NewEvent, ...] = ()
    effects: tuple[EffectRequest, ...] = ()
    timers: tuple[TimerRequest, ...] = ()
    cancel_timers: tuple[TimerCancel, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.events or self.effects or self.timers or self.cancel_timers)


@quick_init
@dataclass(frozen=True, slots=True)
class Observed:
    """Trigger: the world of the key changed (or was listed again)."""

    cause: Cause


@quick_init
@dataclass(frozen=True, slots=True)
class TimerFired:
    stream: StreamId
    name: str
    deadline: float


@quick_init
@dataclass(frozen=True, slots=True)
class EffectOutcome:
    """Trigger: an effect finished. `ok=False` with `permanent=True` gave up."""

    effect_id: int
    stream: StreamId
    type: str
    ok: bool
    permanent: bool = False
    error: str | None = None
    result: Mapping[str, Any] = field(default_factory=dict)


Trigger = Observed | TimerFired | EffectOutcome

W = TypeVar("W")
S = TypeVar("S")


@quick_init
@dataclass(frozen=True, slots=True)
class Input(Generic[W]):
    """What `decide` sees: the latest observed world of the key and what woke it."""

    key: Key
    world: W | None
    trigger: Trigger


@quick_init
@dataclass(frozen=True, slots=True)
class StreamView:
    """A stream's row in the read model: its current state, kept in the same
    transaction as the events it derives from, so queries never fold the log."""

    stream: StreamId
    key: Key
    state: str
    terminal: bool
    snapshot: Mapping[str, Any]
    schema: int = 1
    """The schema version `snapshot` is written in."""


class Decider(Protocol[S, W]):
    """A pure machine over all streams of one key.

    * `initial(key)`: the state of a key with no streams yet.
    * `decide(state, input, now)`: the answer to one input; must be deterministic.
    * `evolve(state, event)`: fold one recorded event into the state.
    * `views(state)`: the read-model rows of the key's streams.
    * `restore(key, views)`: the state as of read-model rows of `snapshot_schema`
      (recovery folds the events after them); raises `ValueError` for a row it cannot
      read, and the runtime then folds the key from its events instead.
    * `snapshot_schema`: the version of the snapshots `views` writes.
    """

    snapshot_schema: int

    def initial(self, key: Key) -> S: ...

    def decide(self, state: S, input: Input[W], now: float) -> Decision: ...

    def evolve(self, state: S, event: RecordedEvent) -> S: ...

    def views(self, state: S) -> Sequence[StreamView]: ...

    def restore(self, key: Key, views: Sequence[StreamView]) -> S: ...
