"""`nicplug journal verify|rebuild|backup|archive|check-archive` on journals the real
decider wrote, some damaged by hand: findings name VM, stream and field; refusals are
one line and a non-zero exit and change nothing; a backup taken while a controller
writes restores and recovers."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import sqlite3
from functools import partial
from pathlib import Path

import pytest

from nicplug.engine.audit import fold_stream, folder
from nicplug.engine.clock import VirtualClock
from nicplug.engine.effects import RecordingExecutor
from nicplug.engine.model import Key
from nicplug.engine.runtime import Runtime
from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.operation import VMState, fold_view
from nicplug.machines.versions import schemas
from nicplug.machines.world import World
from tests.queries.journal_worlds import fill, stop
from tests.queries.test_cli import as_json, nicplug, one_line_error

PLUGGED = "uid-plugged/Network/x/plug/1"


@pytest.fixture
def journal(standard_journal: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "journal.db"
    shutil.copy(standard_journal, copy)
    return copy


def sql(path: Path, statement: str, *params: object) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(statement, params)


def contents(path: Path) -> str:
    """A digest of every row of the journal (the file's bytes may move on a checkpoint)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return hashlib.sha256("\n".join(conn.iterdump()).encode()).hexdigest()


def test_verify_names_every_mismatch_and_rebuild_repairs_the_read_model(journal: Path) -> None:
    sql(journal, "UPDATE streams SET state = 'Failed', snapshot = json_set(snapshot,"
        " '$.reason', 'Invented') WHERE stream = ?", PLUGGED)
    sql(journal, "INSERT INTO timers VALUES (?, 'deadline', 'ns/plugged', 99.0)", PLUGGED)
    result = nicplug("journal", "verify", "--journal", str(journal), env={"COLUMNS": "300"})
    assert result.exit_code == 1
    assert f"ns/plugged {PLUGGED}: state: the journal holds 'Failed', the events give " \
           "'Attached'" in result.stdout
    assert f"ns/plugged {PLUGGED}: snapshot.reason: the journal holds 'Invented'" in result.stdout
    assert f"ns/plugged {PLUGGED}: timers: the journal holds timer deadline armed" in result.stdout
    data = json.loads(nicplug("journal", "verify", "--journal", str(journal), "--json").stdout)
    assert {(m["key"], m["field"]) for m in data["mismatches"]} == {
        ("ns/plugged", "state"), ("ns/plugged", "snapshot.reason"), ("ns/plugged", "timers")}

    rebuilt = nicplug("journal", "rebuild", "--journal", str(journal))
    assert rebuilt.exit_code == 0 and "(1 differed from the fold)" in rebuilt.stdout
    sql(journal, "DELETE FROM timers WHERE stream = ? AND deadline = 99.0", PLUGGED)
    assert as_json("journal", "verify", "--journal", str(journal))["ok"] is True


def test_rebuild_writes_only_the_rows_that_differ_from_their_fold(journal: Path) -> None:
    with sqlite3.connect(journal) as conn:
        other, snapshot = conn.execute(
            "SELECT stream, snapshot FROM streams WHERE stream != ? AND state IS NOT NULL"
            " AND snapshot_through = version AND archived IS NULL ORDER BY stream LIMIT 1",
            (PLUGGED,),
        ).fetchone()
        # the same value in another key order: equal to the fold, but not as written
        reordered = json.dumps(dict(reversed(json.loads(snapshot).items())))
        conn.execute("UPDATE streams SET snapshot = ? WHERE stream = ?", (reordered, other))
    sql(journal, "UPDATE streams SET state = 'Failed' WHERE stream = ?", PLUGGED)

    rebuilt = nicplug("journal", "rebuild", "--journal", str(journal))

    assert rebuilt.exit_code == 0 and "(1 differed from the fold)" in rebuilt.stdout
    with sqlite3.connect(journal) as conn:
        rows = dict(conn.execute("SELECT stream, snapshot FROM streams").fetchall())
        (state,) = conn.execute("SELECT state FROM streams WHERE stream = ?",
                                (PLUGGED,)).fetchone()
    assert rows[other] == reordered and state == "Attached"


def test_rebuild_rewrites_a_snapshot_that_is_not_json_and_refuses_a_newer_one(
    journal: Path,
) -> None:
    sql(journal, "UPDATE streams SET snapshot = '{not json' WHERE stream = ?", PLUGGED)
    rebuilt = nicplug("journal", "rebuild", "--journal", str(journal))
    assert rebuilt.exit_code == 0 and "(1 differed from the fold)" in rebuilt.stdout
    assert as_json("journal", "verify", "--journal", str(journal))["ok"] is True

    sql(journal, "UPDATE streams SET snapshot_schema = 99 WHERE stream = ?", PLUGGED)
    before = contents(journal)
    one_line_error(nicplug("journal", "rebuild", "--journal", str(journal)), 1, str(journal),
                   "cannot be folded", "snapshot", "nothing was changed")
    assert contents(journal) == before


async def test_rebuild_refuses_a_journal_a_controller_holds(journal: Path) -> None:
    before = contents(journal)
    writer = await SQLiteJournal.open(journal, schemas=schemas())
    try:
        result = await asyncio.to_thread(nicplug, "journal", "rebuild", "--journal", str(journal))
    finally:
        await writer.close()
    one_line_error(result, 1, str(journal), "open for writing by a running nicplug",
                   "stop the controller first")
    assert contents(journal) == before


@pytest.mark.parametrize(("change", "said"), [
    ("UPDATE events SET type = 'Teleported' WHERE position = 3", "unknown type 'Teleported'"),
    ("UPDATE events SET schema_version = 7 WHERE position = 3", "schema 7 is newer"),
])
def test_an_event_this_nicplug_cannot_read_is_named_and_changes_nothing(
    journal: Path, change: str, said: str
) -> None:
    sql(journal, change)
    before = contents(journal)
    verify = nicplug("journal", "verify", "--journal", str(journal), env={"COLUMNS": "300"})
    assert verify.exit_code == 1 and said in verify.stdout and "event 3 unreadable" in verify.stdout
    one_line_error(nicplug("journal", "rebuild", "--journal", str(journal)), 1, str(journal),
                   "cannot be folded", "nothing was changed")
    with sqlite3.connect(journal) as conn:
        (stream,) = conn.execute("SELECT stream FROM events WHERE position = 3").fetchone()
        vm = conn.execute("SELECT key FROM streams WHERE stream = ?", (stream,)).fetchone()[0]
    one_line_error(nicplug("history", vm, "--journal", str(journal)), 1, said)
    assert contents(journal) == before


def test_a_backup_target_that_exists_or_cannot_be_written_is_refused(
    journal: Path, tmp_path: Path
) -> None:
    existing = tmp_path / "backup.db"
    existing.write_bytes(b"precious")
    one_line_error(nicplug("journal", "backup", str(existing), "--journal", str(journal)), 2,
                   str(existing), "exists", "choose a new file")
    assert existing.read_bytes() == b"precious"
    # a directory no file can be created in, whoever runs the test (root included)
    one_line_error(nicplug("journal", "backup", "/proc/b.db", "--journal", str(journal)), 2,
                   "cannot write in /proc")
    one_line_error(nicplug("journal", "backup", str(tmp_path / "no" / "b.db"), "--journal",
                           str(journal)), 2, "no directory")


async def test_a_backup_taken_while_the_controller_writes_restores_and_recovers(
    tmp_path: Path,
) -> None:
    path, copy = tmp_path / "journal.db", tmp_path / "backup.db"
    cluster = await fill(path)
    try:
        backing_up = asyncio.create_task(asyncio.to_thread(
            nicplug, "journal", "backup", str(copy), "--journal", str(path)))
        while not backing_up.done():
            await cluster.tick()  # the controller goes on writing meanwhile
        result = await backing_up
        assert result.exit_code == 0, result.output
        assert copy.stat().st_mode & 0o777 == 0o600
    finally:
        await stop(cluster)
    verified = await asyncio.to_thread(as_json, "journal", "verify", "--journal", str(copy))
    assert verified["ok"] is True
    restored = await SQLiteJournal.open(copy, schemas=schemas())
    try:
        clock = VirtualClock()
        runtime: Runtime[VMState, World] = Runtime(
            HotplugDecider(), restored, RecordingExecutor(clock), clock)
        await runtime.start()
        live = {v.view.key for v in await restored.views(live=True)}
        states = {key: runtime.state_of(key) for key in live}
        await runtime.stop(drain=False)
        views = {v.view.stream: v.view for v in await restored.views(live=True)}
    finally:
        await restored.close()
    assert live and all(state is not None for state in states.values())
    for state in states.values():  # recovered exactly as the copy's read model says
        assert state is not None
        for op in state.ops.values():
            if op.stream in views:
                assert views[op.stream].state == op.state
            else:
                assert op.terminal  # a finished sibling of a live operation
    assert Key("ns/flaky") in live


def test_archive_keeps_summaries_that_status_and_history_show(
    journal: Path, tmp_path: Path
) -> None:
    into = tmp_path / "archives"
    into.mkdir()
    result = nicplug("journal", "archive", "--journal", str(journal), "--into", str(into),
                     "--older-than", "0s")
    assert result.exit_code == 0 and "archived" in result.stdout, result.output
    (archive,) = into.iterdir()
    status = as_json("status", "--journal", str(journal))["operations"]
    plugged = next(op for op in status if op["id"] == PLUGGED)
    assert plugged["state"] == "Attached" and plugged["archived"] == str(archive)
    history = nicplug("history", "ns/plugged", "--journal", str(journal),
                      env={"COLUMNS": "300"})
    assert history.exit_code == 0 and "the detail is archived in" in " ".join(
        history.stdout.split())
    timeline = as_json("history", "ns/plugged", "--journal", str(journal))["operations"]
    assert [line["operation"]["archived"] for line in timeline] == [str(archive)]
    assert as_json("journal", "verify", "--journal", str(journal))["ok"] is True
    checked = nicplug("journal", "check-archive", str(archive))
    assert checked.exit_code == 0 and "whole" in checked.stdout
    live = as_json("status", "--journal", str(journal), "--state", "SDNReady")["operations"]
    assert all(op["archived"] is None for op in live)  # nothing live is archived

    truncated = tmp_path / "truncated.jsonl"
    truncated.write_bytes(archive.read_bytes()[:-20])
    one_line_error(nicplug("journal", "check-archive", str(truncated)), 1, str(truncated),
                   "cut short")


def test_archive_refuses_bad_input(journal: Path, tmp_path: Path) -> None:
    before = contents(journal)
    one_line_error(nicplug("journal", "archive", "--journal", str(journal), "--into",
                           str(tmp_path / "missing")), 2, "not a directory")
    one_line_error(nicplug("journal", "archive", "--journal", str(journal), "--into",
                           str(tmp_path), "--older-than", "soon"), 2, "--older-than")
    one_line_error(nicplug("journal", "rebuild", "--journal", str(tmp_path / "none.db")), 1,
                   "no journal file here")
    assert not (tmp_path / "none.db").exists()
    assert contents(journal) == before


async def test_the_machines_one_stream_fold_gives_what_the_decider_gives(
    standard_journal: Path,
) -> None:
    journal = await SQLiteJournal.open(standard_journal, read_only=True, schemas=schemas())
    try:
        decider = HotplugDecider()
        quick = await journal.audit_input(folder(fold_view))
        slow = await journal.audit_input(folder(partial(fold_stream, decider)))
    finally:
        await journal.close()
    assert len(quick.folded) == 11
    assert quick.folded == slow.folded
    assert all(f.view is not None and f.problem is None for f in quick.folded.values())
