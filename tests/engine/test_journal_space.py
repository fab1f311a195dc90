"""A journal gives the space archiving frees back to the file system, step by step."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from nicplug.engine.model import RecordedEvent
from tests.engine.journal_support import commit, opened


def _line(event: RecordedEvent) -> bytes:
    return f"{event.position}\n".encode()


async def test_a_new_journal_shrinks_after_archiving_without_vacuum(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    streams = [f"vm-{n}/net" for n in range(40)]
    async with opened(path) as journal:
        for stream in streams:
            await journal.append(commit(stream, 0, "Opened", "Done", key=f"ns/{stream}",
                                        view="Done", terminal=True, payload={"pad": "x" * 4000}))
        await journal.checkpoint()
        full = path.stat().st_size
        with (tmp_path / "archive.jsonl").open("wb") as sink:
            archived = await journal.archive(
                streams=streams, keep=streams, superseded=[], sink=sink, publish=lambda: None,
                file=str(tmp_path / "archive.jsonl"), line=_line, cutoff_wall=2000.0,
                now_wall=2000.0,
            )
        await journal.checkpoint()
        assert archived.events == 2 * len(streams)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA auto_vacuum").fetchone() == (2,)  # incremental
        assert conn.execute("PRAGMA freelist_count").fetchone() == (0,)
    assert path.stat().st_size < full / 2, (full, path.stat().st_size)
