"""The virtual clock moves only when told and wakes sleepers in deadline order."""

from __future__ import annotations

import asyncio

import pytest

from nicplug.engine.clock import NAP, RealClock, VirtualClock


async def test_sleepers_wake_in_deadline_order_when_the_clock_moves() -> None:
    clock = VirtualClock(start=10.0, epoch=1_700_000_000.0)
    woke: list[str] = []

    async def sleeper(name: str, deadline: float) -> None:
        await clock.sleep_until(deadline)
        woke.append(f"{name}@{clock.now()}")

    tasks = [asyncio.create_task(sleeper(n, d)) for n, d in
             [("late", 30.0), ("early", 15.0), ("tie-1", 20.0), ("tie-2", 20.0), ("past", 5.0)]]
    for _ in range(3):
        await asyncio.sleep(0)
    assert woke == ["past@10.0"]
    assert clock.next_deadline() == 15.0
    clock.advance(10.0)
    for _ in range(3):
        await asyncio.sleep(0)
    assert woke == ["past@10.0", "early@20.0", "tie-1@20.0", "tie-2@20.0"]
    assert clock.wall() == 1_700_000_020.0
    clock.set(30.0)
    await asyncio.gather(*tasks)
    assert woke[-1] == "late@30.0" and clock.next_deadline() is None


def test_a_clock_never_goes_back() -> None:
    clock = VirtualClock(start=5.0)
    with pytest.raises(ValueError, match="never goes back"):
        clock.set(4.0)
    with pytest.raises(ValueError, match="never goes back"):
        clock.advance(-1.0)


async def test_real_clock_does_not_sleep_for_a_past_deadline() -> None:
    clock = RealClock()
    before = clock.now()
    await clock.sleep_until(before - 1.0)
    assert clock.now() - before < 1.0 and clock.wall() > 1_600_000_000


class _SteppedWall:
    """A wall clock that naps advance, and that a test steps back or forward at given
    naps (as NTP or an operator would while a timer sleeps)."""

    def __init__(self, start: float, steps: dict[int, float]) -> None:
        self.time = start
        self.steps = steps
        self.naps: list[float] = []

    def __call__(self) -> float:
        return self.time

    async def nap(self, seconds: float) -> None:
        self.naps.append(seconds)
        self.time += seconds + self.steps.get(len(self.naps), 0.0)


async def test_a_wall_clock_stepped_back_does_not_fire_a_timer_early() -> None:
    wall = _SteppedWall(1_000.0, steps={1: -3600.0})  # an hour back during the first nap
    clock = RealClock(wall=wall, nap=wall.nap)
    await clock.sleep_until(1_020.0)
    assert wall.time >= 1_020.0  # woke early, read the clock, slept again
    assert sum(wall.naps) == pytest.approx(3620.0)


async def test_a_wall_clock_stepped_forward_fires_a_timer_within_one_nap() -> None:
    wall = _SteppedWall(1_000.0, steps={1: 7200.0})  # two hours forward during the first
    clock = RealClock(wall=wall, nap=wall.nap)
    await clock.sleep_until(1_000.0 + 600.0)
    assert wall.naps == [NAP]  # not the whole 600 s the first reading asked for
