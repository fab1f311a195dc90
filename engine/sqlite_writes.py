"""The group commit, as it runs on the database thread.

The writer hands this module every unit queued since its last commit; they are
checked (dedup keys, expected versions) against the journal plus the units before
them, then written in bulk inside one `BEGIN IMMEDIATE … COMMIT`. A unit that fails
its checks fails alone. Should a write still violate a constraint, the group is
retried unit by unit under savepoints so that only the offending unit fails.
Runs synchronously on the connection's thread; must never touch the event loop.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from nicplug.engine.errors import JournalConflict, JournalError
from nicplug.engine.journal import Appended, Commit, EnqueuedEffect
from nicplug.engine.model import StreamId

_INSERT_EVENT = (
    "INSERT INTO events (position, stream, key, version, type, schema_version, payload,"
    " cause_kind, cause_ref, dedup_key, wall_time, logical_time)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_TOUCH_STREAM = (
    "INSERT INTO streams (stream, key, version, updated_wall, updated_logical)"
    " VALUES (?, ?, ?, ?, ?) ON CONFLICT (stream) DO UPDATE SET version = excluded.version,"
    " updated_wall = excluded.updated_wall, updated_logical = excluded.updated_logical"
)
# A view is the fold of its stream's events so far: the stream row was touched with
# this unit's events just before, so its version is what the snapshot is folded through.
_PUT_VIEW = (
    "INSERT INTO streams (stream, key, version, state, terminal, snapshot, snapshot_schema,"
    " snapshot_through, updated_wall, updated_logical) VALUES (?, ?, 0, ?, ?, ?, ?, 0, ?, ?)"
    " ON CONFLICT (stream) DO UPDATE SET state = excluded.state, terminal = excluded.terminal,"
    " snapshot = excluded.snapshot, snapshot_schema = excluded.snapshot_schema,"
    " snapshot_through = streams.version, updated_wall = excluded.updated_wall,"
    " updated_logical = excluded.updated_logical"
)
_INSERT_EFFECT = (
    "INSERT INTO effects (stream, key, type, payload, schema_version, idempotency_key, status,"
    " attempts, created_wall, created_logical, updated_wall, updated_logical)"
    " VALUES (?, ?, ?, ?, ?, ?, 'issued', 0, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
_UPDATE_EFFECT = (
    "UPDATE effects SET status = ?, attempts = ?, next_attempt_at = ?, last_error = ?,"
    " updated_wall = ?, updated_logical = ? WHERE id = ?"
)
_ARM_TIMER = (
    "INSERT INTO timers (stream, name, key, deadline) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (stream, name) DO UPDATE SET deadline = excluded.deadline"
)


def to_json(value: Mapping[str, Any]) -> str:
    return orjson.dumps(value, default=_plain).decode()


def _plain(value: object) -> object:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, set | frozenset):
        return sorted(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


_IN_CHUNK = 500  # stays below SQLite's limit of bound parameters


class _Duplicate(Exception):
    pass


_ACCEPTED = Appended()


class Versions:
    """The stream versions as the last group commit left them, so that the next group
    reads from the table only the streams it has not met yet.

    Trusted only while nothing else changed the file: another connection's commit
    changes `PRAGMA data_version` (read inside the next group's write lock), any other
    write on this connection (retention, a rebuild) changes its `total_changes`. A group
    that fails, or a cache grown past `LIMIT` streams, starts again from the table."""

    LIMIT = 50_000

    def __init__(self) -> None:
        self.known: dict[StreamId, int] = {}
        self._stamp: tuple[int, int] | None = None
        self._data_version = 0

    def valid(self, conn: sqlite3.Connection) -> dict[StreamId, int]:
        """The versions still true, to start a group from (in its write transaction)."""
        self._data_version = int(conn.execute("PRAGMA data_version").fetchone()[0])
        if (self._stamp != (self._data_version, conn.total_changes)
                or len(self.known) > self.LIMIT):
            self.known = {}
        self._stamp = None  # until the group commits
        return self.known

    def committed(self, conn: sqlite3.Connection, versions: dict[StreamId, int]) -> None:
        """The group that started from `valid` committed, leaving `versions`."""
        self.known = versions
        self._stamp = (self._data_version, conn.total_changes)

    def forget(self) -> None:
        self.known, self._stamp = {}, None


class _Group:
    """Versions and dedup keys as they stand after the units accepted so far."""

    def __init__(
        self, conn: sqlite3.Connection, versions: dict[StreamId, int] | None = None
    ) -> None:
        self.conn = conn
        self.versions: dict[StreamId, int] = {} if versions is None else versions
        self.dedups: set[tuple[StreamId, str]] = set()

    def preload(self, units: Sequence[Commit]) -> None:
        """Read the versions of every stream the units expect, a few queries in all."""
        wanted = list({s for unit in units for s in unit.expected if s not in self.versions})
        for first in range(0, len(wanted), _IN_CHUNK):
            chunk = wanted[first : first + _IN_CHUNK]
            marks = ", ".join("?" * len(chunk))
            self.versions.update(dict.fromkeys(chunk, 0))
            self.versions.update(self.conn.execute(
                f"SELECT stream, version FROM streams WHERE stream IN ({marks})", chunk
            ).fetchall())

    def version(self, stream: StreamId) -> int:
        if stream not in self.versions:
            row = self.conn.execute(
                "SELECT version FROM streams WHERE stream = ?", (stream,)
            ).fetchone()
            self.versions[stream] = int(row[0]) if row else 0
        return self.versions[stream]

    def seen(self, stream: StreamId, dedup_key: str) -> bool:
        if (stream, dedup_key) in self.dedups:
            return True
        row = self.conn.execute(
            "SELECT 1 FROM events WHERE stream = ? AND dedup_key = ?", (stream, dedup_key)
        ).fetchone()
        return row is not None

    def check(self, unit: Commit) -> None:
        """Raise `_Duplicate` or `JournalConflict`, or accept the unit into the group."""
        expected, events = unit.expected, unit.events
        # the events each stream gets; a stream without an expected version is refused
        if len(expected) == 1:
            (only,) = expected
            strays = [e.stream for e in events if e.stream != only]
            added = {only: len(events)}
        else:
            strays = [e.stream for e in events if e.stream not in expected]
            added = Counter(e.stream for e in events)
        if strays:
            raise JournalError(
                f"commit of key {unit.key!r} lacks the expected version of {strays[0]!r}"
            )
        dedup = unit.cause.dedup_key
        if dedup is not None and any(self.seen(s, dedup) for s in expected):
            raise _Duplicate
        versions = self.versions
        for stream, version in expected.items():
            actual = versions[stream] if stream in versions else self.version(stream)
            if actual != version:
                raise JournalConflict(stream, version, actual)
        for stream, count in added.items():
            versions[stream] += count
        if dedup is not None:
            self.dedups.update((s, dedup) for s in expected)


def write_group(
    conn: sqlite3.Connection, units: Sequence[Commit], versions: Versions | None = None
) -> list[Appended | Exception]:
    """Commit `units` in one transaction; one result (or error) per unit, in order.
    `versions`: what the previous group left (kept up to date here)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        known = versions.valid(conn) if versions is not None else None
        try:
            group = _Group(conn, known)
            results = _write_checked(conn, group, units, savepoints=False)
        except sqlite3.IntegrityError:
            conn.execute("ROLLBACK")
            conn.execute("BEGIN IMMEDIATE")
            group = _Group(conn)  # from the table alone
            results = _write_checked(conn, group, units, savepoints=True)
        conn.execute("COMMIT")
    except BaseException:
        if versions is not None:
            versions.forget()
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    if versions is not None:
        versions.committed(conn, group.versions)
    return results


def _write_checked(
    conn: sqlite3.Connection, group: _Group, units: Sequence[Commit], *, savepoints: bool
) -> list[Appended | Exception]:
    group.preload(units)
    row = conn.execute("SELECT COALESCE(MAX(position), 0) FROM events").fetchone()
    position = int(row[0])
    results: list[Appended | Exception] = []
    accepted: list[tuple[int, Commit, int]] = []
    for index, unit in enumerate(units):
        if savepoints:
            conn.execute("SAVEPOINT unit")
            saved = (dict(group.versions), set(group.dedups))
        try:
            group.check(unit)
            if savepoints:
                results.append(_write(conn, [(index, unit, position)])[index])
                conn.execute("RELEASE unit")
            else:
                results.append(_ACCEPTED)  # until `_write` gives its positions and ids
                accepted.append((index, unit, position))
            position += len(unit.events)
        except _Duplicate:
            results.append(Appended(duplicate=True))
            if savepoints:
                conn.execute("ROLLBACK TO unit")
                conn.execute("RELEASE unit")
        except (JournalError, sqlite3.IntegrityError) as error:
            if not savepoints and isinstance(error, sqlite3.IntegrityError):
                raise
            results.append(
                error if isinstance(error, JournalError) else JournalError(f"rejected: {error}")
            )
            if savepoints:
                conn.execute("ROLLBACK TO unit")
                conn.execute("RELEASE unit")
                group.versions, group.dedups = saved  # as before the failed unit
    if not savepoints:
        for index, appended in _write(conn, accepted).items():
            results[index] = appended
    return results


def _write(
    conn: sqlite3.Connection, accepted: Sequence[tuple[int, Commit, int]]
) -> dict[int, Appended]:
    """The rows of every accepted unit, each table in one `executemany`; the outbox and
    timers of the units that have any. The per-event work is a tuple and its JSON."""
    dumps = orjson.dumps
    event_rows: list[tuple[Any, ...]] = []
    stream_rows: list[tuple[Any, ...]] = []
    view_rows: list[tuple[Any, ...]] = []
    for _, unit, first_position in accepted:
        cause, key, wall, logical = unit.cause, unit.key, unit.wall_time, unit.logical_time
        kind, ref, dedup_key = cause.kind, cause.ref, cause.dedup_key
        expected = unit.expected
        if len(expected) == 1:
            # one stream (`check` let no event of another through): versions follow on
            # from the expected one, the dedup key goes on the first event
            ((stream, version),) = expected.items()
            position, dedup = first_position, dedup_key
            for event in unit.events:
                position += 1
                version += 1
                event_rows.append((
                    position, stream, key, version, event.type, event.schema_version,
                    dumps(event.payload, default=_plain).decode(), kind, ref, dedup, wall,
                    logical,
                ))
                dedup = None
            if unit.events:
                stream_rows.append((stream, key, version, wall, logical))
        else:
            versions = dict(expected)
            for position, event in enumerate(unit.events, first_position + 1):
                stream = event.stream
                version = versions[stream] + 1
                versions[stream] = version
                event_rows.append((
                    position, stream, key, version, event.type, event.schema_version,
                    dumps(event.payload, default=_plain).decode(), kind, ref,
                    # the dedup key goes on the cause's first event of each stream only
                    dedup_key if version == expected[stream] + 1 else None, wall, logical,
                ))
            for stream, version in versions.items():
                if version != expected[stream]:
                    stream_rows.append((stream, key, version, wall, logical))
        for view in unit.views:
            view_rows.append((
                view.stream, view.key, view.state, int(view.terminal), to_json(view.snapshot),
                view.schema, wall, logical,
            ))
    conn.executemany(_INSERT_EVENT, event_rows)
    conn.executemany(_TOUCH_STREAM, stream_rows)
    if view_rows:
        conn.executemany(_PUT_VIEW, view_rows)
    results: dict[int, Appended] = {}
    for index, unit, first_position in accepted:
        effects = (
            _write_side_effects(conn, unit)
            if unit.effects or unit.effect_updates or unit.timers or unit.cancel_timers
            else ()
        )
        results[index] = Appended(commit=unit, first_position=first_position, effects=effects)
    return results


def _write_side_effects(conn: sqlite3.Connection, unit: Commit) -> tuple[EnqueuedEffect, ...]:
    """Outbox and timers of one unit, in the order the unit states them."""
    wall, logical = unit.wall_time, unit.logical_time
    for update in unit.effect_updates:
        conn.execute(_UPDATE_EFFECT, (
            update.status, update.attempts, update.next_attempt_at, update.last_error,
            wall, logical, update.effect_id,
        ))
    enqueued = []
    for effect in unit.effects:
        cursor = conn.execute(_INSERT_EFFECT, (
            effect.stream, unit.key, effect.type, to_json(effect.payload), effect.schema_version,
            effect.idempotency_key, wall, logical, wall, logical,
        ))
        if cursor.rowcount == 1 and cursor.lastrowid is not None:
            enqueued.append(EnqueuedEffect(id=cursor.lastrowid, new=True))
        else:
            row = conn.execute(
                "SELECT id FROM effects WHERE idempotency_key = ? AND status = 'issued'",
                (effect.idempotency_key,),
            ).fetchone()
            enqueued.append(EnqueuedEffect(id=int(row[0]), new=False))
    for cancel in unit.cancel_timers:
        conn.execute(
            "DELETE FROM timers WHERE stream = ? AND name = ?", (cancel.stream, cancel.name)
        )
    for timer in unit.timers:
        conn.execute(_ARM_TIMER, (timer.stream, timer.name, unit.key, timer.deadline))
    return tuple(enqueued)
