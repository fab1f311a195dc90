"""`nicplug status`: every operation in the journal and its state, filtered.

Reads the read model only (one row per operation), so it answers at once however long
the journal is. Never writes.
"""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.table import Table

from nicplug.adapters.cli.app import app
from nicplug.adapters.cli.querying import (
    DEFAULT_JOURNAL,
    READ_MODES,
    JournalPath,
    JsonFlag,
    age,
    ask_saying_how,
    checked,
    console,
    plain,
    print_json,
    styled_state,
)
from nicplug.adapters.queries import OperationSummary, Selection, operations
from nicplug.adapters.queries.selection import network_ref, state_ref, vm_ref


@app.command()
def status(
    journal: JournalPath = DEFAULT_JOURNAL,
    vm: Annotated[str | None, typer.Option("--vm", help="Only this VM (NS/NAME)")] = None,
    state: Annotated[str | None, typer.Option("--state", help="Only operations in state S")] = None,
    network: Annotated[
        str | None, typer.Option("--network", help="Only this network (Main, TYPE/NAME)")
    ] = None,
    json_: JsonFlag = False,
) -> None:
    """List interface operations and their states (read-only)."""
    selection = Selection(
        vm=checked(vm_ref, vm, "--vm"), state=checked(state_ref, state, "--state"),
        network=checked(network_ref, network, "--network"),
    )
    found, mode = ask_saying_how(journal, lambda j: operations(j, selection))
    if json_:
        print_json(status_json(found))
        return
    show_operations(found, where=str(journal), how=f"read {READ_MODES[mode]}")


def status_json(found: list[OperationSummary]) -> dict[str, object]:
    return {"operations": [op.to_json() for op in found]}


def show_operations(found: list[OperationSummary], *, where: str, how: str) -> None:
    """The table of `status` (also `kubectl nicplug status`'s): `where` the operations
    were read from, `how` (the caption)."""
    out = console()
    if not found:
        out.print(plain(f"no operations match in {where} ({how})"))
        return
    now = time.time()
    table = Table(title=plain(f"operations in {where}"), caption=plain(how))
    for column in ("vm", "network", "op", "mode", "state", "reason", "in state"):
        table.add_column(column, no_wrap=True)
    table.add_column("path", overflow="fold")
    for op in found:
        table.add_row(
            plain(op.vm), plain(op.network), f"{op.direction}#{op.attempt}", op.mode,
            styled_state(op.state), plain(op.reason or ""),
            "" if op.terminal else age(now - op.entered_at), plain(" → ".join(op.history)),
        )
    out.print(table)
    archived = sorted({op.archived for op in found if op.archived})
    if archived:
        count = sum(1 for op in found if op.archived)
        out.print(plain(f"{count} finished operations are summaries: their events are "
                        f"archived in {', '.join(archived)}"))
