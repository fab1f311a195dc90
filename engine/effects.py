"""The effect port and how failed effects are retried.

An `EffectExecutor` does one effect in the world (a Kubernetes patch, a condition)
and either returns a result or raises `TemporaryError` / `RetryAfterObservation` /
`PermanentError`. The runtime owns retries, on the schedule below (`backoff.py`'s
rule with the effects' figures). Effects are
idempotent by contract: a crash between the journal commit and the effect, or
between the effect and recording its outcome, re-issues it at the next start.
Nothing here journals or decides.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from nicplug.engine.backoff import Backoff
from nicplug.engine.clock import Clock
from nicplug.engine.journal import PendingEffect


class EffectExecutor(Protocol):
    async def execute(self, effect: PendingEffect) -> Mapping[str, Any]:
        """Do `effect`; return its result, or raise one of the engine's effect errors."""
        ...


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """A `Backoff` with jitter and a bound: attempt n waits `initial * factor**(n-1)`,
    at most `max_delay`, spread by ±`jitter` (a fraction). `max_attempts` turns a
    temporary failure into a permanent one after that many attempts (None: retry
    forever)."""

    initial: float = 1.0
    factor: float = 2.0
    max_delay: float = 300.0
    jitter: float = 0.1
    max_attempts: int | None = None
    backoff: Backoff = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "backoff", Backoff(
            base=self.initial, cap=self.max_delay, factor=self.factor, jitter=self.jitter))

    def delay(self, attempt: int, rng: random.Random) -> float:
        return self.backoff.delay(attempt, rng)

    def exhausted(self, attempts: int) -> bool:
        return self.max_attempts is not None and attempts >= self.max_attempts


@dataclass(frozen=True, slots=True)
class ExecutedEffect:
    at: float
    effect: PendingEffect


@dataclass
class RecordingExecutor:
    """Executes nothing: records each effect with the clock's time and succeeds.

    For replays and tests, where the world is a tape or a fake and must not be touched.
    """

    clock: Clock
    executed: list[ExecutedEffect] = field(default_factory=list)

    async def execute(self, effect: PendingEffect) -> Mapping[str, Any]:
        self.executed.append(ExecutedEffect(self.clock.now(), effect))
        return {}
