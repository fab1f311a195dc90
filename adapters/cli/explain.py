"""`nicplug explain OPERATION`: the state of one operation, what it waits for, the
last observation and the next timer.

An operation is named by its id (`<vm uid>/<network>/<direction>/<attempt>`, as
`status --json` and `stuck` print it) or by `NS/NAME NETWORK [--direction D]` (its
latest attempt); `NS/NAME` alone lists the VM's operations, each with the line that
explains it. Never writes.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Annotated

import typer

from nicplug.adapters.cli.app import app
from nicplug.adapters.cli.pictures import operation_diagram
from nicplug.adapters.cli.querying import (
    DEFAULT_JOURNAL,
    JournalPath,
    JsonFlag,
    age,
    ask,
    console,
    fail,
    plain,
    print_json,
    styled_state,
)
from nicplug.adapters.queries import (
    Explanation,
    OperationSummary,
    Selection,
    explanation,
    operations,
    resolve,
)
from nicplug.engine.inspection import JournalInspection

DiagramFlag = Annotated[bool, typer.Option(
    "--diagram", help="Print the machine as mermaid, the operation's path and state highlighted")]


async def _explain(
    journal: JournalInspection, operation: str, network: str | None, direction: str | None,
    now: float,
) -> Explanation | None:
    stream = await resolve(journal, operation, network, direction)
    if stream is None:
        return None
    return await explanation(journal, stream, now=now)


_VM = re.compile(r"[^/\s]+/[^/\s]+")
"""`NS/NAME`: one slash; an operation id has four (`<uid>/<network>/<dir>/<n>`)."""


@app.command()
def explain(
    operation: Annotated[str, typer.Argument(help="An operation id, or the VM as NS/NAME")],
    network: Annotated[
        str | None, typer.Argument(help="With NS/NAME: the network (Main, TYPE/NAME)")
    ] = None,
    direction: Annotated[
        str | None, typer.Option("--direction", help="With NS/NAME: plug | unplug | update")
    ] = None,
    journal: JournalPath = DEFAULT_JOURNAL,
    json_: JsonFlag = False,
    diagram: DiagramFlag = False,
) -> None:
    """Explain one operation: its state, what it waits for, its last observation and timers."""
    now = time.time()
    if network is None and direction is None and _VM.fullmatch(operation):
        _list_operations(journal, operation, json_, now)
        return
    found = ask(journal, lambda j: _explain(j, operation, network, direction, now))
    if found is None:
        named = f"{operation} {network}" if network else operation
        fail(f"no operation {named} in journal {journal}", 1)
    if diagram:
        typer.echo(operation_diagram(found.operation), nl=False)
        return
    if json_:
        print_json(found.to_json())
        return
    show_explanation(found)


def _list_operations(journal: Path, vm: str, json_: bool, now: float) -> None:
    """`explain NS/NAME`: which operations there are to explain, and how to name each."""
    found = ask(journal, lambda j: operations(j, Selection(vm=vm)))
    if json_:
        print_json(operation_list_json(vm, found))
        return
    if not found:
        fail(f"no operation of {vm} in journal {journal}", 1)
    show_operation_list(vm, found, now, command="nicplug explain")


def operation_list_json(vm: str, found: list[OperationSummary]) -> dict[str, object]:
    return {"vm": vm, "operations": [op.to_json() for op in found]}


def show_operation_list(vm: str, found: list[OperationSummary], now: float, *,
                        command: str) -> None:
    """What `explain NS/NAME` prints (also `kubectl nicplug explain NS/NAME`)."""
    out = console()
    count = f"{len(found)} operation" + ("" if len(found) == 1 else "s")
    out.print(plain(f"{vm}: {count}; explain one with "
                    f"`{command} {vm} NETWORK [--direction D]` or by its id:"))
    for op in found:
        held = "" if op.terminal else f", for {age(now - op.entered_at)}"
        out.print(f"  {plain(f'{op.network} {op.direction}#{op.attempt}')}: "
                  f"{styled_state(op.state)}{plain(held)}  {plain(op.id)}")


def show_explanation(found: Explanation) -> None:
    """What `explain` prints (also `kubectl nicplug explain`)."""
    op = found.operation
    out = console()
    out.print(f"[bold]{plain(f'{op.vm} {op.network} {op.direction}#{op.attempt}')}[/]"
              f"  ({plain(op.id)})")
    state = styled_state(op.state) + (plain(f" ({op.reason})") if op.reason else "")
    out.print(f"state: {state}" + ("" if op.terminal else f", for {age(found.in_state_for)}"))
    out.print(plain(f"path: {' → '.join(op.history)}"))
    if op.message:
        out.print(plain(f"message: {op.message}"))
    if op.terminal or found.superseded_by:
        out.print(plain(found.summary))
    else:
        out.print("waits until one of:")
        for m in found.waits_for:
            out.print(plain(f"  → {m.to} ({m.trigger}): {m.meaning}"))
        out.print("ends if:")
        for m in found.ends_if:
            out.print(plain(f"  → {m.to} ({m.trigger}): {m.meaning}"))
    for e in found.pending_effects:
        line = f"effect not done: {e.type} {e.target} ({e.outcome}, {e.attempts} attempts)"
        out.print(plain(line + (f", last error: {e.last_error}" if e.last_error else "")))
    seen = found.last_observation
    out.print(plain(f"last observation: {seen.ref} at {seen.wall}") if seen else
              "last observation: none journaled")
    if found.next_timer is None:
        out.print("timers: none armed")
    for t in found.timers:
        when = f"in {age(t.due_in)}" if t.due_in > 0 else f"overdue by {age(-t.due_in)}"
        out.print(plain(f"timer {t.name}: {when}, then it {t.meaning}"))
