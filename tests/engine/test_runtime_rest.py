"""`Runtime(rest=True)`: a key of which nothing is live leaves memory once decided, and
its next input is decided as if it had stayed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from nicplug.engine.clock import VirtualClock
from nicplug.engine.effects import RecordingExecutor, RetryPolicy
from nicplug.engine.errors import PermanentError
from nicplug.engine.journal import PendingEffect, StoredView
from nicplug.engine.listening import RuntimeListener
from nicplug.engine.model import (
    Cause,
    Decision,
    EffectOutcome,
    EffectRequest,
    Input,
    Key,
    NewEvent,
    RecordedEvent,
    StreamId,
    StreamView,
)
from nicplug.engine.runtime import Runtime
from nicplug.engine.sqlite_journal import SQLiteJournal
from tests.engine.counter_machine import Counter, CounterMachine
from tests.engine.journal_support import opened

A, B = Key("ns/a"), Key("ns/b")


@pytest.fixture
async def journal() -> AsyncIterator[SQLiteJournal]:
    async with opened(":memory:") as j:
        yield j


class Rests(RuntimeListener):
    def __init__(self) -> None:
        self.rested: list[Key] = []

    def on_rest(self, key: Key) -> None:
        self.rested.append(key)


class CountingJournal:
    """The journal, counting the reads of one key's rows (what loading a key costs)."""

    def __init__(self, journal: SQLiteJournal) -> None:
        self._journal = journal
        self.loads: list[Key] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._journal, name)

    async def views(self, *, key: Key | None = None, live: bool = False) -> Sequence[StoredView]:
        if key is not None:
            self.loads.append(key)
        return await self._journal.views(key=key, live=live)


def counter(journal: Any, executor: Any, clock: VirtualClock, rests: Rests
            ) -> Runtime[Counter, int]:
    return Runtime(CounterMachine(), journal, executor, clock, listeners=[rests], rest=True,
                   retry=RetryPolicy(initial=1.0, factor=2.0, jitter=0.0))


async def test_a_key_with_no_rows_leaves_memory_and_is_never_read(
    journal: SQLiteJournal,
) -> None:
    clock = VirtualClock()
    counting, rests = CountingJournal(journal), Rests()
    runtime = counter(counting, RecordingExecutor(clock), clock, rests)
    await runtime.start()
    await runtime.observe(B, 0, Cause("observation", "target@1"))  # idle: nothing written
    await runtime.drain()
    assert runtime.state_of(B) is None and rests.rested == [B]

    await runtime.observe(B, 1, Cause("observation", "target@2"))  # now it counts
    await runtime.drain()
    assert counting.loads == []  # the journal has no rows of it: nothing to read
    state = runtime.state_of(B)
    assert state is not None and state.count == 1 and rests.rested == [B]  # live: kept
    await runtime.stop()


@dataclass
class Refusing:
    calls: list[int] = field(default_factory=list)

    async def execute(self, effect: PendingEffect) -> Mapping[str, Any]:
        self.calls.append(effect.id)
        raise PermanentError("422 invalid")


async def test_a_key_whose_streams_ended_loads_again_from_the_journal(
    journal: SQLiteJournal,
) -> None:
    clock = VirtualClock()
    counting, rests = CountingJournal(journal), Rests()
    executor = Refusing()
    runtime = counter(counting, executor, clock, rests)
    await runtime.start()
    await runtime.observe(A, 3, Cause("observation", "target@1"))  # fails: terminal
    await runtime.drain()
    assert runtime.state_of(A) is None and rests.rested == [A]
    assert await journal.timers() == []

    await runtime.observe(A, 3, Cause("observation", "target@2"))
    await runtime.drain()
    assert counting.loads == [A]  # it has rows now: loaded again from them
    assert rests.rested == [A, A]  # and, failed still, let go again
    assert len(executor.calls) == 1  # nothing asked again of a failed stream
    await runtime.stop()


async def test_the_keys_with_rows_are_read_at_start(journal: SQLiteJournal) -> None:
    """A key written by an earlier process is read on its first input, not taken for new."""
    clock = VirtualClock()
    first = counter(journal, Refusing(), clock, Rests())
    await first.start()
    await first.observe(A, 3, Cause("observation", "target@1"))  # fails: terminal
    await first.drain()
    await first.stop()

    counting = CountingJournal(journal)
    runtime = counter(counting, RecordingExecutor(clock), clock, Rests())
    await runtime.start()
    # a world with nothing to do: only its rows say what it is (nothing appended, so no
    # conflict would tell a key taken for new)
    await runtime.observe(A, 0, Cause("observation", "target@2"))
    await runtime.drain()
    assert counting.loads == [A]
    await runtime.stop()


async def test_a_live_stream_or_an_armed_timer_keeps_a_key(journal: SQLiteJournal) -> None:
    clock = VirtualClock()
    rests = Rests()
    runtime = counter(journal, RecordingExecutor(clock), clock, rests)
    await runtime.start()
    await runtime.observe(A, 1, Cause("observation", "target@1"))  # counted to 1: live view
    await runtime.drain()
    state = runtime.state_of(A)
    assert state is not None and state.count == 1 and rests.rested == []
    await runtime.stop()


class Telling:
    """A machine whose one step ends its stream and asks for an effect (as an Event
    told of an outcome), and records the outcome with the world it was decided from."""

    snapshot_schema = 1

    def initial(self, key: Key) -> dict[str, Any]:
        return {}

    def decide(self, state: dict[str, Any], input: Input[int], now: float) -> Decision:
        stream = StreamId(f"{input.key}/tell")
        if isinstance(input.trigger, EffectOutcome):
            return Decision(events=(NewEvent(stream, "Told", {"world": input.world}),))
        if state or not input.world:
            return Decision()
        return Decision(events=(NewEvent(stream, "Done", {}),), effects=(
            EffectRequest(stream, "Tell", {}, f"{stream}/tell"),))

    def evolve(self, state: dict[str, Any], event: RecordedEvent) -> dict[str, Any]:
        return {**state, event.type: event.payload}

    def views(self, state: dict[str, Any]) -> Sequence[StreamView]:
        if not state:
            return ()
        key = Key("ns/a")
        return (StreamView(StreamId(f"{key}/tell"), key, "Done", True, dict(state)),)

    def restore(self, key: Key, views: Sequence[StreamView]) -> dict[str, Any]:
        return dict(views[0].snapshot)


async def test_an_effect_under_way_keeps_the_last_world_until_its_outcome_is_decided(
    journal: SQLiteJournal,
) -> None:
    @dataclass
    class Gate:
        started: asyncio.Event = field(default_factory=asyncio.Event)
        release: asyncio.Event = field(default_factory=asyncio.Event)

        async def execute(self, effect: PendingEffect) -> Mapping[str, Any]:
            self.started.set()
            await self.release.wait()
            return {}

    clock = VirtualClock()
    gate, rests = Gate(), Rests()
    runtime: Runtime[dict[str, Any], int] = Runtime(
        Telling(), journal, gate, clock, listeners=[rests], rest=True)
    await runtime.start()
    await runtime.observe(A, 7, Cause("observation", "world@7"))
    await gate.started.wait()
    for _ in range(10):
        await asyncio.sleep(0)
    assert runtime.state_of(A) is not None and rests.rested == []  # its effect is under way
    gate.release.set()
    await runtime.drain()
    told = [e for e in await journal.history(stream=StreamId(f"{A}/tell")) if e.type == "Told"]
    assert [e.payload for e in told] == [{"world": 7}]  # decided from the last world
    assert runtime.state_of(A) is None and rests.rested == [A]
    await runtime.stop()


async def test_without_rest_an_idle_key_stays(journal: SQLiteJournal) -> None:
    clock = VirtualClock()
    rests = Rests()
    runtime: Runtime[Counter, int] = Runtime(
        CounterMachine(), journal, RecordingExecutor(clock), clock, listeners=[rests])
    await runtime.start()
    await runtime.observe(B, 0, Cause("observation", "target@1"))
    await runtime.drain()
    assert runtime.state_of(B) is not None and rests.rested == []
    await runtime.stop()


async def test_without_rest_too_only_a_key_with_rows_is_read(journal: SQLiteJournal) -> None:
    """Which keys have rows is read at start with or without `rest`: a key new to the
    journal starts blank, unread; one with rows (ended before a restart) is loaded."""
    clock = VirtualClock()
    first = Runtime(CounterMachine(), journal, Refusing(), clock,
                    retry=RetryPolicy(initial=1.0, factor=2.0, jitter=0.0))
    await first.start()
    await first.observe(A, 3, Cause("observation", "target@1"))  # fails: terminal rows
    await first.drain()
    await first.stop()

    counting = CountingJournal(journal)
    again = Runtime(CounterMachine(), counting, RecordingExecutor(clock), clock,
                    retry=RetryPolicy(initial=1.0, factor=2.0, jitter=0.0))
    await again.start()
    await again.observe(B, 1, Cause("observation", "target@2"))
    await again.observe(A, 3, Cause("observation", "target@3"))
    await again.drain()
    assert counting.loads == [A]  # A has rows from before the restart; B none
    state = again.state_of(B)
    assert state is not None and state.count == 1
    await again.stop()
