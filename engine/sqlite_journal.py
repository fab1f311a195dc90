"""The SQLite journal: `aiosqlite`, WAL, one writer task doing group commit.

Appenders queue their `Commit`s; the writer takes everything queued, commits it in
one transaction on the connection's thread (`sqlite_writes`) and acknowledges each
caller only after COMMIT returned. Reads go through the same connection between
groups, so they always see whole groups. Must never recreate or repair a journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, cast

import aiosqlite

from nicplug.engine import sqlite_upkeep as upkeep
from nicplug.engine.audit import AuditInput
from nicplug.engine.errors import JournalClosed, JournalError, JournalRefused
from nicplug.engine.group_commit import GroupCommit, Queued
from nicplug.engine.inspection import Census, JournalInspection, StreamRecord, ViewQuery
from nicplug.engine.journal import (
    Appended,
    ArmedTimer,
    Journal,
    PendingEffect,
    StoredView,
)
from nicplug.engine.model import Key, RecordedEvent, StreamId
from nicplug.engine.sqlite_opening import (
    MEMORY,
    IntegrityCheck,
    ReadMode,
    Synchronous,
    check_file,
    checker,
    configure,
    hold,
    mark_clean,
    prepare_file,
    read_mode,
    reader_uri,
    translate,
)
from nicplug.engine.sqlite_reads import (
    EVENT_COLUMNS,
    VIEW_COLUMNS,
    effect_payload,
    event_of,
    view_of,
)
from nicplug.engine.sqlite_reads import census as read_census
from nicplug.engine.sqlite_reads import find_views as read_views
from nicplug.engine.sqlite_reads import stream_record as read_stream
from nicplug.engine.sqlite_writes import Versions, write_group
from nicplug.engine.upcasting import Schemas, Upcasters

T = TypeVar("T")

_EFFECT_COLUMNS = (
    "id, stream, key, type, payload, idempotency_key, status, attempts, next_attempt_at,"
    " last_error, schema_version"
)
_PREFIXED = ", ".join(f"e.{column.strip()}" for column in EVENT_COLUMNS.split(","))
UNDECODABLE: dict[str, Any] = {}
"""The payload of an outbox row no upcaster could read: an empty mapping, which no
effect type decodes, so the executor drops it (`EffectUndecodable`)."""


@dataclass
class WriterStats:
    """What the writer did so far: `groups` transactions for `units` appends."""

    groups: int = 0
    units: int = 0
    events: int = 0
    last_group_seconds: float = 0.0


class SQLiteJournal(GroupCommit):
    """Open with `await SQLiteJournal.open(path)`; close with `await journal.close()`."""

    def __init__(
        self,
        conn: aiosqlite.Connection,
        *,
        path: str,
        read_only: bool,
        schemas: Schemas,
        read_mode: ReadMode | None = None,
        max_group: int,
        on_group: Callable[[int, float], None] | None,
        lock: int | None = None,
    ) -> None:
        self._conn = conn
        self._lock = lock
        self.path = path
        self.read_only = read_only
        self.schemas = schemas
        self._upcasters = schemas.events
        self.read_mode = read_mode
        """How a read-only journal was opened (`ReadMode`); None when writable."""
        self._start_queue(max_group)
        self._on_group = on_group
        self.stats = WriterStats()
        self._versions = Versions()  # the group commits' cache of stream versions
        self._file_checked = False  # the whole file passed `check_file`
        self._errored = False  # an SQLite error came on this connection
        self._writer = None if read_only else asyncio.create_task(self._write_loop())

    @classmethod
    async def open(
        cls,
        path: str | Path,
        *,
        read_only: bool = False,
        synchronous: Synchronous = "FULL",
        integrity: IntegrityCheck = "bounded",
        size_limit_bytes: int | None = None,
        upcasters: Upcasters | None = None,
        schemas: Schemas | None = None,
        max_group: int = 2000,
        on_group: Callable[[int, float], None] | None = None,
        exclusive: bool = False,
        connect: Callable[..., Awaitable[aiosqlite.Connection]] = aiosqlite.connect,
    ) -> SQLiteJournal:
        """Open (creating with mode 0600 when missing) or refuse with `JournalRefused`.

        `":memory:"` gives a private in-memory journal. `read_only` opens an existing
        journal for queries: beside the writer that holds it, or as an immutable snapshot
        when none does (`read_mode` says which); it never creates a file. `on_group(units,
        seconds)` is called after every group commit (metrics). `schemas` are the
        upcasters of events, snapshots and effects (`upcasters` alone: of events only).
        `integrity` says what is checked before anything is read (`IntegrityCheck`): by
        default the tables recovery reads whole; `check_file` checks the rest later.
        A writer shares the journal's writer lock with other writers; `exclusive`
        (offline work) refuses a journal any writer holds. `connect` stands for
        `aiosqlite.connect` (a deterministic simulation runs the connection on the
        event loop's thread instead, as a replay does with `sqlite_inline`).
        """
        name = str(path)
        if read_only and name == MEMORY:
            raise JournalRefused(name, "an in-memory journal cannot be opened read-only",
                                 "open it for writing")
        lock = None
        if name != MEMORY:
            prepare_file(name, read_only=read_only)
            if not read_only:
                lock = hold(name, exclusive=exclusive)
        mode = read_mode(name) if read_only else None
        target = reader_uri(name, mode) if mode is not None else name
        try:
            conn = await connect(
                target, uri=read_only, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as error:
            if lock is not None:
                os.close(lock)
            raise translate(error, name) from error
        try:
            await _on_thread(conn, partial(
                configure, path=name, read_only=read_only, synchronous=synchronous,
                integrity=integrity, size_limit_bytes=size_limit_bytes,
            ))
        except BaseException:
            await conn.close()
            if lock is not None:
                os.close(lock)
            raise
        if schemas is None:
            schemas = Schemas(events=upcasters)
        return cls(conn, path=name, read_only=read_only, schemas=schemas, read_mode=mode,
                   max_group=max_group, on_group=on_group, lock=lock)

    # -- writing -----------------------------------------------------------------------

    async def _commit(self, batch: list[Queued]) -> None:
        units = [unit for unit, _ in batch]
        started = time.perf_counter()
        try:
            results: list[Appended | Exception] = await _on_thread(
                self._conn, partial(write_group, units=units, versions=self._versions)
            )
        except sqlite3.Error as error:
            self._errored = True
            failure: JournalError = translate(error, self.path)
            results = [failure] * len(batch)
        except Exception as error:  # a bug must fail the callers, not kill the writer
            results = [JournalError(f"journal {self.path}: group commit failed: {error!r}")] * len(
                batch
            )
        elapsed = time.perf_counter() - started
        self.stats.groups += 1
        self.stats.units += len(batch)
        self.stats.events += sum(len(u.events) for u in units)
        self.stats.last_group_seconds = elapsed
        if self._on_group is not None:
            self._on_group(len(batch), elapsed)
        for (_, future), result in zip(batch, results, strict=True):
            if future.done():
                continue
            if isinstance(result, Exception):
                future.set_exception(result)
            else:
                future.set_result(result)

    # -- reading -----------------------------------------------------------------------

    async def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        if self._closed:
            raise JournalClosed(f"journal {self.path} is closed")
        try:
            return list(await self._conn.execute_fetchall(sql, params))
        except sqlite3.Error as error:
            self._errored = True
            raise translate(error, self.path) from error

    async def views(self, *, key: Key | None = None, live: bool = False) -> Sequence[StoredView]:
        sql = f"SELECT {VIEW_COLUMNS} FROM streams WHERE state IS NOT NULL"
        params: list[Any] = []
        if key is not None:
            sql += " AND key = ?"
            params.append(key)
        if live:
            sql += " AND key IN (SELECT key FROM streams WHERE terminal = 0 AND state IS NOT NULL)"
        rows = await self._rows(sql + " ORDER BY key, stream", params)
        snapshots = self.schemas.snapshots
        return [view_of(r, snapshots) for r in rows]

    async def history(self, *, stream: StreamId) -> Sequence[RecordedEvent]:
        rows = await self._rows(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE stream = ? ORDER BY version", (stream,)
        )
        return [self._event(r) for r in rows]

    async def read_all(self, *, after: int = 0, limit: int = 1000) -> Sequence[RecordedEvent]:
        rows = await self._rows(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE position > ? ORDER BY position LIMIT ?",
            (after, limit),
        )
        return [self._event(r) for r in rows]

    async def tail(self, *, key: Key | None = None, live: bool = False) -> Sequence[RecordedEvent]:
        sql = (
            f"SELECT {_PREFIXED} FROM streams s JOIN events e ON e.stream = s.stream"
            " AND e.version > s.snapshot_through WHERE s.state IS NOT NULL"
            " AND s.version > s.snapshot_through"
        )
        params: list[Any] = []
        if key is not None:
            sql += " AND s.key = ?"
            params.append(key)
        if live:
            sql += (" AND s.key IN (SELECT key FROM streams WHERE terminal = 0"
                    " AND state IS NOT NULL)")
        rows = await self._rows(sql + " ORDER BY e.position", params)
        return [self._event(r) for r in rows]

    async def events_of(self, *, key: Key) -> Sequence[RecordedEvent]:
        rows = await self._rows(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE key = ? ORDER BY position", (key,)
        )
        return [self._event(r) for r in rows]

    async def outbox(
        self, *, stream: StreamId | None = None, pending_only: bool = True
    ) -> Sequence[PendingEffect]:
        sql = f"SELECT {_EFFECT_COLUMNS} FROM effects WHERE 1 = 1"
        params: list[Any] = []
        if stream is not None:
            sql += " AND stream = ?"
            params.append(stream)
        if pending_only:
            sql += " AND status = 'issued'"
        rows = await self._rows(sql + " ORDER BY id", params)
        upcasters = self.schemas.effects
        effects = []
        for r in rows:
            schema, payload = effect_payload(r[3], r[10], r[4], upcasters)
            effects.append(PendingEffect(
                id=r[0], stream=StreamId(r[1]), key=Key(r[2]), type=r[3],
                payload=payload if payload is not None else UNDECODABLE,
                idempotency_key=r[5], status=r[6], attempts=r[7], next_attempt_at=r[8],
                last_error=r[9], schema_version=schema,
            ))
        return effects

    async def timers(self, *, due_by: float | None = None) -> Sequence[ArmedTimer]:
        sql = "SELECT stream, name, key, deadline FROM timers"
        params: list[Any] = []
        if due_by is not None:
            sql += " WHERE deadline <= ?"
            params.append(due_by)
        rows = await self._rows(sql + " ORDER BY deadline, stream, name", params)
        return [ArmedTimer(StreamId(r[0]), r[1], Key(r[2]), r[3]) for r in rows]

    async def check_file(self) -> list[str]:
        """`quick_check` of the whole file on a read connection of its own, in a worker
        thread: group commits go on meanwhile. `["ok"]` for a healthy file."""
        if self._closed:
            raise JournalClosed(f"journal {self.path} is closed")
        if self.path == MEMORY:
            return [str(r[0]) for r in await self._rows("PRAGMA quick_check")]
        conn = checker(self.path)
        try:
            problems = await asyncio.to_thread(check_file, conn)
            self._file_checked = problems == ["ok"]
            return problems
        except asyncio.CancelledError:
            conn.interrupt()  # the thread then ends at once and closes it
            raise

    async def integrity(self) -> list[str]:
        """`PRAGMA integrity_check`'s findings; `["ok"]` for a healthy journal."""
        return [str(r[0]) for r in await self._rows("PRAGMA integrity_check")]

    def _event(self, r: sqlite3.Row) -> RecordedEvent:
        return event_of(r, self._upcasters)

    # -- inspecting (`inspection.JournalInspection`) -----------------------------------

    async def _read(self, job: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise JournalClosed(f"journal {self.path} is closed")
        try:
            return await _on_thread(self._conn, job)
        except sqlite3.Error as error:
            self._errored = True
            raise translate(error, self.path) from error

    async def find_views(self, query: ViewQuery) -> Sequence[StoredView]:
        """Read-model rows matching `query` (values bound, never pasted into SQL)."""
        return await self._read(partial(read_views, query=query, schemas=self.schemas))

    async def stream_record(self, stream: StreamId) -> StreamRecord | None:
        """View, events, outbox rows and timers of one stream, in one snapshot."""
        return await self._read(partial(read_stream, stream=stream, schemas=self.schemas))

    async def census(self) -> Census:
        """Counts of events, streams, effects by status and timers; the schema version."""
        return await self._read(read_census)

    # -- upkeep (`sqlite_upkeep`) ------------------------------------------------------

    async def audit_input(self, fold: upkeep.Fold) -> AuditInput:
        """Every row an audit compares, each stream folded by `fold`, in one snapshot."""
        return await self._read(partial(upkeep.audit_input, schemas=self.schemas, fold=fold))

    async def rebuild(self, fold: upkeep.Fold) -> upkeep.Rebuilt:
        """Rewrite the read-model rows that differ from their streams' fold (offline)."""
        self._writable()
        return await self._read(partial(upkeep.rebuild, schemas=self.schemas, fold=fold))

    async def archivable(self, cutoff_wall: float) -> list[StoredView]:
        return await self._read(partial(upkeep.archivable, cutoff_wall=cutoff_wall))

    async def archive(self, **job: Any) -> upkeep.Archived:
        """`sqlite_upkeep.archive` on this journal (see there)."""
        self._writable()
        return await self._read(partial(upkeep.archive, schemas=self.schemas, **job))

    async def archives(self) -> list[tuple[str, int, int, float]]:
        return await self._read(upkeep.archives)

    async def checkpoint(self) -> None:
        """Move the WAL's pages into the database file and truncate the WAL."""
        self._writable()
        await self._read(lambda conn: conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall())

    async def vacuum(self) -> None:
        self._writable()
        await self._read(upkeep.vacuum)

    async def backup(self, target: Path) -> int:
        """A consistent copy at `target` (SQLite's online backup), taken between groups."""
        return await self._read(partial(upkeep.backup, target=target))

    def _writable(self) -> None:
        if self.read_only:
            raise JournalRefused(self.path, "is open read-only", "open it for writing")

    # -- closing -----------------------------------------------------------------------

    async def close(self) -> None:
        """Commit what is queued, then close. Idempotent. The last writer to close,
        after the whole file passed `check_file` in its time, leaves the mark that lets
        the next open skip its check (`sqlite_opening.closed_clean`)."""
        if self._closed:
            return
        self._closing = True
        if self._writer is not None:
            if self._wake is not None and not self._wake.done():
                self._wake.set_result(None)
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
        self._closed = True
        if self._file_checked and not self._errored and self._lock is not None:
            with contextlib.suppress(sqlite3.Error, ValueError):
                await _on_thread(self._conn, partial(
                    mark_clean, lock=self._lock, closed_wall=time.time()))
        await self._conn.close()
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


async def _on_thread(conn: aiosqlite.Connection, job: Callable[..., T]) -> T:
    """Run `job(sqlite3_connection)` on the connection's own thread in one hop.

    aiosqlite queues every call onto the thread that owns the connection; handing it a
    whole group keeps a group commit at one thread switch instead of one per statement.
    """
    run = cast(Callable[[Callable[[], T]], Awaitable[T]], conn._execute)
    return await run(lambda: job(conn._conn))


def _is_a_journal(journal: SQLiteJournal) -> Journal:
    """Never called: makes mypy check that `SQLiteJournal` fulfils the `Journal` port."""
    return journal


def _is_inspectable(journal: SQLiteJournal) -> JournalInspection:
    """Never called: mypy checks that `SQLiteJournal` offers the inspection reads."""
    return journal
