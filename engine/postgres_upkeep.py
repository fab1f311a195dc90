"""Keeping a PostgreSQL journal: rewriting its read model from the events, archiving
finished streams — `sqlite_upkeep`'s jobs, with the same results, on the database.

Every writing job is one transaction fenced like every append (`postgres_writes.fence`):
it takes the writers' lock and is refused (`Superseded`) once a term after the caller's
began, so a deposed leader's retention, or a rebuild a newer leader overtook, writes
nothing. Archiving writes the archive file (fsynced, put in place) before the
transaction that deletes what it holds, and that transaction first checks that no
archived stream gained an event meanwhile: a crash or a refusal between the two leaves
the events in both places, never in neither. Must never call back into the runtime,
never drop or recreate a table.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable, Sequence
from typing import IO

import asyncpg

from nicplug.engine.errors import JournalError
from nicplug.engine.journal import StoredView
from nicplug.engine.model import RecordedEvent, StreamId
from nicplug.engine.postgres_writes import fence
from nicplug.engine.sqlite_reads import EVENT_COLUMNS, VIEW_COLUMNS, event_of, view_of
from nicplug.engine.sqlite_upkeep import Archived, Fold, Rebuilt, compare, fold_rows
from nicplug.engine.sqlite_writes import to_json
from nicplug.engine.upcasting import Schemas

_EVENTS = EVENT_COLUMNS.replace("payload", "payload::text")
_VIEWS = VIEW_COLUMNS.replace("snapshot,", "snapshot::text,")
_CHUNK = 500  # streams per read of their events


async def rebuild(
    conn: asyncpg.Connection, schemas: Schemas, fold: Fold, *, term: int | None
) -> Rebuilt:
    """Fold every stream and rewrite the read-model rows that differ from their fold
    (`sqlite_upkeep.compare`), in one transaction under the writers' lock, fenced by
    `term`; nothing is written when a stream cannot be folded."""
    async with conn.transaction():
        await fence(conn, term)
        events = await conn.fetch(
            "SELECT position, stream, key, version, type, schema_version, payload::text"
            " FROM events ORDER BY stream, version")
        folded = fold_rows((tuple(e) for e in events), schemas, fold)
        del events
        rows = await conn.fetch(
            f"SELECT {_VIEWS} FROM streams WHERE state IS NOT NULL AND archived IS NULL"
            " ORDER BY key, stream")
        rebuilt, differing = compare((tuple(r) for r in rows), folded, schemas)
        if differing:
            await conn.executemany(
                "UPDATE streams SET state = $1, terminal = $2, snapshot = $3::jsonb,"
                " snapshot_schema = $4, snapshot_through = version WHERE stream = $5",
                [(v.state, v.terminal, to_json(v.snapshot), v.schema, v.stream)
                 for v in differing])
    return rebuilt


async def archivable(conn: asyncpg.Connection, cutoff_wall: float) -> list[StoredView]:
    """Finished streams last changed before `cutoff_wall`, with no pending effect and no
    armed timer, whose events are still in the journal."""
    rows = await conn.fetch(
        f"SELECT {_VIEWS} FROM streams s WHERE terminal AND archived IS NULL"
        " AND state IS NOT NULL AND updated_wall < $1"
        " AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.stream = s.stream"
        " AND e.status = 'issued')"
        " AND NOT EXISTS (SELECT 1 FROM timers t WHERE t.stream = s.stream)"
        " ORDER BY key, stream",
        cutoff_wall,
    )
    return [view_of(tuple(r), Schemas().snapshots) for r in rows]


async def archive(
    conn: asyncpg.Connection,
    *,
    term: int | None,
    streams: Sequence[StreamId],
    keep: Iterable[StreamId],
    superseded: Sequence[StreamId],
    sink: IO[bytes],
    publish: Callable[[], None],
    file: str,
    line: Callable[[RecordedEvent], bytes],
    schemas: Schemas,
    cutoff_wall: float,
    now_wall: float,
) -> Archived:
    """`sqlite_upkeep.archive` on PostgreSQL: the events of `streams` to `sink` (JSON
    lines, position order within each chunk of streams, as SQLite writes them), durable
    and published, then one fenced transaction deletes them and their outbox rows, keeps
    the rows of `keep` as summaries naming `file`, drops the `superseded` summaries and
    records the run. Refused, deleting nothing, when a stream gained an event since it
    was written out."""
    kept = set(keep)
    written: dict[str, int] = {}  # stream -> the last version written out
    count = 0
    for first in range(0, len(streams), _CHUNK):
        chunk = list(streams[first : first + _CHUNK])
        rows = await conn.fetch(
            f"SELECT {_EVENTS} FROM events WHERE stream = ANY($1::text[]) ORDER BY position",
            chunk)
        lines = []
        for r in rows:
            event = event_of(tuple(r), schemas.events)
            lines.append(line(event))
            written[event.stream] = max(written.get(event.stream, 0), event.version)
        count += len(lines)
        await asyncio.to_thread(sink.write, b"".join(lines))
    await asyncio.to_thread(sink.flush)
    await asyncio.to_thread(os.fsync, sink.fileno())
    publish()
    names = list(streams)
    async with conn.transaction():
        await fence(conn, term)
        grown = await conn.fetch(
            "SELECT e.stream FROM events e JOIN unnest($1::text[], $2::int[]) AS w(s, v)"
            " ON e.stream = w.s AND e.version > w.v LIMIT 1",
            list(written), list(written.values()))
        if grown:
            raise JournalError(
                f"stream {grown[0][0]} gained events while it was archived to {file}; "
                "nothing was deleted (the archive holds a copy), the next run tries again")
        await conn.execute("DELETE FROM events WHERE stream = ANY($1::text[])", names)
        await conn.execute("DELETE FROM effects WHERE stream = ANY($1::text[])", names)
        await conn.execute("DELETE FROM streams WHERE stream = ANY($1::text[])",
                           [s for s in names if s not in kept])
        await conn.execute(
            "DELETE FROM streams WHERE stream = ANY($1::text[]) AND archived IS NOT NULL",
            list(superseded))
        await conn.execute("UPDATE streams SET archived = $1 WHERE stream = ANY($2::text[])",
                           file, [s for s in names if s in kept])
        await conn.execute(
            "INSERT INTO archives (file, streams, events, cutoff_wall, written_wall)"
            " VALUES ($1, $2, $3, $4, $5)", file, len(names), count, cutoff_wall, now_wall)
    return Archived(file, len(names), count, len([s for s in names if s in kept]))


async def archives(conn: asyncpg.Connection) -> list[tuple[str, int, int, float]]:
    """(file, streams, events, written_wall) of every archive written, newest first."""
    return [(str(r[0]), int(r[1]), int(r[2]), float(r[3])) for r in await conn.fetch(
        "SELECT file, streams, events, written_wall FROM archives ORDER BY id DESC")]
