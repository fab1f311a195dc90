"""`nicplug journal rebuild|archive|backup`: the journal commands that write.

* `rebuild` folds every stream from its events and rewrites the read model (state,
  snapshot, schema) from the fold. Offline: it takes the journal's writer lock alone,
  so it refuses a journal a controller holds open, and a controller refuses to start
  while it runs. Events it cannot read stop it before anything is written.
* `archive` moves the events of operations finished longer ago than the retention
  window into a JSON-lines file (`journal export`'s format), then deletes them in one
  transaction; the newest attempt of each (VM, network, direction) keeps its read-model
  row as a summary naming the file. It may run beside the controller.
* `backup OUT` copies the journal with SQLite's online backup API, beside a running
  controller, into a new file (never over an existing one), through a temporary file.

Every refusal is one line on stderr and exit 1 (the journal) or 2 (the input); a
refused command changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from nicplug.adapters.cli.journal import event_line, journal_app
from nicplug.adapters.cli.querying import DEFAULT_JOURNAL, fail
from nicplug.adapters.queries import duration
from nicplug.engine.audit import fold_stream
from nicplug.engine.errors import JournalError
from nicplug.engine.model import StreamView
from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.operation import summaries_to_keep
from nicplug.machines.versions import schemas

T = TypeVar("T")

WritableJournal = Annotated[
    Path,
    typer.Option("--journal", envvar="NICPLUG_JOURNAL", show_default=True,
                 help="SQLite journal file"),
]


def _with(
    path: Path, job: Callable[[SQLiteJournal], Awaitable[T]], *, read_only: bool = False,
    exclusive: bool = False,
) -> T:
    if not path.is_file():
        fail(f"journal {path}: no journal file here; give the path of an existing journal", 1)

    async def run() -> T:
        journal = await SQLiteJournal.open(
            path, read_only=read_only, exclusive=exclusive, schemas=schemas(),
            integrity="quick",
        )
        try:
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


async def _rebuild(journal: SQLiteJournal) -> tuple[int, int, int]:
    given = await journal.audit_input()
    if given.unreadable:
        stream, why = next(iter(given.unreadable.items()))
        raise _Unreadable(
            f"journal {journal.path}: {len(given.unreadable)} streams cannot be read by this "
            f"nicplug (first: {stream}: {why}); run the nicplug that wrote them; nothing "
            "was changed"
        )
    decider = HotplugDecider()
    rewritten: list[StreamView] = []
    differed = 0
    for row in given.rows:
        events = given.events.get(row.view.stream, ())
        if row.archived is not None or not events:
            continue
        try:
            folded = fold_stream(decider, row.view.key, row.view.stream, events)
        except (ValueError, KeyError, TypeError) as error:
            raise _Unreadable(
                f"journal {journal.path}: the events of {row.view.stream} do not fold "
                f"({error}); nothing was changed"
            ) from error
        if folded is not None:
            rewritten.append(folded)
            differed += row.view != folded or row.through != row.version
    await journal.rewrite_views(rewritten)
    return len(rewritten), sum(len(e) for e in given.events.values()), differed


@journal_app.command()
def rebuild(journal: WritableJournal = DEFAULT_JOURNAL) -> None:
    """Rewrite the read model from the events (stop the controller first)."""
    rows, events, differed = _with(journal, _rebuild, exclusive=True)
    typer.echo(f"{journal}: {rows} read-model rows rebuilt from {events} events "
               f"({differed} differed from the fold)")


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

    async def copy(source: SQLiteJournal) -> int:
        return await source.backup(Path(temporary))

    try:
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
    typer.echo(f"{journal}: backed up to {out} ({pages} pages)")


async def _archive(
    journal: SQLiteJournal, *, window: float, into: Path, now: float
) -> tuple[str, int, int]:
    cutoff = now - window
    candidates = await journal.archivable(cutoff)
    if not candidates:
        return "", 0, 0
    keys = {row.view.key for row in candidates}
    views = [v.view for v in await journal.views() if v.view.key in keys]
    keep = summaries_to_keep(views)
    name = time.strftime("nicplug-archive-%Y%m%dT%H%M%SZ", time.gmtime(now))
    target = into.resolve() / f"{name}.jsonl"
    if target.exists():
        raise FileExistsError(0, "exists", str(target))
    handle, temporary = tempfile.mkstemp(dir=into, prefix=f".{target.name}.")
    try:
        with os.fdopen(handle, "wb") as sink:
            done = await journal.archive(
                streams=[row.view.stream for row in candidates], keep=keep, sink=sink,
                publish=lambda: os.link(temporary, target), file=str(target),
                line=event_line, cutoff_wall=cutoff, now_wall=now,
            )
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)  # the archive is `target` now (or was never put there)
    return done.file, done.streams, done.events


@journal_app.command()
def archive(
    into: Annotated[Path, typer.Option(help="Directory the archive file is written to")],
    older_than: Annotated[
        str, typer.Option(help="Archive operations finished longer ago than this (30d, 12h)")
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
    file, streams, events = _with(
        journal, lambda j: _archive(j, window=window, into=into, now=time.time())
    )
    if not streams:
        typer.echo(f"{journal}: no operation finished before the last {older_than}")
        return
    typer.echo(f"{journal}: archived {events} events of {streams} operations to {file}")
