"""A kopf operator of the tests' own, at kopf's default settings, against the simulator.

kopf is a real client nobody here wrote: before it watches a kind it looks the kind up
in discovery and its CRD, lists with watch-list or paged lists, and it never finishes
starting when a server lacks what it asks for. The operator handles Deckhouse's
VirtualMachine and the renamed KubeVirt VMI, and must start, see every object that
exists, and then see a change — with no scanning or streaming setting switched off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

import kopf
import pytest

from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.resources import VMS

NS = "default"


@contextlib.contextmanager
def _kubeconfig(monkeypatch: pytest.MonkeyPatch, cluster: SimulatedCluster) -> Iterator[None]:
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    yield


async def _until(check: object, what: str, seconds: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not check():  # type: ignore[operator]
        if loop.time() > deadline:
            raise AssertionError(f"kopf never {what}")
        await asyncio.sleep(0.05)


async def test_kopf_starts_lists_and_reacts(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with SimulatedCluster(Knobs(dialect="deckhouse"), fixtures=Fixtures(vms=2)) as cluster:
        registry = kopf.OperatorRegistry()
        seen: list[tuple[str, str, str]] = []

        @kopf.on.event("virtualization.deckhouse.io", "v1alpha2", "virtualmachines",
                       registry=registry)
        def vm_event(event: kopf.RawEvent, name: str, **_: object) -> None:
            seen.append(("vm", str(event["type"]), name))

        @kopf.on.event("internal.virtualization.deckhouse.io", "v1",
                       "internalvirtualizationvirtualmachineinstances", registry=registry)
        def vmi_event(event: kopf.RawEvent, name: str, **_: object) -> None:
            seen.append(("vmi", str(event["type"]), name))

        @kopf.on.login(registry=registry)
        def login(**kwargs: object) -> kopf.ConnectionInfo | None:
            return kopf.login_with_kubeconfig(**kwargs)

        stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with _kubeconfig(monkeypatch, cluster):
            operator = asyncio.create_task(kopf.operator(
                registry=registry, clusterwide=True, stop_flag=stop))
            try:
                await _until(lambda: {(k, n) for k, _t, n in seen} >= {
                    ("vm", "vm-00000"), ("vm", "vm-00001"),
                    ("vmi", "vm-00000"), ("vmi", "vm-00001")}, "listed every object")
                cluster.store.patch(VMS, NS, "vm-00001", {"metadata": {"labels": {"x": "1"}}},
                                    content_type="application/merge-patch+json")
                await _until(lambda: ("vm", "MODIFIED", "vm-00001") in seen, "saw the change")
            finally:
                stop.set_result(None)
                await asyncio.wait_for(operator, 30)
        asked = sorted({(r.verb, r.resource) for r in cluster.requests})
    assert {("list", "customresourcedefinitions"), ("watch", "customresourcedefinitions"),
            ("list", "virtualmachines"), ("watch", "virtualmachines"),
            ("list", "internalvirtualizationvirtualmachineinstances"),
            ("watch", "internalvirtualizationvirtualmachineinstances")} <= set(asked)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [
        r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
