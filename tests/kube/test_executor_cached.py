"""Writes built from the informers' cache: no GET before a write, and a stale cache
makes the server refuse the write, never overwrite what changed.

The executor is given a cache holding each object as the informers would (projected
by `worldview.cache_projection`, as in `nicplug run`). When the server's object moved
after the cache's copy (a user's edit, another writer, a watch event not delivered
yet), the write's preconditions — JSON-patch `test` ops on what the cache held, the
resourceVersion of a status patch — fail on the server (422 / 409): the effect is
`RetryAfterObservation` (decide again) and the object is left as it is.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from typing import Any

import pytest

from nicplug.adapters.core.executor import KubeExecutor
from nicplug.adapters.core.worldview import cache_projection
from nicplug.adapters.kube import resources as kube_kinds
from nicplug.adapters.kube.calls import KubeCalls
from nicplug.adapters.kube.client import ApiConnection
from nicplug.adapters.kube.flavour import UPSTREAM
from nicplug.adapters.kube.resources import KindRef
from nicplug.adapters.sdn import dialect_for
from nicplug.engine.errors import RetryAfterObservation, TemporaryError
from nicplug.machines.effects import (
    PatchPodNetworks,
    RemoveVMCondition,
    RestartVM,
    SetVMCondition,
)
from nicplug.machines.world import SDNRequest
from nicplug.simulator import networking as nw
from nicplug.simulator.fixtures import kvvm_for
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.resources import KVVMS, NAMESPACES, PODS, VMIS, VMS, Resource
from tests.kube.conftest import ApiServer
from tests.kube.test_executor_order import (
    NET_A,
    NET_B,
    _vm_with_net_a_whose_pod_asks_for,
    hold_until,
    interfaces_of,
    pending,
    plug_b,
    template_of,
)

DECKHOUSE = dialect_for("deckhouse")


class Cache:
    """The informers' copies: objects projected as they arrive, keyed as they are."""

    def __init__(self) -> None:
        self.held: dict[tuple[str, str], dict[str, Any]] = {}

    def take(self, kind: KindRef, obj: dict[str, Any]) -> None:
        projection = cache_projection(kind)
        body = copy.deepcopy(obj)
        meta = body["metadata"]
        self.held[kind.name, f"{meta['namespace']}/{meta['name']}"] = (
            projection(body) if projection is not None else body)

    def __call__(self, kind: KindRef, namespace: str, name: str) -> dict[str, Any] | None:
        return self.held.get((kind.name, f"{namespace}/{name}"))


def executor(connection: ApiConnection, cache: Cache) -> KubeExecutor:
    return KubeExecutor(KubeCalls(connection), DECKHOUSE, flavour=UPSTREAM, cached=cache)


def edit(api_server: ApiServer, resource: Resource, name: str, change: Any) -> None:
    """Someone else's write the cache has not seen yet."""
    obj = copy.deepcopy(api_server.store.get(resource, "ns1", name))
    change(obj)
    api_server.store.update(resource, obj)


@pytest.fixture
def ns1(api_server: ApiServer) -> None:
    api_server.store.create(NAMESPACES, {"metadata": {"name": "ns1"}})


def _cached_running_vm(api_server: ApiServer) -> Cache:
    """VM `ns1/vm` with a `Running` condition, in the server and in a fresh cache."""
    vm = api_server.store.create(VMS, {
        "metadata": {"name": "vm", "namespace": "ns1"}, "spec": {},
        "status": {"conditions": [{"type": "Running", "status": "True", "reason": "Up",
                                   "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    cache = Cache()
    cache.take(kube_kinds.VIRTUAL_MACHINES, vm)
    return cache


async def test_a_kvvm_patch_is_built_from_the_cache_without_a_get(
    api_server: ApiServer, connection: ApiConnection, ns1: None
) -> None:
    kvvm = kvvm_for(Knobs(), "ns1", "vm", (("Network", "net-a"),))
    kvvm["spec"]["template"]["spec"]["domain"]["devices"]["interfaces"][0]["pciAddress"] = \
        "0000:81:01.0"  # a field nicplug does not read (Main is kept as it is)
    stored = api_server.store.create(KVVMS, kvvm)
    cache = Cache()
    cache.take(UPSTREAM.kvvms, stored)

    await executor(connection, cache).execute(pending(1, plug_b(template_of(stored))))

    assert interfaces_of(api_server.store) == ["default", NET_A, NET_B]
    spec = api_server.store.get(KVVMS, "ns1", "vm")["spec"]["template"]["spec"]
    assert spec["domain"]["devices"]["interfaces"][0]["pciAddress"] == "0000:81:01.0"
    assert (api_server.count("get"), api_server.count("patch")) == (0, 1)


async def test_a_kvvm_patch_from_a_stale_cache_is_refused_and_writes_nothing(
    api_server: ApiServer, connection: ApiConnection, ns1: None
) -> None:
    stored = api_server.store.create(
        KVVMS, kvvm_for(Knobs(), "ns1", "vm", (("Network", "net-a"),)))
    cache = Cache()
    cache.take(UPSTREAM.kvvms, stored)  # the decision and the cache saw this one

    def by_hand(obj: dict[str, Any]) -> None:
        obj["spec"]["template"]["spec"]["domain"]["devices"]["interfaces"].append(
            {"name": "by-hand", "bridge": {}})
        obj["spec"]["template"]["spec"]["networks"].append({"name": "by-hand", "pod": {}})

    edit(api_server, KVVMS, "vm", by_hand)
    before = api_server.store.get(KVVMS, "ns1", "vm")

    with pytest.raises(RetryAfterObservation):
        await executor(connection, cache).execute(pending(1, plug_b(template_of(stored))))

    assert api_server.store.get(KVVMS, "ns1", "vm") == before
    assert interfaces_of(api_server.store) == ["default", NET_A, "by-hand"]
    assert (api_server.count("get"), api_server.count("patch")) == (0, 1)


def launcher_pod(api_server: ApiServer, annotations: dict[str, str]) -> dict[str, Any]:
    return api_server.store.create(PODS, {"metadata": {
        "name": "virt-launcher-vm-x", "namespace": "ns1", "annotations": annotations}})


async def test_a_pod_patch_from_a_stale_cache_is_refused_and_writes_nothing(
    api_server: ApiServer, connection: ApiConnection, ns1: None
) -> None:
    a, b = SDNRequest("Network/net-a", NET_A, id=2), SDNRequest("Network/net-b", NET_B, id=3)
    key = DECKHOUSE.request_annotation
    pod = launcher_pod(api_server, {key: DECKHOUSE.render_requests(requests=(a,),
                                                                   namespace="ns1") or ""})
    cache = Cache()
    cache.take(UPSTREAM.launcher_pods, pod)
    newer = DECKHOUSE.render_requests(requests=(a, b), namespace="ns1") or ""
    edit(api_server, PODS, "virt-launcher-vm-x",
         lambda obj: obj["metadata"]["annotations"].__setitem__(key, newer))
    decided = PatchPodNetworks("ns1", "virt-launcher-vm-x", pod["metadata"]["uid"], (),
                               observed=(a,))  # unplug a, as the cache shows the pod

    with pytest.raises(RetryAfterObservation):
        await executor(connection, cache).execute(pending(1, decided))

    assert api_server.store.get(PODS, "ns1", "virt-launcher-vm-x")["metadata"][
        "annotations"][key] == newer
    assert (api_server.count("get"), api_server.count("patch")) == (0, 1)


async def test_a_pod_patch_adding_the_first_requests_is_pinned_to_the_whole_pod(
    api_server: ApiServer, connection: ApiConnection, ns1: None
) -> None:
    """With no request annotation in the cache there is nothing to `test` but the
    pod's resourceVersion: an annotation written since is not overwritten."""
    pod = launcher_pod(api_server, {"other": "x"})
    cache = Cache()
    cache.take(UPSTREAM.launcher_pods, pod)
    key = DECKHOUSE.request_annotation
    edit(api_server, PODS, "virt-launcher-vm-x",
         lambda obj: obj["metadata"]["annotations"].__setitem__(key, "[]"))
    decided = PatchPodNetworks("ns1", "virt-launcher-vm-x", pod["metadata"]["uid"],
                               (SDNRequest("Network/net-a", NET_A, id=2),), observed=None)

    with pytest.raises(RetryAfterObservation):
        await executor(connection, cache).execute(pending(1, decided))
    assert api_server.store.get(PODS, "ns1", "virt-launcher-vm-x")["metadata"][
        "annotations"] == {"other": "x", key: "[]"}

    cache.take(UPSTREAM.launcher_pods, api_server.store.get(PODS, "ns1", "virt-launcher-vm-x"))
    await executor(connection, cache).execute(pending(2, decided))  # the next world
    annotations = api_server.store.get(PODS, "ns1", "virt-launcher-vm-x")["metadata"][
        "annotations"]
    assert annotations["other"] == "x" and NET_A in annotations[key]
    assert (api_server.count("get"), api_server.count("patch")) == (0, 2)


async def test_a_condition_from_a_stale_cache_is_refused_then_written_on_a_fresh_read(
    api_server: ApiServer, connection: ApiConnection, ns1: None
) -> None:
    """The patch built from the stale copy is refused (409: it would drop `Migrating`);
    the condition is then read afresh from the server, not from the same stale cache,
    and written with every other condition kept whole."""
    cache = _cached_running_vm(api_server)
    later = {"type": "Migrating", "status": "True", "reason": "Moving"}
    newer = copy.deepcopy(api_server.store.get(VMS, "ns1", "vm"))
    newer["status"]["conditions"].append(later)
    api_server.store.update(VMS, newer, subresource="status")
    failed = SetVMCondition("ns1", "vm", "NetworkHotplugFailed", "True", "SDNTimeout", "slow")

    await executor(connection, cache).execute(pending(1, failed))
    conditions = api_server.store.get(VMS, "ns1", "vm")["status"]["conditions"]
    assert [c["type"] for c in conditions] == ["Running", "Migrating", "NetworkHotplugFailed"]
    assert conditions[0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"  # kept whole
    assert (api_server.count("get"), api_server.count("patch")) == (1, 2)


async def test_a_condition_is_not_written_on_a_fresh_read_of_a_malformed_vm(
    api_server: ApiServer, connection: ApiConnection, ns1: None
) -> None:
    """The VM turned malformed behind the cache (its watch stalled): the patch built from
    the cache is refused (409), and the fresh copy the retry would be built on is one
    nicplug cannot read. Nothing is written on it; decide again from the next world,
    which holds the VM still (found by the simulation, seed 5044)."""
    cache = _cached_running_vm(api_server)
    edit(api_server, VMS, "vm", lambda obj: obj["spec"].__setitem__("disruptions", "not-an-object"))
    before = api_server.store.get(VMS, "ns1", "vm")
    failed = SetVMCondition("ns1", "vm", "NetworkHotplugFailed", "True", "SDNTimeout", "slow")

    with pytest.raises(RetryAfterObservation, match="disruptions"):
        await executor(connection, cache).execute(pending(1, failed))
    assert api_server.store.get(VMS, "ns1", "vm") == before
    assert (api_server.count("get"), api_server.count("patch")) == (1, 1)


async def test_a_404_on_the_condition_write_of_a_vm_just_read_is_retried_not_decided_again(
    api_server: ApiServer, connection: ApiConnection, ns1: None
) -> None:
    """The server answers the status write 404 while the cache holds the VM. Decided
    again, the next world still holds it and asks for the same condition at once, as
    often as the VM's objects change (the simulation's seed 21075: six writes of one
    condition in 31 s): the write is retried with backoff instead, and lands once the
    server answers. A VM the cache does not hold is still decided again."""
    cache = _cached_running_vm(api_server)
    failed = SetVMCondition("ns1", "vm", "NetworkHotplugFailed", "True", "SDNTimeout", "slow")
    api_server.faults.fail_requests(404, verb="patch", times=1)
    run = executor(connection, cache)

    with pytest.raises(TemporaryError, match="404") as raised:
        await run.execute(pending(1, failed))
    assert not isinstance(raised.value, RetryAfterObservation)
    assert "NetworkHotplugFailed" not in [
        c["type"] for c in api_server.store.get(VMS, "ns1", "vm")["status"]["conditions"]]
    await run.execute(pending(1, failed))
    assert [c["type"] for c in api_server.store.get(VMS, "ns1", "vm")["status"]["conditions"]] \
        == ["Running", "NetworkHotplugFailed"]
    with pytest.raises(RetryAfterObservation, match="not in the cache"):
        await run.execute(pending(2, dataclasses.replace(failed, name="gone")))


async def test_a_404_on_the_fresh_read_after_a_409_is_retried_not_decided_again(
    api_server: ApiServer, connection: ApiConnection, ns1: None
) -> None:
    """The condition patch built from a stale cache is refused (409: the VM exists), and
    the server answers the fresh read 404. Decided again, the next world still holds the
    VM and asks for the same condition at once: the effect is retried with backoff
    instead, and the retry writes the condition with every other condition kept."""
    cache = _cached_running_vm(api_server)
    newer = copy.deepcopy(api_server.store.get(VMS, "ns1", "vm"))
    newer["status"]["conditions"].append({"type": "Migrating", "status": "True"})
    api_server.store.update(VMS, newer, subresource="status")
    failed = SetVMCondition("ns1", "vm", "NetworkHotplugFailed", "True", "SDNTimeout", "slow")
    api_server.faults.fail_requests(404, verb="get", times=1)
    run = executor(connection, cache)

    with pytest.raises(TemporaryError, match="404") as raised:
        await run.execute(pending(1, failed))
    assert not isinstance(raised.value, RetryAfterObservation)
    assert (api_server.count("get"), api_server.count("patch")) == (1, 1)
    await run.execute(pending(1, failed))
    assert [c["type"] for c in api_server.store.get(VMS, "ns1", "vm")["status"]["conditions"]] \
        == ["Running", "Migrating", "NetworkHotplugFailed"]


@pytest.mark.parametrize("code", [404, 409])
async def test_a_404_or_409_on_the_patch_of_a_pod_just_read_is_retried_not_decided_again(
    api_server: ApiServer, connection: ApiConnection, ns1: None, code: int
) -> None:
    """The server answers the pod patch 404 (or 409, though the patch is pinned by its
    `test` ops, whose failure is a 422) while the cache holds the pod. Decided again,
    the next world still holds it and asks for the same entries at once, as often as
    the VM's objects change (the simulation's seeds 56874 and 11990: one request sent
    four times in 32 and 40 s): the patch is retried with backoff instead, and lands
    once the server answers. A pod the cache does not hold is still decided again."""
    a = SDNRequest("Network/net-a", NET_A, id=2)
    key = DECKHOUSE.request_annotation
    pod = launcher_pod(api_server, {key: "[]"})
    cache = Cache()
    cache.take(UPSTREAM.launcher_pods, pod)
    decided = PatchPodNetworks("ns1", "virt-launcher-vm-x", pod["metadata"]["uid"], (a,),
                               observed=())
    api_server.faults.fail_requests(code, verb="patch", times=1)
    run = executor(connection, cache)

    with pytest.raises(TemporaryError, match=str(code)) as raised:
        await run.execute(pending(1, decided))
    assert not isinstance(raised.value, RetryAfterObservation)
    assert api_server.store.get(PODS, "ns1", "virt-launcher-vm-x")["metadata"][
        "annotations"][key] == "[]"
    await run.execute(pending(1, decided))
    assert NET_A in api_server.store.get(PODS, "ns1", "virt-launcher-vm-x")["metadata"][
        "annotations"][key]
    with pytest.raises(RetryAfterObservation, match="not in the cache"):
        await run.execute(pending(2, dataclasses.replace(decided, pod="virt-launcher-gone")))


@pytest.mark.parametrize("code", [404, 409])
async def test_a_404_or_409_on_the_patch_of_a_kvvm_just_read_is_retried_not_decided_again(
    api_server: ApiServer, connection: ApiConnection, ns1: None, code: int
) -> None:
    """The server answers the KVVM patch 404, or 409 (the patch pins the KVVM by its own
    `test` op, which the server answers 422 when it fails: a 409 is not the template
    having moved), while the cache holds the KVVM. Decided again, the next world still
    reads as the decision did and asks for the same template at once, as often as the
    VM's objects change (seeds 21075 and 56874 for a condition and a pod, 703 for this
    patch: 4 times in 0.2 s): the patch is retried with backoff instead, and lands once
    the server answers. A KVVM the cache does not hold, or one moved under the cache
    (its `test`), is still decided again."""
    stored = api_server.store.create(
        KVVMS, kvvm_for(Knobs(), "ns1", "vm", (("Network", "net-a"),)))
    cache = Cache()
    cache.take(UPSTREAM.kvvms, stored)
    decided = plug_b(template_of(stored))
    api_server.faults.fail_requests(code, verb="patch", times=1)
    run = executor(connection, cache)

    with pytest.raises(TemporaryError, match=str(code)) as raised:
        await run.execute(pending(1, decided))
    assert not isinstance(raised.value, RetryAfterObservation)
    assert interfaces_of(api_server.store) == ["default", NET_A]
    await run.execute(pending(1, decided))
    assert interfaces_of(api_server.store) == ["default", NET_A, NET_B]
    with pytest.raises(RetryAfterObservation, match="not in the cache"):
        await run.execute(pending(2, dataclasses.replace(decided, name="gone")))

    edit(api_server, KVVMS, "vm", lambda o: o["metadata"].setdefault("labels", {}).update(
        {"moved": "yes"}))
    with pytest.raises(RetryAfterObservation):
        await run.execute(pending(3, decided))


async def test_a_404_on_the_halt_of_a_kvvm_just_read_is_retried_not_decided_again(
    api_server: ApiServer, connection: ApiConnection, ns1: None
) -> None:
    """The same for the run strategy's halt of a restart: its 404 while the cache holds
    the KVVM and its VMI is retried with backoff, not decided again (the next world
    would ask for the same halt at once); a KVVM the cache does not hold is decided
    again."""
    kvvm = api_server.store.create(KVVMS, kvvm_for(Knobs(), "ns1", "vm", ()))
    vmi = api_server.store.create(VMIS, {"metadata": {"name": "vm", "namespace": "ns1"}})
    cache = Cache()
    cache.take(UPSTREAM.kvvms, kvvm)
    cache.take(UPSTREAM.vmis, vmi)
    halt = RestartVM("ns1", "vm", vmi["metadata"]["uid"], "halt", kvvm["spec"]["runStrategy"])
    api_server.faults.fail_requests(404, verb="patch", times=1)
    run = executor(connection, cache)

    with pytest.raises(TemporaryError, match="404") as raised:
        await run.execute(pending(1, halt))
    assert not isinstance(raised.value, RetryAfterObservation)
    assert api_server.store.get(KVVMS, "ns1", "vm")["spec"]["runStrategy"] == \
        kvvm["spec"]["runStrategy"]
    assert (await run.execute(pending(1, halt)))["halted"] is True
    assert api_server.store.get(KVVMS, "ns1", "vm")["spec"]["runStrategy"] == "Halted"
    with pytest.raises(RetryAfterObservation, match="not in the cache"):
        await run.execute(pending(2, dataclasses.replace(halt, name="gone")))


async def test_a_halt_from_a_stale_cache_is_refused_and_writes_nothing(
    api_server: ApiServer, connection: ApiConnection, ns1: None
) -> None:
    kvvm = api_server.store.create(KVVMS, kvvm_for(Knobs(), "ns1", "vm", ()))
    vmi = api_server.store.create(VMIS, {"metadata": {"name": "vm", "namespace": "ns1"}})
    cache = Cache()
    cache.take(UPSTREAM.kvvms, kvvm)
    cache.take(UPSTREAM.vmis, vmi)
    edit(api_server, KVVMS, "vm",
         lambda obj: obj["metadata"].setdefault("labels", {}).__setitem__("by", "hand"))
    halt = RestartVM("ns1", "vm", vmi["metadata"]["uid"], "halt", kvvm["spec"]["runStrategy"])

    with pytest.raises(RetryAfterObservation):
        await executor(connection, cache).execute(pending(1, halt))
    assert api_server.store.get(KVVMS, "ns1", "vm")["spec"]["runStrategy"] == \
        kvvm["spec"]["runStrategy"]
    assert (api_server.count("get"), api_server.count("patch")) == (0, 1)



def _vm_whose_pod_asks_for_a_and_b(api_server: ApiServer, cache: Cache) -> dict[str, Any]:
    """KVVM `vm` with net-a, its launcher pod asking for net-a and net-b; both cached."""
    pod = _vm_with_net_a_whose_pod_asks_for(api_server, A, B)
    cache.take(UPSTREAM.kvvms, api_server.store.get(KVVMS, "ns1", "vm"))
    cache.take(UPSTREAM.launcher_pods, pod)
    return pod


A, B = SDNRequest("Network/net-a", NET_A, id=2), SDNRequest("Network/net-b", NET_B, id=3)


async def test_a_release_decided_before_the_informers_show_a_landed_attach_is_refused(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    """Seeds 3408 and 3107 of the simulation: nicplug's KVVM patch attaching net-b lands
    (effect 2) while the informers are behind (a watch re-listing, a partition); the
    user drops net-b, and the unplug, reading a KVVM without it, releases net-b's pod
    entry (effect 3). The landed patch stays known to the pod patches until the cache
    shows it, and once it does the cached KVVM carries net-b: decided again both times;
    the pod keeps asking for net-b until the KVVM marks it absent."""
    cache = Cache()
    pod = _vm_whose_pod_asks_for_a_and_b(api_server, cache)
    run = executor(connection, cache)
    await run.execute(pending(2, plug_b(template_of(api_server.store.get(KVVMS, "ns1", "vm")))))
    assert interfaces_of(api_server.store) == ["default", NET_A, NET_B]

    def release_b(effect_id: int) -> Any:
        return run.execute(pending(effect_id, PatchPodNetworks(
            "ns1", "virt-launcher-vm-x", pod["metadata"]["uid"], (A,), observed=(A, B))))

    with pytest.raises(RetryAfterObservation, match=r"effect 2\) attached \['veth_n"):
        await release_b(3)  # decided from the cache as it was: without net-b
    cache.take(UPSTREAM.kvvms, api_server.store.get(KVVMS, "ns1", "vm"))
    with pytest.raises(RetryAfterObservation, match="carries"):
        await release_b(5)  # the cache shows it now, the decision did not
    requested = api_server.store.get(PODS, "ns1", "virt-launcher-vm-x")["metadata"][
        "annotations"][DECKHOUSE.request_annotation]
    assert requested == DECKHOUSE.render_requests(requests=(A, B), namespace="ns1")

    edit(api_server, KVVMS, "vm", lambda kvvm: kvvm["spec"]["template"]["spec"]["domain"][
        "devices"]["interfaces"][-1].update(state="absent"))
    cache.take(UPSTREAM.kvvms, api_server.store.get(KVVMS, "ns1", "vm"))
    await release_b(7)  # marked absent, as the cache shows: the entry goes
    requested = api_server.store.get(PODS, "ns1", "virt-launcher-vm-x")["metadata"][
        "annotations"][DECKHOUSE.request_annotation]
    assert requested == DECKHOUSE.render_requests(requests=(A,), namespace="ns1")


async def test_an_older_attach_started_after_a_newer_release_waits_for_it(
    api_server: ApiServer, connection: ApiConnection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seed 3107: a new leader's outbox sends the pending effects in the order of their
    retry times, not their ids: the release of net-b (effect 7, decided after the user
    dropped it) is on the wire when the plug's older KVVM patch adding net-b (effect 4)
    starts. The older patch waits for it and, net-b released, is decided again."""
    cache = Cache()
    pod = _vm_whose_pod_asks_for_a_and_b(api_server, cache)
    run = executor(connection, cache)
    on_the_wire = asyncio.Event()
    hold_until(on_the_wire, monkeypatch, run._calls, "patch_pod")
    release = asyncio.create_task(run.execute(pending(7, PatchPodNetworks(
        "ns1", "virt-launcher-vm-x", pod["metadata"]["uid"], (A,), observed=(A, B)))))
    for _ in range(20):
        await asyncio.sleep(0)
    attach = asyncio.create_task(run.execute(pending(4, plug_b(
        template_of(api_server.store.get(KVVMS, "ns1", "vm"))))))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not attach.done() and interfaces_of(api_server.store) == ["default", NET_A]

    on_the_wire.set()
    await release
    with pytest.raises(RetryAfterObservation, match=r"effect 7\) released"):
        await attach
    assert interfaces_of(api_server.store) == ["default", NET_A]


async def test_two_retried_writes_of_either_kind_do_not_wait_for_each_other(
    api_server: ApiServer, connection: ApiConnection,
) -> None:
    """A newer pod patch (effect 5) and a KVVM patch (effect 4) both failed for now (a
    partition, 503s) and are tried again at once: the older does not wait for the newer,
    which is not on the wire (waiting for its retry, then for the older), so neither
    sits out the 30 s bound; the newer goes once the older has landed."""
    cache = Cache()
    pod = _vm_whose_pod_asks_for_a_and_b(api_server, cache)
    run = executor(connection, cache)
    attach_b = pending(4, plug_b(template_of(api_server.store.get(KVVMS, "ns1", "vm"))))
    keep_both = pending(5, PatchPodNetworks(
        "ns1", "virt-launcher-vm-x", pod["metadata"]["uid"], (B, A), observed=(A, B)))
    for effect, resource in ((keep_both, "pods"), (attach_b, "virtualmachines")):
        api_server.faults.fail_requests(503, verb="patch", resource=resource)
        with pytest.raises(TemporaryError):
            await asyncio.wait_for(run.execute(effect), timeout=10)

    both = asyncio.gather(run.execute(keep_both), run.execute(attach_b))
    await asyncio.wait_for(both, timeout=10)  # a guard: no wait of 30 s
    assert interfaces_of(api_server.store) == ["default", NET_A, NET_B]


async def test_an_older_attach_retried_after_a_newer_release_landed_and_showed_is_refused(
    api_server: ApiServer, connection: ApiConnection,
) -> None:
    """Seed 41710 of the first 100,000-schedule run. A plug's KVVM patch adding net-b
    (effect 4) timed out and was retried by the outbox. Meanwhile the user reverted,
    and the release of net-b gave up waiting for it (effect 5, decided again). The
    new release (effect 6) found no unfinished attach and landed, and the informers
    showed it. Then the old attach's retry came. It must not land: no pod requests
    net-b any more."""
    cache = Cache()
    pod = _vm_whose_pod_asks_for_a_and_b(api_server, cache)
    run = KubeExecutor(KubeCalls(connection), DECKHOUSE, flavour=UPSTREAM, cached=cache,
                       wait_for_earlier=0)  # gives up at once: no wait in real time
    attach_b = pending(4, plug_b(template_of(api_server.store.get(KVVMS, "ns1", "vm"))))
    api_server.faults.fail_requests(503, verb="patch", resource="virtualmachines")
    with pytest.raises(TemporaryError):
        await run.execute(attach_b)

    def release_b(effect_id: int) -> Any:
        return run.execute(pending(effect_id, PatchPodNetworks(
            "ns1", "virt-launcher-vm-x", pod["metadata"]["uid"], (A,), observed=(A, B))))

    with pytest.raises(RetryAfterObservation, match=r"effect 4\) has not finished"):
        await release_b(5)
    await release_b(6)
    cache.take(UPSTREAM.launcher_pods, api_server.store.get(PODS, "ns1", "virt-launcher-vm-x"))

    with pytest.raises(RetryAfterObservation, match=r"effect 6\) landed since"):
        await run.execute(attach_b)
    assert interfaces_of(api_server.store) == ["default", NET_A]


async def test_a_write_for_the_next_boot_is_refused_when_the_cache_holds_a_live_vmi(
    api_server: ApiServer, connection: ApiConnection, ns1: None
) -> None:
    """Decided while the VMI had failed, retried after KubeVirt started a new one from
    the older template: the informers hold the new VMI, the server's answer to the
    VMI's GET says 404. A live VMI either shows refuses the write (simulation seed
    61119: the KVVM patch landed, and the new VMI held an interface its launcher pod
    had never asked the SDN for)."""
    stored = api_server.store.create(
        KVVMS, kvvm_for(Knobs(), "ns1", "vm", (("Network", "net-a"),)))
    cache = Cache()
    cache.take(UPSTREAM.kvvms, stored)
    started = api_server.store.create(VMIS, {
        "metadata": {"name": "vm", "namespace": "ns1"},
        "status": {"phase": "Scheduled", "activePods": {"pod-p2": "node-b"}}})
    cache.take(UPSTREAM.vmis, started)
    api_server.faults.fail_requests(404, verb="get", times=1)
    decided = dataclasses.replace(plug_b(template_of(stored)), stopped=True)

    with pytest.raises(RetryAfterObservation, match="started since"):
        await executor(connection, cache).execute(pending(1, decided))
    assert interfaces_of(api_server.store) == ["default", NET_A]


async def test_an_attach_decided_before_the_informers_showed_a_landed_release_is_refused(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    """Seed 52382 of the 100,000-schedule run: the release of net-b's pod entry
    (effect 3) lands and the informers show it at once, so the order book forgets it;
    in the same instant the user asks for net-b again, and that decision, read from the
    world before the informers heard of the release, finds the entry requested and
    ready and attaches it (effect 4) as the SDN tears it down. Refused, as the cached
    pod no longer requests it: decided again, the plug asks the pod for net-b first,
    and then attaching goes."""
    cache = Cache()
    pod = _vm_whose_pod_asks_for_a_and_b(api_server, cache)
    uid = pod["metadata"]["uid"]
    cache.take(UPSTREAM.vmis, api_server.store.create(VMIS, {
        "metadata": {"name": "vm", "namespace": "ns1"},
        "status": {"phase": "Running", "activePods": {uid: "node-a"}}}))
    run = executor(connection, cache)

    def patch_pod(effect_id: int, *requests: SDNRequest, observed: tuple[SDNRequest, ...],
                  ) -> Any:
        return run.execute(pending(effect_id, PatchPodNetworks(
            "ns1", "virt-launcher-vm-x", uid, requests, observed=observed)))

    def attach_b(effect_id: int) -> Any:
        kvvm = api_server.store.get(KVVMS, "ns1", "vm")
        return run.execute(pending(effect_id, plug_b(template_of(kvvm), pods=(uid,))))

    await patch_pod(3, A, observed=(A, B))
    cache.take(UPSTREAM.launcher_pods, api_server.store.get(PODS, "ns1", "virt-launcher-vm-x"))
    with pytest.raises(RetryAfterObservation, match=r"no longer requests \['veth_n"):
        await attach_b(4)
    assert interfaces_of(api_server.store) == ["default", NET_A]

    await patch_pod(5, A, B, observed=(A,))  # decided again: net-b asked for first
    cache.take(UPSTREAM.launcher_pods, api_server.store.get(PODS, "ns1", "virt-launcher-vm-x"))
    await attach_b(6)
    assert interfaces_of(api_server.store) == ["default", NET_A, NET_B]


C = SDNRequest("Network/net-c", nw.if_name("Network", "net-c"), id=4)


async def test_a_pod_patch_decided_while_one_of_the_same_pod_is_on_the_wire_waits_for_it(
    api_server: ApiServer, connection: ApiConnection, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two MAC addresses named a few milliseconds apart: the first decision's pod patch
    (effect 3, adding net-b) is on the wire when the second decision, from a world that
    does not show it, asks for net-b and net-c over the same annotation (effect 5). The
    second waits for the first; that one landed over what the second was built on, and
    the informers do not show it yet: the second is decided again, unsent, rather than
    sent for the server to refuse. Decided again from the pod as it now is, it goes."""
    cache = Cache()
    pod = _vm_with_net_a_whose_pod_asks_for(api_server, A)
    cache.take(UPSTREAM.launcher_pods, pod)
    run = executor(connection, cache)
    uid = pod["metadata"]["uid"]
    on_the_wire = asyncio.Event()
    hold_until(on_the_wire, monkeypatch, run._calls, "patch_pod")
    add_b = asyncio.create_task(run.execute(pending(3, PatchPodNetworks(
        "ns1", "virt-launcher-vm-x", uid, (A, B), observed=(A,)))))
    for _ in range(20):
        await asyncio.sleep(0)
    add_b_and_c = asyncio.create_task(run.execute(pending(5, PatchPodNetworks(
        "ns1", "virt-launcher-vm-x", uid, (A, B, C), observed=(A,)))))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not add_b_and_c.done()

    on_the_wire.set()
    await add_b
    with pytest.raises(RetryAfterObservation, match=r"effect 3\) landed over"):
        await add_b_and_c

    def requested() -> Any:
        return api_server.store.get(PODS, "ns1", "virt-launcher-vm-x")["metadata"][
            "annotations"][DECKHOUSE.request_annotation]

    assert requested() == DECKHOUSE.render_requests(requests=(A, B), namespace="ns1")
    assert api_server.count("patch", "pods") == 1
    cache.take(UPSTREAM.launcher_pods, api_server.store.get(PODS, "ns1", "virt-launcher-vm-x"))
    await run.execute(pending(6, PatchPodNetworks(
        "ns1", "virt-launcher-vm-x", uid, (A, B, C), observed=(A, B))))
    assert requested() == DECKHOUSE.render_requests(requests=(A, B, C), namespace="ns1")
    assert api_server.count("patch", "pods") == 2


async def test_a_kvvm_patch_decided_while_one_of_the_same_kvvm_is_on_the_wire_waits_for_it(
    api_server: ApiServer, connection: ApiConnection, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same for the KVVM: a second patch built on the resourceVersion the first one
    (still on the wire) replaces is decided again once the first landed, unsent."""
    cache = Cache()
    _vm_whose_pod_asks_for_a_and_b(api_server, cache)
    run = executor(connection, cache)
    stored = api_server.store.get(KVVMS, "ns1", "vm")
    on_the_wire = asyncio.Event()
    hold_until(on_the_wire, monkeypatch, run._calls, "patch")
    first = asyncio.create_task(run.execute(pending(3, plug_b(template_of(stored)))))
    for _ in range(20):
        await asyncio.sleep(0)
    second = asyncio.create_task(run.execute(pending(5, plug_b(template_of(stored)))))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not second.done()

    on_the_wire.set()
    await first
    with pytest.raises(RetryAfterObservation, match=r"effect 3\) landed over"):
        await second
    assert interfaces_of(api_server.store) == ["default", NET_A, NET_B]
    assert api_server.count("patch", "virtualmachines") == 1


async def test_a_restart_condition_set_anew_since_the_removal_was_decided_is_kept(
    api_server: ApiServer, connection: ApiConnection, ns1: None
) -> None:
    """The removal of `NetworkHotplugRestartRequired` was decided once a restart applied
    one change; before it ran, the condition was set anew for a later change: the
    removal names the message it saw and leaves the new one. Once it says that message,
    the condition goes."""
    cache = _cached_running_vm(api_server)
    restart = "NetworkHotplugRestartRequired"
    run = executor(connection, cache)
    for message in ("Restart the VM: Network/y (added)", "Restart the VM: Network/y (removed)"):
        await run.execute(pending(1, SetVMCondition(
            "ns1", "vm", restart, "True", "ChangesPendingRestart", message)))
    seen = RemoveVMCondition("ns1", "vm", restart, "Restart the VM: Network/y (added)")
    cache.take(kube_kinds.VIRTUAL_MACHINES, api_server.store.get(VMS, "ns1", "vm"))

    result = await run.execute(pending(2, seen))
    conditions = api_server.store.get(VMS, "ns1", "vm")["status"]["conditions"]
    assert [(c["type"], c["message"]) for c in conditions if c["type"] == restart] == [
        (restart, "Restart the VM: Network/y (removed)")]
    assert result == {"unchanged": True, "set_anew": True}
    await run.execute(pending(3, RemoveVMCondition(
        "ns1", "vm", restart, "Restart the VM: Network/y (removed)")))
    conditions = api_server.store.get(VMS, "ns1", "vm")["status"]["conditions"]
    assert [c["type"] for c in conditions] == ["Running"]
