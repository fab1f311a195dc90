"""Many tasks' work in one turn of the event loop, bounded: `LoopSlices.turn()`.

The event loop runs, in one turn, every callback that became ready during the turn
before: when a journal commit acknowledges 64 decisions at once, the 64 tasks resume
in the same turn, and each decides its key's next input before it awaits again. Each
task yields, yet together they hold the loop for 64 decisions, and the watches, the
journal's next acknowledgements and the Lease renewal wait that long.

A task calls `turn()` before a slice of work (one decision, one effect's request).
While the turn's budget lasts it returns at once; once spent, the task waits for a
later turn, after the loop has looked at its timers and sockets. The budget is
measured from the first slice of each turn, so a turn runs at most the budget plus
one slice. `turn()` never changes the order of a key's inputs: it only spreads the
work of different tasks over turns.

Time comes from `now` (a work clock): with a clock that does not move while work is
done (a virtual one) no slice is ever spent. Replays and simulations, whose journals
must not depend on how work interleaves, pass no slices to the runtime at all.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class LoopSlices:
    """The work budget of the current turn of the event loop, shared by every task."""

    def __init__(self, budget: float = 0.005, *, now: Callable[[], float] = time.perf_counter,
                 ) -> None:
        if budget <= 0:
            raise ValueError(f"the budget of a turn must be positive, not {budget}")
        self.budget = budget
        self._now = now
        self._began: float | None = None  # the first slice of the current turn
        self.deferred = 0
        """How many times a slice waited for a later turn (for tests and metrics)."""

    async def turn(self) -> None:
        """Return when a slice of work may run in this turn of the loop."""
        while True:
            if self._began is None:
                self._began = self._now()
                # runs first in the next turn: what is deferred now runs after it
                asyncio.get_running_loop().call_soon(self._next_turn)
                return
            if self._now() - self._began < self.budget:
                return
            self.deferred += 1
            await asyncio.sleep(0)

    def _next_turn(self) -> None:
        self._began = None
