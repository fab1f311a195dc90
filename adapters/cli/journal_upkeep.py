"""`nicplug journal rebuild|archive|backup`: the journal commands that write.

* `rebuild` folds every stream from its events and rewrites the read model (state,
  snapshot, schema) from the fold. Offline: it takes the journal's writer lock alone,
  so it refuses a journal a controller holds open, and a controller refuses to start
  while it runs. Events it cannot read stop it before anything is written.
* `archive` moves the events of operations finished longer ago than the retention
  window into a JSON-lines file (`journal export`'s format), then deletes them in one
  transaction; the newest attempt of each (VM, network, direction) keeps its read-model
  row as a summary naming the file. It may run beside the controller.
* `check-archive FILE` reads an archive (or an export) back whole.
* `copy SRC DST` copies a whole journal between an SQLite file and a PostgreSQL
  database (either way), then verifies both sides (`journal verify`) and compares
  their counts: the way an installation moves from one journal to the other.
* `backup OUT` copies the journal with SQLite's online backup API, beside a running
  controller, into a new file (never over an existing one), through a temporary file.
  From PostgreSQL it writes an SQLite journal of one snapshot (`journal copy`'s code).

On PostgreSQL (`--journal postgresql://...`) `archive` and `rebuild` are fenced like
every write; `rebuild` takes a term of its own, so a controller left running is fenced
out (docs/decisions/postgres-journal.md).

Every refusal is one line on stderr and exit 1 (the journal) or 2 (the input); a
refused command changes nothing.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from nicplug.adapters.cli.journal import journal_app
from nicplug.adapters.cli.querying import DEFAULT_JOURNAL, fail, location_of, named
from nicplug.adapters.core.retention import archive_finished
from nicplug.adapters.durations import spelled
from nicplug.adapters.exporting import ArchiveDamaged, read_events
from nicplug.adapters.queries import duration
from nicplug.engine.audit import folder
from nicplug.engine.errors import JournalError
from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.engine.sqlite_opening import IntegrityCheck
from nicplug.machines.operation import fold_view
from nicplug.machines.versions import schemas

if TYPE_CHECKING:
    from nicplug.engine.postgres_journal import PostgresJournal  # the `postgres` extra

T = TypeVar("T")

WritableJournal = Annotated[
    Path,
    typer.Option("--journal", envvar="NICPLUG_JOURNAL", show_default=True,
                 help="SQLite journal file or PostgreSQL DSN"),
]


def _with(
    path: Path, job: Callable[[SQLiteJournal | PostgresJournal], Awaitable[T]], *,
    read_only: bool = False, exclusive: bool = False, integrity: IntegrityCheck = "quick",
    term: str | None = None,
) -> T:
    """`job` on the journal at `path` (a file, or a DSN: opened for writing, and when
    `term` names the holder, in a term of its own taken first)."""
    location = location_of(path)
    if isinstance(location, Path) and not location.is_file():
        fail(f"journal {path}: no journal file here; give the path of an existing journal", 1)

    async def run() -> T:
        journal: SQLiteJournal | PostgresJournal
        if isinstance(location, str):
            from nicplug.engine.postgres_journal import PostgresJournal

            journal = await PostgresJournal.open(location, schemas=schemas(), readers=1)
        else:
            journal = await SQLiteJournal.open(
                location, read_only=read_only, exclusive=exclusive, schemas=schemas(),
                integrity=integrity,
            )
        try:
            if term is not None and not isinstance(journal, SQLiteJournal):
                await journal.lead(term)
            return await job(journal)
        finally:
            await journal.close()

    try:
        return asyncio.run(run())
    except JournalError as error:
        fail(str(error), 1)
    except OSError as error:
        fail(f"{error.filename or path}: {error.strerror or error}", 2)


class _Unreadable(JournalError):
    pass


async def rebuild_read_model(journal: SQLiteJournal | PostgresJournal) -> tuple[int, int, int]:
    """Fold every read-model row from its stream's events and write those the fold
    changes (a row equal to its fold, in the current schema and through the stream's
    last event, is left as it is): (rows rebuilt, events, rows that differed and were
    written). Refuses, writing nothing, when a stream cannot be folded."""
    done = await journal.rebuild(folder(fold_view))
    if done.problems:
        stream, why = next(iter(done.problems.items()))
        raise _Unreadable(
            f"journal {journal.path}: {len(done.problems)} streams cannot be folded by this "
            f"nicplug (first: {stream}: {why}); run the nicplug that wrote them; nothing was "
            "changed"
        )
    return done.rows, done.events, done.differed


@journal_app.command()
def rebuild(journal: WritableJournal = DEFAULT_JOURNAL) -> None:
    """Rewrite the read model from the events (stop the controller first; on PostgreSQL
    it takes a term of its own, which fences out a controller left running)."""
    # it reads every event and every row itself; the whole file: `journal verify`
    async def rebuilt(opened: SQLiteJournal | PostgresJournal) -> tuple[int, ...]:
        fenced = 0 if isinstance(opened, SQLiteJournal) else opened.term or 0
        return (*await rebuild_read_model(opened), fenced)

    rows, events, differed, term = _with(journal, rebuilt, exclusive=True,
                                         integrity="bounded", term="journal rebuild")
    typer.echo(f"{named(journal)}: {rows} read-model rows rebuilt from {events} events "
               f"({differed} differed from the fold)" + (
                   f" in term {term}: a controller still writing is fenced out" if term
                   else ""))


@journal_app.command()
def backup(
    out: Annotated[Path, typer.Argument(help="The new backup file")],
    journal: WritableJournal = DEFAULT_JOURNAL,
) -> None:
    """Copy the journal online (safe while the controller runs) into a new file."""
    if out.exists() or out.is_symlink():
        fail(f"backup target {out} exists; a backup never overwrites: choose a new file", 2)
    directory = out.absolute().parent
    if not directory.is_dir():
        fail(f"backup target {out}: no directory {directory}", 2)
    if not os.access(directory, os.W_OK):
        fail(f"backup target {out}: cannot write in {directory}; choose a writable place", 2)
    try:  # empty and private (0600) like the journal; SQLite fills it
        handle, temporary = tempfile.mkstemp(dir=directory, prefix=f".{out.name}.")
    except OSError as error:
        fail(f"backup target {out}: cannot write in {directory} ({error.strerror}); "
             "choose a writable place", 2)
    os.close(handle)

    async def copy(source: SQLiteJournal | PostgresJournal) -> int:
        assert isinstance(source, SQLiteJournal)
        return await source.backup(Path(temporary))

    location = location_of(journal)
    try:
        if isinstance(location, str):
            rows = _snapshot(location, Path(temporary))
        else:
            pages = _with(journal, copy, read_only=True)
        fd = os.open(temporary, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.link(temporary, out)  # fails, changing nothing, should `out` have appeared
    except FileExistsError:
        fail(f"backup target {out} appeared meanwhile; nothing was written to it", 2)
    finally:
        Path(temporary).unlink(missing_ok=True)
    if isinstance(location, str):
        typer.echo(f"{named(journal)}: backed up to {out} (an SQLite journal of {rows} rows)")
    else:
        typer.echo(f"{journal}: backed up to {out} ({pages} pages)")


def _snapshot(dsn: str, target: Path) -> int:
    """The database's journal as of one moment (one REPEATABLE READ transaction, as
    `journal copy` reads it) written into the new, empty SQLite file `target`, left
    self-contained (no write-ahead log beside it); the rows written."""
    from nicplug.engine import journal_copy

    async def run() -> int:
        tables = await journal_copy.read(dsn)
        await journal_copy.write(str(target), tables)
        return sum(tables.counts().values())

    try:
        rows = asyncio.run(run())
        with sqlite3.connect(target) as conn:
            conn.execute("PRAGMA journal_mode = DELETE")
        conn.close()
    except JournalError as error:
        fail(str(error), 1)
    return rows


@journal_app.command()
def archive(
    into: Annotated[Path, typer.Option(help="Directory the archive file is written to")],
    older_than: Annotated[
        str, typer.Option(
            help="Archive operations finished longer ago than this (30d, 12h, or seconds)")
    ] = "30d",
    journal: WritableJournal = DEFAULT_JOURNAL,
) -> None:
    """Move the events of long-finished operations into a JSON-lines archive."""
    try:
        window = duration(older_than)
    except ValueError as error:
        fail(f"--older-than: {error}", 2)
    if not into.is_dir():
        fail(f"--into {into}: not a directory", 2)
    if not os.access(into, os.W_OK):
        fail(f"--into {into}: cannot write there; choose a writable directory", 2)
    directory = into.resolve()
    done = _with(
        journal, lambda j: archive_finished(j, window=window, into=directory, now=time.time())
    )
    if done is None:
        typer.echo(f"{named(journal)}: no operation finished before the last {spelled(window)}")
        return
    typer.echo(f"{named(journal)}: archived {done.events} events of {done.streams} operations to "
               f"{done.file}")


@journal_app.command("check-archive")
def check_archive(
    file: Annotated[Path, typer.Argument(help="An archive or export (JSON lines)")],
) -> None:
    """Read an archive back whole: how many events of how many operations it holds."""
    streams: set[str] = set()
    count = 0
    try:
        for event in read_events(file):
            streams.add(str(event["stream"]))
            count += 1
    except ArchiveDamaged as error:
        fail(str(error), 1)
    except OSError as error:
        fail(f"archive {file}: {error.strerror or error}", 1)
    typer.echo(f"{file}: {count} events of {len(streams)} operations, whole")


@journal_app.command()
def copy(
    source: Annotated[str, typer.Argument(help="The journal to copy: a file or postgresql://...")],
    target: Annotated[str, typer.Argument(
        help="Where to: a new file or an empty PostgreSQL database")],
) -> None:
    """Copy a whole journal between SQLite and PostgreSQL (stop the controller first),
    then verify both sides."""
    from nicplug.adapters.journal_verdict import verified as verdict
    from nicplug.engine import journal_copy
    from nicplug.engine.locations import is_dsn, shown
    from nicplug.engine.postgres_journal import PostgresJournal

    if not is_dsn(source) and not Path(source).is_file():
        fail(f"journal {source}: no journal file here; give a file or a postgresql:// DSN", 2)
    if not is_dsn(target) and Path(target).exists():
        fail(f"copy target {target} exists; a copy never overwrites: choose a new file", 2)

    async def verified(location: str) -> dict[str, object]:
        journal: SQLiteJournal | PostgresJournal = (
            await PostgresJournal.open(location, read_only=True, schemas=schemas())
            if is_dsn(location) else
            await SQLiteJournal.open(location, read_only=True, schemas=schemas()))
        try:
            return await verdict(journal)
        finally:
            await journal.close()

    async def run() -> tuple[dict[str, int], dict[str, object], dict[str, object]]:
        tables = await journal_copy.read(source)
        await journal_copy.write(target, tables)
        return tables.counts(), await verified(source), await verified(target)

    try:
        counts, before, after = asyncio.run(run())
    except JournalError as error:
        fail(str(error), 1)
    names = (shown(source) if is_dsn(source) else source,
             shown(target) if is_dsn(target) else target)
    same = all(before.get(k) == after.get(k) for k in (
        "events", "last_position", "streams", "live_streams", "effects", "timers"))
    typer.echo(f"copied {names[0]} -> {names[1]}: " + ", ".join(
        f"{n} {table}" for table, n in counts.items()))
    for name, report in zip(names, (before, after), strict=True):
        typer.echo(f"{name}: verify {'ok' if report['ok'] else 'FAILED'}")
    if not (before["ok"] and after["ok"] and same):
        fail("the copy does not verify as the source does; the source is unchanged", 1)
