"""`nicplug journal archive|rebuild|backup` on a PostgreSQL journal (the real server
the suite starts), holding the journal the real decider wrote (`journal copy`): the
same archive file as SQLite's, the same summaries; a deposed leader's retention and
a leader overtaken by a rebuild write nothing; a backup is an SQLite journal of one
moment that `journal verify` accepts and a controller recovers from."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from pathlib import Path

import asyncpg
import pytest

from nicplug.adapters.core.retention import archive_finished
from nicplug.adapters.exporting import event_line, read_events
from nicplug.engine.errors import JournalError, Superseded
from nicplug.engine.postgres_journal import PostgresJournal
from nicplug.machines.versions import schemas
from nicplug.simulator.postgres_server import LocalPostgres
from tests.postgres_support import fresh_database
from tests.queries.test_cli import as_json, nicplug, one_line_error

PLUGGED = "uid-plugged/Network/x/plug/1"


@pytest.fixture
def database(standard_journal: Path, postgres_dsn: str) -> str:
    copied = nicplug("journal", "copy", str(standard_journal), postgres_dsn)
    assert copied.exit_code == 0, copied.output
    return postgres_dsn


async def _sql(dsn: str, statement: str, *params: object) -> list[tuple[object, ...]]:
    conn = await asyncpg.connect(dsn)
    try:
        return [tuple(r) for r in await conn.fetch(statement, *params)]
    finally:
        await conn.close()


def sql(dsn: str, statement: str, *params: object) -> list[tuple[object, ...]]:
    return asyncio.run(_sql(dsn, statement, *params))


def contents(dsn: str) -> list[list[tuple[object, ...]]]:
    return [sql(dsn, f"SELECT * FROM {table} ORDER BY 1, 2") for table in (
        "events", "streams", "effects", "timers", "archives")]


def test_archive_writes_what_sqlite_writes_and_keeps_the_same_summaries(
    database: str, standard_journal: Path, tmp_path: Path,
) -> None:
    here, there = tmp_path / "pg", tmp_path / "sqlite"
    here.mkdir()
    there.mkdir()
    local = tmp_path / "journal.db"
    shutil.copy(standard_journal, local)
    for journal, into in ((database, here), (str(local), there)):
        done = nicplug("journal", "archive", "--journal", journal, "--into", str(into),
                       "--older-than", "0s")
        assert done.exit_code == 0 and "archived" in done.stdout, done.output
    (archive,) = here.iterdir()
    (theirs,) = there.iterdir()
    # the same lines, each the same JSON (a payload's keys in JSONB's order)
    assert list(read_events(archive)) == list(read_events(theirs))
    status = as_json("status", "--journal", database)["operations"]
    plugged = next(op for op in status if op["id"] == PLUGGED)
    assert plugged["state"] == "Attached" and plugged["archived"] == str(archive)
    summaries = {(op["id"], op["archived"] is not None) for op in status}
    assert summaries == {(op["id"], op["archived"] is not None)
                         for op in as_json("status", "--journal", str(local))["operations"]}
    assert as_json("journal", "verify", "--journal", database)["ok"] is True
    with sqlite3.connect(local) as conn:
        (counted,) = conn.execute("SELECT streams, events FROM archives").fetchall()
    assert sql(database, "SELECT file, streams, events FROM archives") == [
        (str(archive), *counted)]
    checked = nicplug("journal", "check-archive", str(archive))
    assert checked.exit_code == 0 and "whole" in checked.stdout
    nothing = nicplug("journal", "archive", "--journal", database, "--into", str(here),
                      "--older-than", "0s")
    assert nothing.exit_code == 0 and "no operation finished" in nothing.stdout


async def test_a_deposed_leaders_retention_deletes_nothing(
    database: str, tmp_path: Path,
) -> None:
    before = await asyncio.gather(*(_sql(database, f"SELECT COUNT(*) FROM {t}")
                                    for t in ("events", "streams", "archives")))
    old = await PostgresJournal.open(database, schemas=schemas())
    new = await PostgresJournal.open(database, schemas=schemas())
    try:
        assert await old.lead("replica-a") == 1
        assert await new.lead("replica-b") == 2
        with pytest.raises(Superseded, match="term 1 is over: term 2 has begun"):
            await archive_finished(old, window=0.0, into=tmp_path, now=4e9)
        # the archive was durable first: the events are in both places, not in neither
        (written,) = await asyncio.to_thread(lambda: [p.stat().st_size for p in tmp_path.iterdir()])
        assert written > 0
        after = await asyncio.gather(*(_sql(database, f"SELECT COUNT(*) FROM {t}")
                                       for t in ("events", "streams", "archives")))
        assert after == before
        done = await archive_finished(new, window=0.0, into=tmp_path, now=4e9 + 1)
        assert done is not None and done.events > 0
        assert await new.archives() == [(done.file, done.streams, done.events, 4e9 + 1)]
    finally:
        await old.close()
        await new.close()


def test_rebuild_repairs_the_read_model_and_fences_out_a_running_leader(
    database: str,
) -> None:
    sql(database, "UPDATE streams SET state = 'Failed', snapshot = jsonb_set(snapshot,"
        " '{reason}', '\"Invented\"') WHERE stream = $1", PLUGGED)
    found = nicplug("journal", "verify", "--journal", database, env={"COLUMNS": "300"})
    assert found.exit_code == 1 and "the journal holds 'Failed'" in found.stdout

    async def leading() -> PostgresJournal:
        journal = await PostgresJournal.open(database, schemas=schemas())
        await journal.lead("replica-a")
        return journal

    async def claim(journal: PostgresJournal) -> None:
        try:
            await journal.claim(1)
        finally:
            await journal.close()

    loop = asyncio.new_event_loop()
    try:
        leader = loop.run_until_complete(leading())
        rebuilt = nicplug("journal", "rebuild", "--journal", database)
        assert rebuilt.exit_code == 0, rebuilt.output
        assert "(1 differed from the fold) in term 2" in rebuilt.stdout
        assert "fenced out" in rebuilt.stdout
        with pytest.raises(Superseded, match="term 1 is over"):
            loop.run_until_complete(claim(leader))
    finally:
        loop.close()
    assert as_json("journal", "verify", "--journal", database)["ok"] is True
    assert sql(database, "SELECT state FROM streams WHERE stream = $1", PLUGGED) == [
        ("Attached",)]
    again = nicplug("journal", "rebuild", "--journal", database)
    assert again.exit_code == 0 and "(0 differed from the fold)" in again.stdout


def test_rebuild_refuses_an_event_it_cannot_read_and_changes_nothing(database: str) -> None:
    sql(database, "UPDATE streams SET state = 'Failed' WHERE stream = $1", PLUGGED)
    sql(database, "UPDATE events SET type = 'Teleported' WHERE position = 3")
    before = contents(database)
    one_line_error(nicplug("journal", "rebuild", "--journal", database), 1,
                   "cannot be folded", "event 3 unreadable", "nothing was changed")
    assert contents(database) == before


def test_a_backup_is_an_sqlite_journal_of_one_moment(
    database: str, tmp_path: Path, postgres_server: LocalPostgres,
) -> None:
    out = tmp_path / "backup.db"
    done = nicplug("journal", "backup", str(out), "--journal", database)
    assert done.exit_code == 0, done.output
    assert "an SQLite journal of" in done.stdout and "password" not in done.stdout
    assert out.stat().st_mode & 0o777 == 0o600
    assert not Path(f"{out}-wal").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["backup.db"]  # no temporary left
    theirs = as_json("journal", "verify", "--journal", database)
    ours = as_json("journal", "verify", "--journal", str(out))
    assert ours["ok"] is True
    for field in ("events", "last_position", "streams", "live_streams", "effects", "timers"):
        assert ours[field] == theirs[field], field
    assert as_json("status", "--journal", str(out)) == as_json("status", "--journal", database)
    restored = asyncio.run(fresh_database(postgres_server))  # a restore: into a new database
    back = nicplug("journal", "copy", str(out), restored)
    assert back.exit_code == 0 and back.output.count("verify ok") == 2, back.output
    assert as_json("status", "--journal", restored) == as_json("status", "--journal", database)

    one_line_error(nicplug("journal", "backup", str(out), "--journal", database), 2,
                   "exists", "choose a new file")
    gone = database.rsplit("/", 1)[0] + "/no_such_database"
    one_line_error(nicplug("journal", "backup", str(tmp_path / "b2.db"), "--journal", gone), 1,
                   "no_such_database")
    assert not (tmp_path / "b2.db").exists()


class _Racing:
    """An archive file whose first write lets another writer append an event to the
    first stream being archived (the sink is written from a worker thread)."""

    def __init__(self, path: Path, dsn: str, stream: str) -> None:
        self.file = path.open("wb")
        self.dsn, self.stream, self.raced = dsn, stream, False

    def write(self, data: bytes) -> int:
        if not self.raced:
            self.raced = True
            asyncio.run(_sql(
                self.dsn, "INSERT INTO events SELECT (SELECT MAX(position) + 1 FROM events),"
                " stream, key, version + 1, type, schema_version, payload, cause_kind,"
                " cause_ref, NULL, wall_time, logical_time, term FROM events"
                " WHERE stream = $1 ORDER BY version DESC LIMIT 1", self.stream))
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()

    def fileno(self) -> int:
        return self.file.fileno()


async def test_a_stream_that_grows_while_archived_is_not_deleted(
    database: str, tmp_path: Path,
) -> None:
    journal = await PostgresJournal.open(database, schemas=schemas())
    try:
        streams = [row.view.stream for row in await journal.archivable(4e9)]
        before = await _sql(database, "SELECT COUNT(*) FROM events")
        sink = await asyncio.to_thread(_Racing, tmp_path / "archive.jsonl", database, streams[0])
        published: list[bool] = []
        try:
            with pytest.raises(JournalError, match=f"stream {streams[0]} gained events"):
                await journal.archive(
                    streams=streams, keep=[], superseded=[], sink=sink,
                    publish=lambda: published.append(True), file="archive.jsonl",
                    line=event_line, cutoff_wall=4e9, now_wall=4e9)
        finally:
            await asyncio.to_thread(sink.file.close)
        assert published == [True]  # durable first: the events are in both places
        after = await _sql(database, "SELECT COUNT(*) FROM events")
        assert after[0][0] == before[0][0] + 1
        assert await journal.archives() == []
    finally:
        await journal.close()
