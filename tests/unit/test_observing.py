"""Holding a VM still: nothing decided from its last readable world while its objects
cannot be read, and no cluster-wide object that cannot be read holds every VM."""

from __future__ import annotations

import copy
from typing import Any

from nicplug.adapters.core.controller import _fence
from nicplug.adapters.core.observing import Observing
from nicplug.adapters.kube.flavour import UPSTREAM as kinds
from nicplug.adapters.kube.lease import Term
from nicplug.adapters.sdn import dialect_for
from nicplug.engine.clock import VirtualClock
from nicplug.engine.effects import RecordingExecutor
from nicplug.engine.journal import PendingEffect
from nicplug.engine.model import Key
from nicplug.engine.runtime import Runtime
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.operation import VMState
from nicplug.machines.world import World
from nicplug.simulator import resources as sim
from nicplug.simulator.fixtures import Fixtures, populate
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.store import Store
from tests.engine.journal_support import opened

KINDS = (
    (sim.VMS, kinds.virtual_machines), (sim.KVVMS, kinds.kvvms), (sim.VMIS, kinds.vmis),
    (sim.PODS, kinds.launcher_pods), (sim.KUBEVIRTS, kinds.kubevirts),
    (sim.NETWORKS, kinds.networks), (sim.CLUSTER_NETWORKS, kinds.cluster_networks),
)  # fmt: skip
VM, OTHER = "default/vm-00000", "default/vm-00001"


def listed(store: Store) -> Observing:
    observing = Observing(dialect_for("deckhouse"), kinds)
    for resource, kind in KINDS:
        for obj in store.list(resource)[0]:
            observing.changed(kind, "ADDED", obj)
    return observing


def cluster(**fixtures: Any) -> Store:
    store = Store()
    populate(store, Knobs(), Fixtures(vms=2, **fixtures))
    return store


def with_networks(store: Store, networks: list[dict[str, Any]]) -> dict[str, Any]:
    vm = copy.deepcopy(store.get(sim.VMS, "default", "vm-00000"))
    vm["spec"]["networks"] = networks
    vm["metadata"]["resourceVersion"] = str(int(vm["metadata"]["resourceVersion"]) + 1000)
    return vm


def test_a_malformed_kubevirt_cr_holds_no_vm_and_its_last_readable_version_stands() -> None:
    store = cluster(rollout_strategy="Stage")
    observing = listed(store)
    broken = copy.deepcopy(store.get(sim.KUBEVIRTS, "kubevirt", "kubevirt"))
    broken["spec"]["configuration"]["vmRolloutStrategy"] = 42

    observing.changed(kinds.kubevirts, "MODIFIED", broken)

    for vm in (VM, OTHER):
        world = observing.world(vm)
        assert world is not None, vm
        assert world.cluster.rollout_strategy == "Stage"
    assert observing.held == frozenset()


async def test_a_held_vm_gets_no_timer_decision_and_no_effect_from_its_last_world() -> None:
    store = cluster()
    observing = listed(store)
    clock = VirtualClock()
    executor = RecordingExecutor(clock)
    async with opened(":memory:") as journal:
        runtime: Runtime[VMState, World] = Runtime(
            HotplugDecider(), journal, executor, clock, concurrency=1)
        await runtime.start()
        plug = with_networks(store, [{"type": "Main", "id": 1},
                                     {"type": "Network", "name": "user-net", "id": 2}])
        observing.changed(kinds.virtual_machines, "MODIFIED", plug)
        await observing.feed(runtime)
        await runtime.drain()
        sent = [e.effect.type for e in executor.executed]
        assert "PatchPodNetworks" in sent  # the plug began; the SDN never answers here

        unreadable = copy.deepcopy(plug)
        unreadable["spec"]["networks"][0]["id"] = "one"
        unreadable["metadata"]["resourceVersion"] += "1"
        observing.changed(kinds.virtual_machines, "MODIFIED", unreadable)
        await observing.feed(runtime)
        for _ in range(10):  # reissue (30 s) and deadline (120 s) would both have fired
            clock.advance(30)
            await runtime.drain()

        assert observing.held == frozenset({VM})
        assert [e.effect.type for e in executor.executed] == sent
        state = runtime.state_of(Key(VM))
        assert state is not None
        assert [op.state for op in state.ops.values()] == ["Requested"]
        await runtime.stop()


class _SpoiledOnTheWay:
    """An executor whose first write finds its VM turned unreadable in the informers
    (a watch event handed on, not yet observed) between the decision and the fence."""

    def __init__(self, observing: Observing, unreadable: dict[str, Any]) -> None:
        self.observing = observing
        self.unreadable: dict[str, Any] | None = unreadable
        self.term = Term(1, until=float("inf"), now=lambda: 0.0)
        self.sent: list[str] = []

    async def execute(self, effect: PendingEffect) -> dict[str, Any]:
        if self.unreadable is not None:
            self.observing.changed(kinds.virtual_machines, "MODIFIED", self.unreadable)
            self.unreadable = None
        _fence(self.term, self.observing)  # the instant before the request leaves
        self.sent.append(effect.type)
        return {}


async def test_a_write_is_not_sent_once_its_vm_turned_unreadable_before_it_is_observed() -> None:
    """The decision read a good VM; the informers hand on a malformed one while the
    effect is on its way. The fence, not the next observation, is the last moment:
    nothing is sent, and the VM's next observation holds it still (seed 24435 of the
    100,000-schedule run: the malformed VM reached the cache the same instant)."""
    store = cluster()
    observing = listed(store)
    clock = VirtualClock()
    plug = with_networks(store, [{"type": "Main", "id": 1},
                                 {"type": "Network", "name": "user-net", "id": 2}])
    unreadable = copy.deepcopy(plug)
    unreadable["spec"]["networks"][0]["id"] = "one"
    unreadable["metadata"]["resourceVersion"] += "1"
    executor = _SpoiledOnTheWay(observing, unreadable)
    async with opened(":memory:") as journal:
        runtime: Runtime[VMState, World] = Runtime(
            HotplugDecider(), journal, executor, clock, concurrency=1)
        await runtime.start()
        await observing.feed(runtime)  # the listing observed: nothing dirty
        observing.changed(kinds.virtual_machines, "MODIFIED", plug)
        await observing.feed(runtime)
        await runtime.drain()
        assert executor.sent == []
        assert observing.unreadable_unobserved(VM) is not None

        await observing.feed(runtime)
        await runtime.drain()
        assert observing.held == frozenset({VM})
        assert observing.unreadable_unobserved(VM) is None  # judged by that observation
        assert executor.sent == []
        await runtime.stop()


async def test_a_deleted_vm_leaves_the_runtimes_memory_once_its_operations_ended() -> None:
    """The VM, KVVM, VMI and pod deleted: its plug is cancelled (VMDeleted), and then
    nothing of the VM stays in memory; the journal keeps its record."""
    store = cluster()
    observing = listed(store)
    clock = VirtualClock()
    async with opened(":memory:") as journal:
        runtime: Runtime[VMState, World] = Runtime(
            HotplugDecider(), journal, RecordingExecutor(clock), clock, concurrency=1)
        await runtime.start()
        plug = with_networks(store, [{"type": "Main", "id": 1},
                                     {"type": "Network", "name": "user-net", "id": 2}])
        observing.changed(kinds.virtual_machines, "MODIFIED", plug)
        await observing.feed(runtime)
        await runtime.drain()
        assert runtime.state_of(Key(VM)) is not None

        for resource, kind in KINDS[:4]:
            for obj in store.list(resource)[0]:
                if VM.split("/")[1] in obj["metadata"]["name"]:
                    observing.changed(kind, "DELETED", obj)
        await observing.feed(runtime)
        await runtime.drain()

        assert runtime.state_of(Key(VM)) is None
        (view,) = await journal.views(key=Key(VM))
        assert (view.view.state, view.view.terminal) == ("Cancelled", True)
        await runtime.stop()


async def test_a_new_resource_version_alone_is_no_observation() -> None:
    store = cluster()
    observing = listed(store)
    clock = VirtualClock()
    async with opened(":memory:") as journal:
        runtime: Runtime[VMState, World] = Runtime(
            HotplugDecider(), journal, RecordingExecutor(clock), clock, concurrency=1)
        await runtime.start()
        assert await observing.feed(runtime) == 2
        await runtime.drain()
        vmi = copy.deepcopy(store.get(sim.VMIS, "default", "vm-00000"))
        vmi["metadata"]["resourceVersion"] = "9999"
        observing.wake.clear()
        observing.changed(kinds.vmis, "MODIFIED", vmi)
        assert observing.pending == 0 and observing.wake.is_set()
        assert await observing.feed(runtime) == 0  # nothing assembled, nothing decided
        held = observing.index.get(kinds.vmis, VM)
        assert held is not None and held["metadata"]["resourceVersion"] == "9999"
        vmi["metadata"]["resourceVersion"] = "10000"
        vmi["status"]["phase"] = "Failed"
        observing.changed(kinds.vmis, "MODIFIED", vmi)
        assert observing.pending == 1
        assert await observing.feed(runtime) == 1
        await runtime.stop()
