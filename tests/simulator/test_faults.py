"""Injected faults, seen by a real client; the store's own subscribers never see them."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import watch
from kubernetes_asyncio.client import ApiClient, ApiException

from nicplug.simulator.resources import PODS
from tests.simulator.conftest import Sim


def pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns1"}, "spec": {"containers": []}}


async def next_event(stream: Any, within: float = 5.0) -> dict[str, Any]:
    async with asyncio.timeout(within):
        event: dict[str, Any] = await anext(stream)
        return event


async def test_failures_hit_only_matching_requests(client: ApiClient, sim: Sim) -> None:
    core = k8s.CoreV1Api(client)
    sim.store.create(PODS, pod("p1"))
    sim.faults.fail_requests(429, times=2, verb="list", resource="pods", retry_after=7)
    assert (await core.read_namespaced_pod("p1", "ns1")).metadata.name == "p1"  # a get
    for _ in range(2):
        with pytest.raises(ApiException) as throttled:
            await core.list_namespaced_pod("ns1")
        assert throttled.value.status == 429
        assert throttled.value.headers["Retry-After"] == "7"
    assert len((await core.list_namespaced_pod("ns1")).items) == 1  # used up
    sim.faults.fail_requests(500, verb="patch", resource="pods/status")
    sim.faults.fail_requests(409, verb="update")
    with pytest.raises(ApiException) as broken:
        await core.patch_namespaced_pod_status("p1", "ns1", {"status": {"phase": "X"}},
                                               _content_type="application/merge-patch+json")
    assert broken.value.status == 500
    current = await core.read_namespaced_pod("p1", "ns1")
    with pytest.raises(ApiException) as conflict:
        await core.replace_namespaced_pod("p1", "ns1", current)
    assert conflict.value.status == 409 and "Conflict" in conflict.value.body
    assert sim.store.get(PODS, "ns1", "p1")["metadata"]["resourceVersion"] == (
        current.metadata.resource_version
    )
    with pytest.raises(ValueError):
        sim.faults.fail_requests(418)


async def test_latency_delays_requests(client: ApiClient, sim: Sim) -> None:
    core = k8s.CoreV1Api(client)
    sim.faults.add_latency(0.2, verb="list")
    loop = asyncio.get_running_loop()
    started = loop.time()
    await core.list_namespaced_pod("ns1")
    assert loop.time() - started >= 0.2


async def test_dropped_watch_ends_after_n_events(client: ApiClient, sim: Sim) -> None:
    core = k8s.CoreV1Api(client)
    for i in range(4):
        sim.store.create(PODS, pod(f"p{i}"))
    sim.faults.drop_watches(after_events=2, resource="pods")
    async with watch.Watch() as w:
        async with asyncio.timeout(5):
            got = [e async for e in w.stream(core.list_namespaced_pod, "ns1", timeout_seconds=5)]
    assert [e["object"].metadata.name for e in got] == ["p0", "p1"]
    async with watch.Watch() as w:  # the fault was for one stream only
        stream = w.stream(core.list_namespaced_pod, "ns1", timeout_seconds=5)
        assert len([await next_event(stream) for _ in range(4)]) == 4


async def test_dropping_an_open_idle_watch(client: ApiClient, sim: Sim) -> None:
    core = k8s.CoreV1Api(client)
    async with watch.Watch() as w:
        stream = w.stream(core.list_namespaced_pod, "ns1", timeout_seconds=30)
        waiting = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0.1)  # let the stream open
        sim.faults.drop_watches()
        with pytest.raises(StopAsyncIteration):
            async with asyncio.timeout(5):
                await waiting


async def test_stalled_watch_sends_nothing_until_resumed(client: ApiClient, sim: Sim) -> None:
    core = k8s.CoreV1Api(client)
    live = sim.store.subscribe(PODS)
    async with watch.Watch() as w:
        stream = w.stream(core.list_namespaced_pod, "ns1", allow_watch_bookmarks=True,
                          timeout_seconds=30)
        sim.store.create(PODS, pod("p1"))
        assert (await next_event(stream))["type"] == "ADDED"
        sim.faults.stall_watches(resource="pods")
        sim.store.create(PODS, pod("p2"))
        pending = asyncio.ensure_future(next_event(stream))
        done, _ = await asyncio.wait({pending}, timeout=0.5)
        assert not done  # no event, not even a bookmark, while stalled
        assert (await next_event(live)).object["metadata"]["name"] == "p1"
        assert (await next_event(live)).object["metadata"]["name"] == "p2"  # actors unaffected
        sim.faults.resume_watches()
        event = await pending
    assert (event["type"], event["object"].metadata.name) == ("ADDED", "p2")


async def test_forced_410_on_resumption(client: ApiClient, sim: Sim) -> None:
    core = k8s.CoreV1Api(client)
    sim.store.create(PODS, pod("p1"))
    rv = str(sim.store.resource_version)
    sim.faults.expire_resumptions(resource="pods")
    async with watch.Watch() as w:
        fresh = w.stream(core.list_namespaced_pod, "ns1", timeout_seconds=5)
        assert (await next_event(fresh))["type"] == "ADDED"  # no resourceVersion: unaffected
    async with watch.Watch() as w:
        resumed = w.stream(core.list_namespaced_pod, "ns1", resource_version=rv,
                           timeout_seconds=5)
        with pytest.raises(ApiException) as expired:
            await next_event(resumed)
    assert expired.value.status == 410
    async with watch.Watch() as w:
        resumed = w.stream(core.list_namespaced_pod, "ns1", resource_version=rv,
                           timeout_seconds=1)
        sim.store.delete(PODS, "ns1", "p1")
        assert (await next_event(resumed))["type"] == "DELETED"


async def test_admin_endpoint_arms_and_describes_faults(sim: Sim) -> None:
    async with aiohttp.ClientSession(sim.url) as http:
        arm = [{"action": "fail", "code": 503, "verb": "get"}, {"action": "latency",
                                                               "seconds": 0.01}]
        async with http.post("/_sim/faults", json=arm) as response:
            described = await response.json()
        assert described["failures"][0]["code"] == 503 and described["latencies"]
        async with http.get("/api/v1/namespaces/default") as response:
            assert response.status == 503
        async with http.get("/api/v1/namespaces/default") as response:
            assert response.status == 200
        for bad in ({"action": "fail", "code": 302}, {"action": "explode"}, {"code": 1}):
            async with http.post("/_sim/faults", json=bad) as response:
                body = await response.json()
                assert (response.status, body["reason"]) == (400, "BadRequest"), bad
        async with http.post("/_sim/faults", json={"action": "clear"}) as response:
            assert (await response.json())["latencies"] == []
