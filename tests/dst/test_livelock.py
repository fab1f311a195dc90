"""The invariants see a livelock: an operation retrying a failing effect for ever always
has a timer armed, and yet is flagged within one schedule (`simulation/bounds.py`)."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from nicplug.adapters.core.executor import KubeExecutor
from nicplug.adapters.simulation.liveness import _unbounded
from nicplug.adapters.simulation.run import simulate
from nicplug.adapters.simulation.schedule import Schedule, Setup, Step
from nicplug.engine.errors import TemporaryError

ROOT = Path(__file__).resolve().parents[2]
LIVELOCKS = ("effect-livelock", "effects-unbounded", "attempts-unbounded")


def _plug() -> Schedule:
    return Schedule(seed=900003, setup=Setup(), faults=("user",), steps=(
        Step(wait=0.0, action="networks", arg=["Network/user-net"]),
        Step(wait=40.0, action="networks", arg=["Network/user-net"]),
    ))


def test_an_effect_that_fails_for_ever_is_a_livelock(monkeypatch: pytest.MonkeyPatch) -> None:
    execute = KubeExecutor.execute

    async def failing(self: KubeExecutor, effect: Any) -> Any:
        if effect.type == "PatchPodNetworks":
            raise TemporaryError("planted: the pod patch fails, every time")
        return await execute(self, effect)

    monkeypatch.setattr(KubeExecutor, "execute", failing)
    outcome = simulate(_plug())
    assert outcome.violation is not None
    assert outcome.violation.invariant in LIVELOCKS, outcome.violation.line()


def test_the_same_schedule_is_clean_without_the_planted_fault() -> None:
    outcome = simulate(_plug())
    assert outcome.violation is None, outcome.violation.line()


def test_the_teardown_leaves_no_task_pending(monkeypatch: pytest.MonkeyPatch,
                                             caplog: pytest.LogCaptureFixture) -> None:
    """Whatever a run leaves running when it ends (here a task planted at its heal) is
    cancelled and ended before the loop closes, never destroyed while pending."""
    from nicplug.adapters.simulation.actions import Hands

    heal = Hands.heal
    ended: list[bool] = []

    async def planted() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            ended.append(True)

    async def healing(self: Hands) -> None:
        asyncio.get_running_loop().create_task(planted())
        await heal(self)

    monkeypatch.setattr(Hands, "heal", healing)
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        outcome = simulate(_plug())
        gc.collect()
    assert outcome.violation is None
    assert ended == [True]
    assert "destroyed but it is pending" not in caplog.text


def _journal_with_creates(tmp_path: Path, times: list[float], names: list[str],
                          type_: str = "CreateMigration") -> Path:
    """A journal (the project's own schema) whose one plug asked to create the
    migrations `names` at `times` (or, with `type_`, other effects naming them)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "j.db"
    conn = sqlite3.connect(path)
    conn.executescript((ROOT / "migrations" / "0001_initial.sql").read_text())
    for i, (at, name) in enumerate(zip(times, names, strict=True)):
        payload = json.dumps({"namespace": "default", "vmi": "vm-00000", "migration": name})
        conn.execute(
            "INSERT INTO effects (stream, key, type, payload, idempotency_key, status,"
            " attempts, created_wall, created_logical, updated_wall, updated_logical)"
            " VALUES (?, ?, ?, ?, ?, 'succeeded', 1, ?, ?, ?, ?)",
            ("uid/Network/user-net/plug/1", f"k{i}", type_, payload, f"i{i}",
             at, at, at, at))
    conn.commit()
    conn.close()
    return path


def test_a_migration_asked_again_as_blind_reissues_space_it_is_within_its_bound(
    tmp_path: Path,
) -> None:
    """Seed 2865: one migration asked for 0, 30, 60, 120, 180, 240 s into its state while
    the informers never showed it; the create of one name creates nothing twice."""
    path = _journal_with_creates(tmp_path, [0, 30, 60, 120, 180, 240], ["m"] * 6)
    assert _unbounded(path) == []


def test_a_migration_asked_again_every_30_s_is_a_livelock(tmp_path: Path) -> None:
    path = _journal_with_creates(tmp_path, [30.0 * i for i in range(6)], ["m"] * 6)
    assert [p[0] for p in _unbounded(path)] == ["effects-unbounded"]


def test_a_kvvm_patch_reissued_blind_at_the_spacing_is_within_its_bound(
    tmp_path: Path,
) -> None:
    """Seed 28759: one template written for the next boot, asked again 30, 60, 120, 180,
    240, 300 s on while the VM's watches stalled; each repeat was refused by its `test`
    of the resourceVersion the informers held. Every 30 s it is a livelock still, and a
    seventh template asked for is over the count."""
    times = [0, 30, 60, 120, 180, 240, 300]
    path = _journal_with_creates(tmp_path, times, ["t"] * 7, "PatchVirtualMachine")
    assert _unbounded(path) == []
    path = _journal_with_creates(
        tmp_path / "fast", [30.0 * i for i in range(7)], ["t"] * 7, "PatchVirtualMachine")
    assert [p[0] for p in _unbounded(path)] == ["effects-unbounded"]
    path = _journal_with_creates(
        tmp_path / "many", [600.0 * i for i in range(7)], [f"t{i}" for i in range(7)],
        "PatchVirtualMachine")
    assert _unbounded(path) == [
        ("effects-unbounded", "uid/Network/user-net/plug/1 issued 7 PatchVirtualMachine")]


def test_a_third_migration_of_one_operation_is_over_its_bound(tmp_path: Path) -> None:
    path = _journal_with_creates(tmp_path, [0, 400, 800], ["m", "m-2", "m-3"])
    assert _unbounded(path) == [
        ("effects-unbounded", "uid/Network/user-net/plug/1 issued 3 CreateMigration")]


def _journal_with_kvvm_patches(tmp_path: Path, times: list[float], versions: list[str]) -> Path:
    """A journal whose one plug asked for the same KVVM patch at `times`, each pinned to
    the template version of `versions` its decision read."""
    path = tmp_path / "j.db"
    conn = sqlite3.connect(path)
    conn.executescript((ROOT / "migrations" / "0001_initial.sql").read_text())
    for i, (at, version) in enumerate(zip(times, versions, strict=True)):
        payload = json.dumps({"namespace": "default", "name": "vm-00001",
                              "networks": [{"if_name": "veth_n8a907563", "absent": False}],
                              "observed": {"version": version}})
        conn.execute(
            "INSERT INTO effects (stream, key, type, payload, idempotency_key, status,"
            " attempts, created_wall, created_logical, updated_wall, updated_logical)"
            " VALUES (?, ?, 'PatchVirtualMachine', ?, ?, 'succeeded', 1, ?, ?, ?, ?)",
            ("uid/Network/second-net/plug/1", f"k{i}", payload, f"i{i}", at, at, at, at))
    conn.commit()
    conn.close()
    return path


def test_a_kvvm_patch_asked_again_while_the_watches_stall_is_within_its_bound(
    tmp_path: Path,
) -> None:
    """Seed 30502: one KVVM patch landed and was asked again every 60 s for six minutes
    while the VM's watches stalled; each repeat, pinned to the template it was decided
    from, was refused (its `test` failed) and changed nothing."""
    path = _journal_with_kvvm_patches(tmp_path, [61.0 + 60 * i for i in range(7)], ["74"] * 7)
    assert _unbounded(path) == []


def test_a_kvvm_patch_asked_again_every_5_s_is_a_livelock(tmp_path: Path) -> None:
    path = _journal_with_kvvm_patches(tmp_path, [5.0 * i for i in range(7)], ["74"] * 7)
    assert [p[0] for p in _unbounded(path)] == ["effects-unbounded"]


def test_seven_kvvm_patches_decided_from_seven_templates_are_over_the_bound(
    tmp_path: Path,
) -> None:
    path = _journal_with_kvvm_patches(tmp_path, [100.0 * i for i in range(7)],
                                      [str(70 + i) for i in range(7)])
    assert _unbounded(path) == [
        ("effects-unbounded", "uid/Network/second-net/plug/1 issued 7 PatchVirtualMachine")]


def _journal_with_pod_patches(tmp_path: Path, times: list[float], entries: list[str],
                              pod_uid: str = "pod-1") -> Path:
    """A journal whose one plug asked for a pod patch of launcher pod `pod_uid` at
    `times`, each requesting the ifName of `entries` and decided from an empty list."""
    path = tmp_path / "j.db"
    conn = sqlite3.connect(path)
    conn.executescript((ROOT / "migrations" / "0001_initial.sql").read_text())
    for i, (at, if_name) in enumerate(zip(times, entries, strict=True)):
        payload = json.dumps({"namespace": "default", "pod": "virt-launcher-vm-00000-gd68f",
                              "pod_uid": pod_uid,
                              "entries": [{"identity": "Network/second-net",
                                           "if_name": if_name, "id": 3, "mac": None}],
                              "observed": []})
        conn.execute(
            "INSERT INTO effects (stream, key, type, payload, idempotency_key, status,"
            " attempts, created_wall, created_logical, updated_wall, updated_logical)"
            " VALUES (?, ?, 'PatchPodNetworks', ?, ?, 'failed', 1, ?, ?, ?, ?)",
            ("uid/Network/second-net/plug/1", f"k{i}", payload, f"i{i}", at, at, at, at))
    conn.commit()
    conn.close()
    return path


def test_a_pod_patch_refused_by_its_test_and_asked_again_is_within_its_bound(
    tmp_path: Path,
) -> None:
    """Seed 37870: the watches stalled, the informers' pod never showed a landed patch,
    and each pod patch decided from it was refused by its `test` and decided again:
    one request 4 times in 93 s, beside one other request."""
    path = _journal_with_pod_patches(tmp_path, [34.5, 64.5, 94.5, 122.1, 127.1],
                                     ["veth_a", "veth_a", "veth_a", "veth_b", "veth_a"])
    assert _unbounded(path) == []


def test_a_pod_patch_asked_again_every_5_s_is_a_livelock(tmp_path: Path) -> None:
    path = _journal_with_pod_patches(tmp_path, [5.0 * i for i in range(5)], ["veth_a"] * 5)
    assert [p[0] for p in _unbounded(path)] == ["effects-unbounded"]


def test_five_different_pod_patches_of_one_pod_are_over_the_bound(tmp_path: Path) -> None:
    path = _journal_with_pod_patches(tmp_path, [100.0 * i for i in range(5)],
                                     [f"veth_{i}" for i in range(5)])
    assert _unbounded(path) == [
        ("effects-unbounded", "uid/Network/second-net/plug/1 issued 5 PatchPodNetworks for pod-1")]
