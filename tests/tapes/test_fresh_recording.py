"""A tape recorded now, from a simulated cluster, replays to the live run's result."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import orjson
import pytest

from nicplug.adapters.demo.scenarios import SCENARIOS
from nicplug.engine.sqlite_journal import SQLiteJournal
from tests.tapes.goldens import SampleTape, replay_output
from tests.tapes.kubectl_tapes import make_tape
from tests.tapes.recording import record, replay_args, slug


async def _live_states(journal: Path) -> list[tuple[object, ...]]:
    opened = await SQLiteJournal.open(journal, read_only=True)
    try:
        views = await opened.views()
    finally:
        await opened.close()
    return sorted(
        (v.view.snapshot["vm"], v.view.snapshot["network"], v.view.snapshot["direction"],
         v.view.state, v.view.snapshot["reason"], tuple(v.view.snapshot["history"]))
        for v in views
    )


@pytest.mark.slow
async def test_a_fresh_recording_replays_to_the_live_final_states(tmp_path: Path) -> None:
    scenario = next(s for s in SCENARIOS if s.world == "kubevirt")
    tape = tmp_path / "fresh.tape.jsonl"
    await record(scenario, tmp_path, tape)
    live = await _live_states(tmp_path / f"{slug(scenario)}.db")
    assert live, "the live run journaled no operation"
    sample = SampleTape("fresh", tape, tuple(replay_args(scenario)), scenario.outcomes)
    code, output = await asyncio.to_thread(replay_output, sample)  # the CLI runs its own loop
    assert code == 0
    replayed = sorted(
        (op["vm"], op["network"], op["direction"], op["state"], op["reason"],
         tuple(op["history"]))
        for op in orjson.loads(output)["operations"]
    )
    assert [row[:5] for row in replayed] == [row[:5] for row in live]
    for (*_, replayed_trail), (*_, live_trail) in zip(replayed, live, strict=True):
        assert _same_but_for_a_coalesced_burst(replayed_trail, live_trail), (
            replayed_trail, live_trail)


def _same_but_for_a_coalesced_burst(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Both trails start and end alike, and one holds the other in order.

    The live controller coalesces a burst of events on a VM into one observation when
    they arrive before it gets to the VM; the replay coalesces the events of one tape
    millisecond. So a state passed through between two events of one burst (the pod's
    annotation seen just before KubeVirt's `MigrationRequired`) can be in one trail and
    not in the other, and never anything else.
    """
    shorter, longer = sorted((a, b), key=len)
    if shorter[:1] != longer[:1] or shorter[-1:] != longer[-1:]:
        return False
    rest = iter(longer)
    return all(state in rest for state in shorter)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
async def test_a_fresh_kubectl_tape_replays_to_the_plug_attached(tmp_path: Path) -> None:
    tape = tmp_path / "kubectl.tape.json"
    tape.write_bytes(await make_tape(tmp_path))
    code, output = await asyncio.to_thread(replay_output, SampleTape("kubectl", tape, (), ()))
    assert code == 0
    [operation] = orjson.loads(output)["operations"]
    assert (operation["network"], operation["direction"], operation["state"]) == (
        "Network/user-net", "plug", "Attached")
