"""Loading the cache holds the cyclic collector off, then freezes what was loaded."""

from __future__ import annotations

import asyncio
import gc
import platform
from collections.abc import Callable, Iterator

import pytest

from nicplug.adapters.heap import (
    frozen_after_full_collections,
    full_collections_in_small_steps,
    give_back_free_memory,
    loading_long_lived,
)


@pytest.fixture(autouse=True)
def _collector_restored() -> Iterator[None]:
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    if enabled:
        gc.enable()


class Later:
    """`call_later` on a clock of our own: `fire()` runs what is due."""

    def __init__(self) -> None:
        self.asked: list[tuple[float, Callable[[], None]]] = []
        self.cancelled = False

    def __call__(self, delay: float, callback: Callable[[], None]) -> Later:
        self.asked.append((delay, callback))
        return self

    def cancel(self) -> None:
        self.cancelled = True

    def fire(self) -> None:
        for _, callback in self.asked:
            callback()


def test_the_collector_is_off_while_loading_and_what_was_loaded_is_frozen_after() -> None:
    gc.enable()
    frozen_before = gc.get_freeze_count()
    later = Later()
    with loading_long_lived(at_most=120.0, later=later):
        assert not gc.isenabled()
        cache = [{"metadata": {"name": f"vm-{i}"}, "items": [i]} for i in range(1000)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= frozen_before + len(cache)
    assert [delay for delay, _ in later.asked] == [120.0] and later.cancelled


def test_a_load_that_does_not_end_gets_the_collector_back() -> None:
    gc.enable()
    later = Later()
    with loading_long_lived(at_most=120.0, later=later):
        later.fire()  # 120 s later, the lists still loading
        assert gc.isenabled()
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled_and_a_failure_still_freezes() -> None:
    gc.disable()
    frozen_before = gc.get_freeze_count()
    later = Later()
    with pytest.raises(RuntimeError), loading_long_lived(at_most=1.0, later=later):
        cache = [[i] for i in range(100)]
        raise RuntimeError(len(cache))
    assert not gc.isenabled()
    assert later.asked == []
    assert gc.get_freeze_count() > frozen_before


def test_what_survives_a_full_collection_is_frozen_and_young_garbage_is_still_collected() -> None:
    gc.enable()
    gc.unfreeze()
    with frozen_after_full_collections():
        kept = [[i] for i in range(1000)]  # lists: always tracked by the collector
        gc.collect(1)
        assert gc.get_freeze_count() == 0  # a young collection freezes nothing
        gc.collect()
        assert gc.get_freeze_count() >= len(kept)
        assert not any(o is kept for o in gc.get_objects(generation=2))
        cycle: list[object] = []
        cycle.append(cycle)  # born after the freeze: the collector still frees it
        del cycle
        assert gc.collect() >= 1
    later = [[0]]
    gc.collect()
    assert any(o is later for o in gc.get_objects(generation=2))  # outside: not frozen


async def test_a_full_collection_follows_every_few_young_ones() -> None:
    gc.disable()  # only the collections this test makes (the fixture enables it again)
    young_per_period = iter([1, 1, 1, 2, 0, 0, 5])
    full_before: list[int] = []

    async def sleep(_: float) -> None:
        full_before.append(gc.get_stats()[2]["collections"])
        try:
            young = next(young_per_period)
        except StopIteration:
            raise asyncio.CancelledError() from None
        for _ in range(young):
            gc.collect(1)

    with pytest.raises(asyncio.CancelledError):
        await full_collections_in_small_steps(every=4, period=1.0, sleep=sleep)
    started = full_before[0]
    # young collections so far, checked after each period: 1, 2, 3, 5 (a full one),
    # then 0, 0 since it, then 5 (another)
    assert [n - started for n in full_before] == [0, 0, 0, 0, 1, 1, 1, 2]


async def test_what_stays_frozen_is_given_back_to_the_collector_every_so_often() -> None:
    """A reference cycle formed among frozen objects outlives its use only until the
    next thaw: the collection after `thaw_after` periods frees it."""
    import weakref

    class Node:
        pass

    periods = 0
    freed_at: list[int] = []

    async def sleep(_: float) -> None:
        nonlocal periods
        periods += 1
        if ref() is None and not freed_at:
            freed_at.append(periods)
        if periods > 6:
            raise asyncio.CancelledError()

    node = Node()
    node.self = node  # type: ignore[attr-defined]
    ref = weakref.ref(node)
    gc.freeze()
    try:
        del node  # a cycle among frozen objects: no ordinary collection frees it
        gc.collect()
        assert ref() is not None
        frozen = gc.get_freeze_count()
        counted: list[tuple[int, int]] = []  # (period, count) at each thaw
        with pytest.raises(asyncio.CancelledError):
            await full_collections_in_small_steps(
                every=1000, period=1.0, thaw_after=3, sleep=sleep,
                on_thaw=lambda count: counted.append((periods, count)))
    finally:
        gc.unfreeze()
    # thawed and collected after the third period: seen gone when the fourth begins
    assert freed_at == [4]
    # counted once per thaw, just before it (the frozen cycle still among them), and the
    # count is what was frozen then; after the sixth period everything was thawed
    assert [period for period, _ in counted] == [3, 6]
    assert counted[0][1] == frozen and counted[1][1] == 0


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc",
    reason="malloc_trim exists only in glibc; on other C libraries nicplug returns no "
    "memory to the system and this has nothing to test")
def test_free_pages_between_live_objects_go_back_to_the_system() -> None:
    held = [bytearray(65536) for _ in range(1000)]  # 64 MB on the C heap, not mmap'd
    del held[::2]  # 32 MB free, in holes between what stays
    before = _rss_mb()
    assert give_back_free_memory()
    assert before - _rss_mb() > 16
    del held
