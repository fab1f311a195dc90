"""The unmodified kubernetes_asyncio client against the simulated API server."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import watch
from kubernetes_asyncio.client import ApiClient, ApiException

from nicplug.simulator.resources import PODS
from nicplug.simulator.server import REQUEST_LOG, RequestRecord
from tests.simulator.conftest import Sim

KV = ("kubevirt.io", "v1")
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


def pod_body(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "compute", "image": "virt-launcher"}]},
    }


def kvvm_body(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {"running": True, "template": {"spec": {"networks": []}}},
        "status": {"ready": True},
    }


async def first(stream: Any, n: int) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    async with asyncio.timeout(5):
        async for event in stream:
            got.append(event)
            if len(got) == n:
                break
    return got


async def test_discovery_over_plain_http(client: ApiClient) -> None:
    assert (await k8s.VersionApi(client).get_code()).major == "1"
    groups = await k8s.ApisApi(client).get_api_versions()
    assert {"kubevirt.io", "coordination.k8s.io", "network.deckhouse.io"} <= {
        g.name for g in groups.groups
    }
    core = await k8s.CoreV1Api(client).get_api_resources()
    assert {"pods", "pods/status", "namespaces", "events"} <= {r.name for r in core.resources}
    kubevirt = await k8s.CustomObjectsApi(client).get_api_resources(*KV)
    vmis = next(r for r in kubevirt.resources if r.name == "virtualmachineinstances")
    assert vmis.namespaced and vmis.kind == "VirtualMachineInstance" and "watch" in vmis.verbs


async def test_crud_conflicts_and_resource_versions(client: ApiClient, sim: Sim) -> None:
    core = k8s.CoreV1Api(client)
    created = await core.create_namespaced_pod("ns1", pod_body("p1", app="x"))
    assert created.metadata.uid and created.metadata.resource_version
    with pytest.raises(ApiException) as duplicate:
        await core.create_namespaced_pod("ns1", pod_body("p1"))
    assert duplicate.value.status == 409 and "AlreadyExists" in duplicate.value.body
    listed = await core.list_namespaced_pod("ns1")
    assert [p.metadata.name for p in listed.items] == ["p1"]
    assert listed.metadata.resource_version == str(sim.store.resource_version)
    created.metadata.labels = {"app": "y"}
    replaced = await core.replace_namespaced_pod("p1", "ns1", created)
    assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)
    with pytest.raises(ApiException) as stale:
        await core.replace_namespaced_pod("p1", "ns1", created)  # the old resourceVersion
    assert stale.value.status == 409 and '"reason":"Conflict"' in stale.value.body
    deleted = await core.delete_namespaced_pod("p1", "ns1")
    assert deleted.metadata.name == "p1"
    with pytest.raises(ApiException) as gone:
        await core.read_namespaced_pod("p1", "ns1")
    assert gone.value.status == 404


async def test_namespaces_and_leases(client: ApiClient) -> None:
    core = k8s.CoreV1Api(client)
    await core.create_namespace({"metadata": {"name": "ns2"}})
    assert "ns2" in {n.metadata.name for n in (await core.list_namespace()).items}
    leases = k8s.CoordinationV1Api(client)
    body = {"metadata": {"name": "nicplug"}, "spec": {"holderIdentity": "a"}}
    lease = await leases.create_namespaced_lease("ns2", body)
    lease.spec.holder_identity = "b"
    renewed = await leases.replace_namespaced_lease("nicplug", "ns2", lease)
    assert renewed.spec.holder_identity == "b"
    lease.spec.holder_identity = "c"
    with pytest.raises(ApiException) as lost:
        await leases.replace_namespaced_lease("nicplug", "ns2", lease)
    assert lost.value.status == 409


async def test_status_subresource_and_generation(client: ApiClient) -> None:
    custom = k8s.CustomObjectsApi(client)
    vm = await custom.create_namespaced_custom_object(*KV, "ns1", "virtualmachines",
                                                      kvvm_body("vm1"))
    assert "status" not in vm  # create ignores .status where it is a subresource
    patched = await custom.patch_namespaced_custom_object(
        *KV, "ns1", "virtualmachines", "vm1",
        {"spec": {"running": False}, "status": {"ready": True}}, _content_type=MERGE,
    )
    assert patched["spec"]["running"] is False and "status" not in patched
    assert patched["metadata"]["generation"] == 2
    status = await custom.patch_namespaced_custom_object_status(
        *KV, "ns1", "virtualmachines", "vm1",
        {"spec": {"running": True}, "status": {"ready": True}}, _content_type=MERGE,
    )
    assert status["status"] == {"ready": True} and status["spec"]["running"] is False
    assert status["metadata"]["generation"] == 2
    read = await custom.get_namespaced_custom_object_status(*KV, "ns1", "virtualmachines", "vm1")
    assert read["status"] == {"ready": True}


async def test_patch_types_by_content_type(client: ApiClient) -> None:
    core = k8s.CoreV1Api(client)
    custom = k8s.CustomObjectsApi(client)
    await core.create_namespaced_pod("ns1", pod_body("p1"))
    sidecar = {"spec": {"containers": [{"name": "sidecar", "image": "s"}]}}
    merged = await core.patch_namespaced_pod("p1", "ns1", sidecar, _content_type=STRATEGIC)
    assert [c.name for c in merged.spec.containers] == ["compute", "sidecar"]
    test_fails = [{"op": "test", "path": "/metadata/name", "value": "other"}]
    with pytest.raises(ApiException) as invalid:
        await core.patch_namespaced_pod("p1", "ns1", test_fails, _content_type=JSON_PATCH)
    assert invalid.value.status == 422
    await custom.create_namespaced_custom_object(*KV, "ns1", "virtualmachines", kvvm_body("v"))
    ops = [{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]
    labelled = await custom.patch_namespaced_custom_object(
        *KV, "ns1", "virtualmachines", "v", ops, _content_type=JSON_PATCH
    )
    assert labelled["metadata"]["labels"] == {"a": "b"}
    with pytest.raises(ApiException) as unsupported:
        await custom.patch_namespaced_custom_object(
            *KV, "ns1", "virtualmachines", "v", {"spec": {}}, _content_type=STRATEGIC
        )
    assert unsupported.value.status == 415


async def test_watch_replays_from_resource_version(client: ApiClient, sim: Sim) -> None:
    core = k8s.CoreV1Api(client)
    await core.create_namespaced_pod("ns1", pod_body("p1"))
    rv = (await core.list_namespaced_pod("ns1")).metadata.resource_version
    await core.patch_namespaced_pod("p1", "ns1", {"metadata": {"labels": {"a": "b"}}},
                                    _content_type=MERGE)
    await core.create_namespaced_pod("ns1", pod_body("p2"))
    async with watch.Watch() as w:
        stream = w.stream(core.list_namespaced_pod, "ns1", resource_version=rv,
                          timeout_seconds=5)
        got = await first(stream, 2)
    assert [(e["type"], e["object"].metadata.name) for e in got] == [
        ("MODIFIED", "p1"), ("ADDED", "p2")
    ]
    async with watch.Watch() as w:
        stream = w.stream(core.list_namespaced_pod, "ns1", timeout_seconds=5)
        initial = await first(stream, 2)
        assert {e["type"] for e in initial} == {"ADDED"}
        sim.store.delete(PODS, "ns1", "p2")  # a live write after the initial state
        (deleted,) = await first(stream, 1)
    assert (deleted["type"], deleted["object"].metadata.name) == ("DELETED", "p2")


async def test_watch_too_old_is_an_error_410(client: ApiClient, sim: Sim) -> None:
    core = k8s.CoreV1Api(client)
    for i in range(60):  # the fixture's store remembers 50 changes
        await core.create_namespaced_pod("ns1", pod_body(f"p{i}"))
    async with watch.Watch() as w:
        stream = w.stream(core.list_namespaced_pod, "ns1", resource_version="3",
                          timeout_seconds=5)
        with pytest.raises(ApiException) as expired:
            await first(stream, 1)
    assert expired.value.status == 410 and "Expired" in expired.value.reason


async def test_watch_bookmarks_carry_the_current_version(client: ApiClient, sim: Sim) -> None:
    custom = k8s.CustomObjectsApi(client)
    await custom.create_namespaced_custom_object(*KV, "ns1", "virtualmachines", kvvm_body("v"))
    async with watch.Watch() as w:
        stream = w.stream(custom.list_namespaced_custom_object, *KV, "ns1", "virtualmachines",
                          allow_watch_bookmarks=True, timeout_seconds=5)
        added, bookmark = await first(stream, 2)
    assert added["type"] == "ADDED"
    assert bookmark["type"] == "BOOKMARK"
    assert bookmark["object"]["metadata"]["resourceVersion"] == str(sim.store.resource_version)


async def test_watch_selectors(client: ApiClient, sim: Sim) -> None:
    core = k8s.CoreV1Api(client)
    await core.create_namespaced_pod("ns1", pod_body("p1", app="x"))
    await core.create_namespaced_pod("ns1", pod_body("p2", app="y"))
    async with watch.Watch() as w:
        stream = w.stream(core.list_namespaced_pod, "ns1", label_selector="app in (x)",
                          timeout_seconds=5)
        (added,) = await first(stream, 1)
        await core.patch_namespaced_pod("p1", "ns1", {"metadata": {"labels": {"app": "z"}}},
                                        _content_type=MERGE)
        (left,) = await first(stream, 1)
    assert (added["type"], left["type"]) == ("ADDED", "DELETED")
    async with watch.Watch() as w:
        stream = w.stream(core.list_pod_for_all_namespaces,
                          field_selector="metadata.name=p2", timeout_seconds=5)
        (only,) = await first(stream, 1)
    assert only["object"].metadata.name == "p2"
    listed = await core.list_namespaced_pod("ns1", label_selector="app!=y")
    assert [p.metadata.name for p in listed.items] == ["p1"]


async def test_timeout_seconds_ends_the_stream(client: ApiClient) -> None:
    core = k8s.CoreV1Api(client)
    async with asyncio.timeout(5):
        async with watch.Watch() as w:
            got = [e async for e in w.stream(core.list_namespaced_pod, "ns1", timeout_seconds=1)]
    assert got == []


async def test_kubernetes_shaped_errors(sim: Sim) -> None:
    async with aiohttp.ClientSession(sim.url) as http:
        async def status(method: str, path: str, **kw: Any) -> tuple[int, dict[str, Any]]:
            async with http.request(method, path, **kw) as response:
                return response.status, await response.json()

        as_json = {"Content-Type": "application/json"}
        code, body = await status("POST", "/api/v1/namespaces/ns1/pods", data=b"{not json",
                                  headers=as_json)
        assert (code, body["kind"], body["reason"]) == (400, "Status", "BadRequest")
        code, body = await status("GET", "/apis/kubevirt.io/v1/namespaces/ns1/gadgets")
        assert (code, body["reason"]) == (404, "NotFound")
        code, body = await status("GET", "/apis/nowhere.io/v1")
        assert code == 404
        code, body = await status("POST", "/api/v1/namespaces/ns1/pods", data=b"{}",
                                  headers={"Content-Type": "application/yaml"})
        assert (code, body["reason"]) == (415, "UnsupportedMediaType")
        huge = b'{"metadata": {"name": "big"}, "data": "' + b"x" * (4 << 20) + b'"}'
        code, body = await status("POST", "/api/v1/namespaces/ns1/pods", data=huge,
                                  headers=as_json)
        assert (code, body["reason"]) == (413, "RequestEntityTooLarge")
        pod = {"metadata": {"name": "p", "namespace": "other"}}
        code, body = await status("POST", "/api/v1/namespaces/ns1/pods", json=pod)
        assert code == 400
        code, body = await status("PATCH", "/api/v1/namespaces/ns1/pods/p", data=b"{}",
                                  headers={"Content-Type": "text/plain"})
        assert code == 404  # the pod does not exist, checked before the media type
        await status("POST", "/api/v1/namespaces/ns1/pods", json={"metadata": {"name": "p"}})
        code, body = await status("PATCH", "/api/v1/namespaces/ns1/pods/p", data=b"{}",
                                  headers={"Content-Type": "text/plain"})
        assert (code, body["reason"]) == (415, "UnsupportedMediaType")
        code, body = await status(
            "PATCH", "/api/v1/namespaces/ns1/pods/p", data=b'{"op": "add"}',
            headers={"Content-Type": JSON_PATCH},
        )
        assert code == 400
    assert len(sim.store.list(PODS)[0]) == 1  # the failures wrote nothing


async def test_every_resource_request_is_logged(client: ApiClient, sim: Sim) -> None:
    client.user_agent = "conformance/1 (tester)"
    core = k8s.CoreV1Api(client)
    await core.create_namespaced_pod("ns1", pod_body("p1"))
    await core.patch_namespaced_pod_status("p1", "ns1", {"status": {"phase": "Running"}},
                                           _content_type=MERGE)
    await core.list_pod_for_all_namespaces()
    logged = list(sim.app[REQUEST_LOG])
    assert [dataclasses.replace(r, user_agent="") for r in logged] == [
        RequestRecord("create", "", "pods", None, "ns1", None),
        RequestRecord("patch", "", "pods", "status", "ns1", "p1"),
        RequestRecord("list", "", "pods", None, None, None),
    ]
    assert {r.user_agent for r in logged} == {client.user_agent}


async def test_a_closed_watch_releases_its_subscription(client: ApiClient, sim: Sim) -> None:
    core = k8s.CoreV1Api(client)

    def watching() -> int:
        return dict(sim.store.subscriptions()).get(PODS, 0)

    async with watch.Watch() as w:
        stream = w.stream(core.list_namespaced_pod, "ns1", timeout_seconds=30)
        sim.store.create(PODS, {"metadata": {"name": "p1", "namespace": "ns1"}})
        await first(stream, 1)
        assert watching() == 1
    for _ in range(500):  # the server notices the client hang up (network I/O, not a timer)
        if not watching():
            break
        await asyncio.sleep(0.01)
    assert watching() == 0
