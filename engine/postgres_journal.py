"""The PostgreSQL journal: `asyncpg`, one writer connection doing group commit, a small
pool for reads, and terms of leadership that fence every write.

The same port as the SQLite journal (`journal.Journal`), for a replicated deployment:
every replica connects to the same database. Appenders queue their `Commit`s; the
writer commits everything queued in one transaction (`postgres_writes`) and
acknowledges each caller after COMMIT returned. A replica that leads takes a term
(`lead`): from then on each of its write transactions and each effect it claims to
send (`claim`) is refused in that same transaction once a later term exists. Reads go
through the pool and see whole commits. Must never call back into the runtime, never
drop or recreate a table.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import asyncpg

from nicplug.engine import postgres_reads as reads
from nicplug.engine import postgres_upkeep as upkeep
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
from nicplug.engine.postgres_following import read_changes
from nicplug.engine.postgres_opening import (
    WRITER_LOCK,
    check_readable,
    migrate,
    shown,
    translate,
)
from nicplug.engine.postgres_writes import CHANNEL, fence, write_group
from nicplug.engine.sqlite_journal import UNDECODABLE, WriterStats
from nicplug.engine.sqlite_opening import ReadMode
from nicplug.engine.sqlite_reads import (
    EVENT_COLUMNS,
    VIEW_COLUMNS,
    effect_payload,
    event_of,
    view_of,
)
from nicplug.engine.sqlite_upkeep import Archived, Fold, Rebuilt
from nicplug.engine.standby import Changes
from nicplug.engine.upcasting import Schemas, Upcasters

T = TypeVar("T")

EVENTS = EVENT_COLUMNS.replace("payload", "payload::text")
VIEWS = VIEW_COLUMNS.replace("snapshot,", "snapshot::text,")
_PREFIXED = ", ".join(f"e.{c.strip()}" for c in EVENTS.split(","))
EFFECT_COLUMNS = (
    "id, stream, key, type, payload::text, idempotency_key, status, attempts,"
    " next_attempt_at, last_error, schema_version"
)


_EVICT = (
    "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'"
    " AND classid = ($1::bigint >> 32)::oid AND objid = ($1::bigint & 4294967295)::oid"
    " AND objsubid = 1 AND granted AND pid <> pg_backend_pid()"
)
"""End the session of whoever holds the writers' lock (a writer of an older term)."""


class PostgresJournal(GroupCommit):
    """Open with `await PostgresJournal.open(dsn)`; close with `await journal.close()`."""

    def __init__(
        self,
        dsn: str,
        pool: asyncpg.Pool,
        writer: asyncpg.Connection | None,
        *,
        read_only: bool,
        schemas: Schemas,
        max_group: int,
        on_group: Callable[[int, float], None] | None,
    ) -> None:
        self.dsn = dsn
        self.path = shown(dsn)  # how messages name it (no password)
        self.read_only = read_only
        self.schemas = schemas
        self._upcasters = schemas.events
        self._pool = pool
        self._conn = writer
        self._start_queue(max_group)
        self._on_group = on_group
        self.read_mode: ReadMode = "shared"  # a reader always sees the writers' commits
        self.term: int | None = None
        """The term of leadership this writer holds (`lead`); None: unfenced."""
        self.stats = WriterStats()
        self._listener: asyncpg.Connection | None = None  # LISTENs for `committed`
        self._commit_seen = asyncio.Event()
        self._writer = None if read_only else asyncio.create_task(self._write_loop())

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        read_only: bool = False,
        upcasters: Upcasters | None = None,
        schemas: Schemas | None = None,
        max_group: int = 2000,
        on_group: Callable[[int, float], None] | None = None,
        readers: int = 4,
    ) -> PostgresJournal:
        """Connect, migrate (a writer) or check the schema (a reader), or refuse with
        `JournalRefused`/`JournalError`. `readers`: connections of the read pool."""
        name = shown(dsn)
        writer: asyncpg.Connection | None = None
        try:
            if not read_only:
                writer = await asyncpg.connect(dsn)
                await migrate(writer, name=name)
            pool = await asyncpg.create_pool(
                dsn, min_size=1, max_size=readers,
                server_settings={"default_transaction_read_only": "on"} if read_only else None,
            )
        except JournalError:
            if writer is not None:
                await writer.close()
            raise
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as error:
            if writer is not None:
                await writer.close()
            raise translate(error, name) from error
        if read_only:
            try:
                async with pool.acquire() as conn:
                    await check_readable(conn, name=name)
            except BaseException:
                await pool.close()
                raise
        if schemas is None:
            schemas = Schemas(events=upcasters)
        return cls(dsn, pool, writer, read_only=read_only, schemas=schemas,
                   max_group=max_group, on_group=on_group)

    # -- terms of leadership -------------------------------------------------------------

    async def lead(self, holder: str, *, evict_after: float = 1.0) -> int:
        """Begin a new term (the highest so far + 1, in one transaction under the
        writers' lock, so it waits for a write in progress); every write of this
        journal from now on carries it. Returns its number.

        A writer of an older term that holds the lock and does not finish within
        `evict_after` seconds (a paused process in the middle of its transaction) has
        its session ended by the server (`pg_terminate_backend`): its transaction
        rolls back unacknowledged, and the new term begins."""
        self._writable()

        async def begin(conn: asyncpg.Connection) -> int:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL lock_timeout = {int(evict_after * 1000)}")
                await conn.execute("SELECT pg_advisory_xact_lock($1)", WRITER_LOCK)
                return int(await conn.fetchval(
                    "INSERT INTO terms (number, holder, started_wall) SELECT"
                    " COALESCE(MAX(number), 0) + 1, $1, $2 FROM terms RETURNING number",
                    holder, time.time()))

        async with self._pool.acquire() as conn:
            for _ in range(10):
                try:
                    self.term = await self._guard(begin(conn))
                    return self.term
                except JournalError as error:
                    if not isinstance(error.__cause__, asyncpg.LockNotAvailableError):
                        raise
                    await self._guard(conn.execute(_EVICT, WRITER_LOCK))
        raise JournalError(f"journal {self.path}: could not take the writers' lock to lead")

    async def latest_term(self) -> int:
        return int(await self._value("SELECT COALESCE(MAX(number), 0) FROM terms"))

    async def claim(self, effect_id: int) -> bool:
        """Claim an outbox row to send it, in this journal's term: refused with
        `Superseded` once a later term began (the effect must then not be sent).
        False when the row is no longer pending (its outcome is recorded)."""
        self._writable()
        async def claim(conn: asyncpg.Connection) -> bool:
            async with conn.transaction():
                await fence(conn, self.term)
                done = await conn.execute(
                    "UPDATE effects SET claimed_term = $1 WHERE id = $2 AND status = 'issued'",
                    self.term or 0, effect_id)
                return bool(done != "UPDATE 0")
        async with self._pool.acquire() as conn:
            return await self._guard(claim(conn))

    # -- writing -----------------------------------------------------------------------

    async def _writer_conn(self) -> asyncpg.Connection:
        """The writer's connection, opened again after it was lost (a failover of the
        database, a restart): the unit in flight then failed, and was not acknowledged."""
        if self._conn is None or self._conn.is_closed():
            self._conn = await asyncpg.connect(self.dsn)
        return self._conn

    async def _commit(self, batch: list[Queued]) -> None:
        units = [unit for unit, _ in batch]
        started = time.perf_counter()
        results: list[Appended | Exception]
        try:
            results = await write_group(await self._writer_conn(), units, term=self.term)
        except JournalError as error:  # `Superseded`: the whole group is refused
            results = [error] * len(batch)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as error:
            results = [translate(error, self.path)] * len(batch)
        except Exception as error:  # a bug must fail the callers, not kill the writer
            results = [JournalError(f"journal {self.path}: group commit failed: {error!r}")] * len(
                batch)
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

    async def _guard(self, work: Awaitable[T]) -> T:
        try:
            return await work
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as error:
            raise translate(error, self.path) from error

    async def _rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        if self._closed:
            raise JournalClosed(f"journal {self.path} is closed")
        rows = await self._guard(self._pool.fetch(sql, *params))
        return [tuple(r) for r in rows]

    async def _value(self, sql: str, *params: Any) -> Any:
        if self._closed:
            raise JournalClosed(f"journal {self.path} is closed")
        return await self._guard(self._pool.fetchval(sql, *params))

    async def views(self, *, key: Key | None = None, live: bool = False) -> Sequence[StoredView]:
        sql = f"SELECT {VIEWS} FROM streams WHERE state IS NOT NULL"
        params: list[Any] = []
        if key is not None:
            params.append(key)
            sql += f" AND key = ${len(params)}"
        if live:
            sql += " AND key IN (SELECT key FROM streams WHERE NOT terminal AND state IS NOT NULL)"
        rows = await self._rows(sql + " ORDER BY key, stream", *params)
        return [view_of(r, self.schemas.snapshots) for r in rows]

    async def history(self, *, stream: StreamId) -> Sequence[RecordedEvent]:
        rows = await self._rows(
            f"SELECT {EVENTS} FROM events WHERE stream = $1 ORDER BY version", stream)
        return [event_of(r, self._upcasters) for r in rows]

    async def read_all(self, *, after: int = 0, limit: int = 1000) -> Sequence[RecordedEvent]:
        rows = await self._rows(
            f"SELECT {EVENTS} FROM events WHERE position > $1 ORDER BY position LIMIT $2",
            after, limit)
        return [event_of(r, self._upcasters) for r in rows]

    async def tail(self, *, key: Key | None = None, live: bool = False) -> Sequence[RecordedEvent]:
        sql = (
            f"SELECT {_PREFIXED} FROM streams s JOIN events e ON e.stream = s.stream"
            " AND e.version > s.snapshot_through WHERE s.state IS NOT NULL"
            " AND s.version > s.snapshot_through"
        )
        params: list[Any] = []
        if key is not None:
            params.append(key)
            sql += f" AND s.key = ${len(params)}"
        if live:
            sql += (" AND s.key IN (SELECT key FROM streams WHERE NOT terminal"
                    " AND state IS NOT NULL)")
        rows = await self._rows(sql + " ORDER BY e.position", *params)
        return [event_of(r, self._upcasters) for r in rows]

    async def events_of(self, *, key: Key) -> Sequence[RecordedEvent]:
        rows = await self._rows(
            f"SELECT {EVENTS} FROM events WHERE key = $1 ORDER BY position", key)
        return [event_of(r, self._upcasters) for r in rows]

    async def outbox(
        self, *, stream: StreamId | None = None, pending_only: bool = True
    ) -> Sequence[PendingEffect]:
        sql = f"SELECT {EFFECT_COLUMNS} FROM effects WHERE TRUE"
        params: list[Any] = []
        if stream is not None:
            params.append(stream)
            sql += f" AND stream = ${len(params)}"
        if pending_only:
            sql += " AND status = 'issued'"
        rows = await self._rows(sql + " ORDER BY id", *params)
        effects = []
        for r in rows:
            schema, payload = effect_payload(r[3], r[10], r[4], self.schemas.effects)
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
            params.append(due_by)
            sql += " WHERE deadline <= $1"
        rows = await self._rows(sql + " ORDER BY deadline, stream, name", *params)
        return [ArmedTimer(StreamId(r[0]), r[1], Key(r[2]), r[3]) for r in rows]

    # -- inspecting (`inspection.JournalInspection`, `postgres_reads`) -------------------

    async def find_views(self, query: ViewQuery) -> Sequence[StoredView]:
        """Read-model rows matching `query` (values bound, never pasted into SQL)."""
        async with self._reader() as conn:
            return await self._guard(reads.find_views(conn, query, self.schemas))

    async def stream_record(self, stream: StreamId) -> StreamRecord | None:
        """View, events, outbox rows and timers of one stream, in one snapshot."""
        async with self._reader() as conn:
            return await self._guard(reads.stream_record(conn, stream, self.schemas))

    async def census(self) -> Census:
        async with self._reader() as conn:
            return await self._guard(reads.census(conn))

    async def integrity(self) -> list[str]:
        async with self._reader() as conn:
            return await self._guard(reads.integrity(conn))

    async def audit_input(self, fold: Fold) -> AuditInput:
        """Every row an audit compares, each stream folded by `fold`, in one snapshot."""
        async with self._reader() as conn:
            return await self._guard(reads.audit_input(conn, self.schemas, fold))

    # -- keeping (`postgres_upkeep`): fenced by this journal's term like every write -------

    async def rebuild(self, fold: Fold) -> Rebuilt:
        """The read model rewritten from the events where it differs, in one transaction
        (`postgres_upkeep.rebuild`); take a term first (`lead`) to fence out a leader."""
        self._writable()
        async with self._pool.acquire() as conn:
            return await self._guard(upkeep.rebuild(conn, self.schemas, fold, term=self.term))

    async def archivable(self, cutoff_wall: float) -> list[StoredView]:
        async with self._reader() as conn:
            return await self._guard(upkeep.archivable(conn, cutoff_wall))

    async def archive(self, **job: Any) -> Archived:
        """`postgres_upkeep.archive` on this journal, in its term (see there)."""
        self._writable()
        async with self._pool.acquire() as conn:
            return await self._guard(
                upkeep.archive(conn, term=self.term, schemas=self.schemas, **job))

    async def archives(self) -> list[tuple[str, int, int, float]]:
        async with self._reader() as conn:
            return await self._guard(upkeep.archives(conn))

    def _reader(self) -> Any:
        if self._closed:
            raise JournalClosed(f"journal {self.path} is closed")
        return self._pool.acquire()

    # -- following (a standby: `standby.Follower`) ----------------------------------------

    async def changes(self, *, after: int | None) -> Changes:
        """Live keys with rows and tails, all or those touched after position `after`,
        in one snapshot (`postgres_following`)."""
        if self._closed:
            raise JournalClosed(f"journal {self.path} is closed")
        async with self._reader() as conn:
            return await self._guard(read_changes(conn, self.schemas, after=after))

    async def committed(self, within: float) -> None:
        """Return at the next group commit of any writer (LISTEN), or after `within`
        seconds; at once when one was notified since the last return, or when this is
        the first call (commits before the LISTEN began are not notified)."""
        if self._listener is None or self._listener.is_closed():
            listener = await self._guard(asyncpg.connect(self.dsn))
            await self._guard(listener.add_listener(CHANNEL, self._notified))
            self._listener = listener
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._commit_seen.wait(), within)
        self._commit_seen.clear()

    def _notified(self, *_args: object) -> None:
        self._commit_seen.set()

    async def last_position(self) -> int:
        """The highest global position committed (a standby's tailing starts there)."""
        return int(await self._value("SELECT COALESCE(MAX(position), 0) FROM events"))

    def _writable(self) -> None:
        if self._closed or self._closing:
            raise JournalClosed(f"journal {self.path} is closed")
        if self.read_only:
            raise JournalRefused(self.path, "is open read-only", "open it for writing")

    # -- closing -----------------------------------------------------------------------

    async def close(self) -> None:
        """Commit what is queued, then close. Idempotent."""
        if self._closed:
            return
        self._closing = True
        if self._writer is not None:
            if self._wake is not None and not self._wake.done():
                self._wake.set_result(None)
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
        self._closed = True
        for conn in (self._listener, self._conn):
            if conn is None:
                continue
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 5)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._pool.close(), 5)


def _is_a_journal(journal: PostgresJournal) -> Journal:
    """Never called: makes mypy check that `PostgresJournal` fulfils the `Journal` port."""
    return journal


def _is_inspectable(journal: PostgresJournal) -> JournalInspection:
    """Never called: mypy checks that `PostgresJournal` offers the inspection reads."""
    return journal
