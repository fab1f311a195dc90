"""Shrinking a failing schedule to the fewest steps that still fail the same way.

Delta debugging over the steps (Zeller's ddmin, on chunks then single steps): a
candidate is kept when its run violates the same invariant. Each try is a whole
simulated run, so the number of tries is bounded; what comes out is at least as short
as what went in and fails the same way.
"""

from __future__ import annotations

from collections.abc import Callable

from nicplug.adapters.simulation.run import Outcome, simulate
from nicplug.adapters.simulation.schedule import Schedule


def shrink(failing: Outcome, *, budget: int = 60,
           run: Callable[[Schedule], Outcome] = simulate) -> Outcome:
    """The shortest schedule found within `budget` runs failing `failing`'s invariant."""
    assert failing.violation is not None, "only a failing run can be shrunk"
    invariant = failing.violation.invariant
    best = failing
    steps = list(failing.schedule.steps[: failing.steps_taken or len(failing.schedule.steps)])
    if len(steps) < len(failing.schedule.steps):
        trial = run(failing.schedule.with_steps(tuple(steps)))
        budget -= 1
        if trial.violation is not None and trial.violation.invariant == invariant:
            best = trial
        else:
            steps = list(failing.schedule.steps)
    chunk = max(1, len(steps) // 2)
    while chunk >= 1 and budget > 0:
        start, removed = 0, False
        while start < len(steps) and budget > 0:
            candidate = steps[:start] + steps[start + chunk:]
            trial = run(failing.schedule.with_steps(tuple(candidate)))
            budget -= 1
            if trial.violation is not None and trial.violation.invariant == invariant:
                steps, best, removed = candidate, trial, True
            else:
                start += chunk
        if not removed:
            chunk //= 2
    return best
