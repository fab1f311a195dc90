"""A live controller's feed yields to the event loop after each time slice; a replay's
feed (no slice) never does, so its journal cannot depend on interleaving."""

from __future__ import annotations

import asyncio
from itertools import count
from typing import Any

from nicplug.adapters.core.observing import Observing
from nicplug.adapters.kube.flavour import UPSTREAM
from nicplug.adapters.sdn import dialect_for


class Observed:
    """Where `feed` hands worlds: the runtime's `observe`, recorded."""

    def __init__(self, trail: list[str]) -> None:
        self.trail = trail

    async def observe(self, key: Any, world: Any, cause: Any) -> None:
        self.trail.append(f"observe {key}")

    def forget(self, key: Any) -> None:
        """These VMs have no objects at all: each is forgotten after its observation."""


async def _feed_beside_a_ticker(observing: Observing, vms: int) -> list[str]:
    trail: list[str] = []
    for i in range(vms):
        observing.mark(f"ns/vm-{i}", "test")

    async def ticker() -> None:
        while True:
            trail.append("tick")
            await asyncio.sleep(0)

    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    trail.clear()
    await observing.feed(Observed(trail))  # type: ignore[arg-type]
    ticking.cancel()
    return trail


async def test_each_slice_of_work_gives_the_loop_a_turn() -> None:
    clock = count()  # every reading is one second later: each VM fills a slice
    observing = Observing(dialect_for("deckhouse"), UPSTREAM, time_slice=1.0,
                          now=lambda: next(clock))
    trail = await _feed_beside_a_ticker(observing, 3)
    assert trail == ["observe ns/vm-0", "tick", "observe ns/vm-1", "tick",
                     "observe ns/vm-2", "tick"]


async def test_without_a_slice_the_feed_runs_in_one_go() -> None:
    observing = Observing(dialect_for("deckhouse"), UPSTREAM)
    trail = await _feed_beside_a_ticker(observing, 3)
    assert trail == ["observe ns/vm-0", "observe ns/vm-1", "observe ns/vm-2"]
