"""Binding and stopping: loopback only, and a stopping server ends its watch streams."""

from __future__ import annotations

import asyncio

import aiohttp

from nicplug.simulator.faults import Faults
from nicplug.simulator.resources import PODS
from nicplug.simulator.server import make_app, serve
from nicplug.simulator.store import Store


async def test_stopping_ends_open_watches() -> None:
    store = Store()
    runner, url = await serve(make_app(store, Faults()), shutdown_timeout=60)
    assert url.startswith("http://127.0.0.1:")
    assert all(host == "127.0.0.1" for host, *_ in runner.addresses)
    async with (
        aiohttp.ClientSession(url) as http,
        http.get("/api/v1/pods?watch=true&resourceVersion=0") as response,
    ):
        store.create(PODS, {"metadata": {"name": "p", "namespace": "n"}})
        assert b'"ADDED"' in await response.content.readline()
        # ends well before the shutdown timeout: the stream was ended, not awaited
        await asyncio.wait_for(runner.cleanup(), 20)
        assert await response.content.read() == b""


async def test_bad_watch_parameters_are_plain_errors() -> None:
    runner, url = await serve(make_app(Store(), Faults()))
    try:
        async with aiohttp.ClientSession(url) as http:
            for query in ("resourceVersion=abc", "labelSelector=a+in+b", "timeoutSeconds=x",
                          "fieldSelector=spec.x%3D1"):
                async with http.get(f"/api/v1/pods?watch=1&{query}") as response:
                    body = await response.json()
                    assert (response.status, body["reason"]) == (400, "BadRequest"), query
    finally:
        await runner.cleanup()


async def test_a_body_nested_too_deep_is_a_400_not_a_500() -> None:
    """Kubernetes refuses JSON nested deeper than its limit with a 400; the simulated
    server's limit is lower (its patches recurse), and a body over it is refused the
    same way instead of failing the handler."""
    store = Store()
    store.create(PODS, {"metadata": {"name": "p", "namespace": "n"}})
    runner, url = await serve(make_app(store, Faults()))
    deep = "{}"
    for _ in range(900):
        deep = '{"a": ' + deep + "}"
    try:
        async with aiohttp.ClientSession(url) as http:
            for media in ("application/merge-patch+json",
                          "application/strategic-merge-patch+json"):
                async with http.patch(
                    "/api/v1/namespaces/n/pods/p", data='{"metadata": {"labels": ' + deep + "}}",
                    headers={"Content-Type": media},
                ) as response:
                    body = await response.json()
                    assert (response.status, body["reason"]) == (400, "BadRequest"), media
                    assert "nested" in body["message"]
            async with http.post("/api/v1/namespaces/n/pods", data=(
                    '{"metadata": {"name": "q"}, "spec": ' + deep + "}"),
                    headers={"Content-Type": "application/json"}) as response:
                assert response.status == 400
    finally:
        await runner.cleanup()
    assert store.get(PODS, "n", "p")["metadata"].get("labels") is None
