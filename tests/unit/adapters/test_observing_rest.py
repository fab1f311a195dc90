"""An idle VM's decoded state leaves memory (`Runtime(rest=True)` with `Rested`), and
its next change is decided exactly as if it had stayed."""

from __future__ import annotations

import copy
from typing import Any

from nicplug.adapters.core.observing import Observing, Rested
from nicplug.adapters.kube.flavour import UPSTREAM as kinds
from nicplug.adapters.kube.translate.assemble import ReadMemo
from nicplug.adapters.sdn import dialect_for
from nicplug.engine.clock import VirtualClock
from nicplug.engine.effects import RecordingExecutor
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


def plugging(store: Store) -> dict[str, Any]:
    vm = copy.deepcopy(store.get(sim.VMS, "default", "vm-00000"))
    vm["spec"]["networks"] = [{"type": "Main", "id": 1},
                              {"type": "Network", "name": "user-net", "id": 2}]
    vm["metadata"]["resourceVersion"] = str(int(vm["metadata"]["resourceVersion"]) + 1000)
    return vm


def test_a_dropped_object_is_read_again() -> None:
    memo = ReadMemo()
    body = {"metadata": {"namespace": "ns", "name": "a", "uid": "u", "resourceVersion": "1"}}
    reads: list[str] = []
    for _ in range(2):
        memo.get("vm", body, lambda: reads.append("vm"))
    assert reads == ["vm"]
    memo.drop([("ns", "b")])
    memo.get("vm", body, lambda: reads.append("vm"))
    assert reads == ["vm"]
    memo.drop([("ns", "a")])
    memo.get("vm", body, lambda: reads.append("vm"))
    assert reads == ["vm", "vm"]


def test_a_vms_own_objects_are_its_addresses_and_shared_ones_are_not() -> None:
    store = Store()
    populate(store, Knobs(), Fixtures(vms=2))
    observing = listed(store)
    pods = {p["metadata"]["name"] for p in store.list(sim.PODS)[0]
            if "vm-00000" in p["metadata"]["name"]}
    assert pods
    addresses = set(observing.index.addresses_of(VM))
    assert addresses == {("default", "vm-00000"), *(("default", p) for p in pods)}


async def _plug_after_rest(rest: bool) -> tuple[list[tuple[str, str]], bool]:
    """A VM observed idle, then asked to plug: the effects sent, and whether the runtime
    held the VM's state in between."""
    store = Store()
    populate(store, Knobs(), Fixtures(vms=2))
    observing = listed(store)
    clock = VirtualClock()
    executor = RecordingExecutor(clock)
    async with opened(":memory:") as journal:
        runtime: Runtime[VMState, World] = Runtime(
            HotplugDecider(), journal, executor, clock, concurrency=1,
            listeners=[Rested(observing)], rest=rest)
        await runtime.start()
        await observing.feed(runtime)
        await runtime.drain()
        kept = runtime.state_of(Key(VM)) is not None
        observing.changed(kinds.virtual_machines, "MODIFIED", plugging(store))
        await observing.feed(runtime)
        await runtime.drain()
        await runtime.stop()
    return [(e.effect.type, str(e.effect.key)) for e in executor.executed], kept


async def test_an_idle_vm_leaves_memory_and_its_next_change_is_decided_the_same() -> None:
    at_rest, kept = await _plug_after_rest(rest=True)
    assert not kept
    staying, kept = await _plug_after_rest(rest=False)
    assert kept
    assert at_rest == staying
    assert ("PatchPodNetworks", VM) in at_rest
