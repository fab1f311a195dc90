"""`nicplug record` against the simulated API server: lists, the end-of-lists
bookmark, then watch events, all with times; the tape replays."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from nicplug.adapters.kube.flavour import DECKHOUSE
from nicplug.adapters.tapes.lines import INITIAL_EVENTS_END
from nicplug.adapters.tapes.recording import record_cluster
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.resources import VMS
from tests.tapes.goldens import SampleTape, replay_output

ROOT = Path(__file__).resolve().parent.parent.parent
MERGE = "application/merge-patch+json"


KV = "internal.virtualization.deckhouse.io"  # the simulated Deckhouse cluster's KubeVirt


async def test_record_lists_then_watches_every_kind(tmp_path: Path) -> None:
    tape = tmp_path / "tape.jsonl"
    async with SimulatedCluster(fixtures=Fixtures(vms=2)) as cluster:
        stop = asyncio.Event()
        recording = asyncio.create_task(record_cluster(
            tape, flavour=DECKHOUSE, kubeconfig=cluster.kubeconfig_path, stop=stop))
        for _ in range(500):
            if INITIAL_EVENTS_END.encode() in (tape.read_bytes() if tape.exists() else b""):
                break
            await asyncio.sleep(0.01)
        networks = [{"type": "Main", "id": 1}, {"type": "Network", "name": "user-net", "id": 2}]
        cluster.store.patch(VMS, "default", "vm-00000", {"spec": {"networks": networks}},
                            content_type=MERGE)
        for _ in range(500):
            if b'"MODIFIED"' in tape.read_bytes():
                break
            await asyncio.sleep(0.01)
        stop.set()
        lines = await recording
    entries = [orjson.loads(line) for line in tape.read_bytes().splitlines()]
    assert len(entries) == lines
    assert all("at" in e for e in entries)
    marker = next(i for i, e in enumerate(entries) if e["type"] == "BOOKMARK")
    listed = {(e["object"]["apiVersion"], e["object"]["kind"]) for e in entries[:marker]}
    assert {e["type"] for e in entries[:marker]} == {"ADDED"}
    assert {("virtualization.deckhouse.io/v1alpha2", "VirtualMachine"),
            (f"{KV}/v1", "InternalVirtualizationVirtualMachine"),
            (f"{KV}/v1", "InternalVirtualizationVirtualMachineInstance"),
            (f"{KV}/v1", "InternalVirtualizationKubeVirt"),
            ("network.deckhouse.io/v1alpha1", "Network"),
            ("network.deckhouse.io/v1alpha1", "ClusterNetwork"), ("v1", "Pod")} <= listed
    assert any(e["type"] == "MODIFIED" for e in entries[marker:])
    code, output = await asyncio.to_thread(replay_output, SampleTape("rec", tape, (), ()))
    assert code == 0
    [operation] = json.loads(output)["operations"]
    assert (operation["network"], operation["state"]) == ("Network/user-net", "Requested")


@pytest.mark.slow
def test_record_without_a_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    tape = tmp_path / "tape.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "nicplug.adapters.cli", "record",
         "--kubeconfig", str(tmp_path / "none"),
         "-o", str(tape), "--duration", "0.1"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 1
    assert "does not exist" in result.stderr


def test_run_refuses_a_tape_it_cannot_write(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from nicplug.adapters.cli import app

    result = CliRunner().invoke(
        app, ["run", "--record-tape", str(tmp_path / "missing" / "t.jsonl")])
    assert result.exit_code == 2
    assert "no directory" in result.output
