"""The invariants see a livelock: an operation retrying a failing effect for ever always
has a timer armed, and yet is flagged within one schedule (`simulation/bounds.py`)."""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import Any

import pytest

from nicplug.adapters.core.executor import KubeExecutor
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


def test_the_teardown_leaves_no_task_pending(monkeypatch: pytest.MonkeyPatch,
                                             caplog: pytest.LogCaptureFixture) -> None:
    """Whatever a run leaves running when it ends (here a task planted at its heal) is
    cancelled and ended before the loop closes, never destroyed while pending."""
    from nicplug.adapters.simulation.actions import Hands

    heal = Hands.heal
    ended: list[bool] = []

    async def planted() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            ended.append(True)

    async def healing(self: Hands) -> None:
        asyncio.get_running_loop().create_task(planted())
        await heal(self)

    monkeypatch.setattr(Hands, "heal", healing)
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        outcome = simulate(_plug())
        gc.collect()
    assert outcome.violation is None
    assert ended == [True]
    assert "destroyed but it is pending" not in caplog.text
