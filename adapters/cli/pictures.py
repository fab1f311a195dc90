"""Pictures of operations, in mermaid: one operation on its machine, a VM's operations
in time.

* `operation_diagram` — `nicplug diagram`'s drawing of the operation's machine (its
  flavour and direction, `diagram.render`), restyled: the states the operation went
  through `s_previous`, the one it is in `s_active`, every other `s_default`
  (`explain --diagram`).
* `timeline` — a mermaid `gantt` of a VM's operations, one section per operation, one
  bar per state from the step that entered it to the next (the current one of a live
  operation up to now, a terminal one as a milestone), failures marked `crit`
  (`history --format mermaid`).

Pure functions of what the queries answer; nothing is read or decided here.
"""

from __future__ import annotations

from nicplug.adapters.cli.diagram import render
from nicplug.adapters.queries.records import OperationSummary, Timeline
from nicplug.machines.operation import INITIAL_STATE, OPENED, TRANSITIONED

_CLASS = "  class "


def operation_diagram(op: OperationSummary) -> str:
    """The operation's machine with its path and its current state highlighted."""
    drawn = render(op.direction, "mermaid", op.flavour).decode().splitlines()
    seen = set(op.history)
    lines = []
    for line in drawn:
        if line.startswith(_CLASS):
            state = line[len(_CLASS):].split()[0]
            style = ("s_active" if state == op.state else
                     "s_previous" if state in seen else "s_default")
            line = f"{_CLASS}{state} {style}"
        lines.append(line)
    title = f"title: {op.vm} {op.network} {op.direction}#{op.attempt}: {op.state}"
    if len(lines) > 2 and lines[0] == lines[2] == "---":
        lines[1] = title
    return "\n".join(lines) + "\n"


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def _spans(line: Timeline, now: float) -> list[tuple[str, float, float | None]]:
    """(state, entered, left or None for a terminal state) of each state in turn."""
    entered: list[tuple[str, float]] = []
    for step in line.steps:
        if step.type == OPENED:
            entered.append((INITIAL_STATE, step.at))
        elif step.type == TRANSITIONED and step.to:
            entered.append((step.to, step.at))
    spans: list[tuple[str, float, float | None]] = []
    for i, (state, at) in enumerate(entered):
        if i + 1 < len(entered):
            spans.append((state, at, entered[i + 1][1]))
        else:
            spans.append((state, at, None if line.operation.terminal else max(now, at)))
    return spans


def timeline(vm: str, lines: list[Timeline], *, now: float) -> str:
    """A mermaid gantt of the operations in `lines` (the same VM's)."""
    out = ["gantt", f"  title nicplug operations of {vm}", "  dateFormat x",
           "  axisFormat %H:%M:%S"]
    for line in lines:
        op = line.operation
        out.append(f"  section {op.network} {op.direction}#{op.attempt}")
        spans = _spans(line, now)
        for n, (state, start, end) in enumerate(spans):
            task = f"op{len(out)}"
            if end is None:
                tag = "crit, milestone" if state == "Failed" else "milestone"
                out.append(f"  {state} :{tag}, {task}, {_ms(start)}, {_ms(start)}")
                continue
            live = n == len(spans) - 1 and not op.terminal
            tag = "active" if live else "done"
            # a bar of at least a millisecond, so that a step taken at once still shows
            out.append(f"  {state} :{tag}, {task}, {_ms(start)}, {max(_ms(end), _ms(start) + 1)}")
    return "\n".join(out) + "\n"
