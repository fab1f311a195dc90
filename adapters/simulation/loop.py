"""One event loop whose time is virtual: the clock of the whole deterministic simulation.

Every timer in the process (the runtime's deadlines, the outbox's backoff, aiohttp's
request timeouts, the informers' watchdogs, the lease's renewals, the simulated
actors' delays) goes through `loop.call_at`. This loop's `time()` is a number that
moves only when nothing is ready to run: then, instead of blocking in the selector, it
jumps to the earliest timer. So a run takes as long as its CPU work, and the order of
everything is the order of the loop's FIFO ready queue and its timer heap — the same on
every run. Nothing may use threads inside the loop (a thread's completion would arrive
at a moment the loop does not control); the journal runs on the loop's thread
(`simulation/journal.py`) and the API server is in-process (`simulation/wire.py`).

The Lease library reads `time.time()` directly; `lease_time` points it at this loop
while a simulation runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
import types
from collections.abc import Callable, Iterator
from typing import Any, TypeVarTuple

from nicplug.engine.clock import sleep_past

EPOCH = 1_800_000_000.5  # what `wall()` reads at virtual time 0 (January 2027); the half
# second keeps the Lease library off whole seconds, whose timestamps it cannot parse back


class Deadlock(RuntimeError):
    """Nothing is ready and no timer is armed: every task waits for something that
    can never happen."""


class Livelock(RuntimeError):
    """The loop keeps running callbacks and time never moves: something spins."""


_Ts = TypeVarTuple("_Ts")

MIN_STEP = 1e-6  # the smallest jump of virtual time
SPIN_LIMIT = 200_000  # loop turns at one virtual instant before it counts as a livelock


class _VirtualSelector(selectors.DefaultSelector):
    """Polls the real descriptors without waiting; a wait becomes a jump of time.

    A simulation registers no descriptor of its own: the only one is the loop's
    self-pipe, which holds data only once something wrote to it (`woken`: a thread's
    `call_soon_threadsafe`) or a signal handler is set. Otherwise the poll, a system
    call on every turn of the loop, is left out: it could find nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.on_livelock: Callable[[str], None] | None = None
        self.runnable: Callable[[], int] = lambda: 0  # callbacks ready in the loop
        self.woken = False  # the self-pipe was written to since the last poll
        self.signalled = False  # a signal handler was set
        self._descriptors = 0
        self._spins = 0

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        key = super().register(fileobj, events, data)
        self._descriptors += 1
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        key = super().unregister(fileobj)
        self._descriptors -= 1
        return key

    def select(self, timeout: float | None = None) -> list[tuple[Any, int]]:
        ready: list[tuple[Any, int]] = []
        if self.woken or self._descriptors > 1 or self.signalled:
            self.woken = False
            ready = super().select(0)
        if not ready and timeout == 0 and not self.runnable():
            timeout = MIN_STEP  # only a timer due at exactly now: let time pass it
        if ready or timeout == 0:
            self._spins += 1
            if self._spins > SPIN_LIMIT:
                self._spins = 0
                problem = f"{SPIN_LIMIT} turns of the loop at t={self.now:.3f}s without time moving"
                told, self.on_livelock = self.on_livelock, None
                if told is None:  # nobody to tell, or still spinning after being told
                    raise Livelock(problem)
                told(problem)
            return ready
        if timeout is None:
            raise Deadlock("every task is waiting and no timer is armed")
        # At least a microsecond: a wait shorter than the float spacing of `now` would
        # leave time where it is, and whoever waits for a deadline would spin on it.
        self.now += max(timeout, MIN_STEP)
        self._spins = 0
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector loop whose `time()` jumps over idle periods."""

    def __init__(self) -> None:
        self._virtual = _VirtualSelector()
        super().__init__(self._virtual)
        # asyncio fires a timer up to a clock resolution early: harmless when real time
        # runs on, but on a clock that moves only when idle, whoever compares the time
        # with the deadline it waited for would find it not yet reached, for ever.
        self._clock_resolution = 0.0
        ready: Any = getattr(self, "_ready")  # noqa: B009  (asyncio's queue of callbacks)
        self._virtual.runnable = lambda: len(ready)

    def _write_to_self(self) -> None:
        # the byte first, then the flag: a poll that clears the flag finds the byte
        super()._write_to_self()  # type: ignore[misc]
        self._virtual.woken = True

    def add_signal_handler(self, sig: int, callback: Callable[[*_Ts], object],
                           *args: *_Ts) -> None:
        self._virtual.signalled = True  # a signal writes to the self-pipe unseen
        super().add_signal_handler(sig, callback, *args)

    def time(self) -> float:
        return self._virtual.now

    def on_livelock(self, tell: Callable[[str], None]) -> None:
        """Call `tell(problem)` once when the loop spins at one instant for
        `SPIN_LIMIT` turns; spinning on after that raises `Livelock`."""
        self._virtual.on_livelock = tell


def virtual_now() -> float:
    """The running loop's time (for `Clock.now` and the informers' watchdog)."""
    return asyncio.get_running_loop().time()


class LoopClock:
    """The engine's `Clock` on the virtual loop: logical and wall time are loop time
    (wall offset by `EPOCH`, so recorded times look like dates); the logical time, in
    which deadlines are journaled, plus `step`: the machine's clock stepped back or
    forward (NTP, an operator). A sleep runs on
    the loop's time, as a real one runs on the monotonic clock, and reads the wall
    clock again when it wakes (`engine.clock.sleep_past`, as `RealClock` does)."""

    def __init__(self) -> None:
        self.step = 0.0

    def now(self) -> float:
        return virtual_now() + self.step

    def wall(self) -> float:
        # unstepped: what it stamps is for people (and the Lease's times, which the
        # watchman reads as the truth of a term; electors judge by when they observed)
        return EPOCH + virtual_now()

    async def sleep_until(self, deadline: float) -> None:
        await sleep_past(deadline, now=self.now)


class LoopSimClock:
    """The simulated cluster's `SimClock` on the virtual loop."""

    def now(self) -> float:
        return virtual_now()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


@contextlib.contextmanager
def lease_time() -> Iterator[None]:
    """Point the Lease library's `time.time()` at the running virtual loop."""
    from kubernetes_asyncio.leaderelection import leaderelection

    shim = types.SimpleNamespace(time=lambda: EPOCH + virtual_now())
    original = getattr(leaderelection, "time")  # noqa: B009
    setattr(leaderelection, "time", shim)  # noqa: B010
    try:
        yield
    finally:
        setattr(leaderelection, "time", original)  # noqa: B010
