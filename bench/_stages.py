"""Split a controller's sampled CPU into the stages of a hotplug's budget.

`python -m bench._stages FILE [--cpu-ms X]` reads py-spy's collapsed stacks (`bench
e2e --sample FILE`: every thread of `nicplug run`, sampled over the window whose CPU
`bench e2e` counts) and prints each stage's share of the samples, and with `--cpu-ms`
(the CPU ms per hotplug of the same run) its ms per hotplug. A stack belongs to the
stage of its innermost frame that names one: a log line inside a decision is the log
line's, pydantic inside an observation world assembly's; a stack through the Event
recorder is the Event's (its HTTP request too). Libraries used by several stages
(aiohttp, asyncio, json) name none, so their frames count for the caller's stage; a
stack that reaches no stage is the event loop's own (select, callbacks, transports).

Sampling without pausing the process skews nothing by call count, unlike cProfile;
its error is the sample count's (a stage of 1% over 2,000 samples is ±0.2%). py-spy
counts a thread that waits for a CPU, or in the disk (the journal's COMMIT, left out
here), as active: the shares are of the time each stage held or wanted a CPU, which on
a loaded machine is close to, not exactly, its share of the CPU time.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from functools import cache
from pathlib import Path

STAGES = (
    "watch decode and projection",
    "world assembly",
    "decision (and the runtime)",
    "journal",
    "executor and HTTP",
    "Events",
    "logs and metrics",
    "full collections (heap.py)",
    "event loop and the rest",
)

# (path fragment, stage), tried in order on each frame's file from the leaf up
RULES: tuple[tuple[str, str], ...] = (
    ("adapters/heap.py", "full collections (heap.py)"),
    ("logging/", "logs and metrics"),
    ("prometheus_client/", "logs and metrics"),
    ("adapters/log_lines.py", "logs and metrics"),
    ("core/observability.py", "logs and metrics"),
    ("core/loop_lag.py", "logs and metrics"),
    ("adapters/durations.py", "logs and metrics"),
    ("kube/requests_seen.py", "logs and metrics"),
    ("aiosqlite/", "journal"),
    ("sqlite3/", "journal"),
    ("engine/journal.py", "journal"),
    ("engine/sqlite_", "journal"),
    ("engine/outbox.py", "journal"),
    ("engine/commit_retry.py", "journal"),
    ("engine/schema.py", "journal"),
    ("machines/", "decision (and the runtime)"),
    ("engine/", "decision (and the runtime)"),
    ("core/executor/", "executor and HTTP"),
    ("kube/calls.py", "executor and HTTP"),
    ("kube/wire.py", "executor and HTTP"),
    ("kube/client.py", "executor and HTTP"),
    ("kube/hotplug_edits.py", "executor and HTTP"),
    ("kube/lease", "executor and HTTP"),
    ("kubernetes_asyncio/", "executor and HTTP"),
    ("translate/projection.py", "watch decode and projection"),
    ("kube/informer.py", "watch decode and projection"),
    ("kube/encoded.py", "watch decode and projection"),
    ("pydantic", "world assembly"),
    ("kube/translate/", "world assembly"),
    ("core/worldview.py", "world assembly"),
    ("core/observing.py", "world assembly"),
    ("adapters/sdn/", "world assembly"),
    ("core/controller.py", "world assembly"),
)

# a stack through the Event recorder is the Event's, its HTTP request included
ANYWHERE: tuple[tuple[str, str], ...] = (("kube/events.py", "Events"),)
# tried only when no frame of a stack names a stage: aiohttp's client side of a request
# (the watches' reads run inside the informers' frames)
FALLBACK: tuple[tuple[str, str], ...] = (
    ("aiohttp/client", "executor and HTTP"),
    ("aiohttp/connector.py", "executor and HTTP"),
    ("aiohttp/http_writer.py", "executor and HTTP"),
    ("aiohttp/payload.py", "executor and HTTP"),
    ("aiohttp/tracing.py", "executor and HTTP"),
    ("aiohappyeyeballs/", "executor and HTTP"),
)

FRAME = re.compile(r"\(([^():]+):\d+\)$")
LINE = re.compile(r"\(([^():]+):(\d+)\)$")
# leaf frames that wait rather than work, which py-spy may still count as active: the
# journal thread's wait on its queue, the loop's wait in select
IDLE = ("(aiosqlite/core.py:59)", "(threading.py:", "(queue.py:")
# a leaf on a line of ours that waits for the disk: the journal's COMMIT (its fsync)
WAITS_FOR_DISK = ('"COMMIT"',)
ROOT = Path(__file__).resolve().parent.parent


def stage_of(stack: list[str]) -> str:
    for rules in (ANYWHERE, RULES, FALLBACK):
        for frame in reversed(stack):
            found = FRAME.search(frame)
            if not found:
                continue
            path = found.group(1)
            for fragment, stage in rules:
                if fragment in path:
                    return stage
    return "event loop and the rest"


@cache
def _source_line(path: str, line: int) -> str:
    try:
        return (ROOT / path).read_text().splitlines()[line - 1]
    except (OSError, IndexError):
        return ""


def idle(leaf: str) -> bool:
    if any(fragment in leaf for fragment in IDLE):
        return True
    found = LINE.search(leaf)
    return found is not None and any(
        wait in _source_line(found.group(1), int(found.group(2))) for wait in WAITS_FOR_DISK)


def split(lines: list[str]) -> tuple[Counter[str], int]:
    counts: Counter[str] = Counter()
    for line in lines:
        stack_text, _, count = line.rstrip("\n").rpartition(" ")
        if not stack_text or not count.isdigit():
            continue
        if idle(stack_text.rpartition(";")[2]):
            continue
        counts[stage_of(stack_text.split(";"))] += int(count)
    return counts, sum(counts.values())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench._stages")
    parser.add_argument("file", type=Path)
    parser.add_argument("--cpu-ms", type=float, default=None,
                        help="CPU ms per hotplug of the sampled run")
    args = parser.parse_args(argv)
    counts, total = split(args.file.read_text().splitlines())
    print(f"{total} samples")
    for stage in STAGES:
        share = counts[stage] / max(total, 1)
        ms = f"  {share * args.cpu_ms:6.2f} ms" if args.cpu_ms is not None else ""
        print(f"  {stage:<30} {share * 100:5.1f}%{ms}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
