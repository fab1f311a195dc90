"""`nicplug stuck --older-than 5m`: live operations that have not moved for a while.

"Moved" is entering a state; re-issued effects do not count. Ages are measured on
the clock the controller decides with (epoch seconds). Never writes.
"""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.table import Table

from nicplug.adapters.cli.app import app
from nicplug.adapters.cli.querying import (
    DEFAULT_JOURNAL,
    JournalPath,
    JsonFlag,
    age,
    ask,
    checked,
    console,
    plain,
    print_json,
    styled_state,
)
from nicplug.adapters.durations import spelled
from nicplug.adapters.queries import OperationSummary, duration
from nicplug.adapters.queries import stuck as stuck_operations


@app.command()
def stuck(
    older_than: Annotated[
        str, typer.Option("--older-than",
                          help="How long without moving: 30s, 5m, 1h30m, 2d, or seconds")
    ] = "5m",
    journal: JournalPath = DEFAULT_JOURNAL,
    json_: JsonFlag = False,
) -> None:
    """List live operations whose last transition is older than a duration."""
    seconds = checked(duration, older_than, "--older-than")
    assert seconds is not None
    now = time.time()
    found = ask(journal, lambda j: stuck_operations(j, older_than=seconds, now=now))
    if json_:
        print_json(stuck_json(found, seconds, now))
        return
    show_stuck(found, seconds, now, hint="see why with: nicplug explain ID")


def stuck_json(found: list[OperationSummary], seconds: float, now: float) -> dict[str, object]:
    return {"older_than": seconds, "now": now, "operations": [op.to_json() for op in found]}


def show_stuck(found: list[OperationSummary], seconds: float, now: float, *,
               hint: str) -> None:
    """The table of `stuck` (also `kubectl nicplug stuck`'s)."""
    out = console()
    if not found:
        out.print(f"no live operation has been still for more than {spelled(seconds)}")
        return
    table = Table(title=f"operations still for more than {spelled(seconds)}")
    for column in ("vm", "network", "op", "state", "in state"):
        table.add_column(column, overflow="fold")
    table.add_column("id", no_wrap=True)
    for op in found:
        table.add_row(plain(op.vm), plain(op.network), f"{op.direction}#{op.attempt}",
                      styled_state(op.state), age(now - op.entered_at), plain(op.id))
    out.print(table)
    out.print(hint)
