"""Records one tape per demo scenario from the simulated cluster.

Each scenario runs in a world of its own (a simulated cluster and a real controller
started with `--record-tape`, as in the demo), its steps are played, and once its
outcomes are reached the controller is stopped. The tape is then cut down to the
scenario's VM (and the cluster-wide kinds), which keeps the committed tapes small:
the other VMs of the world only sit there, and no effect concerns them.

    python -m tests.tapes.recording            # re-record every tape in tests/tapes/
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from nicplug.adapters.demo.board import Board
from nicplug.adapters.demo.play import WorldDriver
from nicplug.adapters.demo.scenarios import SCENARIOS, WORLDS, Scenario
from nicplug.adapters.demo.worlds import WorldSpec, start_world, stop_world
from nicplug.adapters.kube.calls import KubeCalls
from nicplug.adapters.kube.client import ClientSettings, connect

HERE = Path(__file__).parent
SETTLE_SECONDS = 1.5
_VM_INDEX = re.compile(r"vm-(\d+)")


def slug(scenario: Scenario) -> str:
    words = re.sub(r"[^a-z0-9]+", "-", scenario.title.lower()).strip("-")
    return f"{scenario.world}-{words}"


def world_of(scenario: Scenario) -> WorldSpec:
    return next(w for w in WORLDS if w.name == scenario.world)


def replay_args(scenario: Scenario) -> list[str]:
    """The options a replay of the scenario's tape needs: the controller's."""
    spec = world_of(scenario)
    return ["--flavour", spec.flavour, *spec.controller_args]


def scenario_vm(scenario: Scenario) -> str:
    return scenario.outcomes[0].vm


async def record(scenario: Scenario, directory: Path, tape: Path, *, budget: float = 90.0) -> None:
    """Run `scenario` against a fresh world, recording the controller's tape to `tape`."""
    spec = world_of(scenario)
    index = int(_VM_INDEX.findall(scenario_vm(scenario))[0])
    raw = directory / f"{slug(scenario)}.raw"
    spec = dataclasses.replace(
        spec, name=slug(scenario), vms=index + 1,
        controller_args=(*spec.controller_args, "--record-tape", str(raw)),
        # the samples record nicplug's own writes (a replay's `--mode auto` is drive);
        # the platform's own hotplug has its tape in platform_tape.py
        mode="drive",
    )
    world = await start_world(spec, directory)
    board = Board({spec.name: world.journal})
    try:
        connection = await connect(ClientSettings(kubeconfig=world.kubeconfig))
        refresh = asyncio.create_task(_refresh(board))
        try:
            deadline = time.monotonic() + budget
            driver = WorldDriver(spec.name, KubeCalls(connection), board, deadline,
                                 edits_template=spec.dialect == "multus")
            await scenario.steps(driver)
            for outcome in scenario.outcomes:
                await driver.wait_for(outcome, states=frozenset({outcome.state}))
            await asyncio.sleep(SETTLE_SECONDS)
        finally:
            refresh.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await refresh
            await connection.close()
    finally:
        await board.close()
        await stop_world(world)
    with tape.open("wb") as out:
        for line in cut_to_vm(raw, scenario_vm(scenario)):
            out.write(line)


async def _refresh(board: Board) -> None:
    while True:
        await board.refresh()
        await asyncio.sleep(0.1)


def cut_to_vm(raw: Path, vm: str) -> Iterator[bytes]:
    """The lines of `raw` that concern `vm` (namespace/name) or every VM, and the
    effects and bookmarks."""
    namespace, _, name = vm.partition("/")
    with raw.open("rb") as lines:
        for line in lines:
            entry: dict[str, Any] = orjson.loads(line)
            if entry["type"] in ("EFFECT", "BOOKMARK") \
                    or _concerns(entry["object"], namespace, name):
                yield line


def _concerns(obj: dict[str, Any], namespace: str, name: str) -> bool:
    meta = obj.get("metadata") or {}
    kind = str(obj.get("kind")).removeprefix("InternalVirtualization")  # Deckhouse's names
    if kind in ("KubeVirt", "Network", "ClusterNetwork"):
        return True
    if kind == "Namespace":  # its label may opt the VM in to migrations
        return bool(meta.get("name") == namespace)
    if meta.get("namespace") != namespace:
        return False
    owner = meta.get("name")
    if kind == "Pod":  # the demo's VMs keep their names as hostnames
        labels = meta.get("labels") or {}
        owner = labels.get("vm.kubevirt.io/name") or labels.get(
            "vm.kubevirt.internal.virtualization.deckhouse.io/name")
    elif kind == "VirtualMachineInstanceMigration":
        owner = (obj.get("spec") or {}).get("vmiName")
    elif kind == "VirtualMachineOperation":  # Deckhouse's: the VM it acts on
        owner = (obj.get("spec") or {}).get("virtualMachineName")
    elif kind == "VirtualMachineMACAddress":  # owned by its VM, as Deckhouse makes it
        owner = next((o.get("name") for o in meta.get("ownerReferences") or []
                      if o.get("kind") == "VirtualMachine"), None)
    return bool(owner == name)


async def _record_all(directory: Path) -> None:
    await asyncio.gather(*(
        record(s, directory, HERE / f"{slug(s)}.tape.jsonl") for s in SCENARIOS
    ))


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory(prefix="nicplug-tapes-") as tmp:
        asyncio.run(_record_all(Path(tmp)))
    sys.exit(0)
