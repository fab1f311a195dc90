"""What the journal-reading commands share: the `--journal` option, opening the journal
read-only, one-line errors, JSON and time formatting.

The journal is opened read-only (a controller may be writing it), so nothing a query
command does can change it or leave a file beside it; a journal no controller holds is
read as a snapshot (`status` and `journal verify` say which way it was read). A
missing, damaged or newer journal, content this nicplug cannot read, and bad input,
end in one line on stderr and a non-zero exit (1: the journal, naming it; 2: the
input), never a traceback. Holds no command of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import orjson
import typer
from rich.console import Console
from rich.markup import escape

from nicplug.adapters.cli.console import make_console
from nicplug.adapters.queries import DEFAULT_JOURNAL, BadSelection, open_for_queries
from nicplug.engine.errors import JournalError
from nicplug.engine.locations import shown
from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.engine.sqlite_opening import IntegrityCheck, ReadMode

if TYPE_CHECKING:
    from nicplug.engine.postgres_journal import PostgresJournal

T = TypeVar("T")

JournalPath = Annotated[
    Path,
    typer.Option(
        "--journal", envvar="NICPLUG_JOURNAL", show_default=True,
        help="SQLite journal file or PostgreSQL DSN, opened read-only (safe while the"
             " controller runs)",
    ),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON (stable keys) for scripts")]

__all__ = ["DEFAULT_JOURNAL", "JournalPath", "JsonFlag"]


def fail(message: str, code: int) -> NoReturn:
    typer.echo(f"nicplug: {message}", err=True)
    raise typer.Exit(code)


def checked(parse: Callable[[str], T], value: str | None, option: str) -> T | None:
    """`parse(value)`, or a one-line error naming `option` (exit 2)."""
    if value is None:
        return None
    try:
        return parse(value)
    except ValueError as error:
        fail(f"{option}: {error}", 2)


def location_of(journal: Path) -> Path | str:
    """`--journal` as given: a file, or a PostgreSQL DSN. The option is typed as a
    path, and a path folds the DSN's `postgresql://` into `postgresql:/`: restored."""
    text = str(journal)
    for scheme in ("postgresql:", "postgres:"):
        if text.startswith(scheme + "/") and not text.startswith(scheme + "//"):
            return scheme + "/" + text[len(scheme):]
    return journal


def named(journal: Path) -> str:
    """The journal as messages name it (a DSN without its password)."""
    target = location_of(journal)
    return shown(target) if isinstance(target, str) else str(target)


def ask(
    journal: Path, question: Callable[[SQLiteJournal | PostgresJournal], Awaitable[T]],
    *, integrity: IntegrityCheck = "quick",
) -> T:
    """Open `journal` read-only, put `question` to it, close it."""
    return ask_saying_how(journal, question, integrity=integrity)[0]


READ_MODES = {
    "shared": "through its write-ahead log (a controller holds it, or left its WAL)",
    "snapshot": "as a snapshot: no controller holds it",
}


def ask_saying_how(
    journal: Path, question: Callable[[SQLiteJournal | PostgresJournal], Awaitable[T]],
    *, integrity: IntegrityCheck = "quick",
) -> tuple[T, ReadMode]:
    """`ask`, and how the journal was read (`ReadMode`, described by `READ_MODES`)."""

    async def asking() -> tuple[T, ReadMode]:
        opened = await open_for_queries(location_of(journal), integrity=integrity)
        try:
            return await question(opened), opened.read_mode or "shared"
        finally:
            await opened.close()

    try:
        return asyncio.run(asking())
    except JournalError as error:
        fail(str(error), 1)
    except BadSelection as error:  # input that only the journal could show to be wrong
        fail(str(error), 2)
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        detail = " ".join(f"{type(error).__name__}: {error}".split())[:200]
        fail(f"journal {named(journal)}: holds content this nicplug cannot read ({detail}); "
             "check it with `nicplug journal verify` and restore it from a backup", 1)


def print_json(data: Any) -> None:
    typer.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())


def console() -> Console:
    return make_console(highlight=False, soft_wrap=False)


def age(seconds: float) -> str:
    """`42s`, `5m07s`, `3h12m`, `2d04h`: short and exact enough for people."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


STATE_STYLES = {
    "Attached": "green", "Detached": "green", "Failed": "red", "Cancelled": "yellow",
    "RestartRequired": "magenta", "MigrationRequired": "cyan", "Migrating": "cyan",
}


def plain(text: object) -> str:
    """Journal data as table text: never read as rich markup (`[x]` stays `[x]`)."""
    return escape(str(text))


def styled_state(state: str) -> str:
    style = STATE_STYLES.get(state)
    return f"[{style}]{plain(state)}[/]" if style else plain(state)
