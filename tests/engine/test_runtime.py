"""The runtime over a small machine of the tests' own, on a virtual clock."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from nicplug.engine.clock import VirtualClock
from nicplug.engine.effects import RecordingExecutor, RetryPolicy
from nicplug.engine.errors import PermanentError, RetryAfterObservation, TemporaryError
from nicplug.engine.journal import Appended, Commit, PendingEffect
from nicplug.engine.listening import RuntimeListener
from nicplug.engine.model import Cause, Key, NewEvent, RecordedEvent, StreamId, StreamView
from nicplug.engine.outbox import check_not_held
from nicplug.engine.runtime import Runtime
from nicplug.engine.sqlite_journal import SQLiteJournal
from tests.engine.counter_machine import REMINDER, Counter, CounterMachine
from tests.engine.journal_support import opened

A, B = Key("ns/a"), Key("ns/b")


def stream(key: Key) -> StreamId:
    return StreamId(f"{key}/count")


@dataclass
class ScriptedExecutor:
    """Raises the scripted errors for an effect's step, in order, then succeeds."""

    clock: VirtualClock
    journal: SQLiteJournal
    script: dict[int, list[Exception]] = field(default_factory=dict)
    calls: list[tuple[float, int, str]] = field(default_factory=list)
    seen_committed: list[bool] = field(default_factory=list)

    async def execute(self, effect: PendingEffect) -> Mapping[str, Any]:
        self.calls.append((self.clock.now(), effect.id, effect.idempotency_key))
        history = await self.journal.history(stream=effect.stream)
        self.seen_committed.append(any(e.type == "Requested" for e in history))
        failures = self.script.get(effect.payload["step"], [])
        if failures:
            raise failures.pop(0)
        return {"step": effect.payload["step"]}


@pytest.fixture
async def journal() -> AsyncIterator[SQLiteJournal]:
    async with opened(":memory:") as j:
        yield j


def make(journal: SQLiteJournal, executor: Any, clock: VirtualClock, **options: Any
         ) -> Runtime[Counter, int]:
    return Runtime(CounterMachine(), journal, executor, clock,
                   retry=RetryPolicy(initial=1.0, factor=2.0, jitter=0.0), **options)


async def types_of(journal: SQLiteJournal, key: Key) -> list[str]:
    return [e.type for e in await journal.history(stream=stream(key))]


async def eventually(journal: SQLiteJournal, key: Key, types: list[str]) -> bool:
    """Whether the stream reaches `types` while the loop turns (no real sleep; each look
    is a round trip through the database thread, behind any commit already queued)."""
    for _ in range(200):
        if await types_of(journal, key) == types:
            return True
        await asyncio.sleep(0)
    return False


async def test_effects_run_after_their_commit_and_outcomes_feed_back(
    journal: SQLiteJournal,
) -> None:
    clock = VirtualClock()
    executor = ScriptedExecutor(clock, journal)
    runtime = make(journal, executor, clock)
    await runtime.start()
    await runtime.observe(A, 2, Cause("observation", "target@1", "rv-1"))
    await runtime.drain()
    assert executor.seen_committed == [True, True]
    assert await types_of(journal, A) == ["Requested", "Bumped", "Requested", "Bumped"]
    rows = await journal.outbox(stream=stream(A), pending_only=False)
    assert [(r.status, r.attempts) for r in rows] == [("succeeded", 1), ("succeeded", 1)]
    assert await journal.timers() == []
    (view,) = await journal.views(key=A)
    assert view.view.snapshot["count"] == 2 and view.version == 4
    await runtime.stop()


async def test_temporary_failures_back_off_and_honour_their_delay(
    journal: SQLiteJournal,
) -> None:
    clock = VirtualClock()
    executor = ScriptedExecutor(clock, journal, script={
        1: [TemporaryError("503 unavailable"), TemporaryError("429", delay=7.0)],
    })
    runtime = make(journal, executor, clock)
    await runtime.start()
    await runtime.observe(A, 1, Cause("observation", "target@1"))
    await runtime.drain()
    (row,) = await journal.outbox()
    assert (row.attempts, row.next_attempt_at, row.last_error) == (1, 1.0, "503 unavailable")
    clock.advance(1.0)
    await runtime.drain()
    (row,) = await journal.outbox()
    assert (row.attempts, row.next_attempt_at) == (2, 8.0)
    clock.advance(6.9)
    await runtime.drain()
    assert len(executor.calls) == 2
    clock.advance(0.1)
    await runtime.drain()
    assert [t for t, _, _ in executor.calls] == [0.0, 1.0, 8.0]
    assert await types_of(journal, A) == ["Requested", "Bumped"]
    (done,) = await journal.outbox(stream=stream(A), pending_only=False)
    assert (done.status, done.attempts) == ("succeeded", 3)
    await runtime.stop()


def test_backoff_grows_is_capped_and_jitters_reproducibly() -> None:
    policy = RetryPolicy(initial=0.5, factor=2.0, max_delay=10.0, jitter=0.2)
    first = [policy.delay(n, random.Random(7)) for n in range(1, 8)]
    assert first == [policy.delay(n, random.Random(7)) for n in range(1, 8)]
    for n, delay in enumerate(first, start=1):
        base = min(10.0, 0.5 * 2 ** (n - 1))
        assert base * 0.8 <= delay <= base * 1.2
    assert policy.delay(50, random.Random(1)) <= 12.0


async def test_permanent_failure_and_exhausted_retries_fail_the_stream(
    journal: SQLiteJournal,
) -> None:
    clock = VirtualClock()
    executor = ScriptedExecutor(clock, journal, script={1: [PermanentError("422 invalid")]})
    runtime = make(journal, executor, clock)
    await runtime.start()
    await runtime.observe(A, 3, Cause("observation", "target@1"))
    await runtime.drain()
    assert await types_of(journal, A) == ["Requested", "Failed"]
    (row,) = await journal.outbox(stream=stream(A), pending_only=False)
    assert (row.status, row.last_error) == ("failed", "422 invalid")
    assert await journal.timers() == []
    await runtime.stop()

    clock = VirtualClock()
    executor = ScriptedExecutor(clock, journal, script={1: [TemporaryError("down")] * 5})
    runtime = Runtime(CounterMachine(), journal, executor, clock,
                      retry=RetryPolicy(initial=1.0, jitter=0.0, max_attempts=2))
    await runtime.start()
    await runtime.observe(B, 1, Cause("observation", "target@1"))
    await runtime.drain()
    clock.advance(1.0)
    await runtime.drain()
    assert await types_of(journal, B) == ["Requested", "Failed"]
    (row,) = await journal.outbox(stream=stream(B), pending_only=False)
    assert row.status == "failed" and row.last_error == "gave up after 2 attempts: down"
    await runtime.stop()


async def test_a_superseded_effect_is_decided_again_with_the_next_world(
    journal: SQLiteJournal,
) -> None:
    clock = VirtualClock()
    executor = ScriptedExecutor(clock, journal, script={1: [RetryAfterObservation("409")]})
    runtime = make(journal, executor, clock)
    await runtime.start()
    await runtime.observe(A, 1, Cause("observation", "target@1"))
    await runtime.drain()
    assert await types_of(journal, A) == ["Requested"]  # waits for the world to move
    await runtime.observe(A, 1, Cause("observation", "target@2"))
    await runtime.drain()
    assert await types_of(journal, A) == ["Requested", "Requested", "Bumped"]
    rows = await journal.outbox(stream=stream(A), pending_only=False)
    assert [(r.idempotency_key, r.status) for r in rows] == [
        ("ns/a/count/bump/1", "failed"), ("ns/a/count/bump/1/again1", "succeeded")]
    await runtime.stop()


async def test_a_superseded_effect_is_decided_again_when_a_newer_version_is_seen(
    journal: SQLiteJournal,
) -> None:
    """A 409 because the object's status moved: the next version is the same for
    decisions (`seen`, no new world), and the step is asked again at once."""
    clock = VirtualClock()
    executor = ScriptedExecutor(clock, journal, script={1: [RetryAfterObservation("409")]})
    runtime = make(journal, executor, clock)
    await runtime.start()
    runtime.seen(B)  # never observed: nothing to go on
    await runtime.observe(A, 1, Cause("observation", "target@1"))
    await runtime.drain()
    assert await types_of(journal, A) == ["Requested"]
    runtime.seen(A)
    await runtime.drain()
    assert await types_of(journal, A) == ["Requested", "Requested", "Bumped"]
    assert not runtime.remembers(B)
    await runtime.stop()


async def test_a_superseded_effect_is_decided_again_when_a_timer_fires_first(
    journal: SQLiteJournal,
) -> None:
    """A 409 with no change behind it (a proxy, an injected fault): the world never
    moves, so only the machine's own timer can get the step going again."""
    clock = VirtualClock()
    executor = ScriptedExecutor(clock, journal, script={1: [RetryAfterObservation("409")]})
    runtime = make(journal, executor, clock)
    await runtime.start()
    await runtime.observe(A, 1, Cause("observation", "target@1"))
    await runtime.drain()
    assert await types_of(journal, A) == ["Requested"]
    clock.advance(REMINDER)
    await runtime.drain()
    # the outcome first: the step is asked again, which re-arms the reminder that fired
    assert await types_of(journal, A) == ["Requested", "Requested", "Bumped"]
    rows = await journal.outbox(stream=stream(A), pending_only=False)
    assert [(r.idempotency_key, r.status) for r in rows] == [
        ("ns/a/count/bump/1", "failed"), ("ns/a/count/bump/1/again1", "succeeded")]
    await runtime.stop()


@dataclass
class Gate:
    """An executor that holds every effect until released."""

    started: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    calls: list[int] = field(default_factory=list)

    async def execute(self, effect: PendingEffect) -> Mapping[str, Any]:
        self.calls.append(effect.id)
        self.started.set()
        await self.release.wait()
        return {}


@dataclass
class ByKey:
    executors: dict[Key, Any]

    async def execute(self, effect: PendingEffect) -> Mapping[str, Any]:
        result: Mapping[str, Any] = await self.executors[effect.key].execute(effect)
        return result


async def test_timers_fire_through_the_key_and_are_durable(journal: SQLiteJournal) -> None:
    clock = VirtualClock()
    gate = Gate()
    runtime = make(journal, gate, clock)
    await runtime.start()
    await runtime.observe(A, 1, Cause("observation", "target@1"))
    await gate.started.wait()
    armed = await journal.timers()
    assert [(t.name, t.deadline) for t in armed] == [("reminder", REMINDER)]
    clock.advance(REMINDER - 1)
    await asyncio.sleep(0)
    assert await types_of(journal, A) == ["Requested"]
    clock.advance(1)
    assert await eventually(journal, A, ["Requested", "Reminded"])
    assert await journal.timers() == []
    reminded = (await journal.history(stream=stream(A)))[1]
    assert reminded.cause.kind == "timer" and reminded.logical_time == REMINDER
    gate.release.set()
    await runtime.stop()


@dataclass
class Watched:
    """A journal that records how appends overlap, per key and overall."""

    inner: SQLiteJournal
    in_flight: dict[Key, int] = field(default_factory=dict)
    most_per_key: int = 0
    most_overall: int = 0

    async def append(self, commit: Commit) -> Appended:
        self.in_flight[commit.key] = self.in_flight.get(commit.key, 0) + 1
        self.most_per_key = max(self.most_per_key, self.in_flight[commit.key])
        self.most_overall = max(self.most_overall, sum(self.in_flight.values()))
        try:
            for _ in range(3):
                await asyncio.sleep(0)
            return await self.inner.append(commit)
        finally:
            self.in_flight[commit.key] -= 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_one_worker_per_key_many_keys_bounded(journal: SQLiteJournal) -> None:
    clock = VirtualClock()
    watched = Watched(journal)
    machine = CounterMachine()
    runtime: Runtime[Counter, int] = Runtime(
        machine, watched, RecordingExecutor(clock), clock, concurrency=4  # type: ignore[arg-type]
    )
    await runtime.start()
    keys = [Key(f"ns/vm-{n}") for n in range(12)]
    for key in keys:
        await runtime.observe(key, 3, Cause("observation", "target@1"))
    await runtime.drain()
    assert watched.most_per_key == 1
    assert 1 < watched.most_overall <= 4
    for key in keys:
        assert await types_of(journal, key) == ["Requested", "Bumped"] * 3
    await runtime.stop()


async def test_observations_waiting_for_a_key_coalesce(journal: SQLiteJournal) -> None:
    clock = VirtualClock()
    machine = CounterMachine()
    runtime = Runtime(machine, journal, RecordingExecutor(clock), clock)
    await runtime.start()
    for n in range(20):
        await runtime.observe(A, 0, Cause("observation", f"target@{n}"))
    await runtime.drain()
    assert machine.decisions <= 2
    await runtime.stop()


async def test_a_concurrent_writer_means_reload_and_decide_again(journal: SQLiteJournal) -> None:
    clock = VirtualClock()
    runtime = make(journal, RecordingExecutor(clock), clock)
    await runtime.start()
    await runtime.observe(A, 1, Cause("observation", "target@1"))
    await runtime.drain()
    # another writer moves the stream on behind the runtime's back
    await journal.append(Commit(
        key=A, cause=Cause("command", "operator"), wall_time=0.0, logical_time=0.0,
        events=(NewEvent(stream(A), "Requested", {"step": 2, "reissue": False}),),
        expected={stream(A): 2},
        views=(StreamView(stream(A), A, "Pending", False,
                          {"count": 1, "reminders": 0, "reissues": 0}),),
    ))
    await runtime.observe(A, 3, Cause("observation", "target@2"))
    await runtime.drain()
    state = runtime.state_of(A)
    assert state is not None and state.pending and state.count == 1
    await runtime.stop()


async def test_recovery_reissues_exactly_the_effects_without_outcome(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    clock = VirtualClock()
    async with opened(path) as journal:
        gate = Gate()  # B's effect will hang mid-flight
        runtime = make(journal, ByKey({A: RecordingExecutor(clock), B: gate}), clock)
        await runtime.start()
        await runtime.observe(A, 1, Cause("observation", "target@1"))
        await runtime.drain()
        await runtime.observe(B, 1, Cause("observation", "target@1"))
        await gate.started.wait()
        await runtime.stop(drain=False)  # as abrupt as a crash
    async with opened(path) as journal:
        (pending,) = await journal.outbox()
        assert pending.stream == stream(B) and pending.id == gate.calls[0]
        again = RecordingExecutor(clock)
        runtime = make(journal, again, clock)
        await runtime.start()
        await runtime.drain()
        assert [e.effect.id for e in again.executed] == [pending.id]
        assert await types_of(journal, A) == ["Requested", "Bumped"]
        assert await types_of(journal, B) == ["Requested", "Bumped"]
        assert [t.stream for t in await journal.timers()] == []
        clock.advance(REMINDER * 2)
        await runtime.drain()
        assert await types_of(journal, B) == ["Requested", "Bumped"]
        await runtime.stop()


async def test_a_retry_timed_by_a_clock_that_ran_ahead_waits_at_most_the_longest_delay(
    tmp_path: Path,
) -> None:
    """The wall clock ran an hour ahead when a write failed (Retry-After 3 s), then was
    set right: the retry the journal keeps for 3603 s is tried within the policy's
    longest delay (10 s), not an hour later (seeds 38207, 38356 of the simulation)."""
    path = tmp_path / "journal.db"
    retry = RetryPolicy(initial=1.0, factor=2.0, max_delay=10.0, jitter=0.0)
    ahead = VirtualClock(3600.0)
    async with opened(path) as journal:
        failing = ScriptedExecutor(ahead, journal, script={1: [TemporaryError("500", delay=3.0)]})
        runtime = Runtime(CounterMachine(), journal, failing, ahead, retry=retry)
        await runtime.start()
        await runtime.observe(A, 1, Cause("observation", "target@1"))
        await runtime.drain()
        (row,) = await journal.outbox()
        assert (row.attempts, row.next_attempt_at) == (1, 3603.0)
        await runtime.stop(drain=False)
    clock = VirtualClock(0.0)  # set right
    async with opened(path) as journal:
        again = RecordingExecutor(clock)
        runtime = Runtime(CounterMachine(), journal, again, clock, retry=retry)
        await runtime.start()
        await runtime.drain()
        clock.advance(9.9)
        await runtime.drain()
        assert again.executed == []
        clock.advance(0.1)
        await runtime.drain()
        assert [e.at for e in again.executed] == [10.0]
        assert await types_of(journal, A) == ["Requested", "Bumped"]
        await runtime.stop()


async def test_recovery_rearms_timers(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    clock = VirtualClock()
    gate = Gate()
    async with opened(path) as journal:
        runtime = make(journal, gate, clock)
        await runtime.start()
        await runtime.observe(A, 1, Cause("observation", "target@1"))
        await gate.started.wait()
        await runtime.stop(drain=False)
    async with opened(path) as journal:
        gate2 = Gate()
        runtime = make(journal, gate2, clock)
        await runtime.start()
        await gate2.started.wait()  # the effect without outcome is re-issued...
        clock.advance(REMINDER)  # ...and the timer fires while it is in flight
        assert await eventually(journal, A, ["Requested", "Reminded"])
        assert len(gate2.calls) == 1
        gate2.release.set()
        await runtime.drain()
        assert await types_of(journal, A) == ["Requested", "Reminded", "Bumped"]
        await runtime.stop()


async def test_stop_drains_work_in_flight(journal: SQLiteJournal) -> None:
    clock = VirtualClock()
    runtime = make(journal, RecordingExecutor(clock), clock)
    await runtime.start()
    for n in range(10):
        await runtime.observe(Key(f"ns/vm-{n}"), 2, Cause("observation", "target@1"))
    await runtime.stop()
    for n in range(10):
        assert await types_of(journal, Key(f"ns/vm-{n}")) == ["Requested", "Bumped"] * 2
    assert await journal.outbox() == []
    with pytest.raises(RuntimeError, match="not running"):
        await runtime.observe(A, 1, Cause("observation", "late"))


class Recorder(RuntimeListener):
    def __init__(self) -> None:
        self.transitions: list[RecordedEvent] = []
        self.commits: list[tuple[Key, int]] = []
        self.effects: list[str] = []

    def on_transition(self, event: RecordedEvent) -> None:
        self.transitions.append(event)

    def on_commit(self, key: Key, seconds: float, events: int) -> None:
        assert seconds >= 0
        self.commits.append((key, events))

    def on_effect(self, effect: PendingEffect, phase: str, error: str | None) -> None:
        self.effects.append(phase)


class Broken(RuntimeListener):
    def on_transition(self, event: RecordedEvent) -> None:
        raise RuntimeError("a broken metric")


async def test_listeners_see_transitions_commits_and_effects(journal: SQLiteJournal) -> None:
    clock = VirtualClock()
    recorder = Recorder()
    executor = ScriptedExecutor(clock, journal, script={1: [TemporaryError("503")]})
    runtime = make(journal, executor, clock, listeners=[Broken(), recorder])
    await runtime.start()
    await runtime.observe(A, 1, Cause("observation", "target@1"))
    await runtime.drain()
    clock.advance(1.0)
    await runtime.drain()
    assert [(e.type, e.position > 0) for e in recorder.transitions] == [
        ("Requested", True), ("Bumped", True)]
    assert recorder.commits == [(A, 1), (A, 1)]
    assert recorder.effects == ["started", "retrying", "started", "succeeded"]
    await runtime.stop()


async def test_same_inputs_give_the_same_journal() -> None:
    async def run() -> list[tuple[Any, ...]]:
        clock = VirtualClock()
        async with opened(":memory:") as journal:
            executor = ScriptedExecutor(clock, journal, script={2: [TemporaryError("x")]})
            runtime = make(journal, executor, clock, rng=random.Random(3))
            await runtime.start()
            for n, key in enumerate([A, B, Key("ns/c")]):
                await runtime.observe(key, n + 1, Cause("observation", f"t@{n}", f"rv{n}"))
            await runtime.drain()
            clock.advance(REMINDER)
            await runtime.drain()
            await runtime.stop()
            return sorted(
                (e.stream, e.version, e.type, dict(e.payload), e.cause, e.logical_time)
                for e in await journal.read_all()
            )

    first = await run()
    assert len(first) > 6 and first == await run()


@dataclass
class Counted:
    """A journal that counts its appends."""

    inner: SQLiteJournal
    appends: int = 0

    async def append(self, commit: Commit) -> Appended:
        self.appends += 1
        return await self.inner.append(commit)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class ViewCounting(CounterMachine):
    def __init__(self) -> None:
        super().__init__()
        self.listed = 0

    def views(self, state: Counter) -> list[StreamView]:
        self.listed += 1
        return list(super().views(state))


async def test_an_empty_decision_touches_no_journal_and_lists_no_views(
    journal: SQLiteJournal,
) -> None:
    clock = VirtualClock()
    counted, machine = Counted(journal), ViewCounting()
    runtime: Runtime[Counter, int] = Runtime(
        machine, counted, RecordingExecutor(clock), clock  # type: ignore[arg-type]
    )
    await runtime.start()
    await runtime.observe(A, 1, Cause("observation", "target@1"))
    await runtime.drain()
    assert await types_of(journal, A) == ["Requested", "Bumped"]
    appends, listed = counted.appends, machine.listed
    for n in range(3):  # the target is reached: nothing to decide, nothing to write
        await runtime.observe(A, 1, Cause("observation", f"again@{n}"))
        await runtime.drain()
    assert counted.appends == appends
    assert machine.listed == listed
    await runtime.observe(A, 2, Cause("observation", "target@2"))
    await runtime.drain()
    assert await types_of(journal, A) == ["Requested", "Bumped"] * 2
    await runtime.stop()


async def test_a_held_key_decides_nothing_until_it_is_observed_again(
    journal: SQLiteJournal,
) -> None:
    clock = VirtualClock()
    gate = Gate()
    runtime = make(journal, gate, clock)
    await runtime.start()
    await runtime.observe(A, 1, Cause("observation", "target@1"))
    await gate.started.wait()
    runtime.hold(A)  # its world can no longer be read

    clock.advance(REMINDER * 3)
    gate.release.set()
    await runtime.drain()
    assert await types_of(journal, A) == ["Requested"]  # no timer, no outcome decided

    await runtime.observe(A, 1, Cause("observation", "target@2"))
    await runtime.drain()  # the outcome first; the reminder it made moot is dropped
    assert await types_of(journal, A) == ["Requested", "Bumped"]
    await runtime.stop()


async def test_a_retry_due_while_its_key_is_held_waits_for_the_next_observation(
    journal: SQLiteJournal,
) -> None:
    clock = VirtualClock()
    executor = ScriptedExecutor(clock, journal, script={1: [TemporaryError("503")]})
    runtime = make(journal, executor, clock)
    await runtime.start()
    await runtime.observe(A, 1, Cause("observation", "target@1"))
    await runtime.drain()
    assert [t for t, _, _ in executor.calls] == [0.0]  # the retry is due at 1.0
    runtime.hold(A)

    clock.advance(5.0)
    await runtime.drain()
    assert len(executor.calls) == 1  # held still: not attempted from the last world

    await runtime.observe(A, 1, Cause("observation", "target@2"))
    await runtime.drain()
    assert [t for t, _, _ in executor.calls] == [0.0, 5.0]
    assert await types_of(journal, A) == ["Requested", "Bumped"]
    rows = await journal.outbox(stream=stream(A), pending_only=False)
    assert [(r.status, r.attempts) for r in rows] == [("succeeded", 2)]
    await runtime.stop()


@dataclass
class FencedWriter:
    """Reads, waits to be released, then writes: the fence checked the instant before
    the write, as the Kubernetes calls do."""

    started: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    writes: list[int] = field(default_factory=list)

    async def execute(self, effect: PendingEffect) -> Mapping[str, Any]:
        self.started.set()
        await self.release.wait()
        check_not_held()
        self.writes.append(effect.id)
        return {}


async def test_an_attempt_under_way_when_its_key_is_held_writes_nothing(
    journal: SQLiteJournal,
) -> None:
    clock = VirtualClock()
    writer = FencedWriter()
    runtime = make(journal, writer, clock)
    await runtime.start()
    await runtime.observe(A, 1, Cause("observation", "target@1"))
    await writer.started.wait()
    runtime.hold(A)  # between the attempt's read and its write
    writer.release.set()
    await runtime.drain()
    assert writer.writes == []
    assert await types_of(journal, A) == ["Requested"]

    await runtime.observe(A, 1, Cause("observation", "target@2"))
    await runtime.drain()  # decided again from the readable world: asked for again
    assert writer.writes == [2]
    assert await types_of(journal, A) == ["Requested", "Requested", "Bumped"]
    await runtime.stop()


async def test_recovery_with_hold_sends_nothing_before_the_key_is_observed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.db"
    clock = VirtualClock()
    async with opened(path) as journal:
        gate = Gate()
        runtime = make(journal, gate, clock)
        await runtime.start()
        await runtime.observe(A, 1, Cause("observation", "target@1"))
        await gate.started.wait()
        await runtime.stop(drain=False)
    async with opened(path) as journal:
        again = RecordingExecutor(clock)
        runtime = make(journal, again, clock)
        await runtime.start(hold=True)
        clock.advance(REMINDER)
        await runtime.drain()
        assert again.executed == []
        assert await types_of(journal, A) == ["Requested"]

        await runtime.observe(A, 1, Cause("observation", "target@1"))
        await runtime.drain()
        assert len(again.executed) == 1
        assert await types_of(journal, A) == ["Requested", "Reminded", "Bumped"]
        await runtime.stop()


async def test_a_forgotten_key_leaves_memory_once_nothing_of_it_is_live(
    journal: SQLiteJournal,
) -> None:
    """A key gone from the world is dropped from memory when its streams have ended and
    no timer is armed for them; a live one is kept; either loads again from the journal."""
    clock = VirtualClock()
    executor = ScriptedExecutor(clock, journal, script={1: [PermanentError("422 invalid")]})
    runtime = make(journal, executor, clock)
    await runtime.start()
    await runtime.observe(A, 3, Cause("observation", "target@1"))  # fails: terminal
    await runtime.observe(B, 0, Cause("observation", "target@1"))  # idle: never written
    runtime.forget(A)
    runtime.forget(B)
    await runtime.drain()
    assert runtime.state_of(A) is None and runtime.state_of(B) is None
    assert not runtime.remembers(A) and not runtime.remembers(B)  # nor how often observed

    await runtime.observe(A, 3, Cause("observation", "target@2"))  # back: loaded again
    await runtime.drain()
    state = runtime.state_of(A)
    assert state is not None and state.failed
    await runtime.stop()


async def test_a_forgotten_key_with_a_live_stream_or_a_timer_stays(
    journal: SQLiteJournal,
) -> None:
    clock = VirtualClock()
    executor = ScriptedExecutor(clock, journal, script={1: [TemporaryError("down")]})
    runtime = make(journal, executor, clock)
    await runtime.start()
    await runtime.observe(A, 1, Cause("observation", "target@1"))  # pending, a reminder
    await runtime.drain()
    runtime.forget(A)
    await runtime.drain()
    state = runtime.state_of(A)
    assert state is not None and state.pending
    assert await journal.timers()  # the reminder is armed
    clock.advance(1.0)  # the retry succeeds: counted, but the stream has not ended
    await runtime.drain()
    state = runtime.state_of(A)
    assert state is not None and state.count == 1
    await runtime.stop()


async def test_effects_in_flight_are_bounded(journal: SQLiteJournal) -> None:
    """Twelve keys each issue an effect at once; at most `effects_in_flight` execute
    together, and every one runs in the end."""

    class Gated:
        def __init__(self) -> None:
            self.running = self.most = 0
            self.done = 0
            self.gate = asyncio.Event()

        async def execute(self, effect: PendingEffect) -> Mapping[str, Any]:
            self.running += 1
            self.most = max(self.most, self.running)
            await self.gate.wait()
            self.running -= 1
            self.done += 1
            return {"step": effect.payload["step"]}

    clock = VirtualClock()
    executor = Gated()
    runtime = make(journal, executor, clock, effects_in_flight=3)
    await runtime.start()
    keys = [Key(f"ns/k{i}") for i in range(12)]
    for key in keys:
        await runtime.observe(key, 1, Cause("observation", "target@1"))
    for _ in range(200):  # each look a round trip through the database thread
        await journal.timers()
        if executor.running == 3 and len(await journal.outbox(pending_only=True)) == 12:
            break
    for _ in range(20):  # and more turns: still no fourth
        await journal.timers()
    assert executor.running == executor.most == 3
    executor.gate.set()
    await runtime.drain()
    assert executor.done == 12 and executor.most == 3
    await runtime.stop()
