"""The inspection reads on PostgreSQL: filtered read-model rows, one stream's whole
record, counts — what `nicplug status|history|explain` and `/operations` ask.

A stream's record and the census are each read in one REPEATABLE READ snapshot, so
they are never half before and half after a commit. Statements are built from fixed
fragments; every value, snapshot field names included, is a bound parameter. Reads
only.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import orjson

from nicplug.engine.audit import AuditInput, Folded, Issued
from nicplug.engine.errors import JournalError
from nicplug.engine.inspection import Census, StreamRecord, ViewQuery
from nicplug.engine.journal import ArmedTimer, StoredView
from nicplug.engine.model import Key, StreamId
from nicplug.engine.postgres_opening import schema_version
from nicplug.engine.sqlite_reads import (
    EVENT_COLUMNS,
    VIEW_COLUMNS,
    _effect_of,
    event_of,
    view_of,
)
from nicplug.engine.sqlite_upkeep import Fold, fold_rows
from nicplug.engine.upcasting import Schemas

EVENTS = EVENT_COLUMNS.replace("payload", "payload::text")
VIEWS = VIEW_COLUMNS.replace("snapshot,", "snapshot::text,")
_EFFECTS = (
    "id, stream, key, type, payload::text, idempotency_key, status, attempts,"
    " next_attempt_at, last_error, created_wall, created_logical, updated_wall,"
    " updated_logical, schema_version"
)


async def find_views(
    conn: asyncpg.Connection, query: ViewQuery, schemas: Schemas
) -> list[StoredView]:
    sql = f"SELECT {VIEWS} FROM streams WHERE state IS NOT NULL"
    params: list[Any] = []

    def bind(value: Any) -> str:
        params.append(value)
        return f"${len(params)}"

    for column, value in (("key", query.key), ("stream", query.stream),
                          ("state", query.state), ("terminal", query.terminal)):
        if value is not None:
            sql += f" AND {column} = {bind(value)}"
    for name, scalar in query.equal.items():
        sql += f" AND snapshot -> {bind(name)} = {bind(orjson.dumps(scalar).decode())}::jsonb"
    for name, bound in query.below.items():
        field = bind(name)
        sql += (f" AND jsonb_typeof(snapshot -> {field}) = 'number'"
                f" AND (snapshot ->> {field})::float8 < {bind(float(bound))}")
    sql += " ORDER BY key, stream"
    if query.limit is not None:
        sql += f" LIMIT {bind(query.limit)}"
    return [view_of(tuple(r), schemas.snapshots) for r in await conn.fetch(sql, *params)]


async def stream_record(
    conn: asyncpg.Connection, stream: StreamId, schemas: Schemas
) -> StreamRecord | None:
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        row = await conn.fetchrow(f"SELECT {VIEWS} FROM streams WHERE stream = $1", stream)
        if row is None:
            return None
        events = await conn.fetch(
            f"SELECT {EVENTS} FROM events WHERE stream = $1 ORDER BY version", stream)
        effects = await conn.fetch(
            f"SELECT {_EFFECTS} FROM effects WHERE stream = $1 ORDER BY id", stream)
        timers = await conn.fetch(
            "SELECT stream, name, key, deadline FROM timers WHERE stream = $1"
            " ORDER BY deadline, name", stream)
        observed = await conn.fetchrow(
            f"SELECT {EVENTS} FROM events WHERE key = $1 AND cause_kind = 'observation'"
            " ORDER BY position DESC LIMIT 1", row[1])
    return StreamRecord(
        view=view_of(tuple(row), schemas.snapshots) if row[2] is not None else None,
        events=tuple(event_of(tuple(r), schemas.events) for r in events),
        effects=tuple(_effect_of(tuple(r), schemas.effects) for r in effects),
        timers=tuple(ArmedTimer(StreamId(r[0]), r[1], Key(r[2]), r[3]) for r in timers),
        last_observation=event_of(tuple(observed), schemas.events) if observed else None,
    )


async def census(conn: asyncpg.Connection) -> Census:
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        events, last = await conn.fetchrow(
            "SELECT COUNT(*), COALESCE(MAX(position), 0) FROM events")
        streams, live = await conn.fetchrow(
            "SELECT COUNT(*), COUNT(*) FILTER (WHERE NOT terminal AND state IS NOT NULL)"
            " FROM streams")
        effects = dict.fromkeys(("issued", "succeeded", "failed"), 0)
        effects.update({r[0]: int(r[1]) for r in await conn.fetch(
            "SELECT status, COUNT(*) FROM effects GROUP BY status")})
        timers = await conn.fetchval("SELECT COUNT(*) FROM timers")
        version = await schema_version(conn)
    return Census(
        schema_version=version, events=int(events), last_position=int(last),
        streams=int(streams), live_streams=int(live), effects=effects, timers=int(timers),
    )


async def integrity(conn: asyncpg.Connection) -> list[str]:
    """What the journal's own invariants say (the server checks its pages itself:
    data checksums, `amcheck`): every stream row at its last event's version, every
    stream's versions 1..n without gaps, positions unique. `["ok"]` when they hold."""
    problems = [
        f"stream {r[0]}: row at version {r[1]}, events up to {r[2]}"
        for r in await conn.fetch(
            "SELECT s.stream, s.version, COALESCE(MAX(e.version), 0) FROM streams s"
            " LEFT JOIN events e ON e.stream = s.stream WHERE s.archived IS NULL"
            " GROUP BY s.stream, s.version HAVING s.version <> COALESCE(MAX(e.version), 0)"
            " LIMIT 20")
    ]
    problems += [
        f"stream {r[0]}: {r[1]} events for versions up to {r[2]}"
        for r in await conn.fetch(
            "SELECT stream, COUNT(*), MAX(version) FROM events GROUP BY stream"
            " HAVING COUNT(*) <> MAX(version) - MIN(version) + 1 LIMIT 20")
    ]
    return problems or ["ok"]


async def audit_input(conn: asyncpg.Connection, schemas: Schemas, fold: Fold) -> AuditInput:
    """Every read-model row, every stream folded (`sqlite_upkeep.fold_rows`), the pending
    effects and timers, in one snapshot. The events are fetched whole: an audit of a
    journal past a few million events wants a server-side cursor here."""
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        rows: list[StoredView] = []
        unreadable: dict[StreamId, Folded] = {}
        for r in await conn.fetch(
                f"SELECT {VIEWS} FROM streams WHERE state IS NOT NULL ORDER BY key, stream"):
            row = tuple(r)
            try:
                rows.append(view_of(row, schemas.snapshots))
            except JournalError as error:
                unreadable[StreamId(row[0])] = Folded(
                    None, row[5], 0, f"unreadable snapshot ({error})")
                rows.append(view_of(row, Schemas().snapshots))
        events = await conn.fetch(
            "SELECT position, stream, key, version, type, schema_version, payload::text"
            " FROM events ORDER BY stream, version")
        folded = fold_rows((tuple(e) for e in events), schemas, fold)
        folded.update(unreadable)
        issued = [Issued(r[0], StreamId(r[1]), Key(r[2]), r[3]) for r in await conn.fetch(
            "SELECT id, stream, key, type FROM effects WHERE status = 'issued' ORDER BY id")]
        timers = [ArmedTimer(StreamId(r[0]), r[1], Key(r[2]), r[3]) for r in await conn.fetch(
            "SELECT stream, name, key, deadline FROM timers ORDER BY stream, name")]
    return AuditInput(rows, folded, issued, timers)
