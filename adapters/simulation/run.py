"""One simulated run: a schedule played against the real controller and the simulated
cluster in one process, on one virtual clock, and judged.

`simulate(schedule)` builds a fresh event loop (`VirtualTimeLoop`), the simulated
cluster with its actors on that loop's time and seeded uids, the API server
in-process (upstream KubeVirt's names or Deckhouse's renamed ones: `Setup.kubevirt_api`;
the store and the invariants keep KubeVirt's own), and one or two controller
replicas, each with its own SQLite journal in a temporary directory (on a
memory-backed file system when there is one). It plays the steps, checking the safety
invariants on every write (`invariants.Watchman`), then lets the faults stop — the
network heals, the journal commits, a dead replica restarts — lets `QUIET` virtual
seconds pass and checks that every journal verifies and every operation came to rest
(`liveness.py`). The result holds the first violation, if any, and a digest of
everything the cluster saw, so
"the same seed gives the same run" is checkable.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import itertools
import logging
import os
import random
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from nicplug.adapters.simulation.actions import Hands
from nicplug.adapters.simulation.invariants import Violation, Watchman
from nicplug.adapters.simulation.journal import issued_effect_rows, issued_effects
from nicplug.adapters.simulation.liveness import at_rest
from nicplug.adapters.simulation.loop import (
    EPOCH,
    LoopSimClock,
    VirtualTimeLoop,
    lease_time,
    virtual_now,
)
from nicplug.adapters.simulation.replicas import Landings, Replica
from nicplug.adapters.simulation.schedule import Schedule
from nicplug.adapters.simulation.wire import InProcessServer
from nicplug.simulator.apis import served_api
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Delays, Knobs
from nicplug.simulator.resources import EVENTS, EVENTS_V1, NAMESPACES, VMS
from nicplug.simulator.server import make_app
from nicplug.simulator.store import Store
from nicplug.simulator.watching import Change

QUIET = 420.0  # virtual seconds the faults stay away before liveness is judged
LEASE = ("nicplug-system", "nicplug")
SETTINGS: dict[str, Any] = {
    "lease_namespace": LEASE[0], "lease_name": LEASE[1],
    "lease_duration": 40, "renew_deadline": 30.0, "retry_period": 10.0,
    "sdn_ready_timeout": 120.0, "attach_timeout": 120.0, "detach_timeout": 120.0,
    "migration_timeout": 300.0, "backoff_max": 60.0, "request_timeout": 30.0,
    "concurrency": 4,
}


@dataclass
class Outcome:
    schedule: Schedule
    violation: Violation | None
    steps_taken: int
    virtual_seconds: float
    digest: str  # of every change the cluster committed, in order
    writes: int


def simulate(schedule: Schedule, *, workdir: Path | None = None,
             tape: Path | None = None) -> Outcome:
    """Play `schedule` to the end (or its first violation) on a fresh virtual loop."""
    # When the cyclic collector runs depends on everything the process allocated before
    # (earlier runs, lazy imports), and what it frees (weak references: the store's
    # watch subscriptions, aiohttp's sessions) changes the order of things: a run
    # collects before it starts and never during, so its history does not leak in.
    # What outlives that collection (modules, the process's caches) is frozen, so the
    # collection after the run walks only what the run left, and frees its cycles.
    gc.collect()
    gc.freeze()
    collecting = gc.isenabled()
    gc.disable()
    loop = VirtualTimeLoop()
    quieted = {name: logging.getLogger(name).level for name in ("nicplug", "kubernetes_asyncio")}
    for name in quieted:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        with lease_time(), tempfile.TemporaryDirectory(prefix="nicplug-dst-",
                                                       dir=_scratch_parent()) as scratch:
            directory = workdir or Path(scratch)
            return loop.run_until_complete(_play(schedule, directory, tape))
    finally:
        _cancel_what_is_left(loop)
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
        for name, level in quieted.items():  # the process's own logging, as it was
            logging.getLogger(name).setLevel(level)
        if collecting:
            gc.enable()
        if next(_RUNS) % THAW_EVERY == 0:
            # what was frozen alive and became a cycle's garbage since is freed only
            # when given back to the collector: now and then, one walk of everything
            gc.unfreeze()
        gc.collect()


def _cancel_what_is_left(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel every task the run left (as `asyncio.run` does) and let each end: a task
    destroyed while pending (an effect's attempts when a replica's stop was cut short)
    says so on stderr and never runs its `finally`, which closes sessions and files."""
    left = [task for task in asyncio.all_tasks(loop) if not task.done()]
    if not left:
        return
    for task in left:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))


THAW_EVERY = 1024
"""Runs between two thaws of the frozen objects: a full collection of everything
costs about as much as a short run. (The replicas freeze nothing, `Replica.start`: a
run's own objects are collected after it, not kept until a thaw.)"""
_RUNS = itertools.count(1)


def _scratch_parent() -> str | None:
    """Where the journals go: a memory-backed file system when the machine has one (the
    same SQLite files, WAL and fsyncs, without waiting for a disk), else the default
    temporary directory."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else None


async def _play(schedule: Schedule, directory: Path, tape: Path | None) -> Outcome:
    setup = schedule.setup
    draws = random.Random(f"uids/{schedule.seed}")
    store = Store(clock=lambda: EPOCH + virtual_now(),
                  uids=lambda: uuid.UUID(int=draws.getrandbits(128), version=4))
    knobs = Knobs(
        dialect=setup.dialect, dynamic_networks_controller=setup.dynamic_networks_controller,
        delays=Delays(sdn_configure=setup.sdn_configure, restart=setup.restart_delay,
                      migration=setup.migration_delay),
        migration_required_grace=5.0, seed=schedule.seed,
        # (the upstream world keeps the knob's default, as before the deckhouse one:
        # the store holds the dialect's CRDs; the server below speaks `api`)
        kubevirt_api="deckhouse" if setup.kubevirt_api == "deckhouse" else None,
        native_hotplug=False,  # nicplug drives every hotplug of a schedule
        detaches_live=setup.detaches_live or setup.dialect != "deckhouse",
    )
    cluster = SimulatedCluster(
        knobs, clock=LoopSimClock(), serve=False, store=store,
        fixtures=Fixtures(vms=setup.vms, networks=("user-net", "second-net"),
                          rollout_strategy=setup.rollout),
    )
    hasher = hashlib.sha256()
    writes = 0

    api = served_api(setup.kubevirt_api)
    watchman = Watchman(store, setup.dialect, LEASE, virtual_now, api=api)
    listeners: list[Callable[[Change], None]] = [watchman.on_change]

    def tapped(change: Change) -> None:
        nonlocal writes
        writes += 1
        if change.resource in (EVENTS, EVENTS_V1):  # named at random; nothing reads them
            return
        meta = change.obj.get("metadata", {})
        hasher.update(f"{change.type} {change.resource.plural} {meta.get('namespace')}/"
                      f"{meta.get('name')} {change.rv}\n".encode())
        for listener in listeners:
            listener(change)

    store.tap(tapped)
    await cluster.start()
    for namespace, name in cluster.vms if setup.dialect == "deckhouse" else ():
        # (upstream KubeVirt has no Deckhouse VM and no restart approval)
        store.patch(VMS, namespace, name,
                    {"spec": {"disruptions": {"restartApprovalMode": setup.approval}}},
                    content_type="application/merge-patch+json")
    store.create(NAMESPACES, {"metadata": {"name": LEASE[0]}})
    landings = Landings()
    app = make_app(store, cluster.faults, disconnect_check=30.0, api=api)
    app.middlewares.insert(0, landings.middleware)  # outermost: the status that leaves
    server = InProcessServer(app)
    await server.start()

    def requested(replica: Replica, method: str, path: str) -> Callable[[], None] | None:
        return watchman.on_request(replica.identity, replica.listed, method, path,
                                   lambda: issued_effects(replica.journal),
                                   lambda res, ns, name: replica.seen(api.served(res), ns, name))

    # nicplug drives (its writes are what the invariants judge); the kubevirt flavour
    # only observes
    settings = dict(SETTINGS, dialect=setup.dialect, kubevirt_api=setup.kubevirt_api,
                    mode="drive" if setup.dialect == "deckhouse" else "auto")
    replicas = [Replica("nicplug-a", directory / "a.db", settings, server, requested,
                        landings, tape)]
    if setup.standby:
        replicas.append(Replica("nicplug-b", directory / "b.db", settings, server, requested,
                                landings))
    for replica in replicas:
        watchman.journals[replica.identity] = partial(issued_effect_rows, replica.journal)
        replica.start()
    hands = Hands(cluster, replicas, watchman, setup)
    listeners.append(hands.on_change)
    progress = [0]

    async def script() -> None:
        await hands.until_ready()
        for index, step in enumerate(schedule.steps):
            await hands.wait(step.wait)
            watchman.step = index
            await hands.act(step)
            progress[0] = index + 1
            await asyncio.sleep(0)
        await hands.heal()
        await hands.wait(QUIET + hands.clock_debt)
        await _judge(hands, replicas, watchman)

    driver = asyncio.ensure_future(script())
    loop = asyncio.get_running_loop()
    def stop_the_script() -> None:
        loop.call_soon(driver.cancel)

    watchman.on_violation = stop_the_script
    if isinstance(loop, VirtualTimeLoop):
        loop.on_livelock(lambda problem: watchman.report("livelock", problem))
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await driver
    finally:
        watchman.on_violation = lambda: None
        watchman.closed = True  # the run is judged: the shutdown below is the harness's
        for replica in replicas:
            await replica.stop()
        await server.stop()
        await cluster.stop()
    return Outcome(schedule, watchman.violations[0] if watchman.violations else None,
                   progress[0],
                   virtual_now(), hasher.hexdigest()[:16], writes)


async def _judge(hands: Hands, replicas: list[Replica], watchman: Watchman) -> None:
    for problem in hands.actor_errors():
        watchman.report("actor-error", problem)
    for problem in watchman.left_stopped():
        watchman.report("left-stopped", problem)
    for replica in replicas:
        failure = replica.failure()
        if failure is not None:
            watchman.report("controller-died", f"{replica.identity}: {failure!r}")
    leader = any(replica.leading for replica in replicas)
    for replica in replicas:
        if not replica.journal.exists():
            continue
        problems = await at_rest(replica.journal, hands.world(),
                                 manual_restarts=hands.setup.approval == "Manual",
                                 acting=replica.leading or not leader,
                                 clock_ahead=hands.clock_debt)
        for invariant, detail in problems:
            watchman.report(invariant, f"{replica.identity}: {detail}")
