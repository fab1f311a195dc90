"""A key's state from the journal: its snapshots plus the events after them, or the
fold of all its events when a snapshot cannot be trusted.

The events are the truth; a snapshot (the read-model row's `snapshot`) is a cache of
their fold through some version of its stream. `restore` takes the cache only when it
is of the schema the decider writes, folded through a version the stream has, and the
events after it fold onto it; anything else is a `Distrust` with the reason, and the
caller folds the key from its events (`rebuild`) and says so. Never guesses a default
for what a snapshot lacks. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from nicplug.engine.journal import StoredView
from nicplug.engine.model import Decider, Key, RecordedEvent, StreamId, StreamView

S = TypeVar("S")
W = TypeVar("W")


@dataclass(frozen=True, slots=True)
class Distrust:
    """Why a key's snapshots are not used."""

    reason: str


def restore(
    decider: Decider[S, W], key: Key, stored: Sequence[StoredView], tail: Sequence[RecordedEvent]
) -> S | Distrust:
    """The state from `stored` snapshots and the `tail` of events after them."""
    after = Counter(event.stream for event in tail) if tail else Counter[StreamId]()
    for row in stored:
        if row.archived is not None:
            continue  # its events are in the archive: the row is all the journal has
        stream = row.view.stream
        if row.stored_schema != decider.snapshot_schema:
            return Distrust(
                f"stream {stream}: snapshot of schema {row.stored_schema}, this nicplug "
                f"writes {decider.snapshot_schema}"
            )
        if row.through + after[stream] != row.version:
            return Distrust(
                f"stream {stream}: snapshot through version {row.through} and "
                f"{after[stream]} events after it, but the stream is at {row.version}"
            )
    try:
        state = decider.restore(key, [row.view for row in stored])
        for event in tail:
            state = decider.evolve(state, event)
    except (ValueError, KeyError, TypeError) as error:
        return Distrust(f"the snapshots disagree with their events: {error}")
    return state


def rebuild(
    decider: Decider[S, W], key: Key, archived: Sequence[StreamView],
    events: Sequence[RecordedEvent],
) -> S:
    """The fold of every event of `key` (onto the summaries of archived operations)."""
    state = decider.restore(key, archived) if archived else decider.initial(key)
    for event in events:
        state = decider.evolve(state, event)
    return state
