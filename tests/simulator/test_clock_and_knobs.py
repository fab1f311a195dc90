"""The virtual clock's ordering and the knobs' validation."""

from __future__ import annotations

import asyncio

import pytest
from typer.testing import CliRunner

from nicplug.adapters.cli import app
from nicplug.simulator.clock import VirtualSimClock
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Delays, Failures, Knobs


async def test_sleepers_wake_in_deadline_order_at_their_own_time() -> None:
    clock = VirtualSimClock()
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append((name, clock.now()))

    tasks = [asyncio.create_task(sleeper(n, s)) for n, s in
             (("late", 3.0), ("early", 1.0), ("tie-1", 2.0), ("tie-2", 2.0), ("never", 9.0))]
    await asyncio.sleep(0)
    await clock.advance(2.5)
    assert woke == [("early", 1.0), ("tie-1", 2.0), ("tie-2", 2.0)]
    assert clock.now() == 2.5 and clock.next_deadline == 3.0
    tasks[0].cancel()
    await asyncio.sleep(0)
    assert clock.next_deadline == 9.0
    with pytest.raises(ValueError, match="backwards"):
        await clock.advance(-1)
    tasks[-1].cancel()


async def test_a_wake_up_can_schedule_another_within_the_same_advance() -> None:
    clock = VirtualSimClock()
    seen: list[float] = []

    async def chain() -> None:
        await clock.sleep(1.0)
        seen.append(clock.now())
        await clock.sleep(1.0)
        seen.append(clock.now())

    task = asyncio.create_task(chain())
    await asyncio.sleep(0)
    await clock.advance(5.0)
    assert seen == [1.0, 2.0]
    await task


@pytest.mark.parametrize(("build", "message"), [
    (lambda: Knobs(dialect="ovn"), "dialect must be one of"),  # type: ignore[arg-type]
    (lambda: Knobs(dynamic_networks_controller=True), "only in the multus dialect"),
    (lambda: Delays(attach=-1), "delay attach"),
    (lambda: Delays(migration=float("nan")), "delay migration"),
    (lambda: Failures(sdn_rate=1.5), "within"),
    (lambda: Failures(sdn_networks=frozenset({"user-net"})), "Network/<name>"),
    (lambda: Knobs(migration_required_grace=-3), "grace"),
    (lambda: Fixtures(vms=-1), ">= 0"),
    (lambda: Fixtures(rollout_strategy="Sometimes"), "rollout strategy"),  # type: ignore[arg-type]
])
def test_bad_settings_are_refused_with_a_clear_message(build: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()  # type: ignore[operator]


@pytest.mark.parametrize(("argv", "message"), [
    (["--dialect", "ovn"], "dialect must be one of"),
    (["--no-dynamic-networks", "--dynamic-networks"], "only in the multus dialect"),
    (["--rollout-strategy", "Never"], "rollout strategy must be one of"),
    (["--fail-network", "storage"], "ClusterNetwork/<name>"),
    (["--vms", "-2"], "greater than or equal to 0"),
    (["--vm-network", "Main"], "Network/<name> or ClusterNetwork/<name>"),
    (["--nad-namespace", ""], "must not be empty"),
    (["--dialect", "multus", "--native-hotplug"], "native_hotplug is a setting of the deckhouse"),
])
def test_sim_serve_refuses_bad_options_before_starting(argv: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["sim", "serve", *argv])
    assert result.exit_code == 2
    assert message in result.output
