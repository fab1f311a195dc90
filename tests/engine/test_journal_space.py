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


def _index_pages(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as conn:
        return dict(conn.execute(
            "SELECT d.name, COUNT(*) FROM dbstat d JOIN sqlite_schema s ON s.name = d.name"
            " WHERE s.tbl_name = 'streams' AND s.type = 'index' GROUP BY d.name").fetchall())


async def test_archiving_half_the_read_model_leaves_its_stream_names_packed(tmp_path: Path) -> None:
    """Removing every other row at once leaves each index page half empty, which SQLite
    does not merge: the index of stream names (one page or three for the same rows
    under churn) is rebuilt, as small as in a journal that only ever held what remains."""
    name = "uid-{n:06d}/ClusterNetwork/a-rather-long-network-name/plug/{n}"
    streams = [name.format(n=n) for n in range(400)]
    path = tmp_path / "journal.db"
    async with opened(path) as journal:
        for stream in streams:
            await journal.append(commit(stream, 0, "Opened", "Done", key=f"ns/{stream[:10]}",
                                        view="Done", terminal=True))
        with (tmp_path / "archive.jsonl").open("wb") as sink:
            await journal.archive(
                streams=streams[::2], keep=[], superseded=[],
                sink=sink, publish=lambda: None, file=str(tmp_path / "archive.jsonl"),
                line=_line, cutoff_wall=2000.0, now_wall=2000.0,
            )
        await journal.checkpoint()
    fresh = tmp_path / "fresh.db"
    async with opened(fresh) as journal:
        for stream in streams[1::2]:
            await journal.append(commit(stream, 0, "Opened", "Done", key=f"ns/{stream[:10]}",
                                        view="Done", terminal=True))
        await journal.checkpoint()
    archived, only = _index_pages(path), _index_pages(fresh)
    names = "sqlite_autoindex_streams_1"
    assert archived[names] <= only[names], (archived, only)
