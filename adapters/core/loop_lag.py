"""How long the event loop was kept from running: the lag of a 10 ms ticker.

Everything nicplug does shares one event loop: watches, the journal's acknowledgements,
effects, the Lease renewal, `/readyz`. A slice of work that never yields (a whole
initial list indexed in one go, every VM re-assembled after one Network changed) stalls
all of them at once, and a stalled Lease renewal costs the leadership. The ticker asks
to wake every `interval`; how much later it wakes is the longest stall in between. It
only measures; it never changes what the loop runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

Sleep = Callable[[float], Awaitable[None]]
Now = Callable[[], float]


@dataclass
class LoopLag:
    """The ticker's state: the largest lag seen, and a callback for each tick's lag."""

    interval: float = 0.010
    on_lag: Callable[[float], None] | None = None
    largest: float = field(default=0.0, init=False)

    async def run(self, *, now: Now, sleep: Sleep = asyncio.sleep) -> None:
        """Tick until cancelled; `now` is the loop's monotonic clock (`loop.time`)."""
        while True:
            asked = now()
            await sleep(self.interval)
            self.record(max(0.0, now() - asked - self.interval))

    def record(self, lag: float) -> None:
        if lag > self.largest:
            self.largest = lag
        if self.on_lag is not None:
            self.on_lag(lag)
