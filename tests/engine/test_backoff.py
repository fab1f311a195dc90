"""The one backoff schedule: its figures, its one draw per call, its refusals."""

from __future__ import annotations

import random

import pytest

from nicplug.engine.backoff import Backoff


def test_the_wait_doubles_from_the_base_up_to_the_cap() -> None:
    schedule = Backoff(base=0.5, cap=30.0)
    assert [schedule.delay(n) for n in range(1, 10)] == [
        0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert schedule.delay(0) == schedule.delay(-3) == 0.5  # before the first retry: the base


def test_a_power_too_large_for_a_float_is_the_cap() -> None:
    assert Backoff(base=5.0, cap=300.0, factor=3.0).delay(10_000) == 300.0
    assert Backoff(base=0.2, cap=5.0, jitter=0.1).delay(5_000, random.Random(1)) <= 5.5


def test_jitter_spreads_the_wait_by_its_fraction_and_repeats_with_the_seed() -> None:
    schedule = Backoff(base=1.0, cap=300.0, jitter=0.25)
    waits = [schedule.delay(n, random.Random(seed)) for seed in range(50) for n in (1, 4)]
    assert all(0.75 <= w <= 1.25 or 6.0 <= w <= 10.0 for w in waits)
    assert len(set(waits)) > 50  # spread, not one value
    again = [schedule.delay(n, random.Random(seed)) for seed in range(50) for n in (1, 4)]
    assert again == waits


def test_each_call_draws_exactly_once_whatever_the_jitter() -> None:
    for jitter in (0.0, 0.1):
        rng, twin = random.Random(7), random.Random(7)
        Backoff(base=1.0, cap=10.0, jitter=jitter).delay(3, rng)
        twin.random()
        assert rng.random() == twin.random()


def test_a_jittered_schedule_without_an_rng_refuses() -> None:
    with pytest.raises(ValueError, match="needs an rng"):
        Backoff(base=1.0, cap=10.0, jitter=0.1).delay(1)


@pytest.mark.parametrize("figures", [
    {"base": -1.0, "cap": 10.0}, {"base": 1.0, "cap": float("inf")},
    {"base": 1.0, "cap": 10.0, "factor": 0.5}, {"base": 1.0, "cap": 10.0, "jitter": 1.5},
])
def test_figures_that_make_no_schedule_are_refused(figures: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="backoff"):
        Backoff(**figures)
