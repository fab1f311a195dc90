"""Time for the simulated cluster's actors: real for the demo, virtual for the tests.

Every delay an actor simulates (the SDN configuring a link, a migration copying memory,
a restart) goes through a `SimClock`, so a test can jump over seconds of simulated time
in microseconds and get the same interleaving on every run. Nothing here reads the
store or knows about actors.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Awaitable, Callable
from typing import Protocol


class SimClock(Protocol):
    def now(self) -> float:
        """Seconds on this clock (monotonic; the epoch is the clock's own)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return once `seconds` have passed on this clock."""
        ...


class RealSimClock:
    """Wall-clock time: `sim serve` and the demo."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class VirtualSimClock:
    """Time that moves only when a test calls `advance`.

    Sleepers wake in deadline order (ties in the order they went to sleep); after each
    wake-up the clock lets the event loop settle (`settle`, by default a few bare
    yields) so that whatever the woken actor sets in motion happens before the next
    sleeper is due.
    """

    def __init__(
        self, start: float = 0.0, *, settle: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = 0
        self.settle: Callable[[], Awaitable[None]] = settle or _yield_a_little

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._seq += 1
        heapq.heappush(self._sleepers, (self._now + seconds, self._seq, future))
        await future

    @property
    def next_deadline(self) -> float | None:
        """When the earliest live sleeper is due, or None."""
        self._drop_cancelled()
        return self._sleepers[0][0] if self._sleepers else None

    async def advance(self, seconds: float) -> None:
        """Move time forward by `seconds`, waking every sleeper due on the way."""
        if seconds < 0:
            raise ValueError(f"cannot move a clock backwards ({seconds} s)")
        target = self._now + seconds
        await self.settle()
        while True:
            self._drop_cancelled()
            if not self._sleepers or self._sleepers[0][0] > target:
                break
            deadline, _, future = heapq.heappop(self._sleepers)
            self._now = max(self._now, deadline)
            future.set_result(None)
            await self.settle()
        self._now = target
        await self.settle()

    def _drop_cancelled(self) -> None:
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)


async def _yield_a_little() -> None:
    for _ in range(20):
        await asyncio.sleep(0)
