"""What a replay prints: the `--json` document of DESIGN §7, a rich report for people,
and the comparison of the effects with the tape's `EFFECT` lines.

The JSON holds only `operations` and `effects`, in a fixed order (operations by VM,
network, direction, attempt; effects in the order they were issued), with times in one
spelling, so the same replay is the same bytes. Nothing here replays or decides.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from nicplug.adapters.core.replaying import ReplayResult
from nicplug.adapters.tapes.times import format_at


def replay_document(result: ReplayResult) -> dict[str, Any]:
    return {
        "operations": [
            {"vm": r.vm, "network": r.network, "direction": r.direction, "state": r.state,
             "reason": r.reason, "history": list(r.history)}
            for r in result.operations
        ],
        "effects": [
            {"type": e.type, "target": e.target, "at": format_at(e.at)} for e in result.effects
        ],
    }


def replay_json(result: ReplayResult) -> bytes:
    return orjson.dumps(replay_document(result), option=orjson.OPT_INDENT_2) + b"\n"


@dataclass(frozen=True, slots=True)
class EffectDifference:
    type: str
    target: str
    taped: int
    replayed: int

    def describe(self) -> str:
        return (f"{self.type} {self.target}: {self.taped} on the tape, "
                f"{self.replayed} in the replay")


def compare_effects(result: ReplayResult) -> list[EffectDifference]:
    """Where the replay's effects differ from the tape's, as counts per (type, target)
    (times are not compared: a live controller acts milliseconds after what it saw)."""
    taped = Counter((e.type, e.target) for e in result.taped)
    replayed = Counter((e.type, e.target) for e in result.effects)
    order = list(dict.fromkeys([*taped, *replayed]))
    return [
        EffectDifference(type_, target, taped[(type_, target)], replayed[(type_, target)])
        for type_, target in order
        if taped[(type_, target)] != replayed[(type_, target)]
    ]


def print_report(result: ReplayResult, console: Console) -> None:
    stats = result.stats
    span = ""
    if result.started is not None and result.ended is not None:
        span = f" from {format_at(result.started)} to {format_at(result.ended)}"
    console.print(f"[bold]replay[/]: {stats.events} events{span}, "
                  f"{result.observations} observations, {len(result.effects)} effects")
    skipped = [
        f"{stats.bookmarks} bookmarks" if stats.bookmarks else "",
        f"{stats.errors} ERROR events" if stats.errors else "",
        f"{stats.unselected} pods of no VM" if stats.unselected else "",
        f"{stats.effects} EFFECT lines" if stats.effects else "",
    ]
    unknown = sum(stats.unknown_kinds.values())
    if unknown:
        kinds = ", ".join(f"{k} ×{n}" for k, n in sorted(stats.unknown_kinds.items()))
        skipped.append(f"{unknown} objects of unknown kinds ({kinds})")
    if any(skipped):
        console.print("not fed: " + "; ".join(s for s in skipped if s))
    console.print(_operations(result))
    if result.effects:
        console.print(_effect_counts(result.effects_by_type()))
    for m in result.malformed:
        console.print(f"[yellow]malformed line {m.line}[/]: {escape(m.problem)}")
    if stats.malformed > len(result.malformed):
        console.print(f"[yellow]… {stats.malformed - len(result.malformed)} more malformed "
                      "lines[/]")
    for m in result.backwards:
        console.print(f"[yellow]line {m.line}[/]: {escape(m.problem)}")
    if result.backwards_count > len(result.backwards):
        console.print(f"[yellow]… {result.backwards_count - len(result.backwards)} more lines "
                      "whose time goes backwards[/]")
    if result.stopped_at_line is not None:
        console.print(f"stopped at line {result.stopped_at_line}: after --until")
    for vm in sorted(result.held):
        console.print(f"[yellow]held still[/] (unreadable objects at the end): {vm}")
    for error in result.errors:
        console.print(f"[red]error[/] {error}")


def _operations(result: ReplayResult) -> Table:
    table = Table(title="operations")
    for column in ("vm", "network", "direction", "attempt", "state", "reason", "history"):
        table.add_column(column)
    for r in result.operations:
        table.add_row(r.vm, r.network, r.direction, str(r.attempt), r.state, r.reason or "",
                      " → ".join(r.history))
    return table


def _effect_counts(counts: Iterable[tuple[str, int]]) -> Table:
    table = Table(title="effects")
    table.add_column("type")
    table.add_column("count", justify="right")
    for type_, count in counts:
        table.add_row(type_, str(count))
    return table
