"""The read model is an ordinary rowid table: a schema-2 journal (WITHOUT ROWID) is
rebuilt into one at open with every row as it was, and the schema stays on one page."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from nicplug.engine.schema import latest_version, migrations
from nicplug.engine.sqlite_journal import SQLiteJournal

_ROWS = [
    (f"uid-{n}/Network/x/plug/1", f"ns/vm-{n}", 7, "Attached", 1, '{"attempt": 1}', 10.0 + n,
     20.0 + n, 4, 7 - n % 2, None if n % 3 else "/archives/a.jsonl")
    for n in range(50)
] + [("uid-0/Network/x/unplug/1", "ns/vm-0", 0, None, 0, "{}", 1.0, 2.0, 0, 0, None)]
_COLUMNS = ("stream, key, version, state, terminal, snapshot, updated_wall, updated_logical,"
            " snapshot_schema, snapshot_through, archived")


def _schema_2(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        for migration in migrations()[:2]:
            conn.executescript(migration.sql)
        conn.executemany(f"INSERT INTO streams ({_COLUMNS}) VALUES"
                         " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", _ROWS)
        conn.execute("PRAGMA user_version = 2")
    with sqlite3.connect(path) as conn:
        sql = conn.execute("SELECT sql FROM sqlite_schema WHERE name = 'streams'").fetchone()[0]
    assert "WITHOUT ROWID" in sql


async def test_a_schema_2_journal_gets_a_rowid_streams_table_with_every_row(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.db"
    _schema_2(path)
    journal = await SQLiteJournal.open(path)
    views = await journal.views()
    await journal.close()
    assert len(views) == 50  # the row without a view yet stays a row, not a view
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (latest_version(),)
        sql = conn.execute("SELECT sql FROM sqlite_schema WHERE name = 'streams'").fetchone()[0]
        assert "WITHOUT ROWID" not in sql
        rows = conn.execute(f"SELECT {_COLUMNS} FROM streams ORDER BY stream").fetchall()
        indexes = {r[1] for r in conn.execute("PRAGMA index_list(streams)")}
        schema_pages = conn.execute(
            "SELECT COUNT(*) FROM dbstat WHERE name = 'sqlite_schema'").fetchone()
    assert rows == sorted(_ROWS)
    assert {"streams_key", "streams_live"} <= indexes
    assert schema_pages == (1,)


async def test_a_new_journal_keeps_its_schema_on_the_first_page(tmp_path: Path) -> None:
    """Every migration applied to an empty file: the schema never split to a second
    page (a damaged page elsewhere then leaves the schema readable for `verify`)."""
    path = tmp_path / "journal.db"
    await (await SQLiteJournal.open(path)).close()
    with sqlite3.connect(path) as conn:
        assert conn.execute(
            "SELECT COUNT(*) FROM dbstat WHERE name = 'sqlite_schema'").fetchone() == (1,)
