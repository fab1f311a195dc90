"""The one backoff schedule: how long to wait before attempt n again.

Four places wait after a failure — a failed effect (`effects.RetryPolicy`), a refused
commit (`commit_retry`), a failed operation retried by the machines
(`machines.policy.Timeouts.backoff`) and an informer whose list or watch failed — and
each keeps its own figures, but they share this one rule, so a change to how nicplug
backs off is made once. Attempt n waits `base * factor**(n-1)`, at most `cap`, spread
by ±`jitter` (a fraction of the wait).

The randomness is injected: given an `rng`, `delay` draws exactly one number from it
per call, whatever the jitter, so a seeded `random.Random` gives the same schedule on
every run and a schedule sharing its generator with another stays in step. Without an
`rng` there is no jitter to draw: a jittered schedule then refuses. Nothing here
sleeps or reads a clock: the caller waits on its own injected clock.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    base: float
    cap: float
    factor: float = 2.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.base) and math.isfinite(self.cap)
                and self.base >= 0 and self.cap >= 0):
            raise ValueError(f"backoff base and cap must be finite and not negative, "
                             f"got base={self.base} cap={self.cap}")
        if not self.factor >= 1:
            raise ValueError(f"backoff factor must be at least 1, got {self.factor}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"backoff jitter must be a fraction from 0 to 1, got {self.jitter}")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before attempt `attempt` (1 is the first retry's wait)."""
        wait = self.undithered(attempt)
        if rng is None:
            if self.jitter:
                raise ValueError("a jittered backoff needs an rng")
            return wait
        return float(wait * (1.0 + self.jitter * (2.0 * rng.random() - 1.0)))

    def undithered(self, attempt: int) -> float:
        """The wait before jitter: `min(cap, base * factor**(attempt-1))`."""
        try:
            grown = self.base * self.factor ** max(0, attempt - 1)
        except OverflowError:  # the power outgrew a float long after reaching the cap
            return float(self.cap)
        return float(min(self.cap, grown))
