"""The invariants see a livelock: an operation retrying a failing effect for ever always
has a timer armed, and yet is flagged within one schedule (`simulation/bounds.py`)."""

from __future__ import annotations

from typing import Any

import pytest

from nicplug.adapters.executor import KubeExecutor
from nicplug.adapters.simulation.run import simulate
from nicplug.adapters.simulation.schedule import Schedule, Setup, Step
from nicplug.engine.errors import TemporaryError

LIVELOCKS = ("effect-livelock", "effects-unbounded", "attempts-unbounded")


def _plug() -> Schedule:
    return Schedule(seed=900003, setup=Setup(), faults=("user",), steps=(
        Step(wait=0.0, action="networks", arg=["Network/user-net"]),
        Step(wait=40.0, action="networks", arg=["Network/user-net"]),
    ))


def test_an_effect_that_fails_for_ever_is_a_livelock(monkeypatch: pytest.MonkeyPatch) -> None:
    execute = KubeExecutor.execute

    async def failing(self: KubeExecutor, effect: Any) -> Any:
        if effect.type == "PatchPodNetworks":
            raise TemporaryError("planted: the pod patch fails, every time")
        return await execute(self, effect)

    monkeypatch.setattr(KubeExecutor, "execute", failing)
    outcome = simulate(_plug())
    assert outcome.violation is not None
    assert outcome.violation.invariant in LIVELOCKS, outcome.violation.line()


def test_the_same_schedule_is_clean_without_the_planted_fault() -> None:
    outcome = simulate(_plug())
    assert outcome.violation is None, outcome.violation.line()
