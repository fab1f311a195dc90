"""Retention: the events of operations finished longer ago than a window leave the
journal for a JSON-lines archive, so the journal's size stays flat however long the
controller runs.

One run picks the finished streams last changed before `now - window` (with nothing
pending and no timer), writes their events in `journal export`'s format to a new file
in `into`, makes it durable, and only then deletes them in one transaction; the newest
attempt of each (VM, network, direction) keeps its read-model row as a summary that
names the file (`machines.operation.summaries_to_keep`). Used by `nicplug journal
archive`, by the controller on its retention schedule, and by the benchmark. Either
journal: on PostgreSQL the deleting transaction is fenced by the journal's term, so a
deposed leader's run deletes nothing (its archive file, already durable, only repeats
what the journal still holds).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from nicplug.adapters.exporting import event_line
from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.engine.sqlite_upkeep import Archived
from nicplug.machines.operation import summaries_to_keep

if TYPE_CHECKING:
    from nicplug.engine.postgres_journal import PostgresJournal  # the `postgres` extra

DEFAULT_WINDOW = 30 * 86400.0


async def archive_finished(
    journal: SQLiteJournal | PostgresJournal, *, window: float, into: Path, now: float
) -> Archived | None:
    """Archive what finished before `now - window` into a new file in the directory
    `into` (an absolute path); None when nothing is old enough."""
    cutoff = now - window
    candidates = await journal.archivable(cutoff)
    if not candidates:
        return None
    keys = {row.view.key for row in candidates}
    rows = [v for v in await journal.views() if v.view.key in keys]
    keep = summaries_to_keep([v.view for v in rows])
    # summaries an earlier run kept that a newer attempt has superseded since
    superseded = [v.view.stream for v in rows if v.archived and v.view.stream not in keep]
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    target = into / f"nicplug-archive-{stamp}-{int(now * 1000) % 1000:03d}.jsonl"
    handle, temporary = tempfile.mkstemp(dir=into, prefix=f".{target.name}.")
    try:
        with os.fdopen(handle, "wb") as sink:
            return await journal.archive(
                streams=[row.view.stream for row in candidates], keep=keep,
                superseded=superseded, sink=sink,
                publish=lambda: os.link(temporary, target), file=str(target),
                line=event_line, cutoff_wall=cutoff, now_wall=now,
            )
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)  # the archive is `target` now (or was never put there)
