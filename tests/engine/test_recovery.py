"""Recovery folds events: a snapshot is a cache, trusted only when it can be.

The runtime over the tests' counter machine and a journal file; the snapshots are
then damaged by hand, as an old version, a bug or an operator could leave them.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from nicplug.adapters.core.observability import Metrics
from nicplug.adapters.core.reporting import MetricsListener
from nicplug.engine.clock import VirtualClock
from nicplug.engine.effects import RecordingExecutor
from nicplug.engine.listening import RuntimeListener
from nicplug.engine.model import Cause, Key
from nicplug.engine.runtime import Runtime
from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.engine.upcasting import Upcasters
from tests.engine.counter_machine import Counter, CounterMachine
from tests.engine.journal_support import opened

A, B = Key("ns/a"), Key("ns/b")


class Rebuilds(RuntimeListener):
    def __init__(self) -> None:
        self.reasons: dict[Key, str] = {}

    def on_rebuild(self, key: Key, reason: str) -> None:
        self.reasons[key] = reason


async def count_to(path: Path, targets: dict[Key, int]) -> None:
    clock = VirtualClock()
    async with opened(path) as journal:
        runtime: Runtime[Counter, int] = Runtime(
            CounterMachine(), journal, RecordingExecutor(clock), clock
        )
        await runtime.start()
        for key, target in targets.items():
            await runtime.observe(key, target, Cause("observation", f"{key}@1", f"{key}@1"))
        await runtime.drain()
        await runtime.stop()


async def recovered(path: Path) -> tuple[dict[Key, Counter | None], Rebuilds]:
    clock = VirtualClock()
    rebuilds = Rebuilds()
    async with opened(path) as journal:
        runtime: Runtime[Counter, int] = Runtime(
            CounterMachine(), journal, RecordingExecutor(clock), clock, listeners=[rebuilds]
        )
        await runtime.start()
        states = {key: runtime.state_of(key) for key in (A, B)}
        await runtime.stop(drain=False)
    return states, rebuilds


def count(states: dict[Key, Counter | None], key: Key) -> int | None:
    state = states[key]
    return None if state is None else state.count


def sql(path: Path, statement: str, *params: object) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(statement, params)


async def live_journal(tmp_path: Path) -> Path:
    """Two live counters: a at 3 of 5 steps, b at 1 of 2 (each waits for a reminder)."""
    path = tmp_path / "journal.db"
    await count_to(path, {A: 3, B: 1})
    sql(path, "UPDATE streams SET terminal = 0, state = 'Pending'")  # keep both live
    return path


async def test_a_trusted_snapshot_is_loaded_with_the_events_after_it(tmp_path: Path) -> None:
    path = await live_journal(tmp_path)
    # the cache of a as it stood before any event: every event is in its tail
    sql(path, "UPDATE streams SET snapshot = ?, snapshot_through = 0 WHERE key = ?",
        '{"count": 0, "reminders": 0, "reissues": 0}', A)
    states, rebuilds = await recovered(path)
    assert count(states, A) == 3
    assert count(states, B) == 1
    assert rebuilds.reasons == {}


async def test_a_snapshot_of_another_schema_is_rebuilt_from_the_events(tmp_path: Path) -> None:
    path = await live_journal(tmp_path)
    sql(path, "UPDATE streams SET snapshot = ?, snapshot_schema = 7 WHERE key = ?",
        '{"count": 99, "reminders": 0, "reissues": 0}', A)
    states, rebuilds = await recovered(path)
    assert count(states, A) == 3  # the events', not the cache's
    assert "schema 7" in rebuilds.reasons[A] and set(rebuilds.reasons) == {A}


async def test_a_snapshot_ahead_of_its_stream_or_unreadable_is_rebuilt(tmp_path: Path) -> None:
    path = await live_journal(tmp_path)
    sql(path, "UPDATE streams SET snapshot_through = version + 4 WHERE key = ?", A)
    sql(path, "UPDATE streams SET snapshot = '{\"count\": 1}' WHERE key = ?", B)
    states, rebuilds = await recovered(path)
    assert count(states, A) == 3
    assert count(states, B) == 1
    assert "the stream is at" in rebuilds.reasons[A]
    assert "disagree" in rebuilds.reasons[B]


async def test_a_rebuilt_key_writes_its_snapshots_again(tmp_path: Path) -> None:
    path = await live_journal(tmp_path)
    sql(path, "UPDATE streams SET snapshot = '{}', snapshot_schema = 0")
    clock = VirtualClock()
    async with opened(path) as journal:
        runtime: Runtime[Counter, int] = Runtime(
            CounterMachine(), journal, RecordingExecutor(clock), clock
        )
        await runtime.start()
        await runtime.observe(A, 4, Cause("observation", "a@2", "a@2"))
        await runtime.drain()
        await runtime.stop()
        (view,) = await journal.views(key=A)
    assert view.stored_schema == 1 and view.through == view.version
    assert view.view.snapshot["count"] == 4


async def test_the_events_a_snapshot_includes_are_not_folded_twice(tmp_path: Path) -> None:
    path = await live_journal(tmp_path)
    journal = await SQLiteJournal.open(path)
    try:
        ((view,), tail) = (await journal.views(key=A), await journal.tail(key=A))
    finally:
        await journal.close()
    assert view.through == view.version and list(tail) == []


class Errors(RuntimeListener):
    def __init__(self) -> None:
        self.keys: list[Key] = []

    def on_error(self, key: Key, error: BaseException) -> None:
        self.keys.append(key)


async def test_a_key_with_an_event_from_a_newer_version_fails_alone(tmp_path: Path) -> None:
    path = await live_journal(tmp_path)
    sql(path, "UPDATE streams SET snapshot_through = 0 WHERE key = ?", A)  # a's tail: all
    sql(path, "UPDATE events SET schema_version = 9 WHERE key = ? AND version = 2", A)
    known = Upcasters({"Requested": 1, "Bumped": 1, "Failed": 1, "Reminded": 1})
    clock = VirtualClock()
    errors = Errors()
    async with opened(path, upcasters=known) as journal:
        runtime: Runtime[Counter, int] = Runtime(
            CounterMachine(), journal, RecordingExecutor(clock), clock, listeners=[errors]
        )
        await runtime.start()
        states = {key: runtime.state_of(key) for key in (A, B)}
        await runtime.stop(drain=False)
    assert errors.keys == [A] and states[A] is None
    assert count(states, B) == 1  # the other VM is served


async def test_a_rebuild_is_counted_in_the_controllers_metric(tmp_path: Path) -> None:
    path = await live_journal(tmp_path)
    sql(path, "UPDATE streams SET snapshot_schema = 7")
    metrics = Metrics()
    clock = VirtualClock()
    async with opened(path) as journal:
        runtime: Runtime[Counter, int] = Runtime(
            CounterMachine(), journal, RecordingExecutor(clock), clock,
            listeners=[MetricsListener(metrics)],
        )
        await runtime.start()
        await runtime.stop(drain=False)
    assert metrics.registry.get_sample_value("nicplug_snapshot_rebuilds_total") == 2.0
