"""A simulated API server on an ephemeral loopback port, and clients pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.config import new_client_from_config

from nicplug.simulator.faults import Faults
from nicplug.simulator.kubeconfig import write_kubeconfig
from nicplug.simulator.resources import NAMESPACES
from nicplug.simulator.server import make_app, serve
from nicplug.simulator.store import Store

BOOKMARK_INTERVAL = 0.2


@dataclass
class Sim:
    store: Store
    faults: Faults
    app: web.Application
    url: str
    kubeconfig: Path


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[Sim]:
    store = Store(history=50)
    store.create(NAMESPACES, {"metadata": {"name": "default"}})
    store.create(NAMESPACES, {"metadata": {"name": "ns1"}})
    faults = Faults()
    app = make_app(store, faults, bookmark_interval=BOOKMARK_INTERVAL)
    runner, url = await serve(app)
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url)
    try:
        yield Sim(store, faults, app, url, kubeconfig)
    finally:
        await runner.cleanup()


@pytest.fixture
async def client(sim: Sim) -> AsyncIterator[ApiClient]:
    """A kubernetes_asyncio client built by its own kubeconfig loader (plain http)."""
    api = await new_client_from_config(config_file=str(sim.kubeconfig))
    try:
        yield api
    finally:
        await api.close()
