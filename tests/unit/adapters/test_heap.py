"""Loading the cache holds the cyclic collector off, then freezes what was loaded."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from nicplug.adapters.heap import loading_long_lived


@pytest.fixture(autouse=True)
def _collector_restored() -> Iterator[None]:
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    if enabled:
        gc.enable()


def test_the_collector_is_off_while_loading_and_what_was_loaded_is_frozen_after() -> None:
    gc.enable()
    frozen_before = gc.get_freeze_count()
    with loading_long_lived():
        assert not gc.isenabled()
        cache = [{"metadata": {"name": f"vm-{i}"}, "items": [i]} for i in range(1000)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= frozen_before + len(cache)


def test_a_disabled_collector_stays_disabled_and_a_failure_still_freezes() -> None:
    gc.disable()
    frozen_before = gc.get_freeze_count()
    with pytest.raises(RuntimeError), loading_long_lived():
        cache = [[i] for i in range(100)]
        raise RuntimeError(len(cache))
    assert not gc.isenabled()
    assert gc.get_freeze_count() > frozen_before
