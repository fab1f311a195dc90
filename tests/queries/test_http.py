"""`GET /operations` and `GET /operations/{id}` on the controller's HTTP app."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from nicplug.adapters.core.observability import Health, Metrics, make_http_app
from nicplug.adapters.queries.http import add_operation_routes, make_query_app
from tests.queries.journal_worlds import NOW


async def _client(app: web.Application) -> TestClient[Any, Any]:
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    return client


@pytest.fixture
async def client(standard_journal: Path) -> AsyncIterator[TestClient[Any, Any]]:
    app = web.Application()
    add_operation_routes(app, standard_journal, now=lambda: NOW)
    client = await _client(app)
    try:
        yield client
    finally:
        await client.close()


async def test_operations_lists_and_filters(client: TestClient[Any, Any]) -> None:
    response = await client.get("/operations")
    assert response.status == 200
    assert len((await response.json())["operations"]) == 11
    response = await client.get("/operations", params={"vm": "ns/unplugged",
                                                       "network": "Network/x"})
    found = (await response.json())["operations"]
    assert [(o["direction"], o["state"]) for o in found] == [("plug", "Attached"),
                                                            ("unplug", "Detached")]
    response = await client.get("/operations", params={"state": "RestartRequired"})
    assert [o["vm"] for o in (await response.json())["operations"]] == ["ns/staged"]


async def test_bad_parameters_are_a_400(client: TestClient[Any, Any]) -> None:
    for params in ({"state": "Done"}, {"vm": "x' OR 1=1"}, {"colour": "red"}):
        response = await client.get("/operations", params=params)
        assert response.status == 400
        assert "error" in await response.json()


async def test_one_operation_with_timeline_and_explanation(client: TestClient[Any, Any]) -> None:
    response = await client.get("/operations/uid-silent/ClusterNetwork/y/plug/1")
    assert response.status == 200
    body = await response.json()
    assert set(body) == {"timeline", "explain"}
    assert body["timeline"]["operation"]["state"] == "AnnotationPatched"
    assert [s["to"] for s in body["timeline"]["steps"]] == [None, "AnnotationPatched"]
    assert body["explain"]["next_timer"] == {
        "name": "deadline", "deadline": 121.0, "due_in": 91.0,
        "meaning": "fails the operation with a timeout unless it moved on"}
    missing = await client.get("/operations/uid-nobody/Main/plug/1")
    assert missing.status == 404


async def test_the_journal_opens_once_it_exists(
    standard_journal: Path, tmp_path: Path
) -> None:
    path = tmp_path / "later.db"
    app = make_query_app(path)
    client = await _client(app)
    try:
        waiting = await client.get("/operations")
        assert waiting.status == 503
        assert "no journal file here" in (await waiting.json())["error"]
        shutil.copyfile(standard_journal, path)
        ready = await client.get("/operations")
        assert ready.status == 200
        assert len((await ready.json())["operations"]) == 11
    finally:
        await client.close()


async def test_the_metrics_address_serves_no_operation_views() -> None:
    client = await _client(make_http_app(Metrics(), Health()))
    try:
        assert (await client.get("/operations")).status == 404
        assert (await client.get("/metrics")).status == 200
    finally:
        await client.close()


async def test_a_journal_nobody_holds_is_read_afresh_once_a_writer_comes(
    standard_journal: Path, tmp_path: Path
) -> None:
    """A snapshot is read for one request only: a leader that starts writing later is
    seen by the next request, and nothing is ever left beside the journal."""
    import sqlite3

    path = tmp_path / "journal.db"
    shutil.copyfile(standard_journal, path)
    app = web.Application()
    add_operation_routes(app, path, now=lambda: NOW)
    client = await _client(app)
    writer: sqlite3.Connection | None = None
    try:
        response = await client.get("/operations", params={"state": "Cancelled"})
        assert response.status == 200
        before = [o["id"] for o in (await response.json())["operations"]]
        assert sorted(os.listdir(tmp_path)) == ["journal.db"]
        writer = sqlite3.connect(path)
        assert writer.execute("PRAGMA journal_mode = WAL").fetchone() == ("wal",)
        writer.execute("UPDATE streams SET state = 'Cancelled' WHERE stream = ?",
                       ("uid-silent/ClusterNetwork/y/plug/1",))
        writer.commit()
        response = await client.get("/operations", params={"state": "Cancelled"})
        after = [o["id"] for o in (await response.json())["operations"]]
        assert set(after) == {*before, "uid-silent/ClusterNetwork/y/plug/1"}
    finally:
        await client.close()
        if writer is not None:
            writer.close()
