"""The informers' caches out of the cyclic garbage collector's way.

CPython's collector walks every tracked container of the oldest generation each time
that generation has grown by a quarter. At 10,000 VMs the cached objects and the
state derived from them are hundreds of thousands of containers: each full
collection then blocks the event loop for 0.4-0.7 s, and the initial sync, which
only grows the heap, triggers one after another. The cache holds JSON (no reference
cycles: refcounting frees it) and lives as long as the process, so it does not need
the collector: the collector is held off while the lists are loaded and the first
world of every VM is assembled and decided (what stays of that: the live VMs' memo
and state; an idle VM's leave memory once decided, `Runtime(rest=True)`), and what
they built is then frozen (`gc.freeze`: moved to a generation the collector
never walks). Freezing after the lists alone left those to the collector: full
collections of 0.2-0.5 s, one after another, while the first worlds were assembled.
Objects frozen still die by refcount; only a reference cycle among them would
outlive its use, and the load creates none that matter. A load that does not end
(an API server down for hours: retries, each error a traceback cycle) gets the
collector back after `at_most` seconds.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol


class Cancellable(Protocol):
    def cancel(self) -> None: ...


Later = Callable[[float, Callable[[], None]], Cancellable]
"""`loop.call_later`, or a test's stand-in."""


@contextmanager
def frozen_after_full_collections() -> Iterator[None]:
    """Within the block, what survives each full collection is frozen at once.

    After the start, every object that outlives a few young collections is promoted to
    the oldest generation, and a full collection walks all of them: at 10,000 VMs the
    state built since the start (the plugged VMs' objects and records, timers, tasks)
    grew past 200,000 objects in one burst of 1,000 hotplugs, and each full collection
    took 0.1-0.3 s of CPU, growing with it. What a full collection kept was reachable
    then; frozen, it is never walked again, so each full collection walks only what
    arrived since the last. The price is the one `loading_long_lived` pays: a frozen
    object that later becomes part of a reference cycle is never freed (the full
    collections of that burst found no cycle at all among the long-lived objects;
    `nicplug_gc_frozen_objects` shows what stays frozen). For a controller process
    only: a test process that runs many controllers would keep their cycles."""

    def freeze(phase: str, info: dict[str, Any]) -> None:
        if phase == "stop" and info.get("generation") == 2:
            gc.freeze()

    gc.callbacks.append(freeze)
    try:
        yield
    finally:
        gc.callbacks.remove(freeze)


async def full_collections_in_small_steps(
    *, every: int = 1, period: float = 0.5, thaw_after: int = 7200,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    on_thaw: Callable[[int], None] | None = None,
) -> None:
    """Run a full collection whenever `every` young (generation 1) collections happened
    since the last, checked each `period` seconds; until cancelled. With
    `frozen_after_full_collections`, a full collection walks what arrived since the
    last one: left to CPython's own rule (a quarter more than the oldest generation
    held), a burst of hotplugs at 10,000 VMs gathered 110,000-130,000 objects per
    collection, 0.13-0.34 s of CPU each; after every four young collections, 40,000-
    80,000 objects, 40-100 ms; after every two, about half. After every one (the
    default): at 1,000 + 10,000 VMs in `bench e2e` (a load of 8-9 on 2 cores) full
    collections of 24 ms of CPU at the median and 52 ms at most, where after every two
    they took 37 and 79 ms; 53 of them instead of 28, 1.3 s of CPU in all instead of
    1.15 s (about 1% of the run's CPU more, for stalls half as long).

    Every `thaw_after` periods (an hour by default) everything frozen is given back to
    the collector before the full collection: a cycle that formed among frozen objects
    since (a finished task's exception and its traceback, say) is freed then, so what
    freezing can keep is bounded by an hour of such cycles, not the process's life. That
    one collection walks the whole heap: at 10,000 VMs a stall of the order of the
    0.4-0.7 s the module docstring names, once an hour. `on_thaw(count)` is told how
    many objects were frozen just before: counting them walks every one
    (`gc.get_freeze_count`, 0.05-0.2 s at 10,000 VMs), so it is done only then, within
    the hourly stall, never when metrics are scraped."""
    last = gc.get_stats()[1]["collections"]
    periods = 0
    while True:
        await sleep(period)
        periods += 1
        if periods >= thaw_after:
            periods = 0
            if on_thaw is not None:
                on_thaw(gc.get_freeze_count())
            gc.unfreeze()
            gc.collect()
            last = gc.get_stats()[1]["collections"]
        elif gc.get_stats()[1]["collections"] - last >= every:
            gc.collect()
            last = gc.get_stats()[1]["collections"]


@contextmanager
def loading_long_lived(*, at_most: float, later: Later) -> Iterator[None]:
    """Hold the cyclic collector off while the block loads long-lived objects (for at
    most `at_most` seconds), then freeze everything alive and give the collector back
    (as it was)."""
    was_enabled = gc.isenabled()
    gc.disable()
    giving_back = later(at_most, gc.enable) if was_enabled else None
    try:
        yield
    finally:
        if giving_back is not None:
            giving_back.cancel()
        gc.freeze()
        if was_enabled:
            gc.enable()


def give_back_free_memory() -> bool:
    """Return the C heap's free pages to the system (glibc's `malloc_trim`); False where
    there is no glibc (nothing done).

    Assembling and deciding the first world of every VM allocates far more than stays:
    at 10,000 VMs the worlds of idle VMs leave memory once decided (`Runtime(rest=True)`),
    but the C allocator keeps the pages they were freed from, scattered between the
    objects that stay, and the RSS stays at the load's peak. Called once the load is
    decided, it gave back ~10-15 MB there (`docs/performance.md`). It walks the free
    lists once: a few milliseconds, which is why it runs once, not after every burst.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)  # 1 when it released something: either way, done
    return True
