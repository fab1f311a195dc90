"""Time as a parameter: the runtime never reads the system clock directly.

`now()` is logical seconds (what deadlines and backoff use); `wall()` is epoch
seconds, only ever recorded for humans. The real clock's logical time is epoch time
too: deadlines are journaled, and a monotonic clock restarts from an arbitrary origin
on another node or after a reboot, which would make every durable deadline wrong.
`VirtualClock` moves only when told, so tests and replays run without sleeping and give
the same results every time. Nothing here may schedule work of its own beyond waking
sleepers.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

NAP = 30.0
"""The longest a sleeper waits before it reads the wall clock again. A deadline is wall
time, but a sleep runs on the loop's monotonic clock: a wall clock stepped forward
during it is seen within one nap (the timer fires at most `NAP` late), and one stepped
back makes the sleeper wake early, read the clock and sleep again."""


class Clock(Protocol):
    def now(self) -> float: ...

    def wall(self) -> float: ...

    async def sleep_until(self, deadline: float) -> None: ...


async def sleep_past(
    deadline: float,
    *,
    now: Callable[[], float],
    nap: Callable[[float], Awaitable[None]] = asyncio.sleep,
    longest: float = NAP,
) -> None:
    """Return once `now()` has reached `deadline`, however the clock behind `now` was
    stepped meanwhile: every wake reads it again, and an early wake sleeps again. Never
    returns before the deadline; a timer that fired early would be decided as not yet
    due, its cancellation journaled, and the deadline lost."""
    while (delay := deadline - now()) > 0:
        await nap(min(delay, longest))


class RealClock:
    """Epoch seconds for both: durable deadlines keep their meaning across processes.
    `wall` and `nap` are the system's; a test injects its own to step the wall clock."""

    def __init__(
        self,
        wall: Callable[[], float] = time.time,
        nap: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._wall = wall
        self._nap = nap

    def now(self) -> float:
        return self._wall()

    def wall(self) -> float:
        return self._wall()

    async def sleep_until(self, deadline: float) -> None:
        await sleep_past(deadline, now=self._wall, nap=self._nap)


class VirtualClock:
    """A clock that moves only by `advance` / `set`.

    Sleepers are woken in deadline order (ties in the order they started sleeping);
    `wall()` is `epoch + now()`, so recorded wall times are reproducible too.
    """

    def __init__(self, start: float = 0.0, *, epoch: float = 0.0) -> None:
        self._now = start
        self._epoch = epoch
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._epoch + self._now

    async def sleep_until(self, deadline: float) -> None:
        if deadline <= self._now:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (deadline, next(self._order), future))
        await future

    def next_deadline(self) -> float | None:
        """The earliest deadline anyone still sleeps until, if any."""
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)
        return self._sleepers[0][0] if self._sleepers else None

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock never goes back (advance by {seconds})")
        self.set(self._now + seconds)

    def set(self, moment: float) -> None:
        if moment < self._now:
            raise ValueError(f"a clock never goes back ({self._now} -> {moment})")
        self._now = moment
        while self._sleepers and self._sleepers[0][0] <= moment:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)
