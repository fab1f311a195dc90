"""The inspection reads: filtered views, one stream's record in one snapshot, counts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from nicplug.engine.errors import JournalClosed
from nicplug.engine.inspection import ViewQuery
from nicplug.engine.journal import Commit
from nicplug.engine.model import (
    Cause,
    EffectRequest,
    Key,
    NewEvent,
    StreamId,
    StreamView,
    TimerRequest,
)
from nicplug.engine.postgres_journal import PostgresJournal
from nicplug.engine.postgres_opening import is_dsn
from nicplug.engine.postgres_opening import latest_version as pg_latest
from nicplug.engine.schema import latest_version
from nicplug.engine.sqlite_journal import SQLiteJournal
from tests.engine.journal_support import opened

A, B, C = StreamId("vm-a/net-1"), StreamId("vm-a/net-2"), StreamId("vm-b/net-1")


def _unit(stream: StreamId, expected: int, state: str, *, key: str, cause: Cause,
          terminal: bool = False, entered: float = 0.0, **extra: object) -> Commit:
    snapshot = {"network": stream.rpartition("/")[2], "entered_at": entered, "n": expected}
    return Commit(
        key=Key(key), cause=cause, wall_time=1000.0 + expected, logical_time=float(expected),
        events=(NewEvent(stream, "Moved", {"to": state}),), expected={stream: expected},
        views=(StreamView(stream, Key(key), state, terminal, snapshot),), **extra,  # type: ignore[arg-type]
    )


def _seen(ref: str) -> Cause:
    return Cause("observation", ref)


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str | Path:
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_dsn"))
    return tmp_path / "journal.db"


@asynccontextmanager
async def either(location: str | Path) -> AsyncIterator[SQLiteJournal | PostgresJournal]:
    if isinstance(location, str) and is_dsn(location):
        pg = await PostgresJournal.open(location)
        try:
            yield pg
        finally:
            await pg.close()
    else:
        async with opened(location) as j:
            yield j


@pytest.fixture
async def journal(location: str | Path) -> AsyncIterator[SQLiteJournal | PostgresJournal]:
    async with either(location) as j:
        await j.append(_unit(A, 0, "Requested", key="vm-a", cause=_seen("VM/a@1"), entered=1.0,
                             effects=(EffectRequest(A, "Patch", {"x": 1}, "patch-a"),),
                             timers=(TimerRequest(A, "deadline", 121.0),)))
        await j.append(_unit(B, 0, "Done", key="vm-a", cause=_seen("VM/a@2"), terminal=True,
                             entered=2.0))
        await j.append(_unit(C, 0, "Requested", key="vm-b", cause=_seen("VM/b@3"), entered=9.0))
        await j.append(_unit(A, 1, "Patched", key="vm-a", cause=Cause("timer", "timer:t@5"),
                             entered=5.0))
        yield j


def _streams(views: object) -> list[str]:
    return [v.view.stream for v in views]  # type: ignore[attr-defined]


async def test_views_filter_by_columns_and_snapshot_fields(journal: SQLiteJournal) -> None:
    assert _streams(await journal.find_views(ViewQuery())) == [A, B, C]
    assert _streams(await journal.find_views(ViewQuery(key=Key("vm-a")))) == [A, B]
    assert _streams(await journal.find_views(ViewQuery(state="Requested"))) == [C]
    assert _streams(await journal.find_views(ViewQuery(terminal=False))) == [A, C]
    assert _streams(await journal.find_views(ViewQuery(stream=B))) == [B]
    assert _streams(await journal.find_views(ViewQuery(equal={"network": "net-1"}))) == [A, C]
    assert _streams(await journal.find_views(ViewQuery(below={"entered_at": 5.0}))) == [B]
    assert _streams(await journal.find_views(ViewQuery(below={"entered_at": 5.5}))) == [A, B]
    assert _streams(await journal.find_views(ViewQuery(limit=1))) == [A]
    both = ViewQuery(key=Key("vm-a"), terminal=False, equal={"network": "net-1"})
    assert _streams(await journal.find_views(both)) == [A]


async def test_filter_values_are_bound_never_pasted(journal: SQLiteJournal) -> None:
    for hostile in ("Requested' OR '1'='1", "x\"; DROP TABLE events; --"):
        assert await journal.find_views(ViewQuery(state=hostile)) == []
        assert await journal.find_views(ViewQuery(equal={"network": hostile})) == []
    assert (await journal.census()).events == 4
    with pytest.raises(ValueError, match="snapshot field"):
        ViewQuery(equal={"network') OR 1=1 --": "x"})
    with pytest.raises(ValueError, match="limit"):
        ViewQuery(limit=-1)


async def test_a_stream_record_is_its_view_events_effects_and_timers(
    journal: SQLiteJournal,
) -> None:
    record = await journal.stream_record(A)
    assert record is not None and record.view is not None
    assert record.view.view.state == "Patched" and record.view.version == 2
    assert [e.payload["to"] for e in record.events] == ["Requested", "Patched"]
    assert [e.cause.kind for e in record.events] == ["observation", "timer"]
    (effect,) = record.effects
    assert (effect.type, effect.status, effect.attempts) == ("Patch", "issued", 0)
    assert (effect.created_logical, effect.created_wall) == (0.0, 1000.0)
    assert [(t.name, t.deadline) for t in record.timers] == [("deadline", 121.0)]
    # the latest observation of the key, on any of its streams; timers do not count
    assert record.last_observation is not None
    assert record.last_observation.cause.ref == "VM/a@2"
    assert await journal.stream_record(StreamId("nothing/here")) is None


async def test_census_counts_everything(journal: SQLiteJournal) -> None:
    census = await journal.census()
    assert (census.events, census.last_position, census.streams, census.live_streams) == (
        4, 4, 3, 2
    )
    assert census.effects == {"issued": 1, "succeeded": 0, "failed": 0}
    latest = pg_latest() if isinstance(journal, PostgresJournal) else latest_version()
    assert (census.timers, census.schema_version) == (1, latest)
    assert await journal.integrity() == ["ok"]


async def test_a_record_is_one_snapshot_while_a_writer_appends(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    async with opened(path) as writer, opened(path, read_only=True) as reader:
        await writer.append(_unit(A, 0, "S0", key="vm-a", cause=_seen("VM/a@0")))

        async def write() -> None:
            for n in range(1, 150):
                await writer.append(_unit(A, n, f"S{n}", key="vm-a", cause=_seen(f"VM/a@{n}")))

        async def read() -> int:
            checked = 0
            while not writing.done():
                record = await reader.stream_record(A)
                assert record is not None and record.view is not None
                assert record.view.version == len(record.events)
                assert record.view.view.state == record.events[-1].payload["to"]
                checked += 1
                await asyncio.sleep(0)
            return checked

        writing = asyncio.ensure_future(write())
        checked = await read()
        await writing
        assert checked > 1
        assert (await reader.census()).events == 150


async def test_a_closed_journal_refuses_reads(tmp_path: Path) -> None:
    journal = await SQLiteJournal.open(tmp_path / "journal.db")
    await journal.close()
    with pytest.raises(JournalClosed):
        await journal.census()
