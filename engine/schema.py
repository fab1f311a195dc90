"""The journal's schema: numbered SQL files from `nicplug.migrations`, applied at open.

`PRAGMA user_version` records the last file applied. A journal written by a newer
nicplug (a higher version than any file shipped here) is refused, never downgraded.
The files are read through `importlib.resources`, so they ship inside the wheel.
Runs on the database thread; must never create or delete files.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from importlib import resources

from nicplug.engine.errors import JournalRefused

_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    number: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    return numbered()


def numbered(backend: str = "") -> list[Migration]:
    """The SQL migrations of a journal backend, in order: SQLite's at the top of
    `migrations/`, another backend's in its folder there (`postgres`)."""
    folder = resources.files("nicplug.migrations")
    if backend:
        folder = folder / backend
    found = []
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), entry.name, entry.read_text("utf-8")))
    found.sort(key=lambda m: m.number)
    numbers = [m.number for m in found]
    if numbers != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations must be numbered 1..n without gaps, found {numbers}")
    return found


def latest_version() -> int:
    return len(migrations())


def schema_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def migrate(conn: sqlite3.Connection, *, path: str) -> int:
    """Bring the schema up to date; return the version it is at now."""
    current = schema_version(conn)
    known = migrations()
    if current > len(known):
        raise JournalRefused(
            path,
            f"written by a newer nicplug (schema {current}, this one knows up to {len(known)})",
            "run the newer nicplug or restore a journal of this version; it is left untouched",
        )
    for migration in known[current:]:
        try:
            conn.executescript(
                f"BEGIN IMMEDIATE;\n{migration.sql}\n"
                f"PRAGMA user_version = {migration.number};\nCOMMIT;"
            )
        except sqlite3.Error:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    return len(known)
