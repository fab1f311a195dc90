"""Many tasks' work in one turn of the event loop stays within the turn's budget: the
rest waits for a later turn, after the loop's other callbacks had theirs."""

from __future__ import annotations

import asyncio

import pytest

from nicplug.engine.dispatch import Activity, Dispatch
from nicplug.engine.model import Cause, Key, Observed, Trigger
from nicplug.engine.slicing import LoopSlices


class WorkClock:
    """A work clock that moves only when work is done."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def _beside_a_ticker(work: list[asyncio.Task[None]], trail: list[str]) -> None:
    async def ticker() -> None:
        while True:
            trail.append("tick")
            await asyncio.sleep(0)

    ticking = asyncio.create_task(ticker())
    await asyncio.gather(*work)
    ticking.cancel()


async def test_the_work_of_one_turn_stays_within_its_budget() -> None:
    clock = WorkClock()
    slices = LoopSlices(0.005, now=clock)
    trail: list[str] = []

    async def work(name: str) -> None:
        await slices.turn()
        clock.now += 0.002  # each slice takes 2 ms
        trail.append(name)

    tasks = [asyncio.create_task(work(f"w{i}")) for i in range(7)]
    await _beside_a_ticker(tasks, trail)
    turns = " ".join(trail).split("tick")
    ran = [t.split() for t in turns if t.strip()]
    # 0, 2, 4 ms spent: a third slice still starts; then the turn is spent
    assert ran == [["w0", "w1", "w2"], ["w3", "w4", "w5"], ["w6"]]
    assert slices.deferred > 0


async def test_a_clock_that_does_not_move_never_spends_a_turn() -> None:
    slices = LoopSlices(0.005, now=lambda: 0.0)
    trail: list[str] = []

    async def work(name: str) -> None:
        await slices.turn()
        trail.append(name)

    await _beside_a_ticker([asyncio.create_task(work(f"w{i}")) for i in range(50)], trail)
    assert [t for t in trail if t != "tick"] == [f"w{i}" for i in range(50)]
    assert slices.deferred == 0


def test_a_budget_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        LoopSlices(0)


async def test_decisions_of_many_keys_share_the_turns_and_each_key_keeps_its_order() -> None:
    clock = WorkClock()
    slices = LoopSlices(0.005, now=clock)
    trail: list[str] = []

    async def handle(key: Key, trigger: Trigger) -> None:
        clock.now += 0.003  # a decision takes 3 ms
        assert isinstance(trigger, Observed)
        trail.append(f"{key}:{trigger.cause.ref}")
        await asyncio.sleep(0)  # its commit

    activity = Activity()
    dispatch = Dispatch(handle, concurrency=64, activity=activity,
                        on_error=lambda _k, e: trail.append(f"error {e!r}"), slices=slices)
    for key in ("a", "b", "c", "d"):
        dispatch.submit(Key(key), Observed(Cause("observation", "1")))
    dispatch.submit(Key("a"), Observed(Cause("observation", "2")))  # coalesces with a:1
    dispatch.submit(Key("b"), Observed(Cause("observation", "2")))
    await _beside_a_ticker([asyncio.create_task(activity.settled())], trail)
    decided = [t for t in trail if t != "tick"]
    assert sorted(decided) == ["a:2", "b:2", "c:1", "d:1"]
    turns = [t.split() for t in " ".join(trail).split("tick") if t.strip()]
    assert all(len(turn) <= 2 for turn in turns)  # 0 and 3 ms: two decisions a turn
    assert slices.deferred > 0
    await dispatch.close()
