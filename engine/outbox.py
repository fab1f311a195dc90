"""Executing the outbox: each pending effect until it succeeds or fails for good.

An effect runs after the commit that enqueued it (or at start, when its outcome was
never recorded). Temporary failures are retried with backoff, each attempt journaled;
the final outcome is handed back to the key's path, where it is recorded together with
whatever the machine decides about it. An effect whose term of leadership ended
(`Deposed`) is dropped from memory unsent and unrecorded: the next leader re-issues
it. An effect whose key is held (its world cannot be read) is not attempted: it is
parked, with its attempts so far, and runs again once the key is observed; an attempt
under way when its key becomes held sends no further write (`check_not_held`, called
by the executor the instant before each write: `RetryAfterObservation`, decided again
from the next readable world). Where the journal fences terms (PostgreSQL), each
attempt first claims its outbox row in the journal (`claim`): once a later term began
the claim is refused (`Superseded`, a `Deposed`) and nothing is sent. This module
never decides: it reports outcomes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Protocol

from nicplug.engine.clock import Clock
from nicplug.engine.dispatch import Activity
from nicplug.engine.effects import EffectExecutor, RetryPolicy
from nicplug.engine.errors import (
    Deposed,
    JournalError,
    OwnWriteUnseen,
    PermanentError,
    RetryAfterObservation,
    TemporaryError,
)
from nicplug.engine.journal import Commit, EffectUpdate, Journal, PendingEffect
from nicplug.engine.listening import RuntimeListener
from nicplug.engine.model import Cause, EffectOutcome, Key
from nicplug.engine.slicing import LoopSlices

_ATTEMPT: ContextVar[tuple[Key, Callable[[], bool]] | None] = ContextVar(
    "nicplug_attempt", default=None)
"""In the task of an effect's attempt: the effect's key, and whether it is held now."""


def check_not_held() -> None:
    """Raise `RetryAfterObservation` when the effect this task is attempting belongs to
    a key held since the attempt began (its world turned unreadable): held still is
    still, so what the attempt would write next is not sent. Outside an attempt: no-op."""
    attempt = _ATTEMPT.get()
    if attempt is not None and attempt[1]():
        raise RetryAfterObservation("its objects cannot be read: held until observed again")


def attempted_key() -> Key | None:
    """The key of the effect this task is attempting (None outside an attempt)."""
    attempt = _ATTEMPT.get()
    return attempt[0] if attempt is not None else None


class Deliver(Protocol):
    def __call__(
        self, key: Key, outcome: EffectOutcome, update: EffectUpdate, *, hold: bool
    ) -> None: ...


class EffectRunner:
    def __init__(
        self,
        executor: EffectExecutor,
        journal: Journal,
        clock: Clock,
        *,
        retry: RetryPolicy,
        rng: random.Random,
        activity: Activity,
        listener: RuntimeListener,
        deliver: Deliver,
        journal_health: Callable[[JournalError | None], None],
        held: Callable[[Key], bool] = lambda _key: False,
        park: Callable[[PendingEffect], None] = lambda _effect: None,
        in_flight: int = 128,
        slices: LoopSlices | None = None,
        claim: Callable[[int], Awaitable[bool]] | None = None,
    ) -> None:
        if in_flight < 1:
            raise ValueError(f"in_flight must be at least 1, not {in_flight}")
        self._executor = executor
        self._in_flight = asyncio.Semaphore(in_flight)
        self._journal = journal
        self._clock = clock
        self._retry = retry
        self._rng = rng
        self._activity = activity
        self._listener = listener
        self._deliver = deliver
        self._journal_health = journal_health
        self._held = held
        self._park = park
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._running: dict[Key, int] = {}  # key → its effects not yet done attempting
        self._slices = slices
        self._claim = claim

    def run(self, effect: PendingEffect) -> None:
        if effect.id in self._tasks:
            return
        self._running[effect.key] = self._running.get(effect.key, 0) + 1
        task = asyncio.create_task(self._attempts(effect), name=f"effect {effect.id}")
        self._tasks[effect.id] = task
        task.add_done_callback(lambda _: self._tasks.pop(effect.id, None))

    def busy(self, key: Key) -> bool:
        """Whether an effect of `key` is still being attempted (or waits to be): its
        outcome may yet be delivered."""
        return key in self._running

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _attempts(self, effect: PendingEffect) -> None:
        try:
            await self._attempting(effect)
        finally:  # before the delivered outcome is decided: the key is not busy then
            left = self._running[effect.key] - 1
            if left:
                self._running[effect.key] = left
            else:
                del self._running[effect.key]

    async def _attempting(self, effect: PendingEffect) -> None:
        attempts = effect.attempts
        if effect.next_attempt_at is not None:
            await self._sleep_until(effect.next_attempt_at)
        while True:
            if self._held(effect.key):
                # held still is still: not one attempt from the last readable world
                self._park(dataclasses.replace(effect, attempts=attempts, next_attempt_at=None))
                return
            self._activity.enter()  # waiting for a turn is work to do, for `drain`
            try:
                async with self._in_flight:
                    if self._slices is not None:
                        await self._slices.turn()  # building a request is work too
                    retry_at = await self._attempt(effect, attempts + 1)
            finally:
                self._activity.leave()
            if retry_at is None:
                return
            attempts += 1
            await self._sleep_until(retry_at)

    async def _sleep_until(self, retry_at: float) -> None:
        """Wait for the next try: until `retry_at`, but never longer than the policy's
        longest delay. Deadlines are wall time (`clock.py`): one set while the wall clock
        ran ahead, and since set back, lies the clock's step further off, whether it was
        journaled (the outbox row keeps it across terms) or is being slept towards when
        the clock is stepped (an hour's step: an hour's wait). Meanwhile the effect is
        held, and with it every decision asking the same effect, which is not enqueued
        twice: the operation times out and is retried, again and again. So the deadline
        is capped from now, and the sleep by the loop's own (monotonic) time."""
        longest = self._longest_delay()
        deadline = min(retry_at, self._clock.now() + longest)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(longest):
                await self._clock.sleep_until(deadline)

    def _longest_delay(self) -> float:
        """The longest wait the retry policy gives: its cap, jittered up."""
        return self._retry.max_delay * (1.0 + self._retry.jitter)

    async def _attempt(self, effect: PendingEffect, attempt: int) -> float | None:
        """One try; the moment to try again, or None when the outcome is delivered."""
        self._listener.on_effect(effect, "started", None)
        held = _ATTEMPT.set((effect.key, lambda: self._held(effect.key)))
        try:
            if self._claim is not None and not await self._claim(effect.id):
                return None  # its outcome is recorded already: nothing to send
            result = await self._executor.execute(effect)
        except Deposed:
            # The term that decided it has ended: nothing was sent and nothing is
            # recorded; the outbox row stays `issued` for the next leader.
            return None
        except RetryAfterObservation as error:
            self._listener.on_effect(effect, "superseded", str(error))
            unseen: dict[str, object] | None = (
                {"unseen": True} if isinstance(error, OwnWriteUnseen) else None)
            self._finish(effect, attempt, ok=False, permanent=False, error=str(error),
                         result=unseen, hold=True)
            return None
        except PermanentError as error:
            self._listener.on_effect(effect, "failed", str(error))
            self._finish(effect, attempt, ok=False, permanent=True, error=str(error))
            return None
        except Exception as error:  # TemporaryError, or an executor's bug: retry both
            message = str(error) if isinstance(error, TemporaryError) else repr(error)
            if self._retry.exhausted(attempt):
                message = f"gave up after {attempt} attempts: {message}"
                self._listener.on_effect(effect, "failed", message)
                self._finish(effect, attempt, ok=False, permanent=True, error=message)
                return None
            delay = error.delay if isinstance(error, TemporaryError) else None
            if delay is None:
                delay = self._retry.delay(attempt, self._rng)
            # a server's Retry-After too is waited at most the policy's longest delay
            retry_at = self._clock.now() + min(delay, self._longest_delay())
            self._listener.on_effect(effect, "retrying", message)
            try:  # the attempt count is for humans: losing it loses no outcome
                await self._journal.append(Commit(
                    key=effect.key, cause=Cause("effect", f"effect:{effect.id}"),
                    wall_time=self._clock.wall(), logical_time=self._clock.now(),
                    effect_updates=(
                        EffectUpdate(effect.id, "issued", attempt, retry_at, message),
                    ),
                ))
            except JournalError as journal_error:
                self._journal_health(journal_error)
            else:
                self._journal_health(None)
            return retry_at
        finally:
            _ATTEMPT.reset(held)
        self._listener.on_effect(effect, "succeeded", None)
        self._finish(effect, attempt, ok=True, result=dict(result))
        return None

    def _finish(
        self, effect: PendingEffect, attempts: int, *, ok: bool, permanent: bool = False,
        error: str | None = None, result: dict[str, object] | None = None, hold: bool = False,
    ) -> None:
        outcome = EffectOutcome(
            effect_id=effect.id, stream=effect.stream, type=effect.type, ok=ok,
            permanent=permanent, error=error, result=result or {},
        )
        update = EffectUpdate(
            effect.id, "succeeded" if ok else "failed", attempts, None, error
        )
        self._deliver(effect.key, outcome, update, hold=hold)



