"""The executor never lets an older whole-list patch write over a newer one.

Pod and KVVM patches carry whole lists computed from the world their decision saw;
a later decision on the same VM (a higher effect id) saw a newer world. An older
patch that comes back late — retried after a backoff, or re-run after a restart —
must not be sent over the newer.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from dataclasses import replace
from typing import Any

import pytest

from nicplug.adapters.core.executor import KubeExecutor
from nicplug.adapters.kube.calls import KubeCalls
from nicplug.adapters.kube.client import ApiConnection
from nicplug.adapters.kube.flavour import UPSTREAM
from nicplug.adapters.kube.translate import records
from nicplug.adapters.kube.translate.objects import KVVMObject, read
from nicplug.adapters.sdn import dialect_for
from nicplug.engine.errors import (
    EffectUndecodable,
    PermanentError,
    RetryAfterObservation,
    TemporaryError,
)
from nicplug.engine.journal import PendingEffect
from nicplug.engine.model import Key, StreamId
from nicplug.machines.effects import (
    Effect,
    KVVMTemplate,
    PatchPodNetworks,
    PatchVirtualMachine,
    RestartVM,
    VMNetworkEntry,
)
from nicplug.machines.world import RESTART_ANNOTATION, SDNRequest
from nicplug.simulator import networking as nw
from nicplug.simulator.fixtures import fixture_mac, kvvm_for
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.resources import KVVMS, NAMESPACES, PODS, VMIS
from tests.kube.conftest import ApiServer

# net-a is the fixture KVVM's (Deckhouse names it after its MAC); net-b is plugged here
NET_A = nw.mac_if_name("Network", fixture_mac("ns1", "vm", 2))
NET_B = nw.if_name("Network", "net-b")


def pending(effect_id: int, effect: Effect) -> PendingEffect:
    request = effect.request(StreamId(f"uid/op/{effect_id}"))
    return PendingEffect(
        id=effect_id, stream=request.stream, key=Key("ns1/vm"), type=request.type,
        payload=request.payload, idempotency_key=request.idempotency_key, status="issued",
        attempts=0, next_attempt_at=None, last_error=None,
    )


def kvvm_patch(*entries: VMNetworkEntry) -> PatchVirtualMachine:
    requests = tuple(SDNRequest(e.identity, e.if_name, id=i)
                     for i, e in enumerate(entries, start=2) if not e.absent)
    return PatchVirtualMachine("ns1", "vm", (VMNetworkEntry("default", "Main"), *entries),
                               requests)


async def test_an_older_kvvm_patch_coming_back_after_a_newer_one_is_not_sent(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    store = api_server.store
    store.create(NAMESPACES, {"metadata": {"name": "ns1"}})
    store.create(KVVMS, kvvm_for(Knobs(), "ns1", "vm", (("Network", "net-a"),)))
    executor = KubeExecutor(KubeCalls(connection), dialect_for("deckhouse"), flavour=UPSTREAM)
    unplug_a = kvvm_patch(VMNetworkEntry(NET_A, "Network/net-a", absent=True))
    and_plug_b = kvvm_patch(VMNetworkEntry(NET_A, "Network/net-a", absent=True),
                            VMNetworkEntry(NET_B, "Network/net-b"))

    await executor.execute(pending(7, and_plug_b))
    assert await executor.execute(pending(5, unplug_a)) == {"superseded": True}

    spec = store.get(KVVMS, "ns1", "vm")["spec"]["template"]["spec"]
    interfaces = spec["domain"]["devices"]["interfaces"]
    assert [(i["name"], i.get("state")) for i in interfaces] == [
        ("default", None), (NET_A, "absent"), (NET_B, None)]
    assert api_server.count("patch", "virtualmachines") == 1


async def test_the_same_patch_tried_again_is_sent_again(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    store = api_server.store
    store.create(NAMESPACES, {"metadata": {"name": "ns1"}})
    store.create(KVVMS, kvvm_for(Knobs(), "ns1", "vm", ()))
    executor = KubeExecutor(KubeCalls(connection), dialect_for("deckhouse"), flavour=UPSTREAM)
    plug_b = pending(3, kvvm_patch(VMNetworkEntry(NET_B, "Network/net-b")))

    await executor.execute(plug_b)
    await executor.execute(plug_b)  # a re-issue after a timeout: idempotent, still sent
    assert api_server.count("patch", "virtualmachines") == 2


async def test_a_patch_of_a_vanished_launcher_pod_is_decided_again_not_rejected(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    api_server.store.create(NAMESPACES, {"metadata": {"name": "ns1"}})
    executor = KubeExecutor(KubeCalls(connection), dialect_for("deckhouse"), flavour=UPSTREAM)
    gone = PatchPodNetworks("ns1", "virt-launcher-vm-x", "pod-uid",
                            (SDNRequest("Network/net-a", NET_A, id=2),))

    with pytest.raises(RetryAfterObservation) as raised:
        await executor.execute(pending(3, gone))
    assert not isinstance(raised.value, PermanentError)


def template_of(store_kvvm: dict[str, Any]) -> KVVMTemplate:
    """The precondition a decision from `store_kvvm` carries."""
    record, _ = records.kvvm(read(KVVMObject, store_kvvm, kind="KVVM"),
                             dialect=dialect_for("deckhouse"), vmi_exists=True)
    return KVVMTemplate(store_kvvm["metadata"]["resourceVersion"], record.interfaces,
                        record.networks, record.template_requests)


def plug_b(observed: KVVMTemplate, pods: tuple[str, ...] = ()) -> PatchVirtualMachine:
    patch = kvvm_patch(VMNetworkEntry(NET_A, "Network/net-a"),
                       VMNetworkEntry(NET_B, "Network/net-b"))
    return dataclasses.replace(patch, observed=observed, pods=pods)


def interfaces_of(store: Any) -> list[str]:
    spec = store.get(KVVMS, "ns1", "vm")["spec"]["template"]["spec"]
    return [i["name"] for i in spec["domain"]["devices"]["interfaces"]]


async def test_a_kvvm_patch_decided_before_a_users_edit_is_not_written_over_it(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    store = api_server.store
    store.create(NAMESPACES, {"metadata": {"name": "ns1"}})
    store.create(KVVMS, kvvm_for(Knobs(), "ns1", "vm", (("Network", "net-a"),)))
    decided = plug_b(template_of(store.get(KVVMS, "ns1", "vm")))
    edited = copy.deepcopy(store.get(KVVMS, "ns1", "vm"))  # the user adds a NIC by hand
    edited["spec"]["template"]["spec"]["domain"]["devices"]["interfaces"].append(
        {"name": "by-hand", "bridge": {}})
    edited["spec"]["template"]["spec"]["networks"].append({"name": "by-hand", "pod": {}})
    store.update(KVVMS, edited)
    executor = KubeExecutor(KubeCalls(connection), dialect_for("deckhouse"), flavour=UPSTREAM)

    with pytest.raises(RetryAfterObservation, match="template changed"):
        await executor.execute(pending(1, decided))
    assert interfaces_of(store) == ["default", NET_A, "by-hand"]


async def test_a_kvvm_patch_goes_through_status_churn_after_its_decision(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    store = api_server.store
    store.create(NAMESPACES, {"metadata": {"name": "ns1"}})
    store.create(KVVMS, kvvm_for(Knobs(), "ns1", "vm", (("Network", "net-a"),)))
    decided = plug_b(template_of(store.get(KVVMS, "ns1", "vm")))
    churned = copy.deepcopy(store.get(KVVMS, "ns1", "vm"))
    churned.setdefault("status", {})["printableStatus"] = "Running"
    store.update(KVVMS, churned, subresource="status")
    executor = KubeExecutor(KubeCalls(connection), dialect_for("deckhouse"), flavour=UPSTREAM)

    await executor.execute(pending(1, decided))
    assert interfaces_of(store) == ["default", NET_A, NET_B]


async def test_a_kvvm_patch_decided_on_one_launcher_pod_is_not_sent_after_the_vm_moved(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    store = api_server.store
    store.create(NAMESPACES, {"metadata": {"name": "ns1"}})
    store.create(KVVMS, kvvm_for(Knobs(), "ns1", "vm", (("Network", "net-a"),)))
    store.create(VMIS, {"metadata": {"name": "vm", "namespace": "ns1"},
                        "status": {"activePods": {"pod-p2": "node-b"}}})  # P → P′
    decided = plug_b(template_of(store.get(KVVMS, "ns1", "vm")), pods=("pod-p1",))
    executor = KubeExecutor(KubeCalls(connection), dialect_for("deckhouse"), flavour=UPSTREAM)

    with pytest.raises(RetryAfterObservation, match="other launcher pods"):
        await executor.execute(pending(1, decided))
    assert interfaces_of(store) == ["default", NET_A]


async def test_a_write_for_the_next_boot_is_not_sent_once_the_vm_started(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    """Decided while the VM was stopped, sent (late: slow answers, retries) after it
    started again: KubeVirt would hot-plug the interfaces into the running VMI before
    any launcher pod requested them from the SDN."""
    store = api_server.store
    store.create(NAMESPACES, {"metadata": {"name": "ns1"}})
    store.create(KVVMS, kvvm_for(Knobs(), "ns1", "vm", (("Network", "net-a"),)))
    decided = dataclasses.replace(plug_b(template_of(store.get(KVVMS, "ns1", "vm"))),
                                  stopped=True)
    executor = KubeExecutor(KubeCalls(connection), dialect_for("deckhouse"), flavour=UPSTREAM)
    store.create(VMIS, {"metadata": {"name": "vm", "namespace": "ns1"},
                        "status": {"phase": "Scheduled", "activePods": {"pod-p1": "node-a"}}})

    with pytest.raises(RetryAfterObservation, match="started since"):
        await executor.execute(pending(1, decided))
    assert interfaces_of(store) == ["default", NET_A]


async def test_a_write_for_the_next_boot_goes_to_a_vm_still_stopped(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    store = api_server.store
    store.create(NAMESPACES, {"metadata": {"name": "ns1"}})
    store.create(KVVMS, kvvm_for(Knobs(), "ns1", "vm", (("Network", "net-a"),)))
    decided = dataclasses.replace(plug_b(template_of(store.get(KVVMS, "ns1", "vm"))),
                                  stopped=True)
    executor = KubeExecutor(KubeCalls(connection), dialect_for("deckhouse"), flavour=UPSTREAM)

    await executor.execute(pending(1, decided))
    assert interfaces_of(store) == ["default", NET_A, NET_B]


async def test_a_pod_patch_decided_from_requests_that_changed_since_is_not_sent(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    store = api_server.store
    store.create(NAMESPACES, {"metadata": {"name": "ns1"}})
    deckhouse = dialect_for("deckhouse")
    a = SDNRequest("Network/net-a", NET_A, id=2)
    value = deckhouse.render_requests(requests=(a,), namespace="ns1")
    pod = store.create(PODS, {"metadata": {
        "name": "virt-launcher-vm-x", "namespace": "ns1",
        "annotations": {deckhouse.request_annotation: value}}})
    decided_on_nothing = PatchPodNetworks(  # decided when the pod requested nothing yet
        "ns1", "virt-launcher-vm-x", pod["metadata"]["uid"],
        (SDNRequest("Network/net-b", NET_B, id=3),), observed=())
    executor = KubeExecutor(KubeCalls(connection), deckhouse, flavour=UPSTREAM)

    with pytest.raises(RetryAfterObservation, match="SDN requests changed"):
        await executor.execute(pending(1, decided_on_nothing))
    annotations = store.get(PODS, "ns1", "virt-launcher-vm-x")["metadata"]["annotations"]
    assert annotations[deckhouse.request_annotation] == value


async def test_a_restart_halts_the_kvvm_of_the_vmi_it_saw_then_starts_it_as_it_was(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    store = api_server.store
    store.create(NAMESPACES, {"metadata": {"name": "ns1"}})
    store.create(KVVMS, kvvm_for(Knobs(), "ns1", "vm", ()))
    vmi = store.create(VMIS, {"metadata": {"name": "vm", "namespace": "ns1"}})
    executor = KubeExecutor(KubeCalls(connection), dialect_for("deckhouse"), flavour=UPSTREAM)
    strategy = store.get(KVVMS, "ns1", "vm")["spec"]["runStrategy"]

    stale = RestartVM("ns1", "vm", "another-vmi", "halt", strategy)
    assert (await executor.execute(pending(1, stale)))["halted"] is False
    await executor.execute(pending(2, RestartVM("ns1", "vm", vmi["metadata"]["uid"], "halt",
                                                strategy)))
    halted = store.get(KVVMS, "ns1", "vm")
    assert halted["spec"]["runStrategy"] == "Halted"
    assert halted["metadata"]["annotations"][RESTART_ANNOTATION] == strategy
    again = RestartVM("ns1", "vm", vmi["metadata"]["uid"], "halt", strategy)
    assert (await executor.execute(pending(3, again)))["halted"] is False  # once per VMI

    await executor.execute(pending(4, RestartVM("ns1", "vm", "", "start", strategy)))
    started = store.get(KVVMS, "ns1", "vm")
    assert started["spec"]["runStrategy"] == strategy
    assert RESTART_ANNOTATION not in (started["metadata"].get("annotations") or {})


async def test_an_effect_payload_no_version_can_read_is_dropped_not_rejected(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    store = api_server.store
    store.create(NAMESPACES, {"metadata": {"name": "ns1"}})
    store.create(KVVMS, kvvm_for(Knobs(), "ns1", "vm", (("Network", "net-a"),)))
    before = store.get(KVVMS, "ns1", "vm")
    executor = KubeExecutor(KubeCalls(connection), dialect_for("deckhouse"), flavour=UPSTREAM)
    effect = pending(3, kvvm_patch(VMNetworkEntry(NET_B, "Network/net-b")))
    # written by a newer nicplug: the field the patch lists its networks in is renamed
    payload = {k: v for k, v in effect.payload.items() if k != "networks"}
    unreadable = replace(effect, payload={**payload, "interfaces": []}, schema_version=9)

    with pytest.raises(EffectUndecodable, match="schema 9") as raised:
        await executor.execute(unreadable)

    assert isinstance(raised.value, RetryAfterObservation)  # decided again, not Failed
    assert not isinstance(raised.value, PermanentError)
    assert store.get(KVVMS, "ns1", "vm") == before


async def test_a_dialect_that_only_reads_writes_no_pod_and_no_kvvm(
    connection: ApiConnection, api_server: ApiServer
) -> None:
    """Where KubeVirt writes the networks annotation and the user the template (the
    kubevirt flavour), the machines never ask for a pod or KVVM patch; one that came
    anyway (an outbox of another configuration) is refused for good, and nothing is sent."""
    executor = KubeExecutor(KubeCalls(connection), dialect_for("multus"), flavour=UPSTREAM)
    before = len(api_server.requests)
    pod = PatchPodNetworks("ns1", "virt-launcher-vm-1", "uid", ())
    plug = kvvm_patch(VMNetworkEntry(NET_A, "Network/net-a"))
    for effect in (pending(1, pod), pending(2, plug)):
        with pytest.raises(PermanentError, match="never nicplug's"):
            await executor.execute(effect)
    assert len(api_server.requests) == before


@pytest.mark.parametrize("pod_keeps_b", [False, True])
async def test_a_kvvm_patch_waits_for_the_pod_patch_decided_before_it(
    api_server: ApiServer, connection: ApiConnection, monkeypatch: pytest.MonkeyPatch,
    pod_keeps_b: bool,
) -> None:
    """An unplug of net-b released its pod entry (effect 8, still on the wire) when the
    user asked for net-b again, and the plug, reading the pod before that patch landed,
    wrote net-b into the KVVM (effect 10): attached over an entry being released. The
    KVVM patch waits for the pod patch; if the pod no longer requests net-b once it
    landed, it is decided again, else it is sent."""
    store = api_server.store
    deckhouse = dialect_for("deckhouse")
    a, b = SDNRequest("Network/net-a", NET_A, id=2), SDNRequest("Network/net-b", NET_B, id=3)
    pod = _vm_with_net_a_whose_pod_asks_for(api_server, a, b)
    executor = KubeExecutor(KubeCalls(connection), deckhouse, flavour=UPSTREAM)
    on_the_wire = asyncio.Event()
    hold_until(on_the_wire, monkeypatch, executor._calls, "patch_pod")
    entries = (a, b) if pod_keeps_b else (a,)
    pod_patch = asyncio.create_task(executor.execute(pending(8, PatchPodNetworks(
        "ns1", "virt-launcher-vm-x", pod["metadata"]["uid"], entries, observed=(a, b)))))
    kvvm_patch_ = asyncio.create_task(executor.execute(pending(10, kvvm_patch(
        VMNetworkEntry(NET_A, "Network/net-a"), VMNetworkEntry(NET_B, "Network/net-b")))))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not kvvm_patch_.done() and interfaces_of(store) == ["default", NET_A]

    on_the_wire.set()
    await pod_patch
    if pod_keeps_b:
        await kvvm_patch_
        assert interfaces_of(store) == ["default", NET_A, NET_B]
    else:
        with pytest.raises(RetryAfterObservation, match="released"):
            await kvvm_patch_
        assert interfaces_of(store) == ["default", NET_A]


async def test_a_pod_patch_waits_for_the_kvvm_patch_decided_before_it(
    api_server: ApiServer, connection: ApiConnection, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The other way round: a plug's KVVM patch adding net-b is on the wire (effect 2)
    when the user drops net-b, and the unplug, reading a KVVM without it, releases its
    pod entry (effect 3). The pod patch waits for the KVVM patch, which attached net-b:
    it is decided again, and the pod keeps requesting net-b."""
    store = api_server.store
    deckhouse = dialect_for("deckhouse")
    a, b = SDNRequest("Network/net-a", NET_A, id=2), SDNRequest("Network/net-b", NET_B, id=3)
    both = deckhouse.render_requests(requests=(a, b), namespace="ns1")
    pod = _vm_with_net_a_whose_pod_asks_for(api_server, a, b)
    executor = KubeExecutor(KubeCalls(connection), deckhouse, flavour=UPSTREAM)
    on_the_wire = asyncio.Event()
    hold_until(on_the_wire, monkeypatch, executor._calls, "patch")
    plug = asyncio.create_task(executor.execute(pending(2, kvvm_patch(
        VMNetworkEntry(NET_A, "Network/net-a"), VMNetworkEntry(NET_B, "Network/net-b")))))
    release = asyncio.create_task(executor.execute(pending(3, PatchPodNetworks(
        "ns1", "virt-launcher-vm-x", pod["metadata"]["uid"], (a,), observed=(a, b)))))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not release.done()

    on_the_wire.set()
    await plug
    with pytest.raises(RetryAfterObservation, match="attached"):
        await release
    annotations = store.get(PODS, "ns1", "virt-launcher-vm-x")["metadata"]["annotations"]
    assert annotations[deckhouse.request_annotation] == both
    assert interfaces_of(store) == ["default", NET_A, NET_B]


async def test_a_pod_patch_superseded_after_a_temporary_failure_holds_nothing_up(
    api_server: ApiServer, connection: ApiConnection,
) -> None:
    """A pod patch that failed for now (503) stays unfinished for the KVVM patches after
    it; superseded by a newer one when retried, it never lands, and they go on."""
    store = api_server.store
    deckhouse = dialect_for("deckhouse")
    a, b = SDNRequest("Network/net-a", NET_A, id=2), SDNRequest("Network/net-b", NET_B, id=3)
    pod = _vm_with_net_a_whose_pod_asks_for(api_server, a, b)
    uid = pod["metadata"]["uid"]
    executor = KubeExecutor(KubeCalls(connection), deckhouse, flavour=UPSTREAM)
    api_server.faults.fail_requests(503, verb="patch", resource="pods")
    release_b = pending(5, PatchPodNetworks("ns1", "virt-launcher-vm-x", uid, (a,),
                                            observed=(a, b)))
    with pytest.raises(TemporaryError):
        await executor.execute(release_b)
    await executor.execute(pending(9, PatchPodNetworks(
        "ns1", "virt-launcher-vm-x", uid, (a, b), observed=(a, b))))
    assert await executor.execute(release_b) == {"superseded": True}

    plug_b = executor.execute(pending(10, kvvm_patch(
        VMNetworkEntry(NET_A, "Network/net-a"), VMNetworkEntry(NET_B, "Network/net-b"))))
    await asyncio.wait_for(plug_b, timeout=30)  # a guard: it never waits for effect 5
    assert interfaces_of(store) == ["default", NET_A, NET_B]


async def test_a_kvvm_patch_does_not_wait_for_ever_for_a_pod_patch_the_outbox_gave_up(
    api_server: ApiServer, connection: ApiConnection,
) -> None:
    """A pod patch that failed for now and is never tried again (the outbox gave up on
    it, or its key is parked) would hold the KVVM patches after it for ever, each with a
    request slot: past `wait_for_earlier` the KVVM patch is decided again, and the
    stale write is forgotten, so the next one goes."""
    store = api_server.store
    deckhouse = dialect_for("deckhouse")
    a, b = SDNRequest("Network/net-a", NET_A, id=2), SDNRequest("Network/net-b", NET_B, id=3)
    pod = _vm_with_net_a_whose_pod_asks_for(api_server, a, b)
    uid = pod["metadata"]["uid"]
    executor = KubeExecutor(KubeCalls(connection), deckhouse, flavour=UPSTREAM,
                            wait_for_earlier=0)  # past at once: no time passes
    api_server.faults.fail_requests(503, verb="patch", resource="pods")
    with pytest.raises(TemporaryError):
        await executor.execute(pending(5, PatchPodNetworks(
            "ns1", "virt-launcher-vm-x", uid, (a,), observed=(a, b))))
    plug_b = pending(10, kvvm_patch(
        VMNetworkEntry(NET_A, "Network/net-a"), VMNetworkEntry(NET_B, "Network/net-b")))
    with pytest.raises(RetryAfterObservation, match="effect 5"):
        await asyncio.wait_for(executor.execute(plug_b), timeout=30)
    await asyncio.wait_for(executor.execute(plug_b), timeout=30)  # decided again: it goes
    assert interfaces_of(store) == ["default", NET_A, NET_B]


def hold_until(released: asyncio.Event, monkeypatch: pytest.MonkeyPatch, calls: KubeCalls,
               name: str) -> None:
    """Each request `calls.<name>` makes waits for `released` before it goes out."""
    original = getattr(calls, name)

    async def held(*args: Any, **kwargs: Any) -> Any:
        await released.wait()
        return await original(*args, **kwargs)

    monkeypatch.setattr(calls, name, held)


def _vm_with_net_a_whose_pod_asks_for(api_server: ApiServer, *requests: SDNRequest,
                                      ) -> dict[str, Any]:
    """Namespace ns1, a KVVM `vm` with net-a, and its launcher pod `virt-launcher-vm-x`
    whose Deckhouse SDN annotation asks for `requests`: the pod as created."""
    store = api_server.store
    deckhouse = dialect_for("deckhouse")
    store.create(NAMESPACES, {"metadata": {"name": "ns1"}})
    store.create(KVVMS, kvvm_for(Knobs(), "ns1", "vm", (("Network", "net-a"),)))
    return store.create(PODS, {"metadata": {
        "name": "virt-launcher-vm-x", "namespace": "ns1",
        "annotations": {deckhouse.request_annotation: deckhouse.render_requests(
            requests=requests, namespace="ns1")}}})
