"""The effect executor's verbs against the simulated API server, over real HTTP."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kubernetes_asyncio.client import CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from nicplug.adapters.kube.calls import (
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    EventNote,
    KubeCalls,
    compare_and_swap,
    pointer,
)
from nicplug.adapters.kube.client import ApiConnection, ClientSettings
from nicplug.adapters.kube.errors import (
    AlreadyExists,
    Conflict,
    NotFound,
    PatchRejected,
    Temporary,
    TestFailed,
)
from nicplug.adapters.kube.flavour import UPSTREAM
from nicplug.adapters.kube.resources import (
    CLUSTER_NETWORKS,
    VIRTUAL_MACHINES,
)
from nicplug.simulator import resources as sim
from nicplug.simulator.event_views import as_v1
from tests.kube.conftest import ApiServer

SPEC_ANNOTATION = "network.deckhouse.io/networks-spec"

KVVMS, VMIMS = UPSTREAM.kvvms, UPSTREAM.vmims  # the simulated server's default API
LAUNCHER_PODS = UPSTREAM.launcher_pods


def _pod(store_server: ApiServer) -> dict[str, Any]:
    return store_server.store.create(sim.PODS, {
        "metadata": {"name": "virt-launcher-vm1-abcde", "namespace": "ns1",
                     "labels": {"vm.kubevirt.io/name": "vm1"},
                     "annotations": {"keep": "me"}},
        "spec": {"containers": [{"name": "compute", "image": "virt-launcher"}]},
    })


def _kvvm(store_server: ApiServer) -> dict[str, Any]:
    return store_server.store.create(sim.KVVMS, {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "vm1", "namespace": "ns1"},
        "spec": {"template": {"spec": {
            "networks": [{"name": "default", "pod": {}}],
            "domain": {"devices": {"interfaces": [{"name": "default", "bridge": {}}]}},
        }}},
    })


@pytest.fixture
def calls(connection: ApiConnection) -> KubeCalls:
    fixed = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    return KubeCalls(connection, wall_clock=lambda: fixed)


async def test_pod_annotations_set_and_removed_by_merge_patch(
    api_server: ApiServer, calls: KubeCalls
) -> None:
    _pod(api_server)
    value = '[{"id":2,"type":"Network","name":"user-net"}]'
    patched = await calls.patch_pod_annotations(
        "ns1", "virt-launcher-vm1-abcde", {SPEC_ANNOTATION: value})
    assert patched["metadata"]["annotations"] == {"keep": "me", SPEC_ANNOTATION: value}
    removed = await calls.patch_pod_annotations(
        "ns1", "virt-launcher-vm1-abcde", {SPEC_ANNOTATION: None},
        content_type=STRATEGIC_MERGE_PATCH)
    assert removed["metadata"]["annotations"] == {"keep": "me"}
    stored = api_server.store.get(sim.PODS, "ns1", "virt-launcher-vm1-abcde")
    assert stored["metadata"]["annotations"] == {"keep": "me"}


async def test_merge_patch_of_a_custom_object(api_server: ApiServer, calls: KubeCalls) -> None:
    _kvvm(api_server)
    patch = {"spec": {"template": {"metadata": {"annotations": {SPEC_ANNOTATION: "[]"}}}}}
    patched = await calls.patch(KVVMS, "ns1", "vm1", patch, content_type=MERGE_PATCH)
    assert patched["spec"]["template"]["metadata"]["annotations"] == {SPEC_ANNOTATION: "[]"}
    assert patched["spec"]["template"]["spec"]["networks"] == [{"name": "default", "pod": {}}]


async def test_json_patch_compare_and_swap(api_server: ApiServer, calls: KubeCalls) -> None:
    _kvvm(api_server)
    path = pointer("spec", "template", "spec", "networks")
    before = [{"name": "default", "pod": {}}]
    after = [*before, {"name": "veth_n1a2b3c4d", "pod": {}}]
    patched = await calls.patch(KVVMS, "ns1", "vm1", compare_and_swap(path, before, after),
                                content_type=JSON_PATCH)
    assert patched["spec"]["template"]["spec"]["networks"] == after
    # The world moved on: the same swap no longer applies, and nothing is written.
    with pytest.raises(TestFailed) as failed:
        await calls.patch(KVVMS, "ns1", "vm1", compare_and_swap(path, before, before),
                          content_type=JSON_PATCH)
    assert failed.value.status == 422
    assert isinstance(failed.value, Conflict)  # re-read and decide again
    # Without a `test` op, a patch the server cannot apply is rejected for good.
    with pytest.raises(PatchRejected) as rejected:
        await calls.patch(KVVMS, "ns1", "vm1", [{"op": "remove", "path": "/spec/nothing"}],
                          content_type=JSON_PATCH)
    assert not isinstance(rejected.value, Conflict)
    stored = api_server.store.get(sim.KVVMS, "ns1", "vm1")
    assert stored["spec"]["template"]["spec"]["networks"] == after


async def test_the_content_type_given_is_the_one_sent(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    """Left to itself, kubernetes_asyncio labels a dict body for a custom object as a
    JSON patch (the first type it lists), which the server refuses; with
    `_content_type` it sends what it is told, and strategic merge is refused (415) for
    a custom object as by a real API server."""
    _kvvm(api_server)
    raw = CustomObjectsApi(connection.client)
    address = ("kubevirt.io", "v1", "ns1", "virtualmachines", "vm1")
    merge = {"metadata": {"labels": {"a": "b"}}}
    with pytest.raises(ApiException) as guessed:
        await raw.patch_namespaced_custom_object(*address, merge)
    assert guessed.value.status == 400
    assert "JSON patch" in guessed.value.body
    done = await raw.patch_namespaced_custom_object(*address, merge, _content_type=MERGE_PATCH)
    assert done["metadata"]["labels"] == {"a": "b"}
    with pytest.raises(ApiException) as strategic:
        await raw.patch_namespaced_custom_object(
            *address, merge, _content_type=STRATEGIC_MERGE_PATCH)
    assert strategic.value.status == 415


async def test_status_subresource_merge_patch(api_server: ApiServer, calls: KubeCalls) -> None:
    api_server.store.create(sim.VMS, {
        "metadata": {"name": "vm1", "namespace": "ns1"},
        "spec": {"networks": [{"type": "Main"}]},
    })
    condition = {"type": "AwaitingRestartToApplyConfiguration", "status": "True",
                 "reason": "ChangesPendingRestart", "message": "Network/user-net"}
    patched = await calls.patch_status(VIRTUAL_MACHINES, "ns1", "vm1",
                                       {"status": {"conditions": [condition]}})
    assert patched["status"]["conditions"] == [condition]
    # The main endpoint ignores .status: only the subresource writes it.
    ignored = await calls.patch(VIRTUAL_MACHINES, "ns1", "vm1", {"status": {"conditions": []}},
                                content_type=MERGE_PATCH)
    assert ignored["status"]["conditions"] == [condition]


async def test_cluster_scoped_get_and_not_found(api_server: ApiServer, calls: KubeCalls) -> None:
    api_server.store.create(sim.CLUSTER_NETWORKS, {"metadata": {"name": "storage"},
                                                    "spec": {"type": "Access"}})
    got = await calls.get(CLUSTER_NETWORKS, None, "storage")
    assert got["metadata"]["name"] == "storage"
    with pytest.raises(NotFound):
        await calls.get(KVVMS, "ns1", "absent")
    with pytest.raises(NotFound):
        await calls.get(LAUNCHER_PODS, "ns1", "absent")


async def test_migration_created_once(api_server: ApiServer, calls: KubeCalls) -> None:
    created = await calls.create_migration(VMIMS, "ns1", "nicplug-vm1-1", "vm1",
                                           labels={"app.kubernetes.io/managed-by": "nicplug"})
    assert created["spec"] == {"vmiName": "vm1"}
    assert (await calls.get(VMIMS, "ns1", "nicplug-vm1-1"))["spec"] == {"vmiName": "vm1"}
    # while it runs, KubeVirt's webhook refuses it (admission comes before storage) ...
    with pytest.raises(PatchRejected, match="in-flight migration detected"):
        await calls.create_migration(VMIMS, "ns1", "nicplug-vm1-1", "vm1")
    # ... once it has ended, the name is simply taken
    api_server.store.patch(sim.VMIMS, "ns1", "nicplug-vm1-1", {"status": {"phase": "Failed"}},
                           content_type="application/merge-patch+json", subresource="status")
    with pytest.raises(AlreadyExists):
        await calls.create_migration(VMIMS, "ns1", "nicplug-vm1-1", "vm1")


async def test_event_about_an_object(api_server: ApiServer, calls: KubeCalls) -> None:
    vm = api_server.store.create(sim.VMS, {"apiVersion": VIRTUAL_MACHINES.api_version,
                                           "kind": "VirtualMachine",
                                           "metadata": {"name": "vm1", "namespace": "ns1"}})
    event = await calls.create_event(EventNote(vm, "Attached", "Network/user-net attached"))
    assert event["apiVersion"] == "events.k8s.io/v1"
    assert event["regarding"]["uid"] == vm["metadata"]["uid"]
    assert event["regarding"]["kind"] == "VirtualMachine"
    assert event["eventTime"] == "2026-01-02T03:04:05.000000Z"
    assert (event["note"], event["action"]) == ("Network/user-net attached", "NetworkHotplug")
    assert event["reportingController"] == event["reportingInstance"] == "nicplug"
    stored = [as_v1(e) for e in api_server.store.list(sim.EVENTS, "ns1")[0]]
    assert [e["reason"] for e in stored] == ["Attached"]

    again = await calls.patch_event_series("ns1", event["metadata"]["name"], 2)
    assert again["series"] == {"count": 2, "lastObservedTime": "2026-01-02T03:04:05.000000Z"}


async def test_injected_409_429_500_are_translated(
    api_server: ApiServer, calls: KubeCalls
) -> None:
    _kvvm(api_server)
    merge = {"metadata": {"labels": {"a": "b"}}}
    api_server.faults.fail_requests(409, verb="patch")
    with pytest.raises(Conflict):
        await calls.patch(KVVMS, "ns1", "vm1", merge, content_type=MERGE_PATCH)
    api_server.faults.fail_requests(429, verb="patch", retry_after=3)
    with pytest.raises(Temporary) as throttled:
        await calls.patch(KVVMS, "ns1", "vm1", merge, content_type=MERGE_PATCH)
    assert throttled.value.status == 429
    assert throttled.value.delay == 3.0
    api_server.faults.fail_requests(500, verb="get")
    with pytest.raises(Temporary) as broken:
        await calls.get(KVVMS, "ns1", "vm1")
    assert broken.value.status == 500
    # The faults were one-shot: the same calls now succeed.
    patched = await calls.patch(KVVMS, "ns1", "vm1", merge, content_type=MERGE_PATCH)
    assert patched["metadata"]["labels"] == {"a": "b"}


async def test_a_server_that_does_not_answer_in_time_is_temporary(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    impatient = ApiConnection(connection.client, ClientSettings(read_timeout=0.05))
    _kvvm(api_server)
    api_server.faults.add_latency(1.0, verb="get")
    with pytest.raises(Temporary) as slow:
        await KubeCalls(impatient).get(KVVMS, "ns1", "vm1")
    assert slow.value.reason == "Timeout"
