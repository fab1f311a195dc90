"""A journal that cannot be used is refused with a clear error and left as found."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from nicplug.engine.errors import JournalRefused
from nicplug.engine.model import StreamId
from nicplug.engine.schema import latest_version
from nicplug.engine.sqlite_journal import SQLiteJournal
from tests.engine.journal_support import commit, opened, scribbled


async def test_new_file_is_private(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    async with opened(path):
        pass
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


async def test_newer_schema_is_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    async with opened(path):
        pass
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {latest_version() + 1}")
    before = path.read_bytes()
    with pytest.raises(JournalRefused, match="newer nicplug") as refused:
        await SQLiteJournal.open(path)
    assert str(path) in str(refused.value)
    assert path.read_bytes() == before


async def test_garbage_is_refused_never_recreated(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    garbage = os.urandom(8192)
    path.write_bytes(garbage)
    with pytest.raises(JournalRefused, match="corrupt or not an SQLite journal"):
        await SQLiteJournal.open(path)
    assert path.read_bytes() == garbage


async def test_damaged_pages_fail_the_integrity_check(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    async with opened(path) as j:
        for n in range(200):
            await j.append(commit(f"op-{n}", 0, "Requested", view="Requested",
                                  payload={"pad": "x" * 200}))
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    page = 4096
    for at in range(3 * page, len(data) - page, 2 * page):  # scribble over some b-tree pages
        data[at + 8 : at + 64] = os.urandom(56)
    path.write_bytes(bytes(data))
    with pytest.raises(JournalRefused, match="corrupt"):
        await SQLiteJournal.open(path, integrity="full")


async def test_opening_checks_what_recovery_reads_and_check_file_the_history(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.db"
    async with opened(path) as j:  # closed without its whole file checked: as a crash
        for n in range(300):
            await j.append(commit(f"op-{n}", 0, "Requested", "Step", view="Requested",
                                  payload={"pad": "x" * 300}))
        await j.checkpoint()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM clean_close").fetchone() == (0,)

    # a damaged read model, outbox or timers: refused at open, the file left as found
    read_model = scribbled(path, "streams", tmp_path / "read-model.db")
    before = read_model.read_bytes()
    with pytest.raises(JournalRefused, match="corrupt") as refused:
        await SQLiteJournal.open(read_model)
    assert "restore it from a backup" in str(refused.value)
    assert read_model.read_bytes() == before

    # damaged history: opening reads no more than the read model; the whole-file check
    # (run beside the work after a controller starts) finds it; `quick` at open too
    history = scribbled(path, "events", tmp_path / "history.db")
    async with opened(history) as j:
        found = await j.check_file()
        assert found != ["ok"] and found
    with pytest.raises(JournalRefused, match="corrupt"):
        await SQLiteJournal.open(history, integrity="quick")


async def test_unwritable_paths_are_refused(tmp_path: Path) -> None:
    # Tests may run as root, which ignores permission bits; these fail for root too.
    a_file = tmp_path / "plain-file"
    a_file.write_text("not a directory")
    with pytest.raises(JournalRefused, match="cannot be written") as under_file:
        await SQLiteJournal.open(a_file / "journal.db")
    assert "writable directory" in str(under_file.value)
    with pytest.raises(JournalRefused, match="not a regular file"):
        await SQLiteJournal.open(tmp_path)
    with pytest.raises(JournalRefused, match="no journal file"):
        await SQLiteJournal.open(tmp_path / "missing.db", read_only=True)


async def test_full_disk_fails_the_unit_and_keeps_what_was_acknowledged(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    acknowledged = 0
    async with opened(path, size_limit_bytes=256 * 1024) as j:
        with pytest.raises(JournalRefused, match="full") as full:
            for version in range(10_000):
                await j.append(commit("op-1", version, "Step", payload={"pad": "y" * 500}))
                acknowledged += 1
        assert "every acknowledged event is kept" in str(full.value)
        assert len(await j.history(stream=StreamId("op-1"))) == acknowledged
    async with opened(path, integrity="full") as j:
        history = await j.history(stream=StreamId("op-1"))
        assert [e.version for e in history] == list(range(1, acknowledged + 1))
        assert await j.integrity() == ["ok"]
