"""The event loop's stall probe: how late a ticker wakes, and the largest lateness."""

from __future__ import annotations

import asyncio

import pytest

from nicplug.adapters.core.loop_lag import LoopLag


async def test_a_tick_woken_late_records_the_stall_and_keeps_the_largest() -> None:
    stalls = iter([0.0, 0.070, 0.005])  # how much later than asked each sleep returns
    clock = [100.0]
    seen: list[float] = []

    async def late_sleep(interval: float) -> None:
        stall = next(stalls, None)
        if stall is None:
            raise asyncio.CancelledError
        clock[0] += interval + stall

    lag = LoopLag(interval=0.010, on_lag=seen.append)
    with pytest.raises(asyncio.CancelledError):
        await lag.run(now=lambda: clock[0], sleep=late_sleep)
    assert seen == pytest.approx([0.0, 0.070, 0.005])
    assert lag.largest == pytest.approx(0.070)


def test_the_largest_stall_is_kept() -> None:
    lag = LoopLag()
    lag.record(0.2)
    lag.record(0.01)
    assert lag.largest == 0.2
