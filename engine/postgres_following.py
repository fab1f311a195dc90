"""What a standby reads to keep the state it would lead with current: the live keys'
read-model rows and the events after their snapshots, at first for every live key, then
for the keys that events after a global position touched — each time in one snapshot
of the database (REPEATABLE READ), so rows and events agree.

Positions are in commit order: every write transaction takes the writers' lock first
and assigns positions under it (`postgres_writes`), so when a follower has read up to
position P, no commit can later appear below P. Reads only; never writes.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from nicplug.engine.sqlite_reads import EVENT_COLUMNS, VIEW_COLUMNS, event_of, view_of
from nicplug.engine.standby import Changes
from nicplug.engine.upcasting import Schemas

_EVENTS = ", ".join(
    f"e.{c.strip()}" for c in EVENT_COLUMNS.replace("payload", "payload::text").split(","))
_VIEWS = VIEW_COLUMNS.replace("snapshot,", "snapshot::text,")
def _live(column: str) -> str:
    return f"{column} IN (SELECT key FROM streams WHERE NOT terminal AND state IS NOT NULL)"


async def read_changes(
    conn: asyncpg.Connection, schemas: Schemas, *, after: int | None
) -> Changes:
    """Every live key (`after=None`), or those events after `after` touched."""
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        position = int(await conn.fetchval("SELECT COALESCE(MAX(position), 0) FROM events"))
        params: list[Any] = []
        if after is None:
            where, where_s = _live("key"), _live("s.key")
        else:
            touched = [r[0] for r in await conn.fetch(
                "SELECT DISTINCT key FROM events WHERE position > $1", after)]
            if not touched:
                return Changes(position)
            params.append(touched)
            where = f"key = ANY($1::text[]) AND {_live('key')}"
            where_s = f"s.key = ANY($1::text[]) AND {_live('s.key')}"
        views = await conn.fetch(
            f"SELECT {_VIEWS} FROM streams WHERE state IS NOT NULL AND {where}"
            " ORDER BY key, stream", *params)
        tails = await conn.fetch(
            f"SELECT {_EVENTS} FROM streams s JOIN events e ON e.stream = s.stream"
            " AND e.version > s.snapshot_through WHERE s.state IS NOT NULL"
            f" AND s.version > s.snapshot_through AND {where_s}"
            " ORDER BY e.position", *params)
    changes = Changes(position)
    for row in views:
        stored = view_of(tuple(row), schemas.snapshots)
        changes.live.setdefault(stored.view.key, ([], []))[0].append(stored)
    for row in tails:
        event = event_of(tuple(row), schemas.events)
        if event.key in changes.live:
            changes.live[event.key][1].append(event)
    if after is not None:
        changes.ended = set(params[0]) - set(changes.live)
    return changes
