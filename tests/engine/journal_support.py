"""Building blocks shared by the journal tests: open a journal, make commits."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from nicplug.engine.journal import Commit
from nicplug.engine.model import Cause, Key, NewEvent, StreamId, StreamView
from nicplug.engine.sqlite_journal import SQLiteJournal


@asynccontextmanager
async def opened(path: str | Path, **options: Any) -> AsyncIterator[SQLiteJournal]:
    journal = await SQLiteJournal.open(path, **options)
    try:
        yield journal
    finally:
        await journal.close()


def commit(
    stream: str,
    expected: int,
    *types: str,
    key: str = "ns/vm",
    dedup: str | None = None,
    view: str | None = None,
    terminal: bool = False,
    payload: Mapping[str, Any] | None = None,
    **extra: Any,
) -> Commit:
    sid = StreamId(stream)
    views = (
        (StreamView(sid, Key(key), view, terminal, {"last": types[-1] if types else None}),)
        if view
        else ()
    )
    return Commit(
        key=Key(key),
        cause=Cause("observation", f"VirtualMachine/{key}@{dedup}", dedup),
        wall_time=1000.0,
        logical_time=5.0,
        events=tuple(NewEvent(sid, t, dict(payload or {"n": i})) for i, t in enumerate(types)),
        expected={sid: expected} if types else {},
        views=views,
        **extra,
    )


def scribbled(path: Path, table: str, copy: Path) -> Path:
    """A copy of `path` with the b-tree pages of `table` (and only those) overwritten."""
    with sqlite3.connect(path) as conn:
        pages = [int(r[0]) for r in conn.execute(
            "SELECT pageno FROM dbstat WHERE name = ? ORDER BY pageno", (table,))]
    data = bytearray(path.read_bytes())
    page = 4096
    for number in pages[: len(pages) - 1]:  # the last one left whole: still appended to
        at = (number - 1) * page
        data[at + 8 : at + 64] = os.urandom(56)
    copy.write_bytes(bytes(data))
    return copy
