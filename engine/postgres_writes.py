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

import contextlib
from collections import Counter
from collections.abc import Sequence
from typing import Any

import asyncpg
import orjson

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
# The events and every stream row they touch, views included, in one statement: the
# stream rows' version, and each view's `snapshot_through`, computed by the writer.
_UNSET = "CASE WHEN excluded.state IS NULL THEN streams.{0} ELSE excluded.{0} END"
EVENTS_AND_STREAMS = (
    "WITH written AS (" + INSERT_EVENTS + ")"
    " INSERT INTO streams (stream, key, version, state, terminal, snapshot, snapshot_schema,"
    " snapshot_through, updated_wall, updated_logical)"
    " SELECT s, k, v, st, COALESCE(te, FALSE), COALESCE(sn::jsonb, '{}'::jsonb),"
    " COALESCE(sc, 0), COALESCE(th, 0), w, l FROM unnest($14::text[], $15::text[],"
    " $16::int[], $17::text[], $18::bool[], $19::text[], $20::int[], $21::int[],"
    " $22::float8[], $23::float8[]) AS u(s, k, v, st, te, sn, sc, th, w, l)"
    " ON CONFLICT (stream) DO UPDATE SET version = excluded.version,"
    " state = COALESCE(excluded.state, streams.state), "
    + ", ".join(f"{c} = {_UNSET.format(c)}" for c in (
        "terminal", "snapshot", "snapshot_schema", "snapshot_through"))
    + ", updated_wall = excluded.updated_wall, updated_logical = excluded.updated_logical"
)
_INSERT_EFFECT = (
    "INSERT INTO effects (stream, key, type, payload, schema_version, idempotency_key, status,"
    " attempts, created_wall, created_logical, updated_wall, updated_logical)"
    " VALUES ($1, $2, $3, $4::jsonb, $5, $6, 'issued', 0, $7, $8, $7, $8)"
    " ON CONFLICT DO NOTHING RETURNING id"
)
_UPDATE_EFFECTS = (
    "UPDATE effects SET status = u.st, attempts = u.a, next_attempt_at = u.n,"
    " last_error = u.e, updated_wall = u.w, updated_logical = u.l FROM unnest($1::bigint[],"
    " $2::text[], $3::int[], $4::float8[], $5::text[], $6::float8[], $7::float8[])"
    " AS u(id, st, a, n, e, w, l) WHERE effects.id = u.id"
)
_INSERT_EFFECTS = (
    "INSERT INTO effects (stream, key, type, payload, schema_version, idempotency_key, status,"
    " attempts, created_wall, created_logical, updated_wall, updated_logical)"
    " SELECT s, k, t, p::jsonb, sv, ik, 'issued', 0, w, l, w, l FROM unnest($1::text[],"
    " $2::text[], $3::text[], $4::text[], $5::int[], $6::text[], $7::float8[],"
    " $8::float8[]) WITH ORDINALITY AS u(s, k, t, p, sv, ik, w, l, n) ORDER BY n"
    " ON CONFLICT DO NOTHING RETURNING id, idempotency_key"
)
_CANCEL_TIMERS = (
    "DELETE FROM timers USING unnest($1::text[], $2::text[]) AS c(s, n)"
    " WHERE timers.stream = c.s AND timers.name = c.n"
)
_ARM_TIMERS = (
    "INSERT INTO timers (stream, name, key, deadline) SELECT * FROM unnest($1::text[],"
    " $2::text[], $3::text[], $4::float8[])"
    " ON CONFLICT (stream, name) DO UPDATE SET deadline = excluded.deadline"
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
    could not be committed at all. Four round trips for a group without effects, as
    many as plain inserts need: BEGIN with the lock, one read of everything the checks
    need, one statement for the events and the stream rows, COMMIT."""
    try:
        return await _transaction(conn, units, term=term, savepoints=False)
    except asyncpg.IntegrityConstraintViolationError:
        return await _transaction(conn, units, term=term, savepoints=True)


async def _transaction(
    conn: asyncpg.Connection, units: Sequence[Commit], *, term: int | None, savepoints: bool
) -> list[Appended | Exception]:
    await conn.execute(f"BEGIN; SELECT pg_advisory_xact_lock({WRITER_LOCK})")
    try:
        results = await _checked(conn, units, term=term, savepoints=savepoints)
        await conn.execute("COMMIT")
    except BaseException:
        if not conn.is_closed():
            with contextlib.suppress(asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
                await conn.execute("ROLLBACK")
        raise
    return results


# What a group's checks need, in one round trip under the lock (taken in the previous
# statement, so this one's snapshot sees every commit before it). Followers LISTEN: the
# notification is delivered when (and only if) the group commits.
_READ = (
    "SELECT (SELECT COALESCE(MAX(number), 0) FROM terms),"
    " (SELECT COALESCE(MAX(position), 0) FROM events),"
    " (SELECT COALESCE(jsonb_object_agg(stream, version), '{}') FROM streams"
    "  WHERE stream = ANY($1::text[]))::text,"
    " (SELECT COALESCE(jsonb_agg(jsonb_build_array(stream, dedup_key)), '[]') FROM events"
    "  WHERE dedup_key = ANY($2::text[]) AND stream = ANY($1::text[]))::text,"
    f" pg_notify('{CHANNEL}', '')"
)


async def _checked(
    conn: asyncpg.Connection, units: Sequence[Commit], *, term: int | None, savepoints: bool
) -> list[Appended | Exception]:
    group = _Group()
    wanted = list({s for unit in units for s in unit.expected})
    keys = list({u.cause.dedup_key for u in units if u.cause.dedup_key is not None})
    latest, position, versions, dedups, _ = await conn.fetchrow(_READ, wanted, keys)
    if term is not None and latest > term:
        raise Superseded(term, latest)
    group.versions = dict.fromkeys(wanted, 0)
    group.versions.update(orjson.loads(versions))
    group.dedups = {(stream, key) for stream, key in orjson.loads(dedups)}
    position = int(position)
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
            await conn.execute("SAVEPOINT unit")
            try:
                written = await _write(conn, [(index, unit, position)], term)
                await conn.execute("RELEASE SAVEPOINT unit")
                results.append(written[index])
            except asyncpg.IntegrityConstraintViolationError as error:
                await conn.execute("ROLLBACK TO SAVEPOINT unit")
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
    """The rows of every accepted unit: events and stream rows (views included) in one
    statement over arrays; the outbox and timers of the units that have any. Units that
    share a stream, or a view of a stream its unit does not expect, take the longer way
    (`_write_each`)."""
    ev_rows: list[tuple[Any, ...]] = []
    st_rows: list[tuple[Any, ...]] = []
    add_event, add_stream = ev_rows.append, st_rows.append
    for _, unit, first_position in accepted:
        cause, key, wall, logical = unit.cause, unit.key, unit.wall_time, unit.logical_time
        expected = unit.expected
        versions = dict(expected)
        for position, event in enumerate(unit.events, first_position + 1):
            stream = event.stream
            version = versions[stream] + 1
            versions[stream] = version
            add_event((
                position, stream, key, version, event.type, event.schema_version,
                to_json(event.payload), cause.kind, cause.ref,
                # the dedup key goes on the cause's first event of each stream only
                cause.dedup_key if version == expected[stream] + 1 else None, wall, logical,
            ))
        views = {view.stream: view for view in unit.views}
        if any(stream not in versions for stream in views):
            return await _write_each(conn, accepted, term)
        for stream, version in versions.items():
            view = views.get(stream)
            if view is not None:
                add_stream((stream, key, version, view.state, view.terminal,
                          to_json(view.snapshot), view.schema, version, wall, logical))
            elif version != expected[stream]:
                add_stream((stream, key, version, None, None, None, None, None, wall, logical))
    if len({row[0] for row in st_rows}) < len(st_rows):
        return await _write_each(conn, accepted, term)
    # columns for the arrays, transposed in C
    ev = [list(column) for column in zip(*ev_rows, strict=True)] or [[] for _ in range(12)]
    st = [list(column) for column in zip(*st_rows, strict=True)] or [[] for _ in range(10)]
    if ev_rows or st_rows:
        await conn.execute(EVENTS_AND_STREAMS, *ev, term or 0, *st)
    return await _side_effects(conn, accepted)


async def _side_effects(
    conn: asyncpg.Connection, accepted: Sequence[tuple[int, Commit, int]]
) -> dict[int, Appended]:
    """The outbox and timers of every accepted unit: each kind of change one statement
    over arrays, in a unit's own order (outcomes recorded, effects enqueued, timers
    cancelled, timers armed). Units of different keys touch different rows (an effect
    and a timer belong to one stream, a stream to one key), so their changes do not
    interleave; units of one key (the runtime never groups them), or a unit repeating
    a timer or an outcome, go one after another (`_unit_side_effects`)."""
    units = [unit for _, unit, _ in accepted]
    updates = [u for unit in units for u in unit.effect_updates]
    arms = [(t.stream, t.name) for unit in units for t in unit.timers]
    if (len({unit.key for unit in units}) < len(units)
            or len({u.effect_id for u in updates}) < len(updates)
            or len(set(arms)) < len(arms)):
        results: dict[int, Appended] = {}
        for index, unit, first_position in accepted:
            effects = await _unit_side_effects(conn, unit)
            results[index] = Appended(commit=unit, first_position=first_position,
                                      effects=effects)
        return results
    if updates:
        await conn.execute(_UPDATE_EFFECTS, *_columns([
            (u.effect_id, u.status, u.attempts, u.next_attempt_at, u.last_error,
             unit.wall_time, unit.logical_time)
            for unit in units for u in unit.effect_updates], 7))
    enqueued: dict[str, int] = {}
    existing: dict[str, int] = {}
    wanted = [(unit, e) for unit in units for e in unit.effects]
    if wanted:
        for row in await conn.fetch(_INSERT_EFFECTS, *_columns([
            (e.stream, unit.key, e.type, to_json(e.payload), e.schema_version,
             e.idempotency_key, unit.wall_time, unit.logical_time)
            for unit, e in wanted], 8)):
            enqueued[row[1]] = int(row[0])
        pending = {e.idempotency_key for _, e in wanted} - set(enqueued)
        if pending:
            existing = {r[0]: int(r[1]) for r in await conn.fetch(
                "SELECT idempotency_key, id FROM effects WHERE status = 'issued'"
                " AND idempotency_key = ANY($1::text[])", list(pending))}
    cancels = [(c.stream, c.name) for unit in units for c in unit.cancel_timers]
    if cancels:
        await conn.execute(_CANCEL_TIMERS, *_columns(cancels, 2))
    if arms:
        await conn.execute(_ARM_TIMERS, *_columns([
            (t.stream, t.name, unit.key, t.deadline) for unit in units for t in unit.timers], 4))
    results = {}
    new_seen: set[str] = set()
    for index, unit, first_position in accepted:
        landed: list[EnqueuedEffect] = []
        for effect in unit.effects:
            key = effect.idempotency_key
            if key in enqueued and key not in new_seen:
                new_seen.add(key)
                landed.append(EnqueuedEffect(id=enqueued[key], new=True))
            else:
                landed.append(EnqueuedEffect(id=enqueued.get(key) or existing[key], new=False))
        results[index] = Appended(commit=unit, first_position=first_position,
                                  effects=tuple(landed))
    return results


def _columns(rows: Sequence[tuple[Any, ...]], width: int) -> list[list[Any]]:
    return [list(c) for c in zip(*rows, strict=True)] or [[] for _ in range(width)]


async def _write_each(
    conn: asyncpg.Connection, accepted: Sequence[tuple[int, Commit, int]], term: int | None
) -> dict[int, Appended]:
    """Unit after unit, each view folded through the stream's version as its own unit
    leaves it (read from the row, as SQLite's writer does)."""
    results: dict[int, Appended] = {}
    for index, unit, first_position in accepted:
        versions = dict(unit.expected)
        ev: list[list[Any]] = [[] for _ in range(12)]
        for position, event in enumerate(unit.events, first_position + 1):
            stream = event.stream
            versions[stream] += 1
            _add(ev, (
                position, stream, unit.key, versions[stream], event.type,
                event.schema_version, to_json(event.payload), unit.cause.kind, unit.cause.ref,
                unit.cause.dedup_key if versions[stream] == unit.expected[stream] + 1 else None,
                unit.wall_time, unit.logical_time,
            ))
        if ev[0]:
            await conn.execute(INSERT_EVENTS, *ev, term or 0)
            touched = [(s, unit.key, v, unit.wall_time, unit.logical_time)
                       for s, v in versions.items() if v != unit.expected[s]]
            await conn.execute(TOUCH_STREAMS, *(list(c) for c in zip(*touched, strict=True)))
        for view in unit.views:
            await conn.execute(_PUT_VIEWS, [view.stream], [view.key], [view.state],
                               [view.terminal], [to_json(view.snapshot)], [view.schema],
                               [unit.wall_time], [unit.logical_time])
        results[index] = Appended(commit=unit, first_position=first_position,
                                  effects=await _unit_side_effects(conn, unit))
    return results


def _add(columns: list[list[Any]], row: Sequence[object]) -> None:
    """One row onto the column arrays a bulk statement takes."""
    for column, value in zip(columns, row, strict=True):
        column.append(value)


async def _unit_side_effects(
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
