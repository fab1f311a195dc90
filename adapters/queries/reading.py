"""The journal queries: operations, a timeline, stuck operations, an explanation.

Each is a few reads through the engine's inspection port (`JournalInspection`), which
a read-only `SQLiteJournal` offers beside a running controller: WAL lets readers and the
one writer work at once, and a stream's record is read in one snapshot. Selections are
checked first (`selection`) and reach SQL only as bound parameters. Never writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from nicplug.adapters.queries.explaining import Dossier, Explanation, explain
from nicplug.adapters.queries.records import OperationSummary, Timeline
from nicplug.adapters.queries.selection import (
    BadSelection,
    Selection,
    direction_ref,
    network_ref,
    vm_ref,
)
from nicplug.engine.inspection import JournalInspection, StreamRecord
from nicplug.engine.locations import is_dsn
from nicplug.engine.model import StreamId
from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.engine.sqlite_opening import IntegrityCheck
from nicplug.machines.versions import schemas

if TYPE_CHECKING:
    from nicplug.engine.postgres_journal import PostgresJournal

DEFAULT_JOURNAL = Path("nicplug-journal.db")
EVERYTHING = Selection()


async def open_for_queries(
    path: Path | str, *, integrity: IntegrityCheck = "quick"
) -> SQLiteJournal | PostgresJournal:
    """The journal at `path` (a file, or a PostgreSQL DSN), read-only; `JournalRefused`
    when missing, damaged or newer."""
    if isinstance(path, str) and is_dsn(path):
        from nicplug.engine.postgres_journal import PostgresJournal  # the `postgres` extra

        return await PostgresJournal.open(path, read_only=True, schemas=schemas(), readers=2)
    return await SQLiteJournal.open(
        path, read_only=True, integrity=integrity, schemas=schemas()
    )


def _order(op: OperationSummary) -> tuple[str, str, str, int]:
    return (op.vm, op.network, op.direction, op.attempt)


async def operations(
    journal: JournalInspection, selection: Selection = EVERYTHING
) -> list[OperationSummary]:
    """Every operation matching `selection`, by VM, network, direction and attempt."""
    found = await journal.find_views(selection.query())
    return sorted((OperationSummary.of(v) for v in found), key=_order)


async def stuck(
    journal: JournalInspection, *, older_than: float, now: float
) -> list[OperationSummary]:
    """Live operations that entered their state more than `older_than` seconds before `now`."""
    found = await journal.find_views(
        Selection().query(terminal=False, below={"entered_at": now - older_than})
    )
    return sorted((OperationSummary.of(v) for v in found), key=lambda o: (o.entered_at, _order(o)))


async def timeline(journal: JournalInspection, operation: str) -> Timeline | None:
    record = await journal.stream_record(StreamId(operation))
    return Timeline.of(record) if record is not None else None


async def explanation(
    journal: JournalInspection, operation: str, *, now: float
) -> Explanation | None:
    record = await journal.stream_record(StreamId(operation))
    return await _explained(journal, record, now) if record is not None else None


async def dossier(journal: JournalInspection, operation: str, *, now: float) -> Dossier | None:
    """Timeline and explanation of one operation, from one read of its record."""
    record = await journal.stream_record(StreamId(operation))
    if record is None:
        return None
    line = Timeline.of(record)
    explained = await _explained(journal, record, now)
    if line is None or explained is None:
        return None
    return Dossier(timeline=line, explain=explained)


async def _explained(
    journal: JournalInspection, record: StreamRecord, now: float
) -> Explanation | None:
    if record.view is None:
        return None
    op = OperationSummary.of(record.view)
    later = await journal.find_views(
        Selection(network=op.network, direction=op.direction).query(key=record.view.view.key)
    )
    attempts = [o for o in map(OperationSummary.of, later) if o.attempt > op.attempt]
    newest = max(attempts, key=lambda o: o.attempt).id if attempts else None
    return explain(record, now=now, superseded_by=newest)


class Ambiguous(BadSelection):
    """More than one operation fits and nothing says which one."""


async def resolve(
    journal: JournalInspection, operation: str, network: str | None = None,
    direction: str | None = None,
) -> str | None:
    """The stream id of an operation named by its id, or by `NS/NAME NETWORK
    [direction]`: the latest attempt; when both directions have one, the live one, else
    the one that changed last. None when nothing fits."""
    if network is None:
        if direction is not None:
            raise BadSelection("--direction needs NS/NAME and NETWORK, not an operation id")
        found = await journal.find_views(Selection().query(stream=StreamId(operation)))
        return found[0].view.stream if found else None
    selection = Selection(
        vm=vm_ref(operation), network=network_ref(network),
        direction=direction_ref(direction) if direction is not None else None,
    )
    found = await journal.find_views(selection.query())
    return choose(operation, network, [OperationSummary.of(v) for v in found])


def choose(vm: str, network: str, found: list[OperationSummary]) -> str | None:
    """Of the operations of `vm` on `network` in `found`, the one `explain` means: the
    latest attempt; when both directions have one, the live one, else the one that
    changed last. None when nothing fits."""
    latest: dict[str, OperationSummary] = {}
    for op in found:
        if op.direction not in latest or latest[op.direction].attempt < op.attempt:
            latest[op.direction] = op
    if not latest:
        return None
    live = [op for op in latest.values() if not op.terminal]
    if len(live) == 1:
        return live[0].id
    if len(live) > 1:
        names = ", ".join(sorted(op.direction for op in live))
        raise Ambiguous(f"{vm} {network} has live operations in {names}: "
                        "choose one with --direction")
    return max(latest.values(), key=lambda op: (op.updated_wall, op.entered_at)).id
