"""The group commit keeps the stream versions it wrote for the next group, and never
trusts them once something else changed the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from nicplug.engine.errors import JournalConflict
from nicplug.engine.model import RecordedEvent
from tests.engine.journal_support import commit, opened


async def test_a_commit_of_another_writer_is_seen_by_the_next_group(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    async with opened(path) as first, opened(path) as second:
        await first.append(commit("s", 0, "A"))
        await second.append(commit("s", 1, "B"))  # `first` knows nothing of it
        await first.append(commit("s", 2, "C"))
        with pytest.raises(JournalConflict):
            await first.append(commit("s", 2, "D"))
        assert [e.type for e in await second.history(stream="s")] == ["A", "B", "C"]


def _line(event: RecordedEvent) -> bytes:
    return f"{event.position}\n".encode()


async def test_a_write_of_its_own_beside_the_groups_is_seen_too(tmp_path: Path) -> None:
    async with opened(tmp_path / "journal.db") as journal:
        await journal.append(commit("s", 0, "A", "B", view="Done", terminal=True))
        with (tmp_path / "archive.jsonl").open("wb") as sink:  # the stream leaves
            await journal.archive(
                streams=["s"], keep=[], superseded=[], sink=sink, publish=lambda: None,
                file="archive.jsonl", line=_line, cutoff_wall=2000.0, now_wall=2000.0)
        await journal.append(commit("s", 0, "C"))
        with pytest.raises(JournalConflict):
            await journal.append(commit("s", 0, "D"))
        assert [(e.type, e.version) for e in await journal.history(stream="s")] == [("C", 1)]
