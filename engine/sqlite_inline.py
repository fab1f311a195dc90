"""An SQLite connection that runs each job at once on the caller's thread.

`SQLiteJournal` hands every statement to aiosqlite's worker thread, so that a live
controller's event loop never blocks on the disk. A replay decides one key at a time
and waits for each commit before the next decision: there the hop to that thread and
back (a queue, a wake-up, the loop's self-pipe) costs more than the commit itself, and
the loop only sleeps meanwhile. `connect_inline` stands for `aiosqlite.connect`
(`SQLiteJournal.open(connect=...)`) and gives the few things the journal uses of an
aiosqlite connection: the same SQL, the same transactions, on the calling thread.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import aiosqlite

T = TypeVar("T")


class InlineConnection:
    """Stands for `aiosqlite.Connection`; every job runs at once on this thread."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._connection: sqlite3.Connection | None = conn

    @property
    def _conn(self) -> sqlite3.Connection:
        if self._connection is None:
            raise ValueError("no active connection")
        return self._connection

    async def _execute(self, job: Callable[[], T]) -> T:
        return job()

    async def execute_fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        return list(self._conn.execute(sql, params).fetchall())

    async def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


async def connect_inline(target: str, **kwargs: Any) -> aiosqlite.Connection:
    """`aiosqlite.connect`'s stand-in: a connection whose jobs run on this thread."""
    return cast(aiosqlite.Connection, InlineConnection(sqlite3.connect(target, **kwargs)))
