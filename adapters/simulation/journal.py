"""The real SQLite journal, run on the event loop's thread, with commit failures on cue.

`SQLiteJournal` hands every statement to aiosqlite's worker thread; the moment its answer
arrives is the operating system's choice, which a deterministic simulation cannot
allow. `FaultyConnection` is the replay's `engine.sqlite_inline.InlineConnection`
(each job at once on the calling thread: the same SQL, the same file, the same
transactions) with commits that fail on cue.
`CommitFaults` makes the next N group commits fail with the `sqlite3.OperationalError`
a full disk raises, which the journal translates as it would in production.
`issued_effects` reads a replica's outbox from its file, beside the replica, for the
`untraceable-effect` invariant.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import quote

import aiosqlite

from nicplug.adapters.core.settings import Settings
from nicplug.engine.sqlite_inline import InlineConnection
from nicplug.engine.sqlite_journal import SQLiteJournal

T = TypeVar("T")


@dataclass
class CommitFaults:
    """How many of the coming group commits fail (set by the scheduler)."""

    failing: int = 0
    failed: int = 0

    def check(self) -> None:
        if self.failing > 0:
            self.failing -= 1
            self.failed += 1
            raise sqlite3.OperationalError("database or disk is full")


class FaultyConnection(InlineConnection):
    """An `InlineConnection` whose group commits fail on cue (`CommitFaults`)."""

    def __init__(self, conn: sqlite3.Connection, faults: CommitFaults) -> None:
        super().__init__(conn)
        self._faults = faults

    async def _execute(self, job: Callable[[], T]) -> T:
        name = getattr(getattr(job, "__code__", None), "co_name", "")
        if name == "<lambda>" and _is_group_commit(job):
            self._faults.check()
        return job()


def _is_group_commit(job: Callable[[], object]) -> bool:
    """`_on_thread` wraps `partial(write_group, ...)` in a lambda: look inside it."""
    cells = getattr(job, "__closure__", None) or ()
    for cell in cells:
        inner = getattr(cell.cell_contents, "func", None)
        if getattr(inner, "__name__", "") == "write_group":
            return True
    return False


def journal_opener(faults: CommitFaults) -> Callable[..., Any]:
    """The controller's `open_journal`, over a `FaultyConnection`."""

    async def connect(target: str, **kwargs: Any) -> aiosqlite.Connection:
        conn = sqlite3.connect(target, **kwargs)
        return cast(aiosqlite.Connection, FaultyConnection(conn, faults))

    async def open_journal(path: Path, settings: Settings, _metrics: object) -> SQLiteJournal:
        # NORMAL: a simulated crash kills tasks, not the machine; the file stays whole.
        return await SQLiteJournal.open(path, synchronous="NORMAL", connect=connect)

    return open_journal


def issued_effect_rows(path: Path) -> list[tuple[int, str, str]]:
    """(id, type, target) of every effect issued and not finished (`issued_effects`)."""
    if not path.exists():
        return []
    try:
        conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
    except sqlite3.Error:
        return []
    try:
        rows = conn.execute("SELECT id, type, idempotency_key FROM effects"
                            " WHERE status = 'issued'").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()
    return [(int(i), str(kind), str(key).split(":", 1)[-1].rsplit(":", 1)[0])
            for i, kind, key in rows]


def issued_effects(path: Path) -> list[tuple[str, str]]:
    """(type, target) of every effect the journal at `path` holds as issued and not yet
    finished: what its controller may be sending now. Read through a read-only
    connection of its own (as `nicplug journal` reads beside a running controller), which
    sees every committed transaction and changes nothing. The target (`namespace/name`
    of the object acted on) is the middle of the effect's idempotency key,
    `type:namespace/name:digest`. A journal not created yet holds none."""
    if not path.exists():
        return []
    try:
        conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
    except sqlite3.Error:
        return []
    try:
        rows = conn.execute(
            "SELECT type, idempotency_key FROM effects WHERE status = 'issued'").fetchall()
    except sqlite3.OperationalError:  # no schema yet: the journal is being created
        return []
    finally:
        conn.close()
    return [(str(kind), str(key).split(":", 1)[-1].rsplit(":", 1)[0]) for kind, key in rows]
