"""Run the `nicplug` CLI with a sampler that names what stalls its event loop.

`python -m bench._stalls OUT ARGS...` runs `nicplug ARGS...` in this process; a thread
samples the main thread's stack every `INTERVAL` seconds. A stall is a stretch during
which the main thread never waits in the selector (the event loop runs callbacks, one
after another, without looking for I/O or timers): that is what the controller's 10 ms
ticker sees as lag. Each stall longer than `LONGER_THAN` is appended to OUT as one JSON
line as soon as it ends: its length, when it began (seconds since start), and its most
sampled stacks (innermost frames last, asyncio's own frames left out), with how many
samples each. Each collection of the cyclic garbage collector that took longer than
`LONGER_THAN` is a line too (`"gc"`: its generation and length): a collection shows in
the samples as whatever allocation triggered it.

The sampler holds the GIL while it reads a stack, so the figures of a run under it
are a little worse than without; it names the slices, it does not measure them finely.
"""

from __future__ import annotations

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
        self._gc_started = 0.0
        self.stop = threading.Event()

    def write(self, line: dict[str, Any]) -> None:
        with self._lock:
            self._out.write(json.dumps(line) + "\n")
            self._out.flush()

    def run(self) -> None:
        stall_began: float | None = None
        stacks: Counter[tuple[str, ...]] = Counter()
        while not self.stop.wait(INTERVAL):
            frame = sys._current_frames().get(self._main)
            now = time.perf_counter()
            if _idle(frame):
                if stall_began is not None and now - stall_began > LONGER_THAN:
                    self.write({
                        "stall_ms": round((now - stall_began) * 1000, 1),
                        "at_s": round(stall_began - self._began, 2),
                        "samples": sum(stacks.values()),
                        "stacks": [{"n": n, "frames": list(s)}
                                   for s, n in stacks.most_common(5)],
                    })
                stall_began = None
                stacks.clear()
                continue
            if stall_began is None:
                stall_began = now
            stacks[_stack(frame)] += 1

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
            return
        took = time.perf_counter() - self._gc_started
        if took > LONGER_THAN:
            self.write({"gc_ms": round(took * 1000, 1), "generation": info.get("generation"),
                        "at_s": round(self._gc_started - self._began, 2)})


def main(argv: list[str]) -> None:
    out_path, args = argv[0], argv[1:]
    sys.argv = ["nicplug", *args]
    with open(out_path, "w") as out:
        sampler = Sampler(out, threading.get_ident())
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
