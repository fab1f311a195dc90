"""Commits the journal refuses: nothing consumed is lost, nothing stays wedged.

The failures are real SQLite failures on the runtime's own write path: a trigger,
created through a second connection to the journal file, aborts the statement a
commit needs (recording an outcome, cancelling a fired timer, appending an event),
and is dropped again to let writes through. The clock is virtual.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nicplug.engine.clock import VirtualClock
from nicplug.engine.commit_retry import COMMIT_RETRY
from nicplug.engine.effects import RecordingExecutor
from nicplug.engine.errors import JournalError
from nicplug.engine.listening import RuntimeListener
from nicplug.engine.model import Cause, Key
from nicplug.engine.runtime import Runtime
from nicplug.engine.sqlite_journal import SQLiteJournal
from tests.engine.counter_machine import REMINDER, Counter
from tests.engine.test_runtime import Gate, eventually, make, stream, types_of

A, B, C = Key("ns/a"), Key("ns/b"), Key("ns/c")
LONGEST_WAIT = COMMIT_RETRY.max_delay * (1 + COMMIT_RETRY.jitter)

REFUSE_OUTCOMES = """CREATE TRIGGER refuse BEFORE UPDATE OF status ON effects
    WHEN NEW.status = 'succeeded' BEGIN SELECT RAISE(ABORT, 'outcome refused'); END"""
REFUSE_TIMER_CANCELS = """CREATE TRIGGER refuse BEFORE DELETE ON timers
    BEGIN SELECT RAISE(ABORT, 'timer cancel refused'); END"""
REFUSE_EVENTS = """CREATE TRIGGER refuse BEFORE INSERT ON events
    BEGIN SELECT RAISE(ABORT, 'event refused'); END"""


class Refusals:
    """Arms and disarms a refusing trigger on the journal file, as another process could."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _run(self, sql: str) -> None:
        conn = sqlite3.connect(self.path, timeout=5)
        try:
            conn.execute(sql)
            conn.commit()
        finally:
            conn.close()

    def arm(self, trigger: str) -> None:
        self._run(trigger)

    def disarm(self) -> None:
        self._run("DROP TRIGGER refuse")


class JournalStates(RuntimeListener):
    def __init__(self) -> None:
        self.changes: list[str | None] = []
        self.errors: list[BaseException] = []

    def on_journal(self, error: JournalError | None) -> None:
        self.changes.append(None if error is None else str(error))

    def on_error(self, key: Key, error: BaseException) -> None:
        self.errors.append(error)


@pytest.fixture
async def journal(tmp_path: Path) -> AsyncIterator[SQLiteJournal]:
    journal = await SQLiteJournal.open(tmp_path / "journal.db", synchronous="NORMAL")
    yield journal
    await journal.close()


async def settle(
    runtime: Runtime[Counter, int], clock: VirtualClock, seconds: float, *,
    journal: SQLiteJournal, drain: bool = True,
) -> None:
    """Let the clock run `seconds` in small steps, letting the runtime work after each
    (by draining it, or, with an effect held in flight, by a few journal round trips)."""
    step = 0.05
    for _ in range(int(seconds / step) + 1):
        clock.advance(step)
        if drain:
            await runtime.drain()
        else:
            for _ in range(3):
                await journal.timers()


async def test_a_refused_outcome_is_put_back_and_recorded_once_writes_succeed(
    journal: SQLiteJournal,
) -> None:
    clock = VirtualClock()
    executor = RecordingExecutor(clock)
    states = JournalStates()
    runtime = make(journal, executor, clock, listeners=[states])
    refusals = Refusals(Path(journal.path))
    await runtime.start()
    refusals.arm(REFUSE_OUTCOMES)
    await runtime.observe(A, 2, Cause("observation", "target@1"))
    await runtime.drain()
    await settle(runtime, clock, 3.0, journal=journal)  # several retries, all refused
    (row,) = await journal.outbox()
    assert row.status == "issued"
    assert await types_of(journal, A) == ["Requested"]
    assert len(executor.executed) == 1
    assert runtime.journal_failing is not None
    assert states.changes == ["rejected: outcome refused"], "reported once, not per retry"

    refusals.disarm()
    await settle(runtime, clock, LONGEST_WAIT, journal=journal)
    # The outcome was recorded and the machine went on: the next step was not
    # deduplicated onto a wedged row.
    assert await types_of(journal, A) == ["Requested", "Bumped", "Requested", "Bumped"]
    rows = await journal.outbox(stream=stream(A), pending_only=False)
    assert [(r.status, r.attempts) for r in rows] == [("succeeded", 1), ("succeeded", 1)]
    assert [e.effect.payload["step"] for e in executor.executed] == [1, 2], "each step sent once"
    assert runtime.journal_failing is None
    assert states.changes == ["rejected: outcome refused", None]
    assert states.errors == []
    await runtime.stop()


async def test_a_fired_timer_whose_commit_is_refused_fires_again(
    journal: SQLiteJournal,
) -> None:
    clock = VirtualClock()
    gate = Gate()  # the effect never answers: only the reminder moves the machine
    runtime = make(journal, gate, clock)
    refusals = Refusals(Path(journal.path))
    await runtime.start()
    await runtime.observe(A, 1, Cause("observation", "target@1"))
    await gate.started.wait()
    refusals.arm(REFUSE_TIMER_CANCELS)
    clock.advance(REMINDER)
    await settle(runtime, clock, 2.0, journal=journal, drain=False)
    assert await types_of(journal, A) == ["Requested"]
    assert [t.name for t in await journal.timers()] == ["reminder"]  # still armed, durably
    refusals.disarm()
    await settle(runtime, clock, LONGEST_WAIT, journal=journal, drain=False)
    assert await eventually(journal, A, ["Requested", "Reminded"])
    assert await journal.timers() == []
    gate.release.set()
    await runtime.stop()


async def test_every_key_refused_is_decided_again_as_soon_as_one_goes_through(
    journal: SQLiteJournal,
) -> None:
    clock = VirtualClock()
    executor = RecordingExecutor(clock)
    states = JournalStates()
    runtime = make(journal, executor, clock, listeners=[states])
    refusals = Refusals(Path(journal.path))
    await runtime.start()
    refusals.arm(REFUSE_EVENTS)
    await runtime.observe(A, 1, Cause("observation", "a@1"))
    await runtime.drain()
    await settle(runtime, clock, 10.0, journal=journal)  # A's backoff has grown to 5 s
    await runtime.observe(B, 1, Cause("observation", "b@1"))  # B's is still short
    await runtime.drain()
    assert await types_of(journal, A) == [] and await types_of(journal, B) == []
    assert len(states.changes) == 1, "one report for the whole outage"
    assert runtime.journal_failing is not None
    refusals.disarm()
    await settle(runtime, clock, COMMIT_RETRY.initial * 1.5, journal=journal)
    # B's retry went through, and A went with it instead of waiting out its backoff.
    for key in (A, B):
        assert await types_of(journal, key) == ["Requested", "Bumped"], key
    assert states.changes[-1] is None and runtime.journal_failing is None
    await runtime.stop()


async def test_a_unit_refused_for_good_keeps_the_journal_refusing_without_flapping(
    journal: SQLiteJournal,
) -> None:
    """Another key's commits succeed meanwhile: the journal still counts as refusing
    (one report, not one per commit that succeeds) until the refused key goes through."""
    clock = VirtualClock()
    executor = RecordingExecutor(clock)
    states = JournalStates()
    runtime = make(journal, executor, clock, listeners=[states])
    refusals = Refusals(Path(journal.path))
    await runtime.start()
    refusals.arm("""CREATE TRIGGER refuse BEFORE INSERT ON events WHEN NEW.key = 'ns/a'
        BEGIN SELECT RAISE(ABORT, 'event refused'); END""")
    await runtime.observe(A, 1, Cause("observation", "a@1"))
    await runtime.drain()
    for n in range(20):
        await runtime.observe(B, n + 1, Cause("observation", f"b@{n}"))
        await runtime.drain()
    assert len(await types_of(journal, B)) == 40
    assert states.changes == ["rejected: event refused"]
    assert runtime.journal_failing is not None
    refusals.disarm()
    await settle(runtime, clock, LONGEST_WAIT, journal=journal)
    assert await types_of(journal, A) == ["Requested", "Bumped"]
    assert states.changes == ["rejected: event refused", None]
    await runtime.stop()
