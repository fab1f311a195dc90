"""The simulated API server over real HTTP on loopback, and a client connected to it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web

from nicplug.adapters.kube.client import ApiConnection, ClientSettings, connect
from nicplug.simulator.apis import served_api
from nicplug.simulator.faults import Faults
from nicplug.simulator.kubeconfig import write_kubeconfig
from nicplug.simulator.server import REQUEST_LOG, RequestRecord, make_app, serve
from nicplug.simulator.store import Store


@dataclass
class ApiServer:
    """The simulator's store and faults, its kubeconfig, and the requests it served."""

    store: Store
    faults: Faults
    kubeconfig: Path
    app: web.Application

    @property
    def requests(self) -> Sequence[RequestRecord]:
        return self.app[REQUEST_LOG]

    def count(self, verb: str | None = None, resource: str | None = None) -> int:
        return sum(
            1 for r in self.requests
            if (verb is None or r.verb == verb) and (resource is None or r.resource == resource)
        )


ServerFactory = Callable[..., Awaitable[ApiServer]]


@pytest.fixture
async def start_server(tmp_path: Path) -> AsyncIterator[ServerFactory]:
    """Start simulated API servers (`history`, `bookmark_interval` as the store and app
    take them, `api` the KubeVirt names served); all are stopped at the end of the test."""
    runners: list[web.AppRunner] = []

    async def start(*, history: int = 10_000, bookmark_interval: float = 60.0,
                    api: str = "upstream") -> ApiServer:
        store, faults = Store(history=history), Faults()
        app = make_app(store, faults, bookmark_interval=bookmark_interval,
                       api=served_api(api))
        runner, url = await serve(app)
        runners.append(runner)
        path = write_kubeconfig(tmp_path / f"kubeconfig-{len(runners)}", url)
        return ApiServer(store, faults, path, app)

    yield start
    for runner in runners:
        await runner.cleanup()


@pytest.fixture
async def api_server(start_server: ServerFactory) -> ApiServer:
    return await start_server()


@pytest.fixture
async def connection(api_server: ApiServer) -> AsyncIterator[ApiConnection]:
    conn = await connect(ClientSettings(kubeconfig=api_server.kubeconfig, read_timeout=5))
    yield conn
    await conn.close()


async def eventually(check: Callable[[], bool], *, within: float = 5.0) -> None:
    """Wait until `check()` holds while the server and client exchange data over the
    loopback (this waits for I/O, not for time to pass); fail after `within` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not check():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


@pytest.fixture
async def connection_to() -> AsyncIterator[Callable[[ApiServer], Awaitable[ApiConnection]]]:
    """Connections to servers started in the test; closed at its end."""
    opened: list[ApiConnection] = []

    async def open_to(server: ApiServer) -> ApiConnection:
        conn = await connect(ClientSettings(kubeconfig=server.kubeconfig, read_timeout=5))
        opened.append(conn)
        return conn

    yield open_to
    for conn in opened:
        await conn.close()
