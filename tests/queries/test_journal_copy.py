"""`nicplug journal copy SRC DST`: a journal the real decider wrote, from SQLite to
PostgreSQL and back, checked by `verify` on both sides (and `journal verify|export
--journal postgresql://...` on the database) and read back equal through the
journal port; a target that holds a journal already is refused, unchanged."""

from __future__ import annotations

import asyncio
from pathlib import Path

from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.machines.versions import schemas
from tests.queries.test_cli import as_json, nicplug


async def _everything(path: Path) -> tuple[object, ...]:
    journal = await SQLiteJournal.open(path, read_only=True, schemas=schemas())
    try:
        return (await journal.read_all(limit=100_000), await journal.views(),
                await journal.outbox(pending_only=False), await journal.timers(),
                await journal.census())
    finally:
        await journal.close()


def test_a_journal_goes_to_postgres_and_back_unchanged(
    standard_journal: Path, postgres_dsn: str, tmp_path: Path,
) -> None:
    there = nicplug("journal", "copy", str(standard_journal), postgres_dsn)
    assert there.exit_code == 0, there.output
    assert there.output.count("verify ok") == 2, there.output
    verified = as_json("journal", "verify", "--journal", postgres_dsn)
    assert verified["ok"] and verified["events"] > 0, verified
    exported = nicplug("journal", "export", "--journal", postgres_dsn)
    assert exported.exit_code == 0, exported.output
    assert len(exported.stdout.splitlines()) == verified["events"]
    back = tmp_path / "back.db"
    again = nicplug("journal", "copy", postgres_dsn, str(back))
    assert again.exit_code == 0, again.output
    assert again.output.count("verify ok") == 2, again.output
    assert asyncio.run(_everything(back)) == asyncio.run(_everything(standard_journal))

    refused = nicplug("journal", "copy", str(standard_journal), postgres_dsn)
    assert refused.exit_code == 1
    assert "already holds a journal" in refused.output
    existing = nicplug("journal", "copy", str(standard_journal), str(back))
    assert existing.exit_code == 2 and "never overwrites" in existing.output
