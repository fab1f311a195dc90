"""Plays the demo: starts the worlds, runs every scenario at once, shows the board live,
checks each expected outcome and prints a verdict.

The driver acts as a user would with kubectl: merge patches of the VM objects over
the simulated API server's HTTP API, through the same Kubernetes client the controller
uses (on upstream KubeVirt, of the KubeVirt VM's template, as its user guide does it).
The verdict comes from the controllers' journals, never from the driver's own
bookkeeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from nicplug.adapters.demo.board import Board, Row, table
from nicplug.adapters.demo.scenarios import (
    SCENARIOS,
    WORLDS,
    Outcome,
    Scenario,
    matches,
    worlds_in,
)
from nicplug.adapters.demo.worlds import RunningWorld, start_world, stop_world
from nicplug.adapters.kube import hotplug_edits as edits
from nicplug.adapters.kube import resources as kinds
from nicplug.adapters.kube.calls import KubeCalls
from nicplug.adapters.kube.client import ApiConnection, ClientSettings, connect
from nicplug.adapters.kube.flavour import UPSTREAM
from nicplug.adapters.kube.resources import KindRef
from nicplug.adapters.sdn.port import DEFAULT_CLUSTER_NAD_NAMESPACE
from nicplug.machines.graph import TERMINAL

MERGE: Final = "application/merge-patch+json"


class OutcomeTimeout(Exception):
    pass


@dataclass
class WorldDriver:
    """The user's hands in one world."""

    name: str
    calls: KubeCalls
    board: Board
    deadline: float
    waits: list[str] = field(default_factory=list)
    edits_template: bool = False
    """Upstream KubeVirt: the user edits the KubeVirt VM (no Deckhouse VM exists)."""

    @property
    def _vm_kind(self) -> KindRef:
        return UPSTREAM.kvvms if self.edits_template else kinds.VIRTUAL_MACHINES

    async def _edit_template(self, vm: str, edit: Callable[[dict[str, Any]], Any]) -> None:
        namespace, _, name = vm.partition("/")
        body = await self.calls.get(UPSTREAM.kvvms, namespace, name)
        patch = edit(body)
        if patch is not None:
            await self.calls.patch(UPSTREAM.kvvms, namespace, name, patch, content_type=MERGE)

    async def _networks(self, vm: str) -> list[dict[str, Any]]:
        namespace, _, name = vm.partition("/")
        body = await self.calls.get(kinds.VIRTUAL_MACHINES, namespace, name)
        networks = (body.get("spec") or {}).get("networks") or [{"type": "Main", "id": 1}]
        return [dict(n) for n in networks]

    async def _set_networks(self, vm: str, networks: list[dict[str, Any]]) -> None:
        namespace, _, name = vm.partition("/")
        patch = {"spec": {"networks": networks}}
        await self.calls.patch(kinds.VIRTUAL_MACHINES, namespace, name, patch, content_type=MERGE)

    async def add_network(self, vm: str, type_: str, name: str) -> None:
        if self.edits_template:  # as the KubeVirt user guide does it; the user names it
            await self._edit_template(vm, lambda kvvm: edits.plug(
                kvvm, interface=name, network_name=edits.nad_name(
                    kvvm, type_, name, cluster_nad_namespace=DEFAULT_CLUSTER_NAD_NAMESPACE)))
            return
        networks = await self._networks(vm)
        next_id = max((int(n.get("id") or 0) for n in networks), default=1) + 1
        networks.append({"type": type_, "name": name, "id": next_id})
        await self._set_networks(vm, networks)

    async def remove_network(self, vm: str, identity: str) -> None:
        if self.edits_template:  # state: absent; KubeVirt unplugs it, then drops it
            def absent(kvvm: dict[str, Any]) -> Any:
                interface = edits.interface_of(
                    kvvm, identity, cluster_nad_namespace=DEFAULT_CLUSTER_NAD_NAMESPACE)
                return None if interface is None else edits.unplug(kvvm, interface=interface)

            await self._edit_template(vm, absent)
            return
        networks = await self._networks(vm)
        kept = [
            n for n in networks
            if ("Main" if n.get("type") == "Main" else f"{n.get('type')}/{n.get('name')}")
            != identity
        ]
        await self._set_networks(vm, kept)

    async def set_approval(self, vm: str, mode: str) -> None:
        namespace, _, name = vm.partition("/")
        patch = {"spec": {"disruptions": {"restartApprovalMode": mode}}}
        await self.calls.patch(kinds.VIRTUAL_MACHINES, namespace, name, patch, content_type=MERGE)

    async def set_label(self, vm: str, key: str, value: str) -> None:
        namespace, _, name = vm.partition("/")
        patch = {"metadata": {"labels": {key: value}}}
        await self.calls.patch(self._vm_kind, namespace, name, patch, content_type=MERGE)

    async def wait_for(self, outcome: Outcome, *, states: frozenset[str]) -> None:
        while time.monotonic() < self.deadline:
            for row in self.board.rows:
                if row["world"] == self.name and any(
                    matches(Outcome(outcome.vm, outcome.network, outcome.direction, s), row)
                    for s in states
                ):
                    return
            await asyncio.sleep(0.1)
        raise OutcomeTimeout(f"{outcome.vm} never reached {outcome.label()}")


def _met(outcome: Outcome, world: str, rows: Sequence[Row]) -> bool:
    return any(r["world"] == world and matches(outcome, r) for r in rows)


async def play(directory: Path, console: Console, *, budget: float = 150.0,
               mode: str = "observe") -> int:
    """Run the demo in `directory`; 0 when every outcome was reached, 1 otherwise.
    `mode`: whether the live world's Deckhouse hot-plugs (observe) or nicplug does."""
    started = time.monotonic()
    console.print(f"[bold]nicplug demo[/] — journals and logs in {directory}")
    specs = worlds_in(mode)
    worlds: list[RunningWorld] = []
    connections: list[ApiConnection] = []
    board = Board({w.name: directory / f"{w.name}.db" for w in specs})
    try:
        with console.status("starting simulated clusters and controllers…"):
            worlds = list(await asyncio.gather(*(start_world(w, directory) for w in specs)))
        for w in worlds:
            said = "" if w.spec.dialect != "deckhouse" else (
                "; Deckhouse hot-plugs, nicplug observes" if w.spec.mode == "observe"
                else "; nicplug drives the hotplug")
            console.print(f"  [green]✓[/] world [bold]{w.spec.name}[/]: {w.spec.title}{said} "
                          f"(controller metrics {w.metrics_url}/metrics)")
        deadline = time.monotonic() + budget
        drivers: dict[str, WorldDriver] = {}
        for w in worlds:
            connection = await connect(ClientSettings(kubeconfig=w.kubeconfig))
            connections.append(connection)
            drivers[w.spec.name] = WorldDriver(w.spec.name, KubeCalls(connection), board,
                                               deadline, edits_template=w.spec.dialect == "multus")
        code = await _run_scenarios(SCENARIOS, drivers, board, console, deadline)
    finally:
        await board.close()
        for connection in connections:
            await connection.close()
        await asyncio.gather(*(stop_world(w) for w in worlds))
    console.print(f"finished in {time.monotonic() - started:.0f}s")
    _print_queries(console, directory)
    return code


async def _run_scenarios(
    scenarios: Sequence[Scenario], drivers: dict[str, WorldDriver], board: Board,
    console: Console, deadline: float,
) -> int:
    expected = [(s, o) for s in scenarios for o in s.outcomes]
    progress = Progress(TextColumn("outcomes reached"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn())
    task = progress.add_task("outcomes", total=len(expected))
    errors: list[str] = []

    async def one(s: Scenario) -> None:
        try:
            await s.steps(drivers[s.world])
        except Exception as exc:  # a scenario's failure is reported, the others go on
            errors.append(f"{s.title}: {exc}")

    runs = [asyncio.create_task(one(s)) for s in scenarios]
    with Live(console=console, refresh_per_second=4, transient=False) as live:
        while True:
            rows = await board.refresh()
            reached = sum(_met(o, s.world, rows) for s, o in expected)
            progress.update(task, completed=reached)
            live.update(Group(table(rows), progress))
            if (reached == len(expected) and all(r.done() for r in runs)) \
                    or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.25)
    for r in runs:
        r.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.gather(*runs, return_exceptions=True)
    return _verdict(expected, board.rows, errors, console)


def _verdict(
    expected: Sequence[tuple[Scenario, Outcome]], rows: Sequence[Row], errors: Sequence[str],
    console: Console,
) -> int:
    from rich.table import Table

    summary = Table(title="summary")
    for column in ("world", "scenario", "expected", "observed"):
        summary.add_column(column)
    failed = 0
    for s, o in expected:
        seen = [r for r in rows if r["world"] == s.world and r["vm"] == o.vm
                and r["network"] == o.network and r["direction"] == o.direction]
        ok = _met(o, s.world, rows)
        failed += not ok
        observed = ", ".join(
            f"{r['state']}" + (f" ({r['reason']})" if r["reason"] else "") for r in seen
        ) or "no operation"
        mark = "[green]✓[/]" if ok else "[red]✗[/]"
        summary.add_row(s.world, s.title, o.label(), f"{mark} {observed}")
    console.print(summary)
    for e in errors:
        console.print(f"[red]scenario error[/] {e}")
    if failed or errors:
        console.print(f"[red bold]{failed} outcome(s) not reached[/]")
        return 1
    console.print("[green bold]every outcome reached[/]")
    return 0


def _print_queries(console: Console, directory: Path) -> None:
    """The query commands, ready to paste, naming VMs and networks each world played."""
    console.print("\nquery the journals (read-only, safe while a controller runs):")
    for w in WORLDS:
        db = directory / f"{w.name}.db"
        played = [o for s in SCENARIOS if s.world == w.name for o in s.outcomes]
        commands = [f"nicplug status --journal {db}"]
        if played:
            busiest = max(played, key=lambda o: sum(p.vm == o.vm for p in played))
            waiting = next((o for o in played if o.state not in TERMINAL), played[0])
            commands += [
                f"nicplug history {busiest.vm} --journal {db}",
                f"nicplug explain {waiting.vm} {waiting.network} --journal {db}",
            ]
        commands.append(f"nicplug stuck --older-than 1m --journal {db}")
        console.print(f"  [bold]{w.name}[/]")
        for command in commands:
            console.print(f"    {command}", soft_wrap=True, markup=False)
    console.print("  --json on any of them for scripts; `nicplug journal verify|export` "
                  "checks a journal or writes its events as JSON lines", soft_wrap=True)

