"""The executor never lets an older whole-list patch write over a newer one.

Pod and KVVM patches carry whole lists computed from the world their decision saw;
a later decision on the same VM (a higher effect id) saw a newer world. An older
patch that comes back late — retried after a backoff, or re-run after a restart —
must not be sent over the newer.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from nicplug.adapters.executor import KubeExecutor
from nicplug.adapters.kube.calls import KubeCalls
from nicplug.adapters.kube.client import ApiConnection
from nicplug.adapters.kube.flavour import UPSTREAM
from nicplug.adapters.sdn import dialect_for
from nicplug.engine.errors import EffectUndecodable, PermanentError, RetryAfterObservation
from nicplug.engine.journal import PendingEffect
from nicplug.engine.model import Key, StreamId
from nicplug.machines.effects import Effect, PatchVirtualMachine, VMNetworkEntry
from nicplug.machines.world import SDNRequest
from nicplug.simulator import networking as nw
from nicplug.simulator.fixtures import kvvm_for
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.resources import KVVMS, NAMESPACES
from tests.kube.conftest import ApiServer

NET_A, NET_B = nw.if_name("Network", "net-a"), nw.if_name("Network", "net-b")


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
