"""One simulated cluster: the store, the actors, and (optionally) the HTTP API server.

`SimulatedCluster(knobs)` is what the tests, the benchmarks and `nicplug sim serve`
start. It owns the order of things — fixtures before actors, actors before the server
answers — and the ways a test looks inside: `settle()` (run until nothing moves),
`advance(seconds)` (with a virtual clock), `link_not_found` (virt-handler's crashes),
`actor_errors` (bugs an actor hit; a healthy run has none), `requests` (what the
HTTP server answered, each with the username it was taken for). `write_kubeconfig`
gives a client an identity of its own (a service account), which the deckhouse world's
admission policy judges. It never decides behaviour itself: that is the actors'.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections import Counter, deque
from pathlib import Path
from types import TracebackType

from aiohttp import web

from nicplug.simulator.actors.deckhouse_hotplug import NetworkHotplug
from nicplug.simulator.actors.deckhouse_macs import MACAddresses
from nicplug.simulator.actors.deckhouse_operations import VirtualMachineOperations
from nicplug.simulator.actors.garbage import GarbageCollector
from nicplug.simulator.actors.kubevirt import KubeVirt
from nicplug.simulator.actors.multus_dnc import DynamicNetworksController
from nicplug.simulator.actors.reactor import Reactor
from nicplug.simulator.actors.sdn_deckhouse import DeckhouseSDN
from nicplug.simulator.actors.sdn_ipam import DeckhouseIPAM
from nicplug.simulator.actors.virt_handler import Crash, VirtHandler
from nicplug.simulator.apis import served_api
from nicplug.simulator.clock import RealSimClock, SimClock, VirtualSimClock
from nicplug.simulator.definitions import definitions
from nicplug.simulator.faults import Faults
from nicplug.simulator.fixtures import Fixtures, populate
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.kubeconfig import write_kubeconfig
from nicplug.simulator.networking import Json
from nicplug.simulator.rbac import controller_role
from nicplug.simulator.resources import CLUSTER_ROLES, CRDS, EVENTS
from nicplug.simulator.server import REQUEST_LOG, RequestRecord, make_app
from nicplug.simulator.store import Store

_SETTLE_ROUNDS = 100_000


class SimulatedCluster:
    def __init__(
        self,
        knobs: Knobs | None = None,
        *,
        clock: SimClock | None = None,
        fixtures: Fixtures | None = None,
        serve: bool = True,
        host: str = "127.0.0.1",
        port: int = 0,
        kubeconfig_path: Path | None = None,
        store: Store | None = None,
        kubeconfig_user: str | None = None,
    ) -> None:
        self.knobs = knobs or Knobs()
        self.clock: SimClock = clock or RealSimClock()
        self.fixtures = fixtures or Fixtures()
        self.serve = serve
        self.host = host
        self.port = port
        self.store = store if store is not None else Store()
        self.faults = Faults()
        self.url = ""
        self.kubeconfig_path: Path | None = None
        self.vms: list[tuple[str, str]] = []
        self.virt_handler = VirtHandler(self.store, self.knobs, self.clock)
        self.kubevirt = KubeVirt(self.store, self.knobs, self.clock)
        self.actors: list[Reactor] = [self.kubevirt, self.virt_handler,
                                      GarbageCollector(self.store, self.knobs, self.clock)]
        if self.knobs.dialect == "deckhouse":
            self.actors.append(DeckhouseSDN(self.store, self.knobs, self.clock))
            self.actors.append(VirtualMachineOperations(self.store, self.knobs, self.clock))
            self.actors.append(MACAddresses(self.store, self.knobs, self.clock))
            self.actors.append(DeckhouseIPAM(self.store, self.knobs, self.clock))
            if self.knobs.hotplugs:  # a release with #2187
                self.actors.append(NetworkHotplug(self.store, self.knobs, self.clock))
        elif self.knobs.dynamic_networks_controller:
            self.actors.append(DynamicNetworksController(self.store, self.knobs, self.clock))
        self._tasks: list[asyncio.Task[None]] = []
        self._runner: web.AppRunner | None = None
        self._own_dir: Path | None = None
        self._kubeconfig_wanted = kubeconfig_path
        self._kubeconfig_user = kubeconfig_user  # whose requests its kubeconfig makes

    # ------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        self.vms = populate(self.store, self.knobs, self.fixtures)
        for crd in definitions(served_api(self.knobs.api, nads=self.knobs.nads_served)):
            self.store.create(CRDS, crd)
        if self.knobs.dialect == "deckhouse":
            self.store.create(CLUSTER_ROLES, controller_role(native_hotplug=self.knobs.hotplugs))
        if isinstance(self.clock, VirtualSimClock):
            self.clock.settle = self.settle
        self._tasks = [asyncio.create_task(a.run(), name=type(a).__name__)
                       for a in self.actors]
        try:
            if self.serve:
                await self._serve()
            await self.settle()
        except BaseException:
            await self.stop()
            raise

    async def _serve(self) -> None:
        api = served_api(self.knobs.api, nads=self.knobs.nads_served)
        app = make_app(self.store, self.faults, api=api)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        self.url = f"http://{self.host}:{self.port}"
        path = self._kubeconfig_wanted
        if path is None:
            self._own_dir = Path(tempfile.mkdtemp(prefix="nicplug-sim-"))
            path = self._own_dir / "kubeconfig"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_kubeconfig(path, self.url, user=self._kubeconfig_user)
        self.kubeconfig_path = path

    def write_kubeconfig(self, path: Path, *, user: str, namespace: str = "default") -> Path:
        """A kubeconfig for this cluster's server whose requests are `user`'s (e.g.
        `identity.service_account("nicplug-system", "nicplug")`)."""
        if not self.url:
            raise RuntimeError("the cluster serves no HTTP: start it with serve=True")
        return write_kubeconfig(path, self.url, namespace=namespace, user=user)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._own_dir is not None:
            shutil.rmtree(self._own_dir, ignore_errors=True)
            self._own_dir = None

    async def __aenter__(self) -> SimulatedCluster:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # ------------------------------------------------------------- time

    async def settle(self) -> None:
        """Yield to the actors until every one is idle and the store stops changing."""
        quiet = 0
        for _ in range(_SETTLE_ROUNDS):
            version = self.store.resource_version
            for _ in range(3):
                await asyncio.sleep(0)
            if version == self.store.resource_version and all(a.idle for a in self.actors):
                quiet += 1
                if quiet >= 3:
                    return
            else:
                quiet = 0
            for task in self._tasks:
                if task.done() and not task.cancelled() and task.exception() is not None:
                    raise RuntimeError(f"actor {task.get_name()} died") from task.exception()
        raise RuntimeError("the simulated cluster does not settle: its actors keep writing")

    async def advance(self, seconds: float) -> None:
        """Move a virtual clock forward, letting the actors act at each due moment."""
        if not isinstance(self.clock, VirtualSimClock):
            raise TypeError("advance() needs the cluster to run on a VirtualSimClock")
        await self.clock.advance(seconds)

    # ------------------------------------------------------------- looking inside

    @property
    def link_not_found(self) -> list[Crash]:
        """The VMIs virt-handler crashed by attaching before the link existed."""
        return list(self.virt_handler.crashes)

    @property
    def requests(self) -> list[RequestRecord]:
        """The resource requests the HTTP server has answered, oldest first (bounded)."""
        if self._runner is None:
            return []
        served: deque[RequestRecord] = self._runner.app[REQUEST_LOG]
        return list(served)

    def take_requests(self) -> list[RequestRecord]:
        """Remove and return the requests answered since the last call, oldest first: for
        a caller that keeps a record longer than the server's bounded log."""
        if self._runner is None:
            return []
        served: deque[RequestRecord] = self._runner.app[REQUEST_LOG]
        taken = list(served)
        served.clear()
        return taken

    def request_counts(self, user: str | None = None) -> Counter[tuple[str, str]]:
        """(verb, `resource[/subresource]`) → how many of the answered requests (of
        `user`'s alone, if given) asked it: what one client cost the API server."""
        return Counter(
            (r.verb, f"{r.resource}/{r.subresource}" if r.subresource else r.resource)
            for r in self.requests if user is None or r.username == user)

    @property
    def actor_errors(self) -> list[str]:
        return [e for a in self.actors for e in a.errors]

    def events(self, *, reason: str | None = None) -> list[Json]:
        """Every Event, core/v1 and `events.k8s.io/v1` alike (one object behind both
        views), as core/v1 shows them, `count` taken from a series where there is one."""
        items, _ = self.store.list(EVENTS)
        items = [{**e, "count": e.get("count") or (e.get("series") or {}).get("count", 1)}
                 for e in items]
        return [e for e in items if reason is None or e.get("reason") == reason]
