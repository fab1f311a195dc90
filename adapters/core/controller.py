"""The composition root of `nicplug run`: informers → worlds → runtime → executor.

While this replica holds the Lease it opens the journal, recovers, lists and watches
every kind, and feeds the runtime one assembled `World` per VM whose objects changed
(coalesced: a burst of events on one VM is one observation). A standby only stands
for the Lease. Malformed objects are reported and the VM is held still until they
are readable again; the other VMs go on. It never decides anything itself.

Ready means: this replica's term holds at this instant, it has listed and recovered,
and its journal takes writes. The term is read from the clock, so `/readyz` and
`nicplug_leader` flip the instant a term ends, whatever else is running. A lost term
stops the runtime at once, without draining (the outbox keeps what was in flight, and
the fence keeps any effect of the ended term from being sent); a clean stop (SIGTERM)
drains for at most `_DRAIN_BUDGET`, closes the journal and hands the Lease over.

With a PostgreSQL journal every replica opens it at start; one that does not lead is a
hot standby: its informers list and watch from the start, and it follows the journal
(`engine/standby.py`), so that when it wins the
Lease it takes a term in the database (fencing every write of the replica it replaces),
catches up and starts from what it followed, reading no history again. Each effect is
then claimed in the database, in its term, before it is sent.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from nicplug.adapters import __version__
from nicplug.adapters.core.created_objects import clean_created
from nicplug.adapters.core.executor import Cached, KubeExecutor
from nicplug.adapters.core.loop_lag import LoopLag
from nicplug.adapters.core.observability import (
    Health,
    Metrics,
    bind_refused,
    make_http_app,
    parse_addr,
)
from nicplug.adapters.core.observing import Observing, Rested
from nicplug.adapters.core.operation_objects import OperationObjects
from nicplug.adapters.core.platform_mode import ModeFinding, find_mode
from nicplug.adapters.core.reporting import MetricsListener
from nicplug.adapters.core.retention import archive_finished
from nicplug.adapters.core.settings import Settings
from nicplug.adapters.core.worldview import WorldIndex, cache_projection
from nicplug.adapters.heap import (
    frozen_after_full_collections,
    full_collections_in_small_steps,
    give_back_free_memory,
    loading_long_lived,
)
from nicplug.adapters.kube.calls import KubeCalls
from nicplug.adapters.kube.client import ApiConnection, ClientSettings, connect
from nicplug.adapters.kube.errors import KubeError
from nicplug.adapters.kube.informer import (
    Informer,
    WatchProgress,
    WatchSettings,
    all_synced,
)
from nicplug.adapters.kube.lease import Leadership, Term
from nicplug.adapters.kube.resources import KindRef, Scope
from nicplug.adapters.kube.wire import JsonObject
from nicplug.adapters.queries.http import JournalSource, make_query_app
from nicplug.adapters.sdn import dialect_for
from nicplug.adapters.tapes.writer import EffectTaping, TapeWriter
from nicplug.engine.clock import Clock, RealClock
from nicplug.engine.errors import JournalError, JournalRefused, RetryAfterObservation
from nicplug.engine.listening import RuntimeListener
from nicplug.engine.outbox import attempted_key, check_not_held
from nicplug.engine.runtime import Loaded, Runtime
from nicplug.engine.slicing import LoopSlices
from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.engine.sqlite_opening import corrupt
from nicplug.engine.standby import Follower
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.operation import VMState
from nicplug.machines.policy import FLAVOUR_OF
from nicplug.machines.versions import schemas
from nicplug.machines.world import World

if TYPE_CHECKING:
    from nicplug.engine.postgres_journal import PostgresJournal

log = logging.getLogger("nicplug.adapters.controller")  # the name log pipelines filter on

RETENTION_EVERY = 3600.0  # seconds between retention runs
_RELEASE_BUDGET = 2.0  # seconds a clean stop spends handing the lease over
_DRAIN_BUDGET = 2.0  # seconds a clean stop lets effects in flight finish


async def _hand_over(leadership: Leadership) -> None:
    """On a clean stop, release the lease so a standby need not wait it out; a lease
    that cannot be released still expires, so a failure here is only logged."""
    try:
        async with asyncio.timeout(_RELEASE_BUDGET):
            await leadership.release()
    except Exception as exc:
        log.warning("could not release the lease (a standby waits for it to expire): %r", exc)


async def _close_each(closers: Sequence[Callable[[], Awaitable[None]]]) -> None:
    """Run every closer, though one is cut short: a stop that lands while the first
    requests are in flight can end the first connection's close in a `CancelledError`,
    and the Lease's session, never closed, was left open. The first failure is raised
    once all have run."""
    first: BaseException | None = None
    for close in closers:
        try:
            await close()
        except BaseException as exc:
            first = first or exc
    if first is not None:
        raise first


FEED_SLICE = 0.005
"""Seconds of observing between yields to the event loop: well under the 50 ms a
watch, a journal acknowledgement or the Lease renewal may wait."""

LOAD_WITHOUT_COLLECTOR = 120.0
"""Seconds the initial lists may load with the cyclic collector held off (`heap.py`)."""


async def _open_journal(
    path: Path, settings: Settings, metrics: Metrics
) -> SQLiteJournal | PostgresJournal:
    if settings.journal_dsn is not None:
        from nicplug.engine.postgres_journal import PostgresJournal  # the `postgres` extra

        return await PostgresJournal.open(
            settings.journal_dsn, schemas=schemas(),
            on_group=lambda _units, seconds: metrics.commit_latency.observe(seconds),
        )
    return await SQLiteJournal.open(
        path,
        synchronous=settings.synchronous,
        schemas=schemas(),
        on_group=lambda _units, seconds: metrics.commit_latency.observe(seconds),
    )


@dataclass(frozen=True)
class Surroundings:
    """What a controller takes from the machine it runs on. `nicplug run` uses the
    defaults; the deterministic simulation swaps each for its virtual counterpart (time
    from its event loop, the API server in-process, the journal on the loop's thread)
    and serves no HTTP. Nothing else about the controller changes."""

    clock: Clock = field(default_factory=RealClock)
    monotonic: Callable[[], float] = time.monotonic
    work_clock: Callable[[], float] = time.perf_counter  # how long feeding has worked
    connect: Callable[[ClientSettings], Awaitable[ApiConnection]] = connect
    open_journal: Callable[
        [Path, Settings, Metrics], Awaitable[SQLiteJournal | PostgresJournal]] = _open_journal
    serve_http: bool = True
    loop_slice: float | None = FEED_SLICE
    """Seconds of decisions and effect attempts per turn of the event loop, shared by
    every key (`engine/slicing.py`); None: no slicing (the simulation, whose schedule
    must not depend on how long work takes)."""
    check_journal: bool = True
    """Check the whole journal file after start, in a thread beside the work (`_lead`);
    the simulation, whose journal lives on its event loop's thread, checks it itself."""
    measure_loop_lag: bool = True
    """Tick every 10 ms to measure how long the loop was kept from running. On the
    simulation's virtual clock, which moves only when the loop is idle, the lag is 0 by
    construction and the ticker would only turn the loop 100 times a virtual second."""
    freeze_loaded: bool = True
    """Freeze what the initial lists load out of the cyclic collector's way (`heap.py`).
    A process that plays many controllers one after another (the simulation) would
    freeze each one's leftovers with them; it keeps its own heap out of the collector's
    way instead."""


def _fence(term: Term, observing: Observing) -> None:
    """Checked the instant before each write: this term of leadership holds (else
    `Deposed`), and the effect's VM is readable (else, held still, not sent): not held
    by its last observation, nor turned unreadable in the informers since (a change not
    observed yet: the next observation holds it)."""
    term.check()
    check_not_held()
    key = attempted_key()
    problem = observing.unreadable_unobserved(str(key)) if key is not None else None
    if problem is not None:
        raise RetryAfterObservation(f"its objects cannot be read ({problem}): held until "
                                    f"observed again")


async def _give_back_once_decided(runtime: Runtime[VMState, World]) -> None:
    """Once the first worlds are decided (the idle VMs' let go again), give the
    allocator's free pages back to the system (`heap.give_back_free_memory`)."""
    await runtime.drain()
    if give_back_free_memory():
        log.debug("free memory of the initial load given back to the system")


async def _stop(runtime: Runtime[VMState, World], term: Term) -> None:
    """Stop the runtime: at once when the term has ended, else after letting what is
    in flight finish for a moment (never beyond the term)."""
    budget = min(_DRAIN_BUDGET, term.until - asyncio.get_running_loop().time())
    if term.holds() and budget > 0:
        try:
            async with asyncio.timeout(budget):
                await runtime.drain()
        except TimeoutError:
            log.info("stopping with effects in flight; the next leader re-issues them")
    await runtime.stop(drain=False)


def _cached_in(index: WorldIndex) -> Cached:
    """The executor's view of the cache (the world index holds every watched object as
    the informers handed it on): what a write is built from."""

    def cached(kind: KindRef, namespace: str, name: str) -> JsonObject | None:
        return index.get(kind, f"{namespace}/{name}")

    return cached


class JournalHealth(RuntimeListener):
    """Whether the journal takes writes; says so once per change, in one line."""

    def __init__(self, metrics: Metrics, path: str) -> None:
        self._metrics = metrics
        self._path = path
        self.reset()

    def reset(self) -> None:
        """A new term opens the journal afresh."""
        self.writable = True
        self._metrics.journal_writable.set(1)

    def on_journal(self, error: JournalError | None) -> None:
        self.writable = error is None
        self._metrics.journal_writable.set(1 if error is None else 0)
        if error is None:
            log.warning("journal %s takes writes again: ready, deciding again what it refused",
                        self._path)
            return
        problem = error.problem if isinstance(error, JournalRefused) else str(error)
        log.error("journal %s refuses writes (%s): not ready until it takes them again; the "
                  "refused decisions are retried", self._path, problem)


class Controller:
    def __init__(self, settings: Settings, surroundings: Surroundings | None = None) -> None:
        self.settings = settings
        self.surroundings = surroundings or Surroundings()
        self.identity = settings.identity or f"{socket.gethostname()}-{os.getpid()}"
        self.metrics = Metrics(flavour="deckhouse" if settings.dialect == "deckhouse"
                               else "kubevirt")
        self.health = Health(ready=self._is_ready, why=self._not_ready_because,
                             note=self._mode_note)
        self.mode: ModeFinding | None = None
        """The mode this replica's current term runs in, and why (`platform_mode`)."""
        self.dialect = dialect_for(
            settings.dialect, cluster_nad_namespace=settings.cluster_network_namespace
        )
        self.flavour = settings.flavour()
        self._observing = Observing(
            self.dialect,
            self.flavour,
            scope=settings.scope(),
            on_hold=lambda _vm, _problem: self.metrics.observation_errors.labels("object").inc(),
            on_unreadable_pods=lambda _vm, _problem: self.metrics.observation_errors.labels(
                "annotation").inc(),
            time_slice=FEED_SLICE,
            now=self.surroundings.work_clock,
        )
        self._tape: TapeWriter | None = None
        self._ready = False
        self._leadership: Leadership | None = None
        self._journal_health = JournalHealth(self.metrics, settings.journal_name())
        self._shared: PostgresJournal | None = None  # a PostgreSQL journal, opened at start
        self._follower: Follower | None = None
        self._following: asyncio.Task[None] | None = None
        self._warm: list[Informer] | None = None  # a standby's informers, kept running
        self._warm_tasks: list[asyncio.Task[None]] = []
        self._last_progress: dict[str, float] = {}
        self.loop_lag = LoopLag(on_lag=self._lagged)
        self.metrics_port: int | None = None  # the bound port (`metrics_addr` may say 0)
        self.query_port: int | None = None  # the bound port of `/operations`, if served
        # The query API's reader of the journal, closed before the writer closes.
        self._queries = JournalSource(settings.journal_dsn or settings.journal)

    @property
    def listed(self) -> bool:
        """This term's informers have listed and its recovery is done (`/readyz` asks
        besides that it leads and its journal takes writes)."""
        return self._ready

    def cached(self, kind: KindRef, namespace: str, name: str) -> JsonObject | None:
        """An object as this replica's informers hold it now (what its decisions and
        writes are built from), or None."""
        return self._observing.index.get(kind, f"{namespace}/{name}")

    @property
    def leading(self) -> bool:
        """This replica holds a term of leadership now (what `nicplug_leader` shows)."""
        return self._leadership is not None and self._leadership.leading

    def _is_ready(self) -> bool:
        return self._ready and self.leading and self._journal_health.writable

    def _mode_note(self) -> str:
        return "" if self.mode is None else self.mode.describe()

    def _found_mode(self, finding: ModeFinding) -> None:
        """Say the mode of this term: the log, `nicplug_mode_info`, `/readyz`."""
        self.mode = finding
        self.metrics.mode_info.clear()
        flavour = FLAVOUR_OF[self.settings.dialect]
        self.metrics.mode_info.labels(finding.mode, flavour, finding.source).set(1)
        level = logging.WARNING if finding.source == "fallback" else logging.INFO
        log.log(level, "mode: %s, flavour %s", finding.describe(), flavour)

    def _not_ready_because(self) -> str:
        if self._leadership is None or not self._leadership.leading:
            return "not leading (standing for the lease)"
        if not self._journal_health.writable:
            return f"the journal {self.settings.journal_name()} refuses writes"
        return "" if self._ready else "listing and recovering"

    async def run(self) -> None:
        """Serve metrics and health, stand for the Lease, lead while it is ours; when
        cancelled (a clean stop), end the term and release the Lease."""
        runners = await self._serve_http() if self.surroundings.serve_http else []
        timing = self.settings.lease_timing()
        user_agent = f"nicplug/{__version__} ({self.identity})"
        opened: list[ApiConnection] = []
        try:
            if self.settings.record_tape is not None:  # before connecting: fails alone
                self._tape = TapeWriter(self.settings.record_tape,
                                        now=self.surroundings.clock.wall)
            connection = await self.surroundings.connect(ClientSettings(
                kubeconfig=self.settings.kubeconfig, read_timeout=self.settings.request_timeout,
                user_agent=user_agent, on_request=self.metrics.request_seen,
            ))
            opened.append(connection)
            # The Lease has a pool of its own: effects and watches never hold up a renewal.
            lease_connection = await self.surroundings.connect(ClientSettings(
                kubeconfig=self.settings.kubeconfig, read_timeout=timing.call_timeout,
                connect_timeout=timing.call_timeout, max_connections=2, user_agent=user_agent,
                on_request=self.metrics.request_seen,
            ))
        except BaseException:
            for client in opened:
                await client.close()
            for runner in runners:
                await runner.cleanup()
            if self._tape is not None:
                self._tape.close()
            raise
        if self.settings.journal_dsn is not None:
            try:
                await self._stand_by(connection)
            except BaseException:
                for client in (connection, lease_connection):
                    await client.close()
                if runner is not None:
                    await runner.cleanup()
                raise
        ticker = asyncio.create_task(
            self.loop_lag.run(now=asyncio.get_running_loop().time), name="event loop lag"
        ) if self.surroundings.measure_loop_lag else None
        leadership = self._leadership = Leadership(
            lease_connection,
            name=self.settings.lease_name,
            namespace=self.settings.lease_namespace,
            identity=self.identity,
            on_started=lambda term: self._lead(connection, term),
            timing=timing,
            wall=lambda: datetime.datetime.fromtimestamp(
                self.surroundings.clock.wall(), datetime.UTC),
        )
        self.metrics.leader.set_function(lambda: 1.0 if leadership.leading else 0.0)
        try:
            log.info("standing for the lease %s/%s as %s", self.settings.lease_namespace,
                     self.settings.lease_name, self.identity)
            await leadership.run()
        finally:
            self._ready = False
            if ticker is not None:
                ticker.cancel()
            await _hand_over(leadership)
            await self._stop_following()
            for task in self._warm_tasks:
                task.cancel()
            await asyncio.gather(*self._warm_tasks, return_exceptions=True)
            if self._shared is not None:
                await self._shared.close()
            try:
                await _close_each((connection.close, lease_connection.close,
                                   *(runner.cleanup for runner in runners)))
            finally:
                if self._tape is not None:
                    self._tape.close()

    def _lagged(self, lag: float) -> None:
        self.metrics.loop_lag.observe(lag)
        self.metrics.loop_lag_max.set(self.loop_lag.largest)

    async def _serve_http(self) -> list[web.AppRunner]:
        """`/metrics` and the probes on the metrics address; `/operations` on the query
        address, unless it is empty."""
        runner = await _serve(make_http_app(self.metrics, self.health),
                              self.settings.metrics_addr, "--metrics-addr")
        self.metrics_port = int(runner.addresses[0][1])
        log.info("metrics and health on http://%s:%d", parse_addr(self.settings.metrics_addr)[0],
                 self.metrics_port)
        if not self.settings.query_addr:
            return [runner]
        try:
            queries = await _serve(
                make_query_app(self._queries),
                self.settings.query_addr, "--query-addr")
        except BaseException:
            await runner.cleanup()
            raise
        self.query_port = int(queries.addresses[0][1])
        log.info("operation queries on http://%s:%d/operations",
                 parse_addr(self.settings.query_addr)[0], self.query_port)
        return [runner, queries]

    async def _stand_by(self, connection: ApiConnection) -> None:
        """Open the PostgreSQL journal and follow it until this replica leads; list and
        watch from now on, so that a takeover finds every informer synced."""
        journal = await self.surroundings.open_journal(
            self.settings.journal, self.settings, self.metrics)
        from nicplug.engine.postgres_journal import PostgresJournal

        assert isinstance(journal, PostgresJournal)
        self._shared = journal
        self._follower = Follower(journal, on_error=self._follow_failed)
        self._start_following()
        self._warm = self._informers(connection)
        self._warm_tasks = [asyncio.create_task(i.run(), name=f"watch {i.kind.name}")
                            for i in self._warm]

    def _start_following(self) -> None:
        if self._follower is not None and self._following is None:
            self._following = asyncio.create_task(self._follower.run(), name="standby")
            log.info("standing by: following the journal %s", self.settings.journal_name())

    async def _stop_following(self) -> None:
        following, self._following = self._following, None
        if following is not None:
            following.cancel()
            await asyncio.gather(following, return_exceptions=True)

    def _follow_failed(self, error: JournalError | None) -> None:
        if error is not None:
            log.warning("standby: cannot follow the journal now (%s); trying again", error)

    async def _take_over(self) -> tuple[PostgresJournal, Loaded]:
        """Stop following, take a term in the database (every later write of an older
        term is refused), catch up with what committed before it, start from that."""
        assert self._shared is not None and self._follower is not None
        await self._stop_following()
        started = time.monotonic()
        number = await self._shared.lead(self.identity)
        position = await self._follower.catch_up()
        loaded = self._follower.loaded()
        log.info("journal term %d taken at position %d: %d live VMs ready in %.3fs",
                 number, position, len(loaded), time.monotonic() - started)
        return self._shared, loaded

    async def _lead(self, connection: ApiConnection, term: Term) -> None:
        self._journal_health.reset()
        loaded: Loaded | None = None
        journal: SQLiteJournal | PostgresJournal
        if self._shared is not None:
            journal, loaded = await self._take_over()
        else:
            journal = await self.surroundings.open_journal(
                self.settings.journal, self.settings, self.metrics)
        listener = MetricsListener(self.metrics, monotonic=self.surroundings.monotonic)
        informers = self._warm if self._warm is not None else self._informers(connection)
        self._found_mode(await find_mode(self.settings, connection))
        assert self.mode is not None
        objects = OperationObjects(
            KubeCalls(connection, fence=term.check), journal, self.surroundings.clock,
            namespace=self.settings.namespace,
        ) if self.settings.operation_objects else None
        runtime: Runtime[VMState, World] = Runtime(
            HotplugDecider(self.settings.machine_config(self.mode.mode)),
            journal,
            KubeExecutor(
                KubeCalls(connection, fence=partial(_fence, term, self._observing)),
                self.dialect,
                flavour=self.flavour,
                metrics=self.metrics,
                max_migrations=self.settings.max_migrations,
                cached=_cached_in(self._observing.index),
                monotonic=self.surroundings.monotonic,
                # the Events' reportingInstance: this replica, in a pod the pod's name
                # (deployment.yaml sets NICPLUG_IDENTITY from the downward API)
                reporting_instance=self.identity,
            ),
            self.surroundings.clock,
            concurrency=self.settings.concurrency,
            slices=None if self.surroundings.loop_slice is None else LoopSlices(
                self.surroundings.loop_slice, now=self.surroundings.work_clock),
            listeners=[listener, self._journal_health, Rested(self._observing),
                       *([EffectTaping(self._tape)] if self._tape else []),
                       *([objects] if objects is not None else [])],
            claim=self._shared.claim if self._shared is not None else None,
            rest=True,  # idle VMs leave memory (`docs/decisions/idle-vms-at-rest.md`)
        )
        tasks: list[asyncio.Task[None]] = []
        try:
            # re-issued effects wait for the synced world
            await runtime.start(hold=True, loaded=loaded)
            if self.surroundings.check_journal and isinstance(journal, SQLiteJournal):
                tasks.append(asyncio.create_task(self._check_journal(journal),
                                                 name="journal check"))
            # The lists and the first world of every VM (its objects read, its state
            # decided) live as long as the process: the collector is held off while
            # they are built, then they are frozen out of its way (`heap.py`).
            with (loading_long_lived(at_most=LOAD_WITHOUT_COLLECTOR,
                                     later=asyncio.get_running_loop().call_later)
                  if self.surroundings.freeze_loaded else nullcontext()):
                if self._warm is None:
                    tasks.extend(asyncio.create_task(i.run(), name=f"watch {i.kind.name}")
                                 for i in informers)
                await self._synced(informers, [*self._warm_tasks, *tasks])
                if self._tape is not None:
                    self._tape.initial_events_end()
                listener.seed(stored.view for stored in await journal.views())
                for stored in await journal.views(live=True):
                    self._mark(str(stored.view.key), "recovery")
                for key in self._observing.index.vm_keys():
                    self._mark(key, "initial list")
                # PostgreSQL: only into a directory named for it (a replica's own disk
                # would lose the archives with the pod; docs/operations.md)
                if isinstance(journal, SQLiteJournal) or self.settings.archive_dir is not None:
                    tasks.append(asyncio.create_task(self._retain(journal, objects),
                                                     name="retention"))
                if objects is not None:
                    tasks.append(asyncio.create_task(objects.run(), name="operation objects"))
                tasks.append(asyncio.create_task(self._clean_created(
                    KubeCalls(connection, fence=term.check), journal), name="cleanup"))
                self._ready = True
                log.info("ready: %d VMs listed, recovery done", self._observing.pending)
                await self._observing.feed(runtime)
                tasks.append(asyncio.create_task(_give_back_once_decided(runtime),
                                                 name="give back the load's memory"))
                await asyncio.sleep(0)
            await self._feed(runtime, [*self._warm_tasks, *tasks])
        finally:
            self._ready = False
            for task in tasks:
                task.cancel()
            try:
                await asyncio.gather(*tasks, return_exceptions=True)
                await _stop(runtime, term)
            finally:
                listener.forget_effects()
                if journal is self._shared:
                    self._start_following()  # a standby again
                else:
                    async with self._queries.withheld():
                        await journal.close()

    async def _check_journal(self, journal: SQLiteJournal) -> None:
        """The whole journal file checked once, beside the work: opening checked only the
        tables recovery reads whole (its cost grows with the live state, this one's with
        the history). A damaged file ends the term, and `nicplug run`, with one line; the
        journal is left as it is."""
        problems = await journal.check_file()
        if problems != ["ok"]:
            self._observing.wake.set()  # `_feed` looks at its tasks when woken
            raise corrupt(journal.path, "; ".join(problems[:3]))
        log.info("journal %s: the whole file is checked and healthy", journal.path)

    async def _retain(
        self, journal: SQLiteJournal | PostgresJournal, objects: OperationObjects | None
    ) -> None:
        """Archive what finished before the retention window, once an hour (the first
        time at once), and delete the objects of what it archived. A failed run is
        logged and tried again the next hour."""
        into = self.settings.archives()
        while True:
            try:
                done = await archive_finished(
                    journal, window=self.settings.retention, into=into,
                    now=self.surroundings.clock.now(),
                )
                if done is not None:
                    log.info("archived %d events of %d finished operations to %s",
                             done.events, done.streams, done.file)
                    if objects is not None:
                        await objects.reconcile()
            except (JournalError, OSError) as error:
                log.error("retention: archiving failed, tried again in an hour: %s", error)
            await asyncio.sleep(RETENTION_EVERY)

    async def _clean_created(
        self, calls: KubeCalls, journal: SQLiteJournal | PostgresJournal
    ) -> None:
        """Delete the finished migrations and VM operations nicplug created longer ago
        than `--created-objects-retention` that no live operation reads, once an hour
        (the first time at once). A failed run is logged and tried again the next hour."""
        while True:
            try:
                done = await clean_created(
                    calls, self.flavour, journal,
                    retention=self.settings.created_objects_retention,
                    now=self.surroundings.clock.now(), in_scope=self._observing.in_scope)
                if done.deleted:
                    log.info("cleanup: deleted %d finished objects nicplug created",
                             len(done.deleted))
            except (KubeError, JournalError) as error:
                log.error("cleanup: failed, tried again in an hour: %s", error)
            await asyncio.sleep(RETENTION_EVERY)

    def _informers(self, connection: ApiConnection) -> list[Informer]:
        scope = Scope(self.settings.namespace)
        return [
            Informer(
                connection,
                kind,
                namespace=scope.namespace_for(kind),
                on_change=self._changed,
                on_progress=self._progress,
                on_presence=self._observing.presence,
                settings=WatchSettings(),
                clock=self.surroundings.monotonic,
                # a recorded tape keeps whole objects; otherwise only what is read
                transform=None if self._tape is not None else cache_projection(kind),
                # the world index keeps them; a tape records a deletion seen by a
                # re-list with the whole object
                keep_objects=self._tape is not None,
                # the index outlives a term's informers: what went between two terms
                # (the VMI and pod of a VM stopped meanwhile) is told gone by the list
                known=self._observing.index.held(kind),
            )
            for kind in self.flavour.watched_by(
                desired_in_template=self.dialect.kubevirt_owns_requests,
                namespace_opt_in=self.settings.migrations == "opt-in")
        ]

    @staticmethod
    async def _synced(informers: Sequence[Informer], tasks: Sequence[asyncio.Task[None]]) -> None:
        """Return once every informer has listed; raise if one dies before that."""
        synced: asyncio.Future[Any] = asyncio.ensure_future(all_synced(informers))
        watched: list[asyncio.Future[Any]] = [synced, *tasks]
        try:
            await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            for task in tasks:
                if task.done():
                    task.result()  # an informer died before its first list: raise why
            await synced
        finally:
            synced.cancel()

    def _changed(self, kind: KindRef, event_type: str, obj: dict[str, object]) -> None:
        if self._tape is not None:
            self._tape.watch_event(kind, event_type, obj)
        self._observing.changed(kind, event_type, obj)

    def _progress(self, kind: KindRef, progress: WatchProgress) -> None:
        self.metrics.watch_lag.labels(kind.name).set(progress.gap)

    def _mark(self, vm_key: str, ref: str) -> None:
        self._observing.mark(vm_key, ref)

    async def _feed(
        self, runtime: Runtime[VMState, World], tasks: Sequence[asyncio.Task[None]]
    ) -> None:
        """Hand each changed VM's world to the runtime, until an informer dies."""
        while True:
            await self._observing.wake.wait()
            for task in tasks:
                if task.done():
                    task.result()
            await self._observing.feed(runtime)
            await asyncio.sleep(0)


async def _serve(app: web.Application, address: str, option: str) -> web.AppRunner:
    host, port = parse_addr(address)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as error:  # in use, not this host's, unknown host: one line
        await runner.cleanup()
        raise bind_refused(address, error, option) from error
    return runner


async def run_controller(settings: Settings) -> None:
    started = time.monotonic()
    controller = Controller(settings)
    try:
        with frozen_after_full_collections():
            collecting = asyncio.create_task(full_collections_in_small_steps(
                on_thaw=controller.metrics.frozen_objects.set), name="full collections")
            try:
                await controller.run()
            finally:
                collecting.cancel()
    finally:
        log.info("controller stopped after %.1fs", time.monotonic() - started)

