"""The integration tests' world: simulated clusters over real HTTP on loopback, nicplug
controllers running in-process against them, and a user's hands.

Real time cannot be avoided here (a real controller, a real server, the simulator on
its real clock), so nothing sleeps for a fixed time: every wait polls with a short
interval under a hard deadline (`eventually`, `JournalView.wait_for`). Keep simulated
delays small (0–0.2 s) so that a scenario takes about a second.

Fixtures (all factories; everything they start is stopped at the end of the test):

* `start_cluster(knobs, fixtures)` → a started `SimulatedCluster`;
* `follow(cluster, *resources)` → a `Trail` of the store's changes from now on;
* `start_controller(cluster, **settings)` → a `RunningController` (the controller task,
  its settings, a read-only `JournalView`, its metrics URL), ready (`/readyz` 200);
* `user_of(cluster)` → a `User` who edits objects over HTTP as kubectl would.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from nicplug.adapters.core.controller import Controller
from nicplug.adapters.core.settings import Settings
from nicplug.adapters.kube import hotplug_edits as edits
from nicplug.machines.world import if_name_of
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.identity import service_account
from nicplug.simulator.knobs import Delays, Knobs
from nicplug.simulator.resources import Resource
from tests.integration.cluster_view import Trail, served, split
from tests.integration.journal_view import JournalView
from tests.integration.processes_support import Launcher

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
DRIVE_IDENTITY = service_account("d8-system", "nicplug")
"""Who nicplug is in a Deckhouse world: the overlay's identity (`deckhouse-drive`)."""
QUICK = Delays(sdn_configure=0.1, kubevirt_sync=0.0, attach=0.05, migration=0.2, restart=0.2)
"""Small simulated delays: every step still takes a moment, the whole file stays fast."""

log = logging.getLogger(__name__)


async def eventually(
    check: Callable[[], Awaitable[bool] | bool],
    *,
    within: float = 10.0,
    what: str = "the condition",
    interval: float = 0.02,
) -> None:
    """Poll `check` (sync or async) until it holds; fail after `within` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"{what} did not hold within {within:.0f}s")
        await asyncio.sleep(interval)


# ----------------------------------------------------------------------- the cluster


ClusterFactory = Callable[..., Awaitable[SimulatedCluster]]


@pytest.fixture
async def start_cluster(tmp_path: Path) -> AsyncIterator[ClusterFactory]:
    started: list[SimulatedCluster] = []

    async def start(
        knobs: Knobs | None = None, fixtures: Fixtures | None = None, user: str | None = None
    ) -> SimulatedCluster:
        knobs = knobs or Knobs(delays=QUICK)
        if knobs.dialect == "deckhouse" and knobs.native_hotplug is None:
            # nicplug drives the hotplug in these tests: a Deckhouse release without its
            # own (a test of the platform's own hotplug says native_hotplug=True)
            knobs = replace(knobs, native_hotplug=False)
        cluster = SimulatedCluster(
            knobs,
            fixtures=fixtures or Fixtures(vms=1),
            kubeconfig_path=tmp_path / f"kubeconfig-{len(started)}",
            # the controller's identity; in a Deckhouse world by default the drive overlay's
            # (deploy/overlays/deckhouse-drive: a d8-system service account, which
            # Deckhouse's admission policy admits to the internal KubeVirt groups)
            kubeconfig_user=user if user is not None or knobs.dialect != "deckhouse"
            else DRIVE_IDENTITY,
        )
        await cluster.start()
        started.append(cluster)
        return cluster

    yield start
    for cluster in reversed(started):
        await cluster.stop()


@pytest.fixture
async def follow() -> AsyncIterator[Callable[..., Trail]]:
    trails: list[Trail] = []

    def start(cluster: SimulatedCluster, *resources: Resource) -> Trail:
        trail = Trail(cluster.store, resources)
        trails.append(trail)
        return trail

    yield start
    for trail in trails:
        await trail.stop()


# -------------------------------------------------------------------- the controller


@dataclass
class RunningController:
    controller: Controller
    task: asyncio.Task[None]
    settings: Settings
    journal: JournalView

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.controller.metrics_port}"

    async def metric(self, name: str, **labels: str) -> float:
        """One sample of the controller's `/metrics`, fetched over HTTP (0 if absent)."""
        async with aiohttp.ClientSession() as session, \
                session.get(self.metrics_url + "/metrics") as response:
            text = await response.text()
        wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        head = f"{name}{{{wanted}}}" if labels else name
        for line in text.splitlines():
            sample, _, value = line.rpartition(" ")
            if sample == head:
                return float(value)
        return 0.0

    def alive(self) -> None:
        """Fail if the controller task ended (it must run until stopped)."""
        if self.task.done():
            exc = None if self.task.cancelled() else self.task.exception()
            raise AssertionError(f"the controller stopped: {exc!r}")

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.journal.close()


ControllerFactory = Callable[..., Awaitable[RunningController]]


@pytest.fixture
async def start_controller(tmp_path: Path) -> AsyncIterator[ControllerFactory]:
    """Run `Controller(settings).run()` as a task of this event loop, with its journal in
    `tmp_path`, `/metrics` on an ephemeral port, the cluster's dialect unless told."""
    running: list[RunningController] = []

    async def start(
        cluster: SimulatedCluster, *, journal: Path | None = None, within: float = 15.0,
        **overrides: Any,
    ) -> RunningController:
        values: dict[str, Any] = {
            "kubeconfig": cluster.kubeconfig_path,
            "journal": journal or tmp_path / f"journal-{len(running)}.db",
            "dialect": cluster.knobs.dialect,
            # the suites written for nicplug driving the order say so; observe-mode tests
            # pass `mode`
            "mode": "drive" if cluster.knobs.dialect == "deckhouse" else "auto",
            "cluster_network_namespace": cluster.knobs.cluster_network_nad_namespace,
            "metrics_addr": "127.0.0.1:0",
            "query_addr": "127.0.0.1:0",
            "identity": f"itest-{len(running)}",
            "synchronous": "NORMAL",
            "request_timeout": 5.0,
        }
        settings = Settings(**(values | overrides))
        controller = Controller(settings)
        task = asyncio.create_task(controller.run(), name=f"controller {settings.identity}")
        handle = RunningController(controller, task, settings, JournalView(settings.journal))
        running.append(handle)

        async def ready() -> bool:
            handle.alive()
            if controller.metrics_port is None:
                return False
            try:
                async with aiohttp.ClientSession() as session, \
                        session.get(handle.metrics_url + "/readyz") as response:
                    return response.status == 200
            except aiohttp.ClientError:
                return False

        await eventually(ready, within=within, what="the controller's /readyz")
        return handle

    yield start
    for handle in reversed(running):
        await handle.stop()


# -------------------------------------------------------------------------- the user


class User:
    """Edits objects over the API server's HTTP interface, as `kubectl patch` would."""

    def __init__(self, cluster: SimulatedCluster) -> None:
        self.url = cluster.url
        self.cluster = cluster
        self.session = aiohttp.ClientSession(headers={"Authorization": "Bearer user"})
        self._restarts = 0

    async def _send(self, method: str, path: str, body: Any = None,
                    content_type: str = MERGE) -> dict[str, Any]:
        headers = {"Content-Type": content_type} if body is not None else {}
        async with self.session.request(method, self.url + path, json=body,
                                        headers=headers) as response:
            payload: dict[str, Any] = await response.json(content_type=None)
            if response.status >= 400:
                raise AssertionError(f"{method} {path}: {response.status} {payload}")
            return payload

    @staticmethod
    def _vm_path(vm: str) -> str:
        namespace, name = split(vm)
        return (f"/apis/virtualization.deckhouse.io/v1alpha2/namespaces/{namespace}"
                f"/virtualmachines/{name}")

    async def vm(self, vm: str) -> dict[str, Any]:
        return await self._send("GET", self._vm_path(vm))

    async def networks(self, vm: str) -> list[dict[str, Any]]:
        spec = (await self.vm(vm)).get("spec") or {}
        return [dict(n) for n in spec.get("networks") or [{"type": "Main", "id": 1}]]

    async def set_networks(self, vm: str, networks: list[dict[str, Any]]) -> None:
        await self._send("PATCH", self._vm_path(vm), {"spec": {"networks": networks}})

    @property
    def edits_template(self) -> bool:
        """Upstream KubeVirt (the kubevirt flavour): the user edits the KubeVirt VM."""
        return self.cluster.knobs.dialect == "multus"

    def _kvvm_path(self, vm: str) -> str:
        namespace, name = split(vm)
        group, plural = served(self.cluster, "kubevirt.io", "virtualmachines")
        return f"/apis/{group}/v1/namespaces/{namespace}/{plural}/{name}"

    async def add_network(self, vm: str, type_: str, name: str, *,
                          mac: str | None = None, interface: str | None = None) -> None:
        if self.edits_template:  # as the KubeVirt user guide does it
            kvvm = await self._send("GET", self._kvvm_path(vm))
            network = edits.nad_name(kvvm, type_, name, cluster_nad_namespace=self.nad_namespace)
            # named as nicplug would name it, unless told: the views look for that name
            interface = interface or if_name_of(type_, name)  # type: ignore[arg-type]
            patch = edits.plug(kvvm, interface=interface, network_name=network, mac=mac)
            if patch is not None:
                await self._send("PATCH", self._kvvm_path(vm), patch)
            return
        networks = await self.networks(vm)
        next_id = max((int(n.get("id") or 0) for n in networks), default=1) + 1
        await self.set_networks(vm, [*networks, {"type": type_, "name": name, "id": next_id}])

    async def add_networks(self, vm: str, *refs: tuple[str, str]) -> None:
        """Add several networks in one edit."""
        if not self.edits_template:
            networks = await self.networks(vm)
            next_id = max((int(n.get("id") or 0) for n in networks), default=1) + 1
            added = [{"type": t, "name": n, "id": i} for i, (t, n) in enumerate(refs, next_id)]
            await self.set_networks(vm, [*networks, *added])
            return
        kvvm = await self._send("GET", self._kvvm_path(vm))
        patch = None
        for type_, name in refs:
            network = edits.nad_name(kvvm, type_, name, cluster_nad_namespace=self.nad_namespace)
            patch = edits.plug(kvvm, interface=if_name_of(type_, name),  # type: ignore[arg-type]
                               network_name=network) or patch
            if patch is not None:
                kvvm = {**kvvm, "spec": {**kvvm["spec"], "template": {
                    **kvvm["spec"]["template"], "spec": {
                        **kvvm["spec"]["template"]["spec"], **patch["spec"]["template"]["spec"]}}}}
        if patch is not None:
            await self._send("PATCH", self._kvvm_path(vm), patch)

    @property
    def nad_namespace(self) -> str:
        return self.cluster.knobs.cluster_network_nad_namespace

    async def remove_network(self, vm: str, identity: str) -> None:
        if self.edits_template:
            kvvm = await self._send("GET", self._kvvm_path(vm))
            interface = edits.interface_of(kvvm, identity,
                                           cluster_nad_namespace=self.nad_namespace)
            patch = None if interface is None else edits.unplug(kvvm, interface=interface)
            if patch is not None:
                await self._send("PATCH", self._kvvm_path(vm), patch)
            return

        def ident(n: dict[str, Any]) -> str:
            return "Main" if n.get("type") == "Main" else f"{n.get('type')}/{n.get('name')}"

        await self.set_networks(vm, [n for n in await self.networks(vm) if ident(n) != identity])

    async def set_approval(self, vm: str, mode: str) -> None:
        patch = {"spec": {"disruptions": {"restartApprovalMode": mode}}}
        await self._send("PATCH", self._vm_path(vm), patch)

    async def patch_vm(self, vm: str, patch: Any, content_type: str = MERGE) -> None:
        await self._send("PATCH", self._vm_path(vm), patch, content_type)

    async def patch_kvvm(self, vm: str, patch: Any, *, status: bool = False) -> None:
        path = self._kvvm_path(vm) + ("/status" if status else "")
        await self._send("PATCH", path, patch)

    async def patch_pod(self, namespace: str, name: str, patch: Any) -> None:
        await self._send("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}", patch)

    async def restart(self, vm: str) -> None:
        """What `virtctl restart` does: delete the VMI; KubeVirt starts a new one. On
        Deckhouse (runStrategy Manual: a deleted VMI stays deleted) what `d8 v restart`
        does: a `Restart` VirtualMachineOperation."""
        namespace, name = split(vm)
        if self.cluster.knobs.dialect == "deckhouse":
            self._restarts += 1
            await self._send(
                "POST", f"/apis/virtualization.deckhouse.io/v1alpha2/namespaces/{namespace}"
                "/virtualmachineoperations",
                {"apiVersion": "virtualization.deckhouse.io/v1alpha2",
                 "kind": "VirtualMachineOperation",
                 "metadata": {"name": f"restart-{name}-{self._restarts}", "namespace": namespace},
                 "spec": {"type": "Restart", "virtualMachineName": name}},
                content_type="application/json")
            return
        group, plural = served(self.cluster, "kubevirt.io", "virtualmachineinstances")
        await self._send("DELETE", f"/apis/{group}/v1/namespaces/{namespace}/{plural}/{name}")

    async def close(self) -> None:
        await self.session.close()


@pytest.fixture
async def user_of() -> AsyncIterator[Callable[[SimulatedCluster], User]]:
    users: list[User] = []

    def make(cluster: SimulatedCluster) -> User:
        user = User(cluster)
        users.append(user)
        return user

    yield make
    for user in users:
        await user.close()


@pytest.fixture
async def launcher(tmp_path: Path) -> AsyncIterator[Launcher]:
    """Starts controllers as processes of their own (`processes_support`); every one
    still running is stopped at the end."""
    launcher = Launcher(tmp_path)
    try:
        yield launcher
    finally:
        await launcher.close()
