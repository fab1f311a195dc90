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
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...

    def wall(self) -> float: ...

    async def sleep_until(self, deadline: float) -> None: ...


class RealClock:
    """Epoch seconds for both: durable deadlines keep their meaning across processes."""

    def now(self) -> float:
        return time.time()

    def wall(self) -> float:
        return time.time()

    async def sleep_until(self, deadline: float) -> None:
        delay = deadline - time.time()
        if delay > 0:
            await asyncio.sleep(delay)


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
