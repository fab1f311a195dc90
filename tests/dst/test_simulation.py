"""The deterministic simulation of controller and cluster (`nicplug.adapters.simulation`).

* one seed, one run: the same schedule played twice commits the same writes in the same
  order (a digest of every store change) and ends the same way;
* a failing schedule shrinks to fewer steps failing the same invariant;
* one process plays many runs: a run leaves no cluster of its own alive behind it;
* `nicplug simulate` refuses bad input with one line and exit 2;
* the fixed seeds of CI (`SEEDS`): every run ends with no violation except those
  recorded in `known_violations.json`, today's findings on unfixed code. A seed that
  starts failing differently, or a new failing seed, fails the test; when a fix makes a
  recorded seed pass, the test says so, so the record is kept true.
* `found_defects.json`: the seed or schedule that shows each defect of issue 12. An
  entry is collected as a regression test only once it is marked `"fixed": true`
  (the fixes are made elsewhere); until then it is listed, not run.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from typer.testing import CliRunner

from nicplug.adapters.cli import app
from nicplug.adapters.core.executor.kvvm import KVVMPatches
from nicplug.adapters.simulation.loop import Deadlock, VirtualTimeLoop
from nicplug.adapters.simulation.run import simulate
from nicplug.adapters.simulation.schedule import Schedule, Step, draw
from nicplug.adapters.simulation.shrink import shrink

HERE = Path(__file__).parent
_RECORD = json.loads((HERE / "known_violations.json").read_text())
SEEDS = range(int(os.environ.get("NICPLUG_DST_SEEDS", _RECORD["checked"])))
KNOWN: dict[str, str] = _RECORD["seeds"]
DEFECTS: list[dict[str, object]] = json.loads((HERE / "found_defects.json").read_text())["defects"]


def test_the_loop_jumps_over_idle_time_and_refuses_to_wait_for_nothing() -> None:
    loop = VirtualTimeLoop()
    try:
        async def an_hour() -> float:
            start = loop.time()
            await asyncio.sleep(3600)
            return loop.time() - start

        started = time.perf_counter()
        # a timer fires at its time or up to one step of virtual time (1 µs) after it
        assert loop.run_until_complete(an_hour()) == pytest.approx(3600, abs=1e-5)
        assert time.perf_counter() - started < 1.0
        with pytest.raises(Deadlock):
            loop.run_until_complete(loop.create_future())
    finally:
        loop.close()


def test_the_loop_still_hears_a_signal_though_it_polls_no_descriptor_of_its_own() -> None:
    loop = VirtualTimeLoop()
    try:
        heard = loop.create_future()
        loop.add_signal_handler(signal.SIGUSR1, heard.set_result, "heard")
        os.kill(os.getpid(), signal.SIGUSR1)
        assert loop.run_until_complete(heard) == "heard"
    finally:
        loop.remove_signal_handler(signal.SIGUSR1)
        loop.close()


def test_the_same_seed_plays_the_same_run() -> None:
    first, second = simulate(draw(8)), simulate(draw(8))
    assert first.digest == second.digest
    assert first.writes == second.writes > 20
    assert (first.violation, first.steps_taken) == (second.violation, second.steps_taken)


def test_a_run_does_not_depend_on_the_runs_before_it_nor_on_the_process(tmp_path: Path) -> None:
    simulate(draw(40))
    here = simulate(draw(41))
    alone = subprocess.run(
        [sys.executable, "-m", "nicplug.adapters.cli", "simulate", "--seed", "41",
         "--shrink-budget", "0", "--out", str(tmp_path)],
        capture_output=True, text=True, check=False, timeout=120,
        env={**os.environ, "PYTHONHASHSEED": "123"},
    )
    assert f"digest {here.digest}" in alone.stdout, alone.stdout + alone.stderr


def test_different_seeds_play_different_runs() -> None:
    assert simulate(draw(8)).digest != simulate(draw(10)).digest


def test_a_failing_schedule_shrinks_and_keeps_its_invariant(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a defect put back (a write for a stopped VM's next boot no longer checks
    that the VM is still stopped), seed 201 finds it, and its schedule shrinks."""

    async def unchecked(self: KVVMPatches, e: object) -> None:
        return None

    monkeypatch.setattr(KVVMPatches, "_check_stopped", unchecked)
    failing = simulate(draw(201))
    assert failing.violation is not None, "seed 201 shows the defect put back"
    assert failing.violation.invariant == "link-before-sdn"
    small = shrink(failing, budget=12)
    assert small.violation is not None
    assert small.violation.invariant == failing.violation.invariant
    assert len(small.schedule.steps) < len(failing.schedule.steps)


def test_a_schedule_round_trips_through_json() -> None:
    schedule = draw(12)
    assert Schedule.from_json(json.loads(json.dumps(schedule.to_json()))) == schedule


def test_an_unknown_action_is_a_harness_error() -> None:
    schedule = draw(8).with_steps((Step(0.0, "teleport"),))
    with pytest.raises(ValueError, match="unknown action 'teleport'"):
        simulate(schedule)


@pytest.mark.parametrize("args", [["--faults", "meteor"], ["--schedules", "0"]])
def test_the_command_refuses_bad_options(args: list[str]) -> None:
    result = CliRunner().invoke(app, ["dst", *args])
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_the_command_refuses_an_unreadable_schedule(tmp_path: Path) -> None:
    bad = tmp_path / "s.json"
    bad.write_text("{not json")
    result = CliRunner().invoke(app, ["dst", "--schedule", str(bad)])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "cannot read the schedule" in result.output


def test_a_run_leaves_no_cluster_alive_behind_it() -> None:
    simulate(draw(8))
    gc.unfreeze()  # what `simulate` froze is counted too
    try:
        gc.collect()
        left = [o for o in gc.get_objects() if isinstance(o, web.Application)]
    finally:
        gc.freeze()
    assert left == []


def test_a_replica_killed_as_it_starts_closes_both_its_sessions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seed 21185 kills a replica in the instant it started, its first requests in
    flight: the close of its first connection ended in a `CancelledError` and the
    Lease's session was never closed ("Unclosed client session" once the run ended)."""
    made: list[aiohttp.ClientSession] = []
    original = aiohttp.ClientSession.__init__

    def tracked(self: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(aiohttp.ClientSession, "__init__", tracked)
    simulate(draw(21185))
    assert len(made) > 4  # two per start of a replica, a replica started three times
    assert [s for s in made if not s.closed] == []


def _outcome(seed: int) -> tuple[int, str | None]:
    outcome = simulate(draw(seed))
    return seed, outcome.violation.invariant if outcome.violation else None


@pytest.mark.slow
@pytest.mark.timeout(1800)  # ~0.3 CPU-s a seed: 1-2 min on 2 idle cores, more on a busy one
def test_the_fixed_seeds_find_only_what_is_known() -> None:
    with ProcessPoolExecutor(max_workers=2) as pool:
        found = dict(pool.map(_outcome, SEEDS, chunksize=10))
    new = {s: v for s, v in found.items() if v is not None and KNOWN.get(str(s)) != v}
    gone = {s: KNOWN[str(s)] for s, v in found.items() if v is None and str(s) in KNOWN}
    assert not new, f"violations not in known_violations.json: {new}"
    assert not gone, (f"these seeds pass now: remove them from known_violations.json "
                      f"(and mark their defects fixed): {gone}")


FIXED = [pytest.param(d, id=f"defect-{d['defect']}-seed-{d.get('seed')}")
         for d in DEFECTS if d.get("fixed") is True]


def test_the_defects_fixed_so_far_are_regression_seeds() -> None:
    assert {d["defect"] for d in DEFECTS if d.get("fixed") is True} >= {1, 2, 3, 6, 7}


@pytest.mark.parametrize("defect", FIXED)
def test_a_fixed_defect_stays_fixed(defect: dict[str, object]) -> None:
    if "schedule" in defect:
        schedule = Schedule.from_json(json.loads((HERE / str(defect["schedule"])).read_text()))
    else:
        schedule = draw(int(str(defect["seed"])))
    outcome = simulate(schedule)
    assert outcome.violation is None, outcome.violation.line()


def test_an_effect_sent_while_the_journal_refuses_writes_is_not_a_write_before_sync() -> None:
    """Seed 550: one group commit fails (a full disk) while a KVVM patch committed
    before it is sent. The controller is not ready then (`/readyz` asks for a journal
    that takes writes), but its informers have listed: `write-before-sync` asks only
    that, and an effect journaled before the disk filled is the controller's to send."""
    outcome = simulate(draw(550))
    assert outcome.violation is None, outcome.violation.line()


def test_the_deckhouse_world_and_the_users_intent_are_drawn_where_they_apply() -> None:
    """Half the deckhouse seeds are played against Deckhouse's renamed KubeVirt API, where
    nicplug restarts through VirtualMachineOperations; only there, and only where it
    restarts at all (Automatic), does the user act once nicplug's restart is under way."""
    schedules = [draw(seed) for seed in range(400)]
    worlds = {(s.setup.dialect, s.setup.kubevirt_api) for s in schedules}
    assert worlds == {("deckhouse", "deckhouse"), ("deckhouse", "upstream"),
                      ("multus", "upstream")}
    intents = [s for s in schedules if any(step.action == "intend" for step in s.steps)]
    assert len(intents) > 10
    for schedule in intents:
        assert (schedule.setup.kubevirt_api, schedule.setup.approval) == ("deckhouse", "Automatic")
        for step in schedule.steps:
            if step.action == "intend":
                assert step.arg["when"] in ("stopping", "stopped")
                assert {act for act, _ in step.arg["acts"]} <= {"Start", "Stop", "Restart"}
