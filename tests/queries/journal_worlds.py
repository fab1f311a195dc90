"""A journal filled by the real decider through the real runtime, for the query tests.

Several VMs, each a `Sim` world from the machine tests, are observed tick by tick by a
`Runtime(HotplugDecider)` on a `VirtualClock`; effects go through a `RecordingExecutor`
and then into the VM's simulated world, so the journal holds what a controller run
would: transitions with their causes, the outbox with outcomes, retries and armed
timers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from nicplug.engine.clock import VirtualClock
from nicplug.engine.effects import RecordingExecutor, RetryPolicy
from nicplug.engine.errors import PermanentError, TemporaryError
from nicplug.engine.journal import PendingEffect
from nicplug.engine.model import Cause, EffectRequest, Key
from nicplug.engine.runtime import Runtime
from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.operation import VMState
from nicplug.machines.world import World
from tests.unit.machines.sim import MAIN, Sim, net

X = net("x", 2)
Y = net("y", 3, "ClusterNetwork")


@dataclass
class SimExecutor:
    """Records each effect, then lets the VM's simulated world react to it; the
    `failures` queue of (key, effect type) raises instead, one exception per attempt."""

    clock: VirtualClock
    sims: Mapping[str, Sim]
    failures: dict[tuple[str, str], list[Exception]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.recording = RecordingExecutor(self.clock)

    async def execute(self, effect: PendingEffect) -> Mapping[str, object]:
        await self.recording.execute(effect)
        queue = self.failures.get((effect.key, effect.type))
        if queue:
            raise queue.pop(0)
        self.sims[effect.key].execute(
            EffectRequest(effect.stream, effect.type, effect.payload, effect.idempotency_key)
        )
        return {}


def world_of(key: str, sim: Sim) -> World:
    """The Sim's world renamed to the VM `key` (namespace/name) with a uid of its own."""
    world = sim.world()
    namespace, _, name = key.partition("/")
    pods = tuple(
        replace(p, name=p.name.replace("-vm-", f"-{name}-"), namespace=namespace)
        for p in world.pods
    )
    vm = world.vm
    if vm is not None:
        vm = replace(vm, uid=f"uid-{name}", namespace=namespace, name=name)
    return replace(world, vm=vm, pods=pods)


@dataclass
class Cluster:
    journal: SQLiteJournal
    clock: VirtualClock
    sims: dict[str, Sim]
    runtime: Runtime[VMState, World]
    version: int = 0

    async def tick(self, seconds: float = 1.0) -> None:
        """Observe every VM, let the worlds react, move the clock on."""
        for key, sim in self.sims.items():
            self.version += 1
            cause = Cause("observation", f"VirtualMachine/{key}@{self.version}")
            await self.runtime.observe(Key(key), world_of(key, sim), cause)
        await self.runtime.drain()
        for sim in self.sims.values():
            sim.settle()
        self.clock.advance(seconds)
        await self.runtime.drain()

    async def run(self, ticks: int) -> None:
        for _ in range(ticks):
            await self.tick()


async def start(path: Path, sims: dict[str, Sim],
                failures: dict[tuple[str, str], list[Exception]] | None = None) -> Cluster:
    journal = await SQLiteJournal.open(path)
    clock = VirtualClock(epoch=1_700_000_000.0)
    executor = SimExecutor(clock, sims, failures or {})
    runtime: Runtime[VMState, World] = Runtime(
        HotplugDecider(), journal, executor, clock, retry=RetryPolicy(initial=1.0, jitter=0.0),
    )
    await runtime.start()
    return Cluster(journal, clock, sims, runtime)


async def stop(cluster: Cluster) -> None:
    await cluster.runtime.stop()
    await cluster.journal.close()


def standard_sims() -> dict[str, Sim]:
    """One VM per outcome the queries must show."""
    return {
        "ns/plugged": Sim(networks=(MAIN, X)),
        "ns/unplugged": Sim(networks=(MAIN, X)),
        "ns/failing": Sim(networks=(MAIN, X), sdn_fails=frozenset({"Network/x"})),
        "ns/staged": Sim(networks=(MAIN, X), strategy="Stage"),
        "ns/silent": Sim(networks=(MAIN, Y), sdn_silent=frozenset({"ClusterNetwork/y"})),
        "ns/rejected": Sim(networks=(MAIN, X)),
        "ns/flaky": Sim(networks=(MAIN, X)),
    }


def standard_failures() -> dict[tuple[str, str], list[Exception]]:
    return {
        ("ns/plugged", "PatchVirtualMachine"): [
            TemporaryError("503 Service Unavailable"), TemporaryError("503 Service Unavailable"),
        ],
        ("ns/rejected", "PatchPodNetworks"): [PermanentError("admission webhook denied it")],
        ("ns/flaky", "PatchVirtualMachine"): [TemporaryError("429 Too Many Requests")] * 50,
    }


async def fill(path: Path) -> Cluster:
    """The standard journal: 20 s of plugging, then `ns/unplugged` loses Network/x and
    10 s more pass (the clock reads `NOW`). The cluster is still running (stop it)."""
    cluster = await start(path, standard_sims(), standard_failures())
    await cluster.run(20)
    cluster.sims["ns/unplugged"].networks = (MAIN,)
    await cluster.run(10)
    assert cluster.clock.now() == NOW
    return cluster


NOW = 30.0


async def _filled(path: Path) -> None:
    await stop(await fill(path))


def filled_journal(path: Path) -> Path:
    """Write the standard journal at `path` (from synchronous code) and return it."""
    asyncio.run(_filled(path))
    return path
