"""What `nicplug journal verify` finds in a journal, and the refusal `nicplug run` gives
for a journal it rejects.

One module so both say it in the same words: a controller that starts on a journal
whose read model disagrees with its events would decide from the wrong states, so
`run` audits the journal it is given before anything connects (SQLite's whole-file
check stays beside the work, `controller._check_journal`: its cost grows with the
history, the audit's with the live state). Read-only: it never writes or repairs.
"""

from __future__ import annotations

import sqlite3
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nicplug.adapters.queries.reading import open_for_queries
from nicplug.engine.audit import audit, folder
from nicplug.engine.errors import JournalRefused
from nicplug.engine.schema import latest_version, schema_version
from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.engine.sqlite_opening import checker
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.operation import fold_view, retrying

if TYPE_CHECKING:
    from nicplug.engine.postgres_journal import PostgresJournal


async def verified(
    journal: SQLiteJournal | PostgresJournal, *, integrity: bool = True,
) -> dict[str, Any]:
    """The report of `journal verify`, for either backend: the backend's integrity
    check (unless `integrity` is False), the counts, and every mismatch between the
    events and the read model."""
    problems = ["ok"]
    if integrity:
        try:
            problems = await journal.integrity()
        except JournalRefused as error:  # so damaged that the check itself gives up
            return {"ok": False, "integrity": [error.problem]}
    report: dict[str, Any] = {"ok": problems == ["ok"], "integrity": problems}
    try:
        census = await journal.census()
    except JournalRefused as error:  # damaged pages may fail the counts too
        report["ok"] = False
        report["integrity"] = [*problems, error.problem] if problems != ["ok"] else [
            error.problem]
        return report
    report.update(
        schema_version=census.schema_version, schema_supported=_supported(journal),
        events=census.events, last_position=census.last_position, streams=census.streams,
        live_streams=census.live_streams, effects=dict(census.effects), timers=census.timers,
    )
    if report["ok"]:
        decider = HotplugDecider()
        given = await journal.audit_input(folder(fold_view))
        mismatches = audit(decider, given, retrying)
        report["mismatches"] = [asdict(m) for m in mismatches]
        report["ok"] = not mismatches
    return report


def _supported(journal: SQLiteJournal | PostgresJournal) -> int:
    if isinstance(journal, SQLiteJournal):
        return latest_version()
    from nicplug.engine.postgres_opening import latest_version as postgres_latest

    return postgres_latest()


def _for_the_writer(path: Path) -> bool:
    """Is the journal at `path` one no reader can audit yet: no schema (version 0) or an
    older one? Anything else (a newer schema, a file that is no database) is left to
    the audit's own refusal."""
    try:
        conn = checker(str(path))
        try:
            version = schema_version(conn)
        finally:
            conn.close()
    except (sqlite3.Error, JournalRefused):
        return False
    return version < latest_version()


def mismatches_found(count: int) -> str:
    """How verify names a journal whose read model disagrees with its events."""
    return (f"{count} mismatches between the events and what the journal keeps from "
            "them; `nicplug journal rebuild` (controller stopped) rewrites the read model "
            "from the events")


async def refused_at_start(path: Path) -> JournalRefused | None:
    """Why `nicplug run` must not start on the existing journal at `path` (audited
    read-only, in verify's words), or None: it verifies, or it is for the writer to
    finish first — a file with no schema yet (a replica racing for the Lease has just
    created it) or of an older schema (written by an older nicplug: the writer migrates
    it when it opens it; `journal verify` audits it afterwards)."""
    if _for_the_writer(path):
        return None
    journal = await open_for_queries(path, integrity="bounded")
    try:
        report = await verified(journal, integrity=False)
    finally:
        await journal.close()
    if report["ok"]:
        return None
    mismatches = report.get("mismatches", [])
    if mismatches:
        first = mismatches[0]
        return JournalRefused(
            str(path), mismatches_found(len(mismatches)),
            f"the first: {first['key']} {first['stream']}: {first['field']}: the journal "
            f"holds {first['stored']}, the events give {first['folded']}")
    return JournalRefused(str(path), "DAMAGED: " + "; ".join(report["integrity"][:3]),
                          "`nicplug journal verify` lists what is wrong")
