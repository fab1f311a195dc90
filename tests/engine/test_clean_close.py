"""Opening checks only what moved since the last clean close.

A writer that closes the journal last, after its whole file passed `check_file`, leaves
a mark; the next writer to open it checks nothing at open (the whole file is checked
after start, as the history always is) and takes the mark away, so that a crash of its
own leaves none. Without the mark (a crash, a term whose check did not pass or did not
run, another writer still open), opening checks the tables recovery reads whole.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from nicplug.engine import sqlite_opening
from nicplug.engine.errors import JournalRefused
from nicplug.engine.sqlite_journal import SQLiteJournal
from tests.engine.journal_support import commit, opened, scribbled


def _marked(path: Path) -> bool:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT COUNT(*) FROM clean_close").fetchone() == (1,)


async def _filled(path: Path) -> None:
    async with opened(path) as j:
        for n in range(200):
            await j.append(commit(f"op-{n}", 0, "Requested", "Step", view="Requested",
                                  payload={"pad": "x" * 300}))
        await j.checkpoint()
        assert await j.check_file() == ["ok"]


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The checks opening ran, by mode."""
    ran: list[str] = []
    checked = sqlite_opening._checked

    def counting(conn: sqlite3.Connection, integrity: sqlite_opening.IntegrityCheck) -> list[str]:
        ran.append(integrity)
        return checked(conn, integrity)

    monkeypatch.setattr(sqlite_opening, "_checked", counting)
    return ran


async def test_after_a_clean_close_opening_checks_nothing_and_takes_the_mark(
    tmp_path: Path, checks: list[str]
) -> None:
    path = tmp_path / "journal.db"
    await _filled(path)
    assert _marked(path)
    checks.clear()
    journal = await SQLiteJournal.open(path)
    try:
        assert checks == []
        assert not _marked(path)  # a crash from here on leaves no mark
    finally:
        await journal.close()  # its own file check never ran: it leaves none either
    assert not _marked(path)
    await (await SQLiteJournal.open(path)).close()
    assert checks == ["bounded"]


async def test_a_damaged_read_model_after_a_clean_close_is_found_by_the_file_check(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.db"
    await _filled(path)
    damaged = scribbled(path, "streams", tmp_path / "damaged.db")
    async with opened(damaged) as j:
        found = await j.check_file()
    assert found != ["ok"] and found
    assert not _marked(damaged)
    with pytest.raises(JournalRefused, match="corrupt"):  # and now refused at open
        await SQLiteJournal.open(damaged)


async def test_only_the_last_writer_leaves_the_mark(tmp_path: Path, checks: list[str]) -> None:
    path = tmp_path / "journal.db"
    await _filled(path)
    first = await SQLiteJournal.open(path)
    second = await SQLiteJournal.open(path)  # a second writer beside it (`journal archive`)
    assert await first.check_file() == ["ok"] and await second.check_file() == ["ok"]
    await first.close()  # the other still writes: no mark
    assert not _marked(path)
    await second.close()
    assert _marked(path)


async def test_explicit_checks_run_whatever_the_mark(tmp_path: Path, checks: list[str]) -> None:
    path = tmp_path / "journal.db"
    await _filled(path)
    checks.clear()
    await (await SQLiteJournal.open(path, integrity="quick")).close()
    assert checks == ["quick"]
    reader = await SQLiteJournal.open(path, read_only=True, integrity="quick")
    await reader.close()
    assert checks == ["quick", "quick"]
