"""`nicplug journal verify|export`: is the journal healthy, and every event as JSON lines.

`verify` runs SQLite's full integrity check, then holds the caches against the truth:
every stream folded from its events and compared with its read-model row, the outbox
and timers checked against the streams (`nicplug.engine.audit`); it prints the schema
version and how much the journal holds, names every mismatch, and exits 1 when there
is one. `export` writes every event, in position order, up to the last one committed
when it started, one JSON object per line. Both open the journal read-only (safe
beside a running controller); `export` writes its output through a temporary file, so
a failed export leaves no half file, and refuses to write over the journal itself.
The commands that write (`rebuild`, `archive`, `backup`) live in `journal_upkeep`.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import IO, Annotated

import typer

from nicplug.adapters.cli.app import app
from nicplug.adapters.cli.querying import (
    DEFAULT_JOURNAL,
    READ_MODES,
    JournalPath,
    JsonFlag,
    ask,
    ask_saying_how,
    console,
    fail,
    named,
    plain,
    print_json,
)
from nicplug.adapters.exporting import event_line
from nicplug.adapters.journal_verdict import mismatches_found, verified
from nicplug.engine.audit import Mismatch
from nicplug.engine.inspection import JournalInspection

journal_app = typer.Typer(
    name="journal", help="Check, export, rebuild, archive or back up the journal.",
    no_args_is_help=True,
)
app.add_typer(journal_app)

_PAGE = 1000


@journal_app.command()
def verify(journal: JournalPath = DEFAULT_JOURNAL, json_: JsonFlag = False) -> None:
    """Check the journal's integrity and that its read model, outbox and timers agree
    with its events; print its schema version and counts."""
    report, mode = ask_saying_how(journal, verified, integrity="none")
    name = named(journal)
    report = {"journal": name, "read_mode": mode, **report}
    if json_:
        print_json(report)
    else:
        out = console()
        mismatches = [Mismatch(**m) for m in report.get("mismatches", [])]
        out.print(plain(f"{name}: read {READ_MODES[mode]}"))
        if report["ok"]:
            out.print(plain(f"{name}: ok"))
        elif mismatches:
            out.print(plain(f"{name}: {mismatches_found(len(mismatches))}"))
            for mismatch in mismatches[:50]:
                out.print(plain(f"  {mismatch.line()}"))
        else:
            out.print(plain(f"{name}: DAMAGED"))
            for problem in report["integrity"][:20]:
                out.print(plain(f"  {problem}"))
        if "events" in report:
            effects = ", ".join(f"{n} {s}" for s, n in report["effects"].items())
            out.print(
                f"schema {report['schema_version']} (this nicplug reads "
                f"{report['schema_supported']}); {report['events']} events (last position "
                f"{report['last_position']}); {report['streams']} streams, "
                f"{report['live_streams']} live; effects: {effects}; {report['timers']} timers"
            )
    if not report["ok"]:
        raise typer.Exit(1)


async def _export(journal: JournalInspection, sink: IO[bytes]) -> int:
    last = (await journal.census()).last_position
    after, written = 0, 0
    while after < last:
        page = [e for e in await journal.read_all(after=after, limit=_PAGE) if e.position <= last]
        if not page:
            break
        sink.write(b"".join(event_line(e) for e in page))
        written += len(page)
        after = page[-1].position
    return written


def _same_file(output: Path, journal: Path) -> bool:
    target = output.resolve()
    source = journal.resolve()
    return target in {source, Path(f"{source}-wal"), Path(f"{source}-shm")}


@journal_app.command()
def export(
    journal: JournalPath = DEFAULT_JOURNAL,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write here instead of stdout")
    ] = None,
) -> None:
    """Export every event as JSON lines, in position order."""
    if output is None:
        try:
            ask(journal, lambda j: _export(j, sys.stdout.buffer))
            sys.stdout.flush()
        except BrokenPipeError:  # `| head`: the reader has all it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return
    if _same_file(output, journal):
        fail(f"--output {output} is the journal itself; choose another file", 2)
    directory = output.resolve().parent
    if not directory.is_dir():
        fail(f"--output {output}: no directory {directory}", 2)
    if output.is_dir():
        fail(f"--output {output} is a directory; name a file", 2)
    try:
        handle, temporary = tempfile.mkstemp(dir=directory, prefix=f".{output.name}.")
    except OSError as error:
        fail(f"--output {output}: cannot write in {directory} ({error.strerror or error})", 2)
    try:
        with os.fdopen(handle, "wb") as sink:
            count = ask(journal, lambda j: _export(j, sink))
        os.replace(temporary, output)
    except OSError as error:  # the disk filled, or `output` became unwritable meanwhile
        Path(temporary).unlink(missing_ok=True)
        fail(f"--output {output}: cannot write ({error.strerror or error})", 1)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    typer.echo(f"wrote {count} events to {output}", err=True)
