"""The controller's retention on a PostgreSQL journal: a leader archives what finished
before the window when `--archive-dir` names where archives go, and leaves the
database as it is without one (a replica's own disk would lose them with the pod)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest

from tests.integration.conftest import eventually
from tests.queries.journal_worlds import filled_journal
from tests.queries.test_cli import nicplug


def _archives(directory: Path) -> list[Path]:
    return [p for p in directory.iterdir() if p.name.startswith("nicplug-archive-")]


async def _count(dsn: str, table: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval(f"SELECT COUNT(*) FROM {table}"))
    finally:
        await conn.close()


@pytest.fixture
def database(postgres_dsn: str, tmp_path: Path) -> str:
    """The standard journal (finished operations of 2023 among them) in the database."""
    (tmp_path / "source").mkdir()
    source = filled_journal(tmp_path / "source" / "journal.db")
    copied = nicplug("journal", "copy", str(source), postgres_dsn)
    assert copied.exit_code == 0, copied.output
    return postgres_dsn


async def test_a_leader_archives_into_the_archive_dir_only(
    start_cluster, start_controller, database: str, tmp_path: Path,
) -> None:
    postgres_dsn = database
    cluster = await start_cluster()

    # no --archive-dir: a leader on PostgreSQL keeps every row
    without = await start_controller(cluster, journal_dsn=postgres_dsn)
    await without.stop()
    assert await _count(postgres_dsn, "archives") == 0
    assert await _count(postgres_dsn, "streams WHERE archived IS NOT NULL") == 0
    assert _archives(tmp_path) == []

    into = tmp_path / "archives"
    into.mkdir()
    ctl = await start_controller(cluster, journal_dsn=postgres_dsn, archive_dir=into)

    async def archived() -> bool:
        return await _count(postgres_dsn, "archives") == 1

    await eventually(archived, within=10.0, what="the first retention run")
    await ctl.stop()
    (file,) = _archives(into)
    assert file.stat().st_size > 0
    assert await _count(postgres_dsn, "streams WHERE archived IS NOT NULL") > 0
    assert await _count(postgres_dsn, "events e JOIN streams s ON s.stream = e.stream"
                        " WHERE s.archived IS NOT NULL") == 0
    checked = await asyncio.to_thread(nicplug, "journal", "check-archive", str(file))
    assert checked.exit_code == 0 and "whole" in checked.stdout
