"""`python -m bench dst [--quick] [--schedules N] [--workers W] [--first S]`: how fast the
deterministic simulation explores, and what it finds.

Plays N seeded schedules (default 100,000; `--quick`: 1,000) across W worker processes
(default: the CPU count), each a whole run of controller and simulated cluster on a
virtual clock. Prints schedules per minute (wall clock, all workers together), the
distribution of steps per schedule and of virtual seconds per run, and the violations
by invariant; last, one JSON line: `schedules`, `violations`, `schedules_per_min`, the
step quantiles and the violations by invariant. `--record FILE` writes every failing
seed with its invariant (the format of `tests/dst/known_violations.json`).

What asyncio says while a schedule plays or is torn down (a task destroyed while
pending, an exception never retrieved, an unclosed session) is not a violation, but it
is a defect of the teardown: it is counted per seed (`said`), its first line printed
with the seed, and kept under `said` in the record, instead of going to stderr with no
seed beside it. (`simulate` collects the run's garbage before it returns, so what a run
leaves is said within its own seed.)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

Played = tuple[int, int, float, "str | None", list[str]]


class _Said(logging.Handler):
    """The first line of each record asyncio logs while one schedule plays."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        lines = record.getMessage().splitlines()
        text = lines[0] if lines else ""
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            text += f" ({type(error).__name__}: {error})"
        self.lines.append(text)


def _play(seed: int) -> Played:
    from nicplug.adapters.simulation.run import simulate
    from nicplug.adapters.simulation.schedule import draw

    said = _Said()
    logger = logging.getLogger("asyncio")
    logger.addHandler(said)
    try:
        schedule = draw(seed)
        outcome = simulate(schedule)
    finally:
        logger.removeHandler(said)
    return (seed, len(schedule.steps), outcome.virtual_seconds,
            outcome.violation.invariant if outcome.violation else None, said.lines)


def _quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return {"min": ordered[0], "p50": at(0.5), "p90": at(0.9), "max": ordered[-1]}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench dst")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--schedules", type=int, default=None)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--record", default=None,
                        help="write each failing seed's invariant here (known_violations.json)")
    args = parser.parse_args(argv)
    count = args.schedules or (1_000 if args.quick else 100_000)
    seeds = range(args.first, args.first + count)
    started = time.perf_counter()
    results: list[Played] = []
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for result in pool.map(_play, seeds, chunksize=8):
            results.append(result)
    elapsed = time.perf_counter() - started
    steps = [float(r[1]) for r in results]
    virtual = [r[2] for r in results]
    found = Counter(r[3] for r in results if r[3] is not None)
    per_min = len(results) / elapsed * 60
    print(f"{len(results)} schedules in {elapsed:.1f}s on {args.workers} workers: "
          f"{per_min:.0f} schedules/min")
    print(f"steps per schedule: {_quantiles(steps)} (mean {statistics.mean(steps):.1f})")
    print(f"virtual seconds per run: {_quantiles(virtual)}")
    print(f"violations: {sum(found.values())}")
    for invariant, n in found.most_common():
        first = next(r[0] for r in results if r[3] == invariant)
        print(f"  {invariant:24s} {n:6d}  (first: seed {first})")
    said = {r[0]: r[4] for r in results if r[4]}
    print(f"seeds that left asyncio messages: {len(said)}")
    for seed, lines in said.items():
        print(f"  seed {seed}: {len(lines)}: {'; '.join(sorted(set(lines)))[:300]}")
    if args.record:
        with open(args.record, "w") as sink:
            json.dump({"about": f"draw(seed) with every fault class, seeds {args.first}.."
                                f"{args.first + count - 1}: the invariant each failing seed "
                                f"violates (seeds not listed pass)",
                       "checked": count,
                       "seeds": {str(r[0]): r[3] for r in results if r[3] is not None},
                       "said": {str(seed): lines for seed, lines in said.items()}},
                      sink, indent=1)
            sink.write("\n")
    print(json.dumps({
        "schedules": len(results), "violations": sum(found.values()),
        "schedules_per_min": round(per_min, 1), "steps": _quantiles(steps),
        "by_invariant": dict(found), "said": len(said),
    }))
    return 0
