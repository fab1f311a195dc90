"""The inspection reads, as they run on the database thread.

Each public function is one hop onto the connection's thread; the ones that read
several tables do so inside one read transaction, so a record of a stream is never
half before and half after a concurrent commit. Statements are built from fixed
fragments; every value, snapshot field paths included, is a bound parameter. Runs
synchronously on the connection's thread; must never write or touch the event loop.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

import orjson

from nicplug.engine.errors import UnknownSchema
from nicplug.engine.inspection import Census, EffectRecord, StreamRecord, ViewQuery
from nicplug.engine.journal import ArmedTimer, StoredView
from nicplug.engine.model import Cause, Key, RecordedEvent, StreamId, StreamView
from nicplug.engine.schema import schema_version
from nicplug.engine.upcasting import SNAPSHOT, Schemas, Upcasters

T = TypeVar("T")

EVENT_COLUMNS = (
    "position, stream, key, version, type, schema_version, payload, cause_kind, cause_ref,"
    " dedup_key, wall_time, logical_time"
)
VIEW_COLUMNS = (
    "stream, key, state, terminal, snapshot, version, updated_wall, updated_logical,"
    " snapshot_schema, snapshot_through, archived"
)
_EFFECT_COLUMNS = (
    "id, stream, key, type, payload, idempotency_key, status, attempts, next_attempt_at,"
    " last_error, created_wall, created_logical, updated_wall, updated_logical, schema_version"
)


def event_of(r: sqlite3.Row | tuple[Any, ...], upcasters: Upcasters) -> RecordedEvent:
    """One `events` row (selected as `EVENT_COLUMNS`), upcast to the current schema."""
    schema, payload = r[5], orjson.loads(r[6])
    if upcasters:
        schema, payload = upcasters.upcast(r[4], schema, payload)
    return RecordedEvent(
        stream=StreamId(r[1]), key=Key(r[2]), version=r[3], position=r[0], type=r[4],
        schema_version=schema, payload=payload, cause=Cause(kind=r[7], ref=r[8], dedup_key=r[9]),
        wall_time=r[10], logical_time=r[11],
    )


def view_of(r: sqlite3.Row | tuple[Any, ...], upcasters: Upcasters) -> StoredView:
    """One `streams` row (selected as `VIEW_COLUMNS`), its snapshot upcast. A snapshot
    of the first format (stored schema 0, before snapshots were versioned) is schema 1."""
    stored = r[8] or 1
    schema, snapshot = stored, orjson.loads(r[4])
    if upcasters:
        schema, snapshot = upcasters.upcast(SNAPSHOT, stored, snapshot)
    return StoredView(
        view=StreamView(
            stream=StreamId(r[0]), key=Key(r[1]), state=r[2], terminal=bool(r[3]),
            snapshot=snapshot, schema=schema,
        ),
        version=r[5], updated_wall=r[6], updated_logical=r[7], through=r[9],
        stored_schema=stored, archived=r[10],
    )


def effect_payload(
    type_: str, schema: int, payload: str, upcasters: Upcasters
) -> tuple[int, Any]:
    """An outbox payload as stored, upcast; an unreadable one comes back as `None`
    (the executor drops it and the machine decides again: `EffectUndecodable`)."""
    try:
        decoded = orjson.loads(payload)
        if upcasters:
            return upcasters.upcast(type_, schema, decoded)
        return schema, decoded
    except (orjson.JSONDecodeError, UnknownSchema, KeyError, TypeError, ValueError):
        return schema, None


def _effect_of(r: tuple[Any, ...], upcasters: Upcasters) -> EffectRecord:
    _, payload = effect_payload(r[3], r[14], r[4], upcasters)
    return EffectRecord(
        id=r[0], stream=StreamId(r[1]), key=Key(r[2]), type=r[3],
        payload=payload if payload is not None else {}, idempotency_key=r[5], status=r[6],
        attempts=r[7], next_attempt_at=r[8], last_error=r[9], created_wall=r[10],
        created_logical=r[11], updated_wall=r[12], updated_logical=r[13],
    )


def _snapshot(conn: sqlite3.Connection, job: Callable[[], T]) -> T:
    """Run `job` inside one read transaction (a consistent snapshot under WAL)."""
    conn.execute("BEGIN")
    try:
        return job()
    finally:
        conn.execute("COMMIT")


def find_views(
    conn: sqlite3.Connection, query: ViewQuery, schemas: Schemas
) -> list[StoredView]:
    sql = f"SELECT {VIEW_COLUMNS} FROM streams WHERE state IS NOT NULL"
    params: list[Any] = []
    for clause, value in (
        (" AND key = ?", query.key),
        (" AND stream = ?", query.stream),
        (" AND state = ?", query.state),
        (" AND terminal = ?", None if query.terminal is None else int(query.terminal)),
    ):
        if value is not None:
            sql += clause
            params.append(value)
    for name, scalar in query.equal.items():
        sql += " AND json_extract(snapshot, ?) = ?"
        params += [f"$.{name}", scalar]
    for name, bound in query.below.items():
        sql += " AND json_extract(snapshot, ?) < ?"
        params += [f"$.{name}", bound]
    sql += " ORDER BY key, stream"
    if query.limit is not None:
        sql += " LIMIT ?"
        params.append(query.limit)
    rows = conn.execute(sql, params).fetchall()
    return [view_of(r, schemas.snapshots) for r in rows]


def stream_record(
    conn: sqlite3.Connection, stream: StreamId, schemas: Schemas
) -> StreamRecord | None:
    upcasters = schemas.events

    def read() -> StreamRecord | None:
        row = conn.execute(
            f"SELECT {VIEW_COLUMNS} FROM streams WHERE stream = ?", (stream,)
        ).fetchone()
        if row is None:
            return None
        key = row[1]
        events = conn.execute(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE stream = ? ORDER BY version", (stream,)
        ).fetchall()
        effects = conn.execute(
            f"SELECT {_EFFECT_COLUMNS} FROM effects WHERE stream = ? ORDER BY id", (stream,)
        ).fetchall()
        timers = conn.execute(
            "SELECT stream, name, key, deadline FROM timers WHERE stream = ?"
            " ORDER BY deadline, name",
            (stream,),
        ).fetchall()
        observed = conn.execute(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE stream IN"
            " (SELECT stream FROM streams WHERE key = ?) AND cause_kind = 'observation'"
            " ORDER BY position DESC LIMIT 1",
            (key,),
        ).fetchone()
        return StreamRecord(
            view=view_of(row, schemas.snapshots) if row[2] is not None else None,
            events=tuple(event_of(r, upcasters) for r in events),
            effects=tuple(_effect_of(r, schemas.effects) for r in effects),
            timers=tuple(ArmedTimer(StreamId(r[0]), r[1], Key(r[2]), r[3]) for r in timers),
            last_observation=event_of(observed, upcasters) if observed else None,
        )

    return _snapshot(conn, read)


def census(conn: sqlite3.Connection) -> Census:
    def read() -> Census:
        events, last = conn.execute(
            "SELECT COUNT(*), COALESCE(MAX(position), 0) FROM events"
        ).fetchone()
        streams, live = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(terminal = 0 AND state IS NOT NULL), 0) FROM streams"
        ).fetchone()
        effects = dict.fromkeys(("issued", "succeeded", "failed"), 0)
        effects.update(
            conn.execute("SELECT status, COUNT(*) FROM effects GROUP BY status").fetchall()
        )
        (timers,) = conn.execute("SELECT COUNT(*) FROM timers").fetchone()
        return Census(
            schema_version=schema_version(conn), events=int(events), last_position=int(last),
            streams=int(streams), live_streams=int(live), effects=effects, timers=int(timers),
        )

    return _snapshot(conn, read)
