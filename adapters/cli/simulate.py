"""`nicplug dst`: deterministic simulation testing of the controller against a
simulated cluster (not to be confused with `nicplug sim serve`, which serves a
simulated cluster to try nicplug and kubectl against). `nicplug simulate`, its older
name, still works and says so on stderr.

`--seed S` plays one schedule exactly (the same seed, faults and steps give the same
run); `--schedules N` plays seeds S, S+1, … S+N-1. A violation prints the seed and the
invariant, shrinks the schedule to the fewest steps that still fail, saves the shrunk
schedule (JSON, playable with `--schedule FILE`) and a tape of the controller's watch
events that `nicplug replay` plays. Exit codes: 0 no violation, 1 a violation, 2 bad
options.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from nicplug.adapters.cli.app import app


def simulate(
    ctx: typer.Context,
    seed: Annotated[int, typer.Option(help="The first seed")] = 0,
    schedules: Annotated[int, typer.Option(min=1, help="How many seeds to play")] = 1,
    faults: Annotated[str, typer.Option(
        help="Comma-separated fault classes (default: all): vm, user, migration, api, watch, "
             "crash, journal, lease, malformed, sdn")] = "",
    schedule: Annotated[Path | None, typer.Option(
        help="Play this saved schedule (JSON) instead of drawing one")] = None,
    out: Annotated[Path, typer.Option(
        help="Where a violation's shrunk schedule and tape are written")] = Path("."),
    shrink_budget: Annotated[int, typer.Option(min=0, help="Runs spent shrinking")] = 60,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Print every step")] = False,
) -> None:
    """Deterministic simulation testing: seeded fault schedules, violations shrunk.

    The real controller against a simulated cluster; a violation becomes a replayable tape."""
    if ctx.info_name == "simulate":
        print("nicplug: `simulate` is deprecated: say `nicplug dst`", file=sys.stderr)
    from nicplug.adapters.simulation.run import simulate as play
    from nicplug.adapters.simulation.schedule import FAULT_CLASSES, Schedule, draw
    from nicplug.adapters.simulation.shrink import shrink

    chosen = tuple(f.strip() for f in faults.split(",") if f.strip()) or FAULT_CLASSES
    unknown = [f for f in chosen if f not in FAULT_CLASSES]
    if unknown:
        print(f"error: unknown fault class {unknown[0]!r} (choose from "
              f"{', '.join(FAULT_CLASSES)})", file=sys.stderr)
        raise typer.Exit(2)
    plans: list[Schedule]
    if schedule is not None:
        try:
            plans = [Schedule.from_json(json.loads(schedule.read_text()))]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"error: cannot read the schedule {schedule}: {exc}", file=sys.stderr)
            raise typer.Exit(2) from None
    else:
        plans = [draw(s, faults=chosen) for s in range(seed, seed + schedules)]  # type: ignore[arg-type]
    failed = 0
    for plan in plans:
        outcome = play(plan)
        if verbose or len(plans) == 1:
            for index, step in enumerate(plan.steps):
                print(f"  {index:2d} {step.describe()}")
        if outcome.violation is None:
            print(f"seed {plan.seed}: ok ({outcome.steps_taken} steps, "
                  f"{outcome.virtual_seconds:.0f}s virtual, digest {outcome.digest})")
            continue
        failed += 1
        print(f"seed {plan.seed}: VIOLATION {outcome.violation.line()}")
        small = shrink(outcome, budget=shrink_budget)
        out.mkdir(parents=True, exist_ok=True)
        saved = out / f"dst-seed-{plan.seed}.json"
        saved.write_text(json.dumps(small.schedule.to_json(), indent=1) + "\n")
        tape = out / f"dst-seed-{plan.seed}.tape.jsonl"
        play(small.schedule, tape=tape)
        print(f"  shrunk to {len(small.schedule.steps)} steps "
              f"(from {len(plan.steps)}): {small.violation.line() if small.violation else ''}")
        for index, step in enumerate(small.schedule.steps):
            print(f"    {index:2d} {step.describe()}")
        tapes = sorted(str(p) for p in out.glob(f"dst-seed-{plan.seed}.tape.*.jsonl"))
        print(f"  schedule: {saved}")
        for path in tapes:
            print(f"  tape: {path}  (nicplug replay {path} --flavour "
                  f"{'kubevirt' if plan.setup.dialect == 'multus' else 'deckhouse'})")
    if failed:
        raise typer.Exit(1)


app.command("dst")(simulate)
app.command("simulate", hidden=True)(simulate)  # the older name, deprecated
