"""The demo's worlds: one simulated cluster and one controller per world, each a real
process on loopback, with the controller's journal in the demo's directory.

This module only starts, waits for and stops processes; it never talks to the
journal and never decides what a scenario expects.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from nicplug.adapters.private_files import open_private


@dataclass(frozen=True, slots=True)
class WorldSpec:
    """One cluster: its SDN, its rollout strategy, what fails, the controller's flags.

    `mode` (deckhouse): `observe` — a Deckhouse release whose controller hot-plugs by
    itself (today's), `drive` — one without (nicplug writes the hotplug). The
    controller runs with `--mode auto` and finds out which from the cluster, as in
    production; the kubevirt flavour always observes."""

    name: str
    title: str
    dialect: str = "deckhouse"
    rollout_strategy: str = "LiveUpdate"
    vms: int = 8
    sim_args: tuple[str, ...] = ()
    controller_args: tuple[str, ...] = ()
    mode: str = "observe"

    @property
    def flavour(self) -> str:
        """The controller's `--flavour`: multus is the SDN of the kubevirt flavour."""
        return "kubevirt" if self.dialect == "multus" else self.dialect


@dataclass
class RunningWorld:
    spec: WorldSpec
    directory: Path
    kubeconfig: Path
    journal: Path
    metrics_port: int
    processes: list[asyncio.subprocess.Process] = field(default_factory=list)

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _spawn(argv: list[str], log: Path) -> asyncio.subprocess.Process:
    out = open_private(log)  # the logs show whole objects, like the journal
    try:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "nicplug.adapters.cli", *argv,
            stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT,
        )
    finally:
        out.close()


async def start_world(spec: WorldSpec, directory: Path, *, deadline: float = 30.0) -> RunningWorld:
    """Start the simulated cluster, then the controller; return once it is ready."""
    kubeconfig = directory / f"{spec.name}.kubeconfig"
    world = RunningWorld(
        spec=spec,
        directory=directory,
        kubeconfig=kubeconfig,
        journal=directory / f"{spec.name}.db",
        metrics_port=free_port(),
    )
    sim = await _spawn(
        ["sim", "serve", "--vms", str(spec.vms), "--flavour", spec.flavour,
         "--rollout-strategy", spec.rollout_strategy, "--kubeconfig", str(kubeconfig),
         # observe: today's Deckhouse, which hot-plugs; drive: a release without it
         *([] if spec.dialect != "deckhouse" else
           ["--native-hotplug"] if spec.mode == "observe" else ["--no-native-hotplug"]),
         *spec.sim_args],
        directory / f"{spec.name}-cluster.log",
    )
    world.processes.append(sim)
    await _wait(lambda: _kubeconfig_ready(kubeconfig), sim, "the simulated cluster", deadline)
    controller = await _spawn(
        ["run", "--kubeconfig", str(kubeconfig), "--journal", str(world.journal),
         "--flavour", spec.flavour, "--metrics-addr", f"127.0.0.1:{world.metrics_port}",
         "--query-addr", "",
         "--identity", f"demo-{spec.name}",
         "--mode", "auto", *spec.controller_args],
        directory / f"{spec.name}-controller.log",
    )
    world.processes.append(controller)
    await _wait(lambda: _ready(world.metrics_url), controller, "the controller", deadline)
    return world


def _nonempty(path: Path) -> bool:
    return path.exists() and path.stat().st_size > 0


async def _kubeconfig_ready(path: Path) -> bool:
    return _nonempty(path)


async def _ready(url: str) -> bool:
    try:
        timeout = aiohttp.ClientTimeout(total=1)
        async with aiohttp.ClientSession(timeout=timeout) as session, \
                session.get(url + "/readyz") as response:
            return response.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


async def _wait(
    probe: Callable[[], Awaitable[bool]],
    process: asyncio.subprocess.Process,
    what: str,
    deadline: float,
) -> None:
    loop = asyncio.get_running_loop()
    until = loop.time() + deadline
    while loop.time() < until:
        if process.returncode is not None:
            raise RuntimeError(f"{what} exited with code {process.returncode}")
        if await probe():
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{what} was not ready within {deadline:.0f}s")


async def stop_world(world: RunningWorld) -> None:
    """Controller first (it may be mid-effect), then the cluster."""
    for process in reversed(world.processes):
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
