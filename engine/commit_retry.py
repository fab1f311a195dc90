"""Inputs whose commit failed, waiting to be decided again.

When the journal refuses a commit (a full disk, an I/O error, a rejected unit), the
input that caused it is not lost: the runtime puts back what it consumed and hands
the input here, which submits it again after a backoff on the injected clock, per
key. When one of them goes through, every other one waiting is submitted at once, so
the keys that failed are decided again as soon as the journal takes writes. The
journal's state is reported on each change only: one line for an outage, not one per
input.
This module never decides or journals; it only holds inputs and their timing.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from nicplug.engine.clock import Clock
from nicplug.engine.effects import RetryPolicy
from nicplug.engine.errors import JournalError
from nicplug.engine.model import Key, Observed, Trigger

COMMIT_RETRY = RetryPolicy(initial=0.2, factor=2.0, max_delay=5.0, jitter=0.1)
"""A failed commit costs one rolled-back transaction: trying every few seconds is cheap,
and a journal that takes writes again is noticed within `max_delay`. (The schedule is
`backoff.py`'s, drawn from the runtime's seeded generator.)"""


class CommitRetries:
    """Refused inputs per key, their backoff, and whether the journal is refusing.

    The journal counts as refusing from the first refused input until every refused
    input has been decided again (a unit the journal keeps rejecting keeps it so,
    rather than flapping with every other commit that succeeds). A refused input that
    goes through proves the journal takes writes again: every other one waiting goes
    at once instead of waiting out its backoff.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        policy: RetryPolicy,
        rng: random.Random,
        submit: Callable[[Key, Trigger], None],
        on_change: Callable[[JournalError | None], None],
    ) -> None:
        self._clock = clock
        self._policy = policy
        self._rng = rng
        self._submit = submit
        self._on_change = on_change
        self._waiting: dict[Key, list[Trigger]] = {}
        self._refused: dict[Key, list[Trigger]] = {}
        self._failures: dict[Key, int] = {}
        self._timers: dict[Key, asyncio.Task[None]] = {}
        self.failing: JournalError | None = None
        """Why the journal refused a write, until every refused input went through."""

    def failed(self, key: Key, trigger: Trigger, error: JournalError) -> None:
        """`trigger` of `key` could not be committed: submit it again later."""
        self._waiting.setdefault(key, []).append(trigger)
        refused = self._refused.setdefault(key, [])
        if trigger not in refused:
            refused.append(trigger)
        failures = self._failures[key] = self._failures.get(key, 0) + 1
        if key not in self._timers:
            retry_at = self._clock.now() + self._policy.delay(failures, self._rng)
            self._timers[key] = asyncio.create_task(
                self._later(key, retry_at), name=f"commit retry {key}")
        self.journal_failed(error)

    def journal_failed(self, error: JournalError) -> None:
        if self.failing is None:
            self.failing = error
            self._on_change(error)

    def decided(self, key: Key, trigger: Trigger) -> None:
        """`trigger` of `key` was decided without the journal refusing it. A newer
        observation stands for an older one refused (worlds are level-based)."""
        refused = self._refused.get(key)
        if refused:
            newer = isinstance(trigger, Observed)
            left = [t for t in refused
                    if t != trigger and not (newer and isinstance(t, Observed))]
            if len(left) < len(refused):
                self._wake_all()
            if left:
                self._refused[key] = left
            else:
                del self._refused[key]
                self._failures.pop(key, None)
        self.wrote()

    def waiting(self, key: Key) -> bool:
        """Whether an input of `key` the journal refused is still to be decided again."""
        return key in self._waiting or key in self._refused

    def wrote(self) -> None:
        """A write succeeded: the journal stops counting as refusing once nothing
        refused is left to decide."""
        if self.failing is not None and not self._refused:
            self.failing = None
            self._on_change(None)

    def _wake_all(self) -> None:
        for waiting in list(self._timers):
            self._timers.pop(waiting).cancel()
            self._again(waiting)

    async def _later(self, key: Key, retry_at: float) -> None:
        await self._clock.sleep_until(retry_at)
        del self._timers[key]
        self._again(key)

    def _again(self, key: Key) -> None:
        for trigger in self._waiting.pop(key, []):
            self._submit(key, trigger)

    async def close(self) -> None:
        timers = list(self._timers.values())
        for timer in timers:
            timer.cancel()
        await asyncio.gather(*timers, return_exceptions=True)
        self._timers.clear()
        self._waiting.clear()
