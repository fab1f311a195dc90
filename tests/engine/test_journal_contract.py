"""The journal's contract, run against every backend: SQLite in memory and in a file,
and PostgreSQL (a real server, `tests/postgres_support.py`).

The tests that open a journal by its file path themselves (`sqlite_only`) are about
SQLite's file: reopening it, a read-only reader beside the writer's WAL, closing it.
Their PostgreSQL counterparts are in `test_postgres_journal.py`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nicplug.engine.errors import JournalClosed, JournalConflict, JournalError, JournalRefused
from nicplug.engine.journal import EffectUpdate
from nicplug.engine.model import EffectRequest, Key, StreamId, TimerCancel, TimerRequest
from nicplug.engine.postgres_journal import PostgresJournal
from nicplug.engine.postgres_opening import is_dsn
from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.engine.upcasting import Upcasters
from tests.engine.journal_support import commit, opened

S1, S2 = StreamId("op-1"), StreamId("op-2")


sqlite_only = pytest.mark.sqlite_only  # opens an SQLite file by its path

ALL_JOURNALS = ["memory", "file", "postgres"]


@pytest.fixture(params=ALL_JOURNALS)
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str | Path:
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_dsn"))
    return ":memory:" if request.param == "memory" else tmp_path / "journal.db"


@pytest.fixture
async def journal(location: str | Path) -> AsyncIterator[SQLiteJournal | PostgresJournal]:
    if isinstance(location, str) and is_dsn(location):
        pg = await PostgresJournal.open(location)
        try:
            yield pg
        finally:
            await pg.close()
        return
    async with opened(location) as j:
        yield j


async def test_appends_get_versions_and_positions(journal: SQLiteJournal) -> None:
    first = await journal.append(commit("op-1", 0, "Requested", "AnnotationPatched"))
    second = await journal.append(commit("op-2", 0, "Requested"))
    third = await journal.append(commit("op-1", 2, "SDNReady"))
    assert [(e.version, e.position) for e in first.events] == [(1, 1), (2, 2)]
    assert [(e.stream, e.version, e.position) for e in second.events] == [(S2, 1, 3)]
    assert third.events[0].version == 3
    history = await journal.history(stream=S1)
    assert [e.type for e in history] == ["Requested", "AnnotationPatched", "SDNReady"]
    assert history[0].cause.kind == "observation" and history[0].payload == {"n": 0}
    assert (history[0].wall_time, history[0].logical_time) == (1000.0, 5.0)


async def test_stale_or_skipping_version_is_a_typed_conflict(journal: SQLiteJournal) -> None:
    await journal.append(commit("op-1", 0, "Requested", "AnnotationPatched"))
    with pytest.raises(JournalConflict) as stale:
        await journal.append(commit("op-1", 1, "SDNReady"))
    assert (stale.value.stream, stale.value.expected, stale.value.actual) == ("op-1", 1, 2)
    with pytest.raises(JournalConflict):
        await journal.append(commit("op-1", 5, "SDNReady"))
    assert len(await journal.history(stream=S1)) == 2


async def test_a_conflict_fails_alone_within_its_group(journal: SQLiteJournal) -> None:
    results = await asyncio.gather(
        journal.append(commit("op-1", 0, "Requested", view="Requested")),
        journal.append(commit("op-1", 0, "Requested", view="Wrong")),
        journal.append(commit("op-2", 0, "Requested", view="Requested")),
        return_exceptions=True,
    )
    assert isinstance(results[1], JournalConflict)
    assert not isinstance(results[0], BaseException) and not isinstance(results[2], BaseException)
    assert journal.stats.groups < 3
    views = {v.view.stream: v for v in await journal.views()}
    assert views[S1].view.state == "Requested" and views[S1].version == 1
    assert views[S2].view.state == "Requested"


async def test_the_same_cause_is_never_applied_twice(journal: SQLiteJournal) -> None:
    once = await journal.append(commit("op-1", 0, "Requested", "Patched", dedup="rv-7"))
    assert not once.duplicate and len(once.events) == 2
    again = await journal.append(
        commit("op-1", 2, "Requested", dedup="rv-7", view="Again",
               effects=(EffectRequest(S1, "Patch", {}, "patch-1"),))
    )
    assert again.duplicate and again.events == () and again.effects == ()
    assert len(await journal.history(stream=S1)) == 2
    assert await journal.views() == [] and await journal.outbox() == []
    other = await journal.append(commit("op-1", 2, "SDNReady", dedup="rv-8"))
    assert other.events[0].version == 3


async def test_read_model_commits_with_its_events_only(journal: SQLiteJournal) -> None:
    await journal.append(commit("op-1", 0, "Requested", view="Requested", key="ns/a"))
    await journal.append(commit("op-2", 0, "Attached", view="Attached", terminal=True, key="ns/b"))
    with pytest.raises(JournalConflict):
        await journal.append(commit("op-1", 0, "Requested", view="Broken", key="ns/a"))
    live = await journal.views(live=True)
    assert [(v.view.stream, v.view.state, v.version) for v in live] == [(S1, "Requested", 1)]
    assert live[0].view.snapshot == {"last": "Requested"}
    by_key = await journal.views(key=Key("ns/b"))
    assert [v.view.terminal for v in by_key] == [True]


async def test_outbox_lifecycle(journal: SQLiteJournal) -> None:
    patch = EffectRequest(S1, "PatchPodNetworks", {"add": ["user-net"]}, "op-1/patch/1")
    first = await journal.append(commit("op-1", 0, "Requested", effects=(patch,)))
    again = await journal.append(commit("op-1", 1, "Reissued", effects=(patch,)))
    assert first.effects[0].new and not again.effects[0].new
    assert first.effects[0].id == again.effects[0].id
    pending = await journal.outbox()
    assert [(p.type, p.payload, p.status, p.attempts) for p in pending] == [
        ("PatchPodNetworks", {"add": ["user-net"]}, "issued", 0)
    ]
    effect_id = pending[0].id
    await journal.append(commit("op-1", 2, effect_updates=(
        EffectUpdate(effect_id, "issued", 1, next_attempt_at=9.0, last_error="503"),)))
    assert (await journal.outbox())[0].last_error == "503"
    await journal.append(commit("op-1", 2, "Patched", effect_updates=(
        EffectUpdate(effect_id, "succeeded", 2),)))
    assert await journal.outbox() == []
    reissued = await journal.append(commit("op-1", 3, "Again", effects=(patch,)))
    assert reissued.effects[0].new and reissued.effects[0].id != effect_id
    rows = await journal.outbox(stream=S1, pending_only=False)
    assert [r.status for r in rows] == ["succeeded", "issued"]


async def test_timers_arm_rearm_and_cancel(journal: SQLiteJournal) -> None:
    await journal.append(commit("op-1", 0, "Requested", timers=(
        TimerRequest(S1, "sdn-deadline", 30.0), TimerRequest(S1, "attach", 60.0))))
    await journal.append(commit("op-2", 0, "Requested", timers=(TimerRequest(S2, "x", 10.0),)))
    await journal.append(commit("op-1", 1, timers=(TimerRequest(S1, "sdn-deadline", 45.0),),
                                cancel_timers=(TimerCancel(S1, "attach"),)))
    armed = await journal.timers()
    assert [(t.stream, t.name, t.deadline) for t in armed] == [
        (S2, "x", 10.0), (S1, "sdn-deadline", 45.0)
    ]
    assert [t.name for t in await journal.timers(due_by=20.0)] == ["x"]
    assert armed[0].key == "ns/vm"


async def test_read_all_in_position_order(journal: SQLiteJournal) -> None:
    await asyncio.gather(*(journal.append(commit(f"op-{i}", 0, "A", "B")) for i in range(20)))
    everything = await journal.read_all()
    assert [e.position for e in everything] == list(range(1, 41))
    page = await journal.read_all(after=10, limit=5)
    assert [e.position for e in page] == [11, 12, 13, 14, 15]


async def test_concurrent_appenders_share_commits(journal: SQLiteJournal) -> None:
    async def appender(n: int) -> None:
        for version in range(10):
            await journal.append(commit(f"op-{n}", version, "Step", view=f"v{version}"))

    await asyncio.gather(*(appender(n) for n in range(50)))
    assert journal.stats.units == 500
    assert journal.stats.groups < 100, journal.stats
    for n in (0, 49):
        history = await journal.history(stream=StreamId(f"op-{n}"))
        assert [e.version for e in history] == list(range(1, 11))


@sqlite_only
async def test_old_payloads_are_upcast_when_read(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    async with opened(path) as j:
        await j.append(commit("op-1", 0, "Requested", payload={"net": "user-net"}))
    upcasters = Upcasters()
    upcasters.register("Requested", 1, lambda p: {"network": p["net"]})
    upcasters.register("Requested", 2, lambda p: {**p, "type": "Network"})
    async with opened(path, upcasters=upcasters) as j:
        (event,) = await j.history(stream=S1)
    assert (event.schema_version, event.payload) == (3, {"network": "user-net", "type": "Network"})


@sqlite_only
async def test_read_only_open_while_a_writer_appends(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    async with opened(path) as writer:
        await writer.append(commit("op-1", 0, "Requested", view="Requested"))
        async with opened(path, read_only=True) as reader:
            assert len(await reader.history(stream=S1)) == 1
            await writer.append(commit("op-1", 1, "Patched"))
            assert len(await reader.history(stream=S1)) == 2
            with pytest.raises(JournalRefused, match="read-only"):
                await reader.append(commit("op-2", 0, "Requested"))


async def test_a_unit_that_breaks_a_constraint_fails_alone(journal: SQLiteJournal) -> None:
    patch = EffectRequest(S1, "Patch", {}, "patch-1")
    (effect,) = (await journal.append(commit("op-0", 0, "Requested", effects=(patch,)))).effects
    bogus = EffectUpdate(effect.id, "vanished", 1)  # type: ignore[arg-type]
    groups = journal.stats.groups
    results = await asyncio.gather(
        journal.append(commit("op-1", 0, "Requested", dedup="rv-1")),
        journal.append(commit("op-2", 0, "Requested", dedup="rv-1", effect_updates=(bogus,))),
        journal.append(commit("op-2", 0, "Requested", dedup="rv-1")),
        return_exceptions=True,
    )
    assert isinstance(results[1], JournalError) and "CHECK" in str(results[1])
    assert not isinstance(results[0], BaseException) and not isinstance(results[2], BaseException)
    assert journal.stats.groups == groups + 1
    assert [e.version for e in await journal.history(stream=S2)] == [1]
    assert [e.position for e in await journal.read_all()] == [1, 2, 3]
    assert [e.status for e in await journal.outbox()] == ["issued"]


@sqlite_only
async def test_a_closed_journal_refuses_appends(tmp_path: Path) -> None:
    journal = await SQLiteJournal.open(tmp_path / "journal.db")
    pending = asyncio.ensure_future(journal.append(commit("op-1", 0, "Requested")))
    await asyncio.sleep(0)
    await journal.close()
    assert (await pending).events[0].version == 1  # what was queued is committed
    with pytest.raises(JournalClosed):
        await journal.append(commit("op-1", 1, "Patched"))
