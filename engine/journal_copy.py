"""Copying a whole journal between backends (SQLite ↔ PostgreSQL), row for row, so an
installation can move from one to the other and back.

The source is read in one snapshot (a read transaction); the target must hold no
journal yet (its schema is made by opening it as every writer does) and is written in
one transaction: all of it or nothing. Positions, versions, effect ids, snapshots and
their `through`, timers and the archive list are kept as they are, so `journal verify`
finds the same journal on both sides. Terms of leadership are not copied: the target's
first leader starts at term 1. Stop the controller first: a copy is of one moment.
"""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from nicplug.engine.errors import JournalRefused
from nicplug.engine.locations import is_dsn, shown
from nicplug.engine.postgres_journal import PostgresJournal
from nicplug.engine.postgres_opening import translate
from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.engine.sqlite_opening import read_mode, reader_uri

COLUMNS = {
    "events": ("position", "stream", "key", "version", "type", "schema_version", "payload",
               "cause_kind", "cause_ref", "dedup_key", "wall_time", "logical_time"),
    "streams": ("stream", "key", "version", "state", "terminal", "snapshot", "updated_wall",
                "updated_logical", "snapshot_schema", "snapshot_through", "archived"),
    "effects": ("id", "stream", "key", "type", "payload", "idempotency_key", "status",
                "attempts", "next_attempt_at", "last_error", "created_wall",
                "created_logical", "updated_wall", "updated_logical", "schema_version"),
    "timers": ("stream", "name", "key", "deadline"),
    "archives": ("id", "file", "streams", "events", "cutoff_wall", "written_wall"),
}
_JSON = {"payload", "snapshot"}
_BOOL = {"terminal"}


@dataclass
class Tables:
    """Every row of a journal, per table in `COLUMNS` order (JSON as text, flags as
    booleans)."""

    rows: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        return {table: len(rows) for table, rows in self.rows.items()}


def _read_sqlite(path: str) -> Tables:
    conn = sqlite3.connect(reader_uri(path, read_mode(path)), uri=True)
    try:
        conn.execute("BEGIN")
        tables = Tables()
        for table, columns in COLUMNS.items():
            rows = conn.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall()
            flags = [i for i, c in enumerate(columns) if c in _BOOL]
            tables.rows[table] = [
                tuple(bool(v) if i in flags else v for i, v in enumerate(r)) for r in rows]
        conn.execute("COMMIT")
        return tables
    finally:
        conn.close()


async def read(location: str) -> Tables:
    """Every row of the journal at `location` (a file or a DSN), in one snapshot."""
    if is_dsn(location):
        journal = await PostgresJournal.open(location, read_only=True, readers=1)
        await journal.close()  # the schema is checked: now the rows, on one connection
        conn = await asyncpg.connect(location)
        try:
            tables = Tables()
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                for table, columns in COLUMNS.items():
                    shown_columns = [f"{c}::text" if c in _JSON else c for c in columns]
                    tables.rows[table] = [tuple(r) for r in await conn.fetch(
                        f"SELECT {', '.join(shown_columns)} FROM {table}")]
            return tables
        finally:
            await conn.close()
    await (await SQLiteJournal.open(location, read_only=True)).close()  # checks it
    return await asyncio.to_thread(_read_sqlite, location)


def _write_sqlite(path: str, tables: Tables) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        if conn.execute("SELECT (SELECT COUNT(*) FROM events) + (SELECT COUNT(*) FROM"
                        " streams) + (SELECT COUNT(*) FROM effects)").fetchone()[0]:
            conn.execute("ROLLBACK")
            raise JournalRefused(path, "already holds a journal",
                                 "copy into a new file; a copy never merges")
        for table, columns in COLUMNS.items():
            marks = ", ".join("?" * len(columns))
            conn.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})",
                             tables.rows[table])
        conn.execute("COMMIT")
    finally:
        conn.close()


async def write(location: str, tables: Tables) -> None:
    """Write `tables` into the empty journal at `location`, in one transaction."""
    if is_dsn(location):
        journal = await PostgresJournal.open(location, readers=1)  # migrates
        await journal.close()
        conn = await asyncpg.connect(location)
        try:
            async with conn.transaction():
                held = await conn.fetchval(
                    "SELECT (SELECT COUNT(*) FROM events) + (SELECT COUNT(*) FROM streams)"
                    " + (SELECT COUNT(*) FROM effects)")
                if held:
                    raise JournalRefused(shown(location), "already holds a journal",
                                         "copy into an empty database; a copy never merges")
                for table, columns in COLUMNS.items():
                    values = ", ".join(
                        f"${i}::jsonb" if c in _JSON else f"${i}"
                        for i, c in enumerate(columns, 1))
                    if tables.rows[table]:
                        await conn.executemany(
                            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({values})",
                            tables.rows[table])
                for table in ("effects", "archives"):  # ids go on after the copied ones
                    await conn.execute(
                        f"SELECT setval(pg_get_serial_sequence('{table}', 'id'),"
                        f" GREATEST((SELECT MAX(id) FROM {table}), 1),"
                        f" (SELECT MAX(id) FROM {table}) IS NOT NULL)")
        except (asyncpg.PostgresError, OSError) as error:
            raise translate(error, shown(location)) from error
        finally:
            await conn.close()
        return
    await (await SQLiteJournal.open(location)).close()  # creates and migrates
    await asyncio.to_thread(_write_sqlite, location, tables)
