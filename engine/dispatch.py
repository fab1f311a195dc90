"""Per-key serialization: one worker per key at a time, many keys in parallel.

Triggers for a key queue up in order; a newer observation replaces one still waiting
(the world is level-triggered: only the latest matters). At most `concurrency` keys
are handled at once. `Activity` counts runnable work so `drain` can wait for quiet;
work that sleeps on the clock (timers, backoff) is not runnable and does not count.
Dispatch never decides or journals itself: it only calls `handle`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

from nicplug.engine.model import Key, Observed, Trigger
from nicplug.engine.slicing import LoopSlices

_SETTLE_TURNS = 5


class Activity:
    def __init__(self) -> None:
        self._count = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def enter(self) -> None:
        self._count += 1
        self._idle.clear()

    def leave(self) -> None:
        self._count -= 1
        if self._count == 0:
            self._idle.set()

    @property
    def busy(self) -> bool:
        return self._count > 0

    async def settled(self) -> None:
        """Return once nothing is runnable, even after letting woken sleepers run."""
        while True:
            await self._idle.wait()
            for _ in range(_SETTLE_TURNS):
                await asyncio.sleep(0)
            if not self.busy:
                return


class Dispatch:
    def __init__(
        self,
        handle: Callable[[Key, Trigger], Awaitable[None]],
        *,
        concurrency: int,
        activity: Activity,
        on_error: Callable[[Key, BaseException], None],
        on_idle: Callable[[Key], None] | None = None,
        slices: LoopSlices | None = None,
    ) -> None:
        """`slices`: each input waits for its slice of the event loop's turn (None: it is
        decided as soon as its key's worker runs)."""
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        self._handle = handle
        self._activity = activity
        self._on_error = on_error
        self._on_idle = on_idle
        self._slices = slices
        self._slots = asyncio.Semaphore(concurrency)
        self._queues: dict[Key, deque[Trigger]] = {}
        self._workers: dict[Key, asyncio.Task[None]] = {}

    def submit(self, key: Key, trigger: Trigger) -> None:
        queue = self._queues.setdefault(key, deque())
        if isinstance(trigger, Observed):
            for index, queued in enumerate(queue):
                if isinstance(queued, Observed):
                    queue[index] = trigger
                    break
            else:
                queue.append(trigger)
        else:
            queue.append(trigger)
        if key not in self._workers:
            self._activity.enter()
            self._workers[key] = asyncio.create_task(self._work(key, queue), name=f"key {key}")

    async def _work(self, key: Key, queue: deque[Trigger]) -> None:
        try:
            while queue:
                async with self._slots:
                    if self._slices is not None:
                        await self._slices.turn()
                    if not queue:
                        break
                    trigger = queue.popleft()
                    try:
                        await self._handle(key, trigger)
                    except Exception as error:
                        self._on_error(key, error)
        finally:
            del self._workers[key]
            if not queue:
                del self._queues[key]
                if self._on_idle is not None:
                    self._on_idle(key)
            self._activity.leave()

    def busy(self, key: Key) -> bool:
        """Whether an input of `key` is waiting or being decided."""
        return key in self._workers

    async def close(self) -> None:
        """Cancel every worker (what is queued is dropped; the journal keeps the rest)."""
        workers = list(self._workers.values())
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        self._queues.clear()
