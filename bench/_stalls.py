"""Run the `nicplug` CLI with a sampler that names what stalls its event loop.

`python -m bench._stalls OUT ARGS...` runs `nicplug ARGS...` in this process. A thread
asks the event loop every `GAP` seconds to run a callback (`call_soon_threadsafe`: the
loop wakes at once unless it is busy) and samples the main thread's stack every
`INTERVAL` seconds until the callback has run: how late it runs is the stall the
controller's 10 ms ticker sees as lag, and the samples are what the loop ran meanwhile.
Each stall longer than `LONGER_THAN` is appended to OUT as one JSON line as soon as it
ends: its length, the main thread's CPU time in it (on a loaded machine a stall is
partly the process waiting for a CPU), when it began (seconds since start), and its
most sampled stacks (innermost frames last, asyncio's own frames left out), with how
many samples each. Each collection of the cyclic garbage collector that took longer
than `LONGER_THAN` is a line too (`"gc_ms"`, its CPU time, its generation, how many
objects it freed): a collection shows in the samples as whatever allocation
triggered it.

The sampler holds the GIL while it reads a stack, so the figures of a run under it
are a little worse than without; it names the slices, it does not measure them finely.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import runpy
import sys
import threading
import time
from collections import Counter
from types import FrameType
from typing import IO, Any

INTERVAL = 0.002
GAP = 0.025  # between two asks: a loop woken more often would never look idle to `settle`
LONGER_THAN = 0.030
DEPTH = 14  # frames kept of each stack, innermost last
_SKIPPED = ("asyncio" + os.sep, "threading.py", "runpy.py", "typer" + os.sep, "click" + os.sep)


def _where(frame: FrameType) -> str:
    code = frame.f_code
    return f"{os.path.basename(code.co_filename)}:{code.co_name}:{frame.f_lineno}"


def _stack(frame: FrameType | None) -> tuple[str, ...]:
    frames: list[str] = []
    while frame is not None:
        if not any(part in frame.f_code.co_filename for part in _SKIPPED):
            frames.append(_where(frame))
        frame = frame.f_back
    return tuple(reversed(frames[:DEPTH]))


def _idle(frame: FrameType | None) -> bool:
    """The loop waits for I/O or a timer: the innermost frame is the selector's wait."""
    if frame is None:
        return True
    code = frame.f_code
    return code.co_name == "select" and os.path.basename(code.co_filename) == "selectors.py"


class Sampler:
    def __init__(self, out: IO[str], main: int) -> None:
        self._out = out
        self._main = main
        self._began = time.perf_counter()
        self._lock = threading.Lock()
        self._gc_started = self._gc_cpu = 0.0
        self._cpu = time.pthread_getcpuclockid(main)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stop = threading.Event()

    def write(self, line: dict[str, Any]) -> None:
        with self._lock:
            self._out.write(json.dumps(line) + "\n")
            self._out.flush()

    def run(self) -> None:
        while not self.stop.wait(GAP):
            loop = self.loop
            if loop is None or not loop.is_running():
                continue
            ran = threading.Event()
            began, cpu_began = time.perf_counter(), time.clock_gettime(self._cpu)
            try:
                loop.call_soon_threadsafe(ran.set)
            except RuntimeError:  # the loop closed meanwhile
                continue
            stacks: Counter[tuple[str, ...]] = Counter()
            while not ran.wait(INTERVAL) and not self.stop.is_set():
                frame = sys._current_frames().get(self._main)
                if frame is not None and not _idle(frame):
                    stacks[_stack(frame)] += 1
            took = time.perf_counter() - began
            if took > LONGER_THAN:
                self.write({
                    "stall_ms": round(took * 1000, 1),
                    "cpu_ms": round((time.clock_gettime(self._cpu) - cpu_began) * 1000, 1),
                    "at_s": round(began - self._began, 2),
                    "samples": sum(stacks.values()),
                    "stacks": [{"n": n, "frames": list(s)} for s, n in stacks.most_common(5)],
                })

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
            self._gc_cpu = time.thread_time()
            return
        took = time.perf_counter() - self._gc_started
        if took > LONGER_THAN:
            self.write({"gc_ms": round(took * 1000, 1),
                        "cpu_ms": round((time.thread_time() - self._gc_cpu) * 1000, 1),
                        "generation": info.get("generation"),
                        "collected": info.get("collected"),
                        "at_s": round(self._gc_started - self._began, 2)})


def main(argv: list[str]) -> None:
    out_path, args = argv[0], argv[1:]
    sys.argv = ["nicplug", *args]
    with open(out_path, "w") as out:
        sampler = Sampler(out, threading.get_ident())

        class Policy(asyncio.DefaultEventLoopPolicy):
            def new_event_loop(self) -> asyncio.AbstractEventLoop:
                sampler.loop = super().new_event_loop()
                return sampler.loop

        asyncio.set_event_loop_policy(Policy())
        gc.callbacks.append(sampler.on_gc)
        thread = threading.Thread(target=sampler.run, name="stall sampler", daemon=True)
        thread.start()
        try:
            runpy.run_module("nicplug.adapters.cli", run_name="__main__")
        except SystemExit:
            pass
        finally:
            sampler.stop.set()
            thread.join()


if __name__ == "__main__":
    main(sys.argv[1:])
