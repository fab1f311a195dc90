"""Run the `nicplug` CLI with `tracemalloc` on; SIGUSR1 writes where its memory is.

`python -m bench._traced OUT ARGS...` runs `nicplug ARGS...` tracing every allocation
(one frame each). On SIGUSR1 it writes to OUT the live Python allocations grouped by
file and by line, largest first, as JSON (`{"traced_mb", "by_file", "by_line"}`), so a
benchmark can ask a running controller where its memory is without stopping it.
Tracing costs CPU and memory of its own (the RSS of a traced process is not the one to
report; the figures are the allocations themselves).
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import signal
import sys
import tracemalloc
from types import FrameType

TOP = 40
FRAMES = int(os.environ.get("BENCH_TRACE_FRAMES", "1"))
"""Frames kept per allocation; over 1, the JSON also groups by whole traceback."""


def _top(snapshot: tracemalloc.Snapshot, key: str) -> list[tuple[str, float, int]]:
    stats = snapshot.statistics(key)[:TOP]
    rows = []
    for stat in stats:
        frame = stat.traceback[0]
        where = frame.filename if key == "filename" else f"{frame.filename}:{frame.lineno}"
        rows.append((where, round(stat.size / 2**20, 2), stat.count))
    return rows


def _traces(snapshot: tracemalloc.Snapshot) -> list[tuple[list[str], float, int]]:
    return [([f"{f.filename}:{f.lineno}" for f in stat.traceback],
             round(stat.size / 2**20, 2), stat.count)
            for stat in snapshot.statistics("traceback")[:TOP]]


def main(argv: list[str]) -> None:
    out, args = argv[0], argv[1:]
    sys.argv = ["nicplug", *args]

    def dump(_signum: int, _frame: FrameType | None) -> None:
        snapshot = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__)])
        traced, _peak = tracemalloc.get_traced_memory()
        with open(out + ".part", "w") as f:
            json.dump({"traced_mb": round(traced / 2**20, 1),
                       "by_file": _top(snapshot, "filename"),
                       "by_line": _top(snapshot, "lineno"),
                       "by_trace": _traces(snapshot) if FRAMES > 1 else []}, f, indent=1)
        os.replace(out + ".part", out)  # whole, or not there

    signal.signal(signal.SIGUSR1, dump)
    tracemalloc.start(FRAMES)
    with contextlib.suppress(SystemExit):
        runpy.run_module("nicplug.adapters.cli", run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
