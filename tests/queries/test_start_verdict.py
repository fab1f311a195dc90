"""`nicplug run` audits the journal it is given before it connects, but only a journal a
reader can audit: one a racing replica has just created (no schema yet) or one an older
nicplug wrote (the writer migrates it when it opens it) is the writer's to finish, and
starting on it is no refusal. Before, either made `run` exit 1: a candidate for the
Lease started beside a leader that had just created the journal died, and so did every
upgrade."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

import pytest

from nicplug.adapters.journal_verdict import refused_at_start
from nicplug.engine.errors import JournalRefused
from nicplug.engine.schema import latest_version

FORMAT1 = Path(__file__).parents[1] / "engine" / "fixtures" / "format1-mid-unplug.sqlite"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_a_journal_just_created_by_another_replica_is_no_refusal(tmp_path: Path) -> None:
    empty = tmp_path / "journal.db"
    empty.touch()  # what SQLite leaves before the creating writer's schema commits
    assert await refused_at_start(empty) is None
    sqlite3.connect(empty).execute("PRAGMA journal_mode = WAL").fetchall()  # header only
    assert await refused_at_start(empty) is None


async def test_a_journal_an_older_nicplug_wrote_is_left_to_the_writer_to_migrate(
    tmp_path: Path,
) -> None:
    old = tmp_path / "journal.db"
    shutil.copy(FORMAT1, old)
    with sqlite3.connect(f"file:{old}?mode=ro", uri=True) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] < latest_version()
    before = digest(old)
    assert await refused_at_start(old) is None
    assert digest(old) == before  # read, never written


async def test_a_file_that_is_no_journal_is_still_refused(tmp_path: Path) -> None:
    other = tmp_path / "journal.db"
    other.write_bytes(b"not a database at all, but long enough to be read as one" * 100)
    with pytest.raises(JournalRefused, match="not an SQLite journal"):  # `run` exits 1 on it
        await refused_at_start(other)
