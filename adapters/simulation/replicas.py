"""The controller replicas of a simulated run: started, killed, cut off, restarted.

Each replica is the real `Controller` (Lease, informers, `Observing`, `Runtime`,
`HotplugDecider`, `KubeExecutor`, `SQLiteJournal`) with its surroundings swapped for the
simulation's: the loop's virtual clock, the API server in-process, the journal on the
loop's thread. A kill is a crash, not a stop: the replica's connections are cut and its
journal refuses every later commit *before* its task is cancelled, so nothing the dying
process does afterwards reaches the cluster or the disk; its Lease is left to expire.
A partition cuts the connections for a while and lets the replica live on.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from nicplug.adapters.core.controller import Controller, Surroundings
from nicplug.adapters.core.settings import Settings
from nicplug.adapters.kube.client import ApiConnection, ClientSettings
from nicplug.adapters.kube.resources import KindRef
from nicplug.adapters.simulation.journal import CommitFaults, journal_opener
from nicplug.adapters.simulation.loop import LoopClock, virtual_now
from nicplug.adapters.simulation.wire import InProcessServer
from nicplug.simulator.resources import Resource

# (replica, method, path): every request a replica sends, before it is sent; what it
# returns is called if the server applies the request (`Landings`)
RequestHook = Callable[["Replica", str, str], Callable[[], None] | None]


class Landings:
    """The writes judged on what the server did with them. Each carries a header that
    names it; the server's outermost middleware (`middleware`) calls its judge once
    the server answered it 2xx, the write applied. One refused, or never handled (the
    connection cut while the server waited, the run over first), changed nothing."""

    HEADER = "X-Simulated-Write"

    def __init__(self) -> None:
        self._waiting: dict[str, Callable[[], None]] = {}
        self._serial = itertools.count(1)

    def send(self, headers: MutableMapping[str, str], landed: Callable[[], None]) -> None:
        name = str(next(self._serial))
        headers[self.HEADER] = name
        self._waiting[name] = landed

    @web.middleware
    async def middleware(self, request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                         ) -> web.StreamResponse:
        landed = self._waiting.pop(request.headers.get(self.HEADER, ""), None)
        response = await handler(request)
        if landed is not None and response.status < 300:
            landed()
        return response


class Replica:
    """One `nicplug run` process of the simulation, by identity and journal."""

    def __init__(self, identity: str, journal: Path, settings: dict[str, Any],
                 server: InProcessServer, on_request: RequestHook, landings: Landings,
                 tape: Path | None = None) -> None:
        self.identity = identity
        self.journal = journal
        self.commit_faults = CommitFaults()
        self.reachable = True
        self.incarnation = 0
        self.clock = LoopClock()  # the machine's: a step outlives the process
        self._settings = settings
        self._server = server
        self._on_request = on_request
        self._landings = landings
        self._tape = tape
        self.controller: Controller | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def leading(self) -> bool:
        # not the `nicplug_leader` gauge's stored value: the gauge is computed when
        # collected (`set_function`), its stored value stays 0
        return self.controller is not None and self.controller.leading

    @property
    def ready(self) -> bool:
        return self.controller is not None and self.controller.health.ready()

    @property
    def listed(self) -> bool:
        """Its informers have listed (what `write-before-sync` asks; `ready` also asks
        for the lease and a journal that takes writes, which are other invariants' or
        no fault at all: an effect committed before the journal filled is still sent)."""
        return self.controller is not None and self.controller.listed

    def seen(self, resource: Resource, namespace: str, name: str) -> int | None:
        """The resourceVersion of the object as this replica's informers hold it now."""
        if self.controller is None:
            return None
        kind = KindRef(resource.group, resource.version, resource.plural, resource.kind,
                       resource.namespaced)
        held = self.controller.cached(kind, namespace, name)
        version = ((held or {}).get("metadata") or {}).get("resourceVersion")
        return int(version) if version is not None else None

    def start(self) -> None:
        self.incarnation += 1
        self.commit_faults = CommitFaults()
        self.reachable = True
        tape = None
        if self._tape is not None:
            tape = self._tape.with_name(f"{self._tape.stem}.{self.identity}."
                                        f"{self.incarnation}{self._tape.suffix}")
        settings = Settings(
            journal=self.journal, identity=self.identity, metrics_addr="127.0.0.1:0",
            query_addr="",
            record_tape=tape, **self._settings,
        )
        surroundings = Surroundings(
            clock=self.clock, monotonic=virtual_now, work_clock=virtual_now,
            connect=self._connect,
            open_journal=journal_opener(self.commit_faults), serve_http=False,
            check_journal=False,  # no thread beside the loop: the liveness check reads it
            measure_loop_lag=False,  # virtual time moves only when idle: no lag to see
            loop_slice=None,  # the schedule is the seed's alone
            freeze_loaded=False,  # many runs in one process: `run.simulate` freezes
        )
        self.controller = Controller(settings, surroundings)
        self._task = asyncio.ensure_future(self.controller.run())

    async def _connect(self, settings: ClientSettings) -> ApiConnection:
        connection = await self._server.connect(settings)
        incarnation = self.incarnation

        async def on_request(session: aiohttp.ClientSession, context: Any,
                             params: aiohttp.TraceRequestStartParams) -> None:
            if not self.reachable or incarnation != self.incarnation:
                raise aiohttp.ClientConnectionError("simulated: the network is cut")
            landed = self._on_request(self, params.method, params.url.path)
            if landed is not None:
                self._landings.send(params.headers, landed)

        trace = aiohttp.TraceConfig()
        trace.on_request_start.append(on_request)
        trace.freeze()
        session = connection.client.rest_client.pool_manager
        session._trace_configs.append(trace)
        return connection

    async def kill(self) -> None:
        """Crash: cut the network, freeze the journal, cancel everything."""
        self.reachable = False
        self.commit_faults.failing = 10**9
        self.incarnation += 1  # the dead process's connections stay dead
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        self._task = None

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        self._task = None

    def failure(self) -> BaseException | None:
        """Why the replica's task ended on its own, if it did."""
        if self._task is None or not self._task.done() or self._task.cancelled():
            return None
        return self._task.exception()
