"""The demo's scenarios, played in-process: a simulated cluster per demo world and the
real controller (`Controller`, leader election included) against its HTTP API.

The user's hands write straight into the simulated store, so every request in the
cluster's request log is the controller's own. The actors run on a virtual clock that
moves only when the cluster, the controller and the journal have been quiet for a few
polls, so each world plays in the demo's order without the demo's seconds of waiting.
The controller's own timers run on the real clock: the settings below keep them out
of the way (no retry within a run).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nicplug.adapters.core.controller import Controller
from nicplug.adapters.core.settings import Settings
from nicplug.adapters.demo.board import Board, Row
from nicplug.adapters.demo.play import WorldDriver
from nicplug.adapters.demo.scenarios import SCENARIOS, WORLDS, Outcome, Scenario, matches
from nicplug.adapters.kube import resources as kinds
from nicplug.adapters.kube.flavour import UPSTREAM
from nicplug.adapters.kube.resources import KindRef
from nicplug.simulator import resources as sim
from nicplug.simulator.clock import VirtualSimClock
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Delays, Failures, Knobs
from nicplug.simulator.server import RequestRecord

STEP = 0.25  # virtual seconds per move of the clock
QUIET_POLLS = 3
POLL = 0.01  # real seconds between polls: waiting for the loopback and the journal thread


@dataclass(frozen=True)
class Plan:
    """How this test builds one demo world in-process (the demo passes flags instead)."""

    knobs: Knobs
    fixtures: Fixtures
    settings: Mapping[str, Any] = field(default_factory=dict)
    released_lease: bool = False  # a Lease left behind by a replica that shut down cleanly


PLANS: dict[str, Plan] = {
    "live": Plan(
        Knobs(delays=Delays(sdn_configure=1.0),
              failures=Failures(sdn_networks=frozenset({"Network/broken-net"})),
              native_hotplug=False),  # nicplug drives the hotplug
        Fixtures(networks=("user-net", "broken-net")),
        # a failed operation is not retried in the run; an SDN that cannot configure a
        # network is waited for until the deadline, as in the demo
        settings={"backoff_base": 300.0, "sdn_ready_timeout": 8.0, "mode": "drive"},
    ),
    "stage": Plan(
        # a release without native hotplug: `--mode auto` reads its controller's role
        Knobs(delays=Delays(sdn_configure=0.3, restart=1.0), native_hotplug=False),
        Fixtures(rollout_strategy="Stage"),
        released_lease=True,
    ),
    "kubevirt": Plan(
        Knobs(dialect="multus", migration_required_grace=2.0,
              delays=Delays(migration=2.0)),
        Fixtures(),
        settings={"migrations": "opt-in"},
    ),
    "kubevirt-stage": Plan(
        Knobs(dialect="multus", dynamic_networks_controller=True,
              delays=Delays(sdn_configure=0.5)),
        Fixtures(rollout_strategy="Stage"),
    ),
}


@dataclass
class WorldRun:
    name: str
    requests: list[RequestRecord]
    rows: list[Row]
    missed: list[str]  # expected outcomes not reached, scenario errors
    actor_errors: list[str]


class StoreCalls:
    """The two calls the demo's driver makes, served by the store without HTTP."""

    _RESOURCES: Mapping[KindRef, sim.Resource] = {
        kinds.VIRTUAL_MACHINES: sim.VMS, UPSTREAM.kvvms: sim.KVVMS}

    def __init__(self, cluster: SimulatedCluster) -> None:
        self._store = cluster.store

    async def get(self, kind: KindRef, namespace: str, name: str) -> dict[str, Any]:
        return self._store.get(self._RESOURCES[kind], namespace, name)

    async def patch(
        self, kind: KindRef, namespace: str, name: str, patch: Any, *, content_type: str
    ) -> dict[str, Any]:
        return self._store.patch(self._RESOURCES[kind], namespace, name, patch,
                                 content_type=content_type)


@dataclass
class PromptDriver(WorldDriver):
    """The demo's driver, told of every board refresh instead of polling on its own."""

    refreshed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def wait_for(self, outcome: Outcome, *, states: frozenset[str]) -> None:
        wanted = [Outcome(outcome.vm, outcome.network, outcome.direction, s) for s in states]
        async with self.refreshed:
            await self.refreshed.wait_for(
                lambda: any(matches(w, r) for w in wanted for r in self.board.rows))


def _met(outcome: Outcome, rows: Sequence[Row]) -> bool:
    return any(matches(outcome, r) for r in rows)


async def _play(
    cluster: SimulatedCluster, board: Board, driver: PromptDriver,
    scenarios: Sequence[Scenario], deadline: float,
) -> list[str]:
    errors: list[str] = []

    async def one(s: Scenario) -> None:
        try:
            await s.steps(driver)
        except Exception as exc:
            errors.append(f"{s.title}: {exc!r}")

    expected = [o for s in scenarios for o in s.outcomes]
    runs = [asyncio.create_task(one(s)) for s in scenarios]
    quiet, last = 0, None
    try:
        while time.monotonic() < deadline:
            rows = await board.refresh()
            async with driver.refreshed:
                driver.refreshed.notify_all()
            if all(_met(o, rows) for o in expected) and all(r.done() for r in runs):
                break
            mark = (cluster.store.resource_version, len(cluster.requests),
                    [(r["vm"], r["network"], r["direction"], r["state"]) for r in rows])
            quiet = quiet + 1 if mark == last else 0
            last = mark
            if quiet >= QUIET_POLLS:
                await cluster.advance(STEP)
                quiet = 0
            await asyncio.sleep(POLL)
    finally:
        for r in runs:
            r.cancel()
        await asyncio.gather(*runs, return_exceptions=True)
    missed = [f"{o.vm}: {o.label()}" for o in expected if not _met(o, board.rows)]
    return missed + errors


async def _ready(controller: Controller, running: asyncio.Task[None], deadline: float) -> None:
    while not controller.health.ready():
        if running.done():
            running.result()  # raises why it stopped
            raise AssertionError("the controller stopped before it was ready")
        if time.monotonic() > deadline:
            raise AssertionError("the controller did not become ready")
        await asyncio.sleep(POLL)


async def play_world(name: str, directory: Path, lease: tuple[str, str], *,
                     budget: float = 40.0) -> WorldRun:
    """Play the demo world `name`; `lease` is the (namespace, name) of the Lease."""
    lease_namespace, lease_name = lease
    spec = next(w for w in WORLDS if w.name == name)
    plan = PLANS[name]
    fixtures = dataclasses.replace(plan.fixtures, vms=spec.vms)
    journal = directory / f"{name}.db"
    cluster = SimulatedCluster(plan.knobs, clock=VirtualSimClock(), fixtures=fixtures,
                               kubeconfig_path=directory / f"{name}.kubeconfig")
    async with cluster:
        store = cluster.store
        store.create(sim.NAMESPACES, {"metadata": {"name": lease_namespace}})
        if plan.released_lease:
            store.create(sim.LEASES, {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": lease_name, "namespace": lease_namespace},
                "spec": {"holderIdentity": "", "leaseDurationSeconds": 15},
            })
        assert cluster.kubeconfig_path is not None
        settings = Settings(
            kubeconfig=cluster.kubeconfig_path, journal=journal, dialect=plan.knobs.dialect,
            metrics_addr="127.0.0.1:0", query_addr="",
            lease_name=lease_name, lease_namespace=lease_namespace,
            identity=f"rbac-{name}", **plan.settings,
        )
        controller = Controller(settings)
        running = asyncio.create_task(controller.run(), name=f"controller {name}")
        board = Board({name: journal})
        deadline = time.monotonic() + budget
        try:
            await _ready(controller, running, deadline)
            driver = PromptDriver(name, StoreCalls(cluster), board, deadline,  # type: ignore[arg-type]
                                  edits_template=spec.dialect == "multus")
            scenarios = [s for s in SCENARIOS if s.world == name]
            missed = await _play(cluster, board, driver, scenarios, deadline)
        finally:
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
            await board.close()
        return WorldRun(name, list(cluster.requests), list(board.rows), missed,
                        cluster.actor_errors)


async def play_all(directory: Path, lease: tuple[str, str]) -> list[WorldRun]:
    """Every demo world at once, each with its own cluster and controller."""
    return list(await asyncio.gather(*(
        play_world(w.name, directory, lease) for w in WORLDS
    )))
