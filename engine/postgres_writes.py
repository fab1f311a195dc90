"""The group commit on PostgreSQL: every unit queued since the last commit, in one
transaction.

The transaction first takes the writers' advisory lock, then checks the term: once a
later term exists, the whole group is refused (`Superseded`) before anything is read.
Under the lock nobody else writes, so positions follow on from the highest one and are
in commit order with no gaps. Units are checked (dedup keys, expected versions) against
the journal plus the units before them, and written in bulk: each table one statement
over arrays (`unnest`). A unit that fails its checks fails alone; should a write still
break a constraint, the group is done again unit by unit under savepoints so that only
the offending unit fails. Must never call back into the runtime.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import asyncpg

from nicplug.engine.errors import JournalConflict, JournalError, Superseded
from nicplug.engine.journal import Appended, Commit, EnqueuedEffect
from nicplug.engine.model import StreamId
from nicplug.engine.postgres_opening import WRITER_LOCK, translate
from nicplug.engine.sqlite_writes import to_json

INSERT_EVENTS = (
    "INSERT INTO events (position, stream, key, version, type, schema_version, payload,"
    " cause_kind, cause_ref, dedup_key, wall_time, logical_time, term)"
    " SELECT p, s, k, v, t, sv, pl::jsonb, ck, cr, dk, w, l, $13 FROM unnest($1::bigint[],"
    " $2::text[], $3::text[], $4::int[], $5::text[], $6::int[], $7::text[], $8::text[],"
    " $9::text[], $10::text[], $11::float8[], $12::float8[])"
    " AS u(p, s, k, v, t, sv, pl, ck, cr, dk, w, l)"
)
TOUCH_STREAMS = (
    "INSERT INTO streams (stream, key, version, updated_wall, updated_logical)"
    " SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::float8[], $5::float8[])"
    " ON CONFLICT (stream) DO UPDATE SET version = excluded.version,"
    " updated_wall = excluded.updated_wall, updated_logical = excluded.updated_logical"
)
# A view is the fold of its stream's events so far: the stream row was touched with this
# unit's events just before, so its version is what the snapshot is folded through.
_PUT_VIEWS = (
    "INSERT INTO streams (stream, key, version, state, terminal, snapshot, snapshot_schema,"
    " snapshot_through, updated_wall, updated_logical)"
    " SELECT s, k, 0, st, te, sn::jsonb, sc, 0, w, l FROM unnest($1::text[], $2::text[],"
    " $3::text[], $4::bool[], $5::text[], $6::int[], $7::float8[], $8::float8[])"
    " AS u(s, k, st, te, sn, sc, w, l)"
    " ON CONFLICT (stream) DO UPDATE SET state = excluded.state, terminal = excluded.terminal,"
    " snapshot = excluded.snapshot, snapshot_schema = excluded.snapshot_schema,"
    " snapshot_through = streams.version, updated_wall = excluded.updated_wall,"
    " updated_logical = excluded.updated_logical"
)
_INSERT_EFFECT = (
    "INSERT INTO effects (stream, key, type, payload, schema_version, idempotency_key, status,"
    " attempts, created_wall, created_logical, updated_wall, updated_logical)"
    " VALUES ($1, $2, $3, $4::jsonb, $5, $6, 'issued', 0, $7, $8, $7, $8)"
    " ON CONFLICT DO NOTHING RETURNING id"
)
_UPDATE_EFFECT = (
    "UPDATE effects SET status = $1, attempts = $2, next_attempt_at = $3, last_error = $4,"
    " updated_wall = $5, updated_logical = $6 WHERE id = $7"
)
_ARM_TIMER = (
    "INSERT INTO timers (stream, name, key, deadline) VALUES ($1, $2, $3, $4)"
    " ON CONFLICT (stream, name) DO UPDATE SET deadline = excluded.deadline"
)


CHANNEL = "nicplug_journal"
"""Where every group commit notifies (`LISTEN nicplug_journal`): a standby's wake-up."""


class _Duplicate(Exception):
    pass


async def fence(conn: asyncpg.Connection, term: int | None) -> None:
    """Take the writers' lock (until COMMIT); refuse when a term after `term` began.
    `term=None`: an unfenced writer (offline work, a single replica's tests)."""
    await conn.execute("SELECT pg_advisory_xact_lock($1)", WRITER_LOCK)
    if term is None:
        return
    latest = int(await conn.fetchval("SELECT COALESCE(MAX(number), 0) FROM terms"))
    if latest > term:
        raise Superseded(term, latest)


class _Group:
    """Versions and dedup keys as they stand after the units accepted so far."""

    def __init__(self) -> None:
        self.versions: dict[StreamId, int] = {}
        self.dedups: set[tuple[str, str]] = set()

    async def preload(self, conn: asyncpg.Connection, units: Sequence[Commit]) -> None:
        """The versions of every stream the units expect, and which of their dedup keys
        are journaled already: two queries for the whole group."""
        wanted = list({s for unit in units for s in unit.expected})
        self.versions = dict.fromkeys(wanted, 0)
        if wanted:
            for row in await conn.fetch(
                "SELECT stream, version FROM streams WHERE stream = ANY($1::text[])", wanted
            ):
                self.versions[StreamId(row[0])] = int(row[1])
        keys = list({u.cause.dedup_key for u in units if u.cause.dedup_key is not None})
        if keys:
            for row in await conn.fetch(
                "SELECT stream, dedup_key FROM events WHERE dedup_key = ANY($1::text[])"
                " AND stream = ANY($2::text[])", keys, wanted,
            ):
                self.dedups.add((row[0], row[1]))

    def check(self, unit: Commit) -> None:
        """Raise `_Duplicate` or `JournalConflict`, or accept the unit into the group."""
        expected = unit.expected
        strays = [e.stream for e in unit.events if e.stream not in expected]
        if strays:
            raise JournalError(
                f"commit of key {unit.key!r} lacks the expected version of {strays[0]!r}"
            )
        dedup = unit.cause.dedup_key
        if dedup is not None and any((s, dedup) in self.dedups for s in expected):
            raise _Duplicate
        for stream, version in expected.items():
            actual = self.versions.get(stream, 0)
            if actual != version:
                raise JournalConflict(stream, version, actual)
        for stream, count in Counter(e.stream for e in unit.events).items():
            self.versions[stream] = self.versions.get(stream, 0) + count
        if dedup is not None:
            self.dedups.update((s, dedup) for s in expected)


async def write_group(
    conn: asyncpg.Connection, units: Sequence[Commit], *, term: int | None
) -> list[Appended | Exception]:
    """Commit `units` in one transaction; one result (or error) per unit, in order.
    Raises `Superseded` for the whole group, or the driver's error when the group
    could not be committed at all."""
    try:
        async with conn.transaction():
            return await _checked(conn, units, term=term, savepoints=False)
    except asyncpg.IntegrityConstraintViolationError:
        async with conn.transaction():
            return await _checked(conn, units, term=term, savepoints=True)


async def _checked(
    conn: asyncpg.Connection, units: Sequence[Commit], *, term: int | None, savepoints: bool
) -> list[Appended | Exception]:
    await fence(conn, term)
    group = _Group()
    await group.preload(conn, units)
    # followers LISTEN: the notification is delivered when (and only if) this commits
    position = int(await conn.fetchval(
        f"SELECT COALESCE(MAX(position), 0) FROM events, pg_notify('{CHANNEL}', '')"))
    results: list[Appended | Exception] = []
    accepted: list[tuple[int, Commit, int]] = []
    for index, unit in enumerate(units):
        saved = (dict(group.versions), set(group.dedups))
        try:
            group.check(unit)
        except _Duplicate:
            results.append(Appended(duplicate=True))
            continue
        except JournalError as error:
            results.append(error)
            continue
        if savepoints:
            try:
                async with conn.transaction():
                    written = await _write(conn, [(index, unit, position)], term)
                results.append(written[index])
            except asyncpg.IntegrityConstraintViolationError as error:
                results.append(translate(error, "unit"))
                group.versions, group.dedups = saved  # as before the failed unit
                continue
        else:
            results.append(Appended())  # until `_write` gives its positions and ids
            accepted.append((index, unit, position))
        position += len(unit.events)
    if not savepoints:
        for index, appended in (await _write(conn, accepted, term)).items():
            results[index] = appended
    return results


async def _write(
    conn: asyncpg.Connection, accepted: Sequence[tuple[int, Commit, int]], term: int | None
) -> dict[int, Appended]:
    """The rows of every accepted unit, each table in one statement over arrays; the
    outbox and timers of the units that have any."""
    ev: list[list[Any]] = [[] for _ in range(12)]
    st: list[list[Any]] = [[] for _ in range(5)]
    vw: list[list[Any]] = [[] for _ in range(8)]
    for _, unit, first_position in accepted:
        cause, key, wall, logical = unit.cause, unit.key, unit.wall_time, unit.logical_time
        expected = unit.expected
        versions = dict(expected)
        for position, event in enumerate(unit.events, first_position + 1):
            stream = event.stream
            version = versions[stream] + 1
            versions[stream] = version
            row = (
                position, stream, key, version, event.type, event.schema_version,
                to_json(event.payload), cause.kind, cause.ref,
                # the dedup key goes on the cause's first event of each stream only
                cause.dedup_key if version == expected[stream] + 1 else None, wall, logical,
            )
            _add(ev, row)
        for stream, version in versions.items():
            if version != expected[stream]:
                _add(st, (stream, key, version, wall, logical))
        for view in unit.views:
            view_row = (view.stream, view.key, view.state, view.terminal,
                        to_json(view.snapshot), view.schema, wall, logical)
            _add(vw, view_row)
    if len(accepted) > 1 and (len(set(st[0])) < len(st[0]) or len(set(vw[0])) < len(vw[0])):
        # two units of one stream (the runtime never groups them: one worker per key):
        # one statement may not touch a row twice, and each view is folded through its
        # own unit's events, so the units are written one after another
        results: dict[int, Appended] = {}
        for one in accepted:
            results.update(await _write(conn, [one], term))
        return results
    if ev[0]:
        await conn.execute(INSERT_EVENTS, *ev, term or 0)
    if st[0]:
        await conn.execute(TOUCH_STREAMS, *st)
    if vw[0]:
        await conn.execute(_PUT_VIEWS, *vw)
    results = {}
    for index, unit, first_position in accepted:
        effects = (
            await _write_side_effects(conn, unit)
            if unit.effects or unit.effect_updates or unit.timers or unit.cancel_timers
            else ()
        )
        results[index] = Appended(commit=unit, first_position=first_position, effects=effects)
    return results


def _add(columns: list[list[Any]], row: Sequence[object]) -> None:
    """One row onto the column arrays a bulk statement takes."""
    for column, value in zip(columns, row, strict=True):
        column.append(value)


async def _write_side_effects(
    conn: asyncpg.Connection, unit: Commit
) -> tuple[EnqueuedEffect, ...]:
    """Outbox and timers of one unit, in the order the unit states them."""
    wall, logical = unit.wall_time, unit.logical_time
    for update in unit.effect_updates:
        await conn.execute(_UPDATE_EFFECT, update.status, update.attempts,
                           update.next_attempt_at, update.last_error, wall, logical,
                           update.effect_id)
    enqueued = []
    for effect in unit.effects:
        new_id = await conn.fetchval(
            _INSERT_EFFECT, effect.stream, unit.key, effect.type, to_json(effect.payload),
            effect.schema_version, effect.idempotency_key, wall, logical,
        )
        if new_id is not None:
            enqueued.append(EnqueuedEffect(id=int(new_id), new=True))
        else:
            old = await conn.fetchval(
                "SELECT id FROM effects WHERE idempotency_key = $1 AND status = 'issued'",
                effect.idempotency_key,
            )
            enqueued.append(EnqueuedEffect(id=int(old), new=False))
    for cancel in unit.cancel_timers:
        await conn.execute("DELETE FROM timers WHERE stream = $1 AND name = $2",
                           cancel.stream, cancel.name)
    for timer in unit.timers:
        await conn.execute(_ARM_TIMER, timer.stream, timer.name, unit.key, timer.deadline)
    return tuple(enqueued)
