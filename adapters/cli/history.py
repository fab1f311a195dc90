"""`nicplug history NS/NAME`: how each operation of a VM went, step by step.

Each step is shown with its time and its cause (the object and resourceVersion that
moved it, the timer, or the effect outcome), each effect with what became of it, read
from the journal's events and outbox. Never writes.
"""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.table import Table

from nicplug.adapters.cli.app import app
from nicplug.adapters.cli.pictures import timeline as gantt
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
from nicplug.adapters.queries import Selection, Timeline, operations, timeline
from nicplug.adapters.queries.selection import network_ref, vm_ref
from nicplug.engine.inspection import JournalInspection

FormatOption = Annotated[str, typer.Option(
    "--format", help="table, or mermaid: a gantt of the VM's operations in time")]


def picture_format(value: str) -> str:
    if value not in ("table", "mermaid"):
        raise ValueError(f"table or mermaid, not {value!r}")
    return value


async def _timelines(journal: JournalInspection, selection: Selection) -> list[Timeline]:
    found = []
    for op in await operations(journal, selection):
        line = await timeline(journal, op.id)
        if line is not None:
            found.append(line)
    return found


def _offset(seconds: float) -> str:
    """Time since the operation opened: `+0.021s`, `+4s`, `+5m03s`."""
    if seconds < 60:
        return "+" + f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"
    return "+" + age(seconds)


def _rows(line: Timeline) -> list[tuple[float, int, int, tuple[str, str, str, str]]]:
    start = line.operation.opened_at
    rows = []
    for s in line.steps:
        if s.type == "Transitioned":
            what = f"{plain(s.source)} → {styled_state(s.to or '')} ({plain(s.trigger)})"
            if s.reason and s.reason != s.trigger:
                what += plain(f" {s.reason}")
            if s.message:
                what += plain(f": {s.message}")
        else:
            what = "opened" if s.type == "Opened" else plain(s.type)
        cells = (_offset(s.at - start), s.wall, what, plain(s.cause.ref))
        rows.append((s.at, 0, s.position, cells))
    for e in line.effects:
        what = f"effect {e.type} {e.target}: {e.outcome}"
        if e.attempts > 1:
            what += f" after {e.attempts} attempts"
        detail = f"last error: {e.last_error}" if e.last_error else f"effect:{e.id}"
        cells = (_offset(e.issued_at - start), e.issued_wall, plain(what), plain(detail))
        rows.append((e.issued_at, 1, e.id, cells))
    return sorted(rows)


@app.command()
def history(
    vm: Annotated[str, typer.Argument(help="The VM, NS/NAME")],
    journal: JournalPath = DEFAULT_JOURNAL,
    network: Annotated[
        str | None, typer.Option("--network", help="Only this network (Main, TYPE/NAME)")
    ] = None,
    json_: JsonFlag = False,
    format_: FormatOption = "table",
) -> None:
    """Show each operation of a VM: steps with their times and causes, effects with outcomes."""
    format_ = checked(picture_format, format_, "--format") or "table"
    selection = Selection(
        vm=checked(vm_ref, vm, "NS/NAME"), network=checked(network_ref, network, "--network")
    )
    lines = ask(journal, lambda j: _timelines(j, selection))
    if json_:
        print_json(history_json(vm, lines))
        return
    if format_ == "mermaid":
        typer.echo(gantt(vm, lines, now=time.time()), nl=False)
        return
    show_timelines(lines, empty=f"no operations of {vm} in {journal}")


def history_json(vm: str, lines: list[Timeline]) -> dict[str, object]:
    return {"vm": vm, "operations": [line.to_json() for line in lines]}


def show_timelines(lines: list[Timeline], *, empty: str) -> None:
    """The tables of `history` (also `kubectl nicplug history`'s), one per operation."""
    out = console()
    if not lines:
        out.print(plain(empty))
        return
    for line in lines:
        op = line.operation
        table = Table(
            title=plain(f"{op.vm} {op.network} {op.direction}#{op.attempt}: ")
            + styled_state(op.state),
            caption=plain(op.id if not op.archived else
                          f"{op.id}: the detail is archived in {op.archived}"),
            title_justify="left", caption_justify="left",
        )
        table.add_column("t", no_wrap=True, justify="right")
        table.add_column("wall time", no_wrap=True)
        table.add_column("what", overflow="fold")
        table.add_column("cause / detail", overflow="fold")
        for *_, cells in _rows(line):
            table.add_row(*cells)
        out.print(table)
