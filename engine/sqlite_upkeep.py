"""Keeping an SQLite journal: reading it whole for an audit, rewriting its read model
from the events, archiving finished streams, giving space back, copying it online.

These run on the connection's thread like `sqlite_writes` and `sqlite_reads`. Each
writing job is one transaction: it happens whole or not at all. Archiving writes the
archive file (fsynced) before the transaction that deletes what it holds commits, so a
crash between the two leaves the events in both places, never in neither. Must never
touch the event loop, and never creates, truncates or deletes the journal file.
"""

from __future__ import annotations

import gc
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

from nicplug.engine.audit import AuditInput, Folded, Issued, Step
from nicplug.engine.errors import JournalError
from nicplug.engine.journal import ArmedTimer, StoredView
from nicplug.engine.model import Key, RecordedEvent, StreamId, StreamView
from nicplug.engine.sqlite_reads import EVENT_COLUMNS, VIEW_COLUMNS, event_of, view_of
from nicplug.engine.sqlite_writes import to_json
from nicplug.engine.upcasting import Schemas

Fold = Callable[[Key, StreamId, Sequence[Step]], Folded]


@contextmanager
def _uncollected() -> Iterator[None]:
    """The cyclic collector paused: reading a whole journal builds millions of objects
    that form no cycles, and every collection would rescan all those kept so far (at a
    million events, a third of a rebuild's time went to it)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def audit_input(conn: sqlite3.Connection, schemas: Schemas, fold: Fold) -> AuditInput:
    """Every read-model row, every stream folded (`fold`, one stream's events in memory
    at a time), the pending effects and timers, in one read transaction. What cannot be
    read (a snapshot or an event of an unknown schema) is a `Folded` problem."""
    with _uncollected():
        return _audit_input(conn, schemas, fold)


def _audit_input(conn: sqlite3.Connection, schemas: Schemas, fold: Fold) -> AuditInput:
    conn.execute("BEGIN")
    try:
        rows: list[StoredView] = []
        unreadable: dict[StreamId, Folded] = {}
        for r in conn.execute(
            f"SELECT {VIEW_COLUMNS} FROM streams WHERE state IS NOT NULL ORDER BY key, stream"
        ):
            try:
                rows.append(view_of(r, schemas.snapshots))
            except JournalError as error:
                unreadable[StreamId(r[0])] = Folded(
                    None, r[5], 0, f"unreadable snapshot ({error})")
                rows.append(view_of(r, Schemas().snapshots))
        folded = fold_streams(conn, schemas, fold)
        folded.update(unreadable)
        issued = [
            Issued(r[0], StreamId(r[1]), Key(r[2]), r[3]) for r in conn.execute(
                "SELECT id, stream, key, type FROM effects WHERE status = 'issued' ORDER BY id")
        ]
        timers = [
            ArmedTimer(StreamId(r[0]), r[1], Key(r[2]), r[3]) for r in conn.execute(
                "SELECT stream, name, key, deadline FROM timers ORDER BY stream, name")
        ]
    finally:
        conn.execute("COMMIT")
    return AuditInput(rows, folded, issued, timers)


def fold_streams(conn: sqlite3.Connection, schemas: Schemas, fold: Fold) -> dict[StreamId, Folded]:
    """Every stream folded by `fold` from its events (`fold_rows`)."""
    return fold_rows(conn.execute(
        "SELECT position, stream, key, version, type, schema_version, payload FROM events"
        " ORDER BY stream, version"
    ), schemas, fold)


def fold_rows(
    rows: Iterable[Sequence[Any]], schemas: Schemas, fold: Fold
) -> dict[StreamId, Folded]:
    """Every stream folded by `fold` from its event rows (position, stream, key, version,
    type, schema version, payload as JSON text; in stream and version order), one
    stream's events in memory at a time; an event that cannot be read (not JSON, an
    unknown type or schema) is the stream's `Folded` problem. A million events: one
    row, one JSON decoding and one `Step` each, and the set lookup that finds its
    schema current (`Upcasters.reads_as_is`). Any backend's rows."""
    folded: dict[StreamId, Folded] = {}
    stream: StreamId | None = None
    key = Key("")
    events: list[Step] = []
    problem: str | None = None
    upcasters = schemas.events
    upcast = upcasters.upcast if upcasters else None
    as_is = upcasters.reads_as_is

    def done() -> None:
        if stream is not None:
            folded[stream] = (Folded(None, 0, len(events), problem) if problem
                              else fold(key, stream, events))

    # a `Step` made as its own constructor makes it, less the Python call around it
    loads, new, append = orjson.loads, tuple.__new__, events.append
    for position, of, by, version, type_, schema, payload in rows:
        if of != stream:
            done()
            stream, key, events, problem = of, by, [], None
            append = events.append
        if problem is None:
            try:
                decoded = loads(payload)
                if upcast is not None and (type_, schema) not in as_is:
                    schema, decoded = upcast(type_, schema, decoded)
                append(new(Step, (position, of, key, version, type_, schema, decoded)))
            except (JournalError, orjson.JSONDecodeError) as error:
                problem = f"event {position} unreadable ({error})"
    done()
    return folded


@dataclass(frozen=True, slots=True)
class Rebuilt:
    """What a rebuild did: `rows` folded from their events (of `events`), `differed`
    of them written; or, when some stream cannot be folded, nothing written and each
    such stream's problem."""

    rows: int
    events: int
    differed: int
    problems: dict[StreamId, str]


def rebuild(conn: sqlite3.Connection, schemas: Schemas, fold: Fold) -> Rebuilt:
    """Fold every stream and rewrite the read-model rows that differ from their fold,
    in one write transaction (nothing is written when a stream cannot be folded).

    A row is left as it is when its state, terminal flag, snapshot schema and snapshot
    text are what the fold gives, folded through the stream's last event: the fold's
    snapshot is encoded as every commit encodes it and compared as text, so the rows
    that agree (nearly all) are never decoded; any other row is decoded (upcast) and
    compared as data, like `journal verify` does."""
    with _uncollected():
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = _rebuild(conn, schemas, fold)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    return result


def _rebuild(conn: sqlite3.Connection, schemas: Schemas, fold: Fold) -> Rebuilt:
    folded = fold_streams(conn, schemas, fold)
    rebuilt, differing = compare(conn.execute(
        f"SELECT {VIEW_COLUMNS} FROM streams WHERE state IS NOT NULL AND archived IS NULL"
        " ORDER BY key, stream"), folded, schemas)
    if rebuilt.problems:
        return rebuilt
    conn.executemany(
        "UPDATE streams SET state = ?, terminal = ?, snapshot = ?, snapshot_schema = ?,"
        " snapshot_through = version WHERE stream = ?",
        [(v.state, int(v.terminal), to_json(v.snapshot), v.schema, v.stream) for v in differing],
    )
    return rebuilt


def compare(
    rows: Iterable[sqlite3.Row | tuple[Any, ...]], folded: dict[StreamId, Folded],
    schemas: Schemas,
) -> tuple[Rebuilt, list[StreamView]]:
    """The read-model rows (`VIEW_COLUMNS`, snapshot as JSON text, any backend's) held
    against their streams' folds: what a rebuild reports, and the folded views of the
    rows that differ (none when some stream cannot be folded: nothing is to be written)."""
    problems = {s: f.problem for s, f in folded.items() if f.problem is not None}
    count = 0
    differing: list[StreamView] = []
    for r in rows:
        result = folded.get(r[0])
        if result is None or result.problem is not None or result.view is None:
            continue
        view = result.view
        if (r[2] == view.state and r[3] == view.terminal and r[8] == view.schema
                and r[9] == r[5] and r[4] == to_json(view.snapshot)):
            count += 1
            continue
        try:
            stored = view_of(r, schemas.snapshots)
        except JournalError as error:  # a snapshot schema this nicplug does not know
            problems[view.stream] = f"unreadable snapshot ({error})"
            continue
        except (ValueError, TypeError, KeyError):  # not even a snapshot: the fold replaces it
            count += 1
            differing.append(view)
            continue
        count += 1
        if (stored.view != view or stored.through != stored.version
                or stored.stored_schema != view.schema):
            differing.append(view)
    events = sum(f.events for f in folded.values())
    if problems:
        return Rebuilt(count, events, 0, problems), []
    return Rebuilt(count, events, len(differing), {}), differing


@dataclass(frozen=True, slots=True)
class Archived:
    file: str
    streams: int
    events: int
    summaries: int


def archivable(conn: sqlite3.Connection, cutoff_wall: float) -> list[StoredView]:
    """Finished streams last changed before `cutoff_wall`, with no pending effect and no
    armed timer, whose events are still in the journal."""
    rows = conn.execute(
        f"SELECT {VIEW_COLUMNS} FROM streams s WHERE terminal = 1 AND archived IS NULL"
        " AND state IS NOT NULL AND updated_wall < ?"
        " AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.stream = s.stream"
        " AND e.status = 'issued')"
        " AND NOT EXISTS (SELECT 1 FROM timers t WHERE t.stream = s.stream)"
        " ORDER BY key, stream",
        (cutoff_wall,),
    ).fetchall()
    return [view_of(r, Schemas().snapshots) for r in rows]


def archive(
    conn: sqlite3.Connection,
    *,
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
    """Write the events of `streams` to `sink` (JSON lines, position order), make it
    durable and `publish` it (put it in place), then in one transaction delete them and
    their outbox rows; of their read-model rows, those in `keep` stay as summaries
    (`archived` names the file), the others go, and so do the summaries of earlier
    runs now `superseded`. One `archives` row records the run."""
    kept = set(keep)
    count = 0
    for first in range(0, len(streams), 500):
        chunk = list(streams[first : first + 500])
        marks = ", ".join("?" * len(chunk))
        for r in conn.execute(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE stream IN ({marks}) ORDER BY position",
            chunk,
        ):
            sink.write(line(event_of(r, schemas.events)))
            count += 1
    sink.flush()
    os.fsync(sink.fileno())
    publish()
    conn.execute("BEGIN IMMEDIATE")
    try:
        removed = 0  # read-model rows
        for first in range(0, len(streams), 500):
            chunk = list(streams[first : first + 500])
            marks = ", ".join("?" * len(chunk))
            conn.execute(f"DELETE FROM events WHERE stream IN ({marks})", chunk)
            conn.execute(f"DELETE FROM effects WHERE stream IN ({marks})", chunk)
            going = [s for s in chunk if s not in kept]
            if going:
                removed += conn.execute(
                    f"DELETE FROM streams WHERE stream IN ({', '.join('?' * len(going))})",
                    going,
                ).rowcount
        removed += conn.executemany(
            "DELETE FROM streams WHERE stream = ? AND archived IS NOT NULL",
            [(s,) for s in superseded]).rowcount
        conn.executemany("UPDATE streams SET archived = ? WHERE stream = ?",
                         [(file, s) for s in streams if s in kept])
        conn.execute(
            "INSERT INTO archives (file, streams, events, cutoff_wall, written_wall)"
            " VALUES (?, ?, ?, ?, ?)", (file, len(streams), count, cutoff_wall, now_wall),
        )
        _repack(conn, removed)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    # every free page back to the file system: each step of the pragma frees one page
    # and `execute` steps a statement without result columns once, a script to its end
    conn.executescript("PRAGMA incremental_vacuum;")
    return Archived(file, len(streams), count, len([s for s in streams if s in kept]))


def _repack(conn: sqlite3.Connection, removed: int) -> None:
    """Rebuild the read model's indexes after a bulk delete: SQLite merges an index page
    with its neighbours only once it is two-thirds empty, so removing a large share of
    the rows at once can leave every page half empty, and how many pages stay then
    depends on where the names fell (under churn the stream-name index took one page
    or three for the same 80 rows). Done when the rows removed are at least half those
    left, so its cost (sorting what is left) stays within twice the delete's."""
    if removed == 0:
        return
    left = int(conn.execute("SELECT COUNT(*) FROM streams").fetchone()[0])
    if 2 * removed >= left:
        conn.execute("REINDEX streams")


def archives(conn: sqlite3.Connection) -> list[tuple[str, int, int, float]]:
    """(file, streams, events, written_wall) of every archive written, newest first."""
    return [(str(r[0]), int(r[1]), int(r[2]), float(r[3])) for r in conn.execute(
        "SELECT file, streams, events, written_wall FROM archives ORDER BY id DESC")]


def vacuum(conn: sqlite3.Connection) -> None:
    """Give every free page back to the file system (rewrites the file; offline use)."""
    conn.execute("VACUUM")


def backup(conn: sqlite3.Connection, target: Path) -> int:
    """Copy the journal to `target` with SQLite's online backup API (a consistent copy
    while writers go on); returns the pages copied. `target` is new and empty."""
    copy = sqlite3.connect(target)
    try:
        conn.backup(copy, pages=1024)
        pages = int(copy.execute("PRAGMA page_count").fetchone()[0])
        copy.execute("PRAGMA journal_mode = DELETE")
    finally:
        copy.close()
    return pages
