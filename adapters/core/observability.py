"""Prometheus metrics and the controller's small HTTP face (`/metrics`, `/healthz`,
`/readyz`). The read-only journal views (`/operations`) are served apart, on the query
address (`queries/http.py`): what a scraper and the kubelet may reach is not what
names every VM of every namespace.

Metrics live in a registry of their own (never the process-global one) so that two
controllers in one test process do not collide; the registry carries the process and
platform collectors the global one would (`process_*`: the memory limits are sized
from RSS) and a `nicplug_build_info` series. No `_created` series are exported: they
double every counter and histogram for a timestamp no rule reads. This module only
records and serves; it never decides anything and never blocks the controller: a
failing scrape is the scraper's problem.
"""

from __future__ import annotations

import errno
import platform
import socket
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from nicplug.adapters import __version__

disable_created_metrics()  # type: ignore[no-untyped-call]  # process-wide: every registry

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_OPERATION_BUCKETS = (1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600, 6 * 3600, 86400)
"""An operation takes seconds when all goes well, minutes at a timeout or a migration,
hours to days when it waits for a person (a restart, a migration nicplug may not make)."""


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    flavour: str = "deckhouse"

    def __post_init__(self) -> None:
        r = self.registry
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            r.register(collector)  # stateless readers of this process: shared safely
        Gauge(
            "nicplug_build_info", "1, labelled with what runs: nicplug's and Python's versions",
            ["version", "python", "flavour"], registry=r,
        ).labels(__version__, platform.python_version(), self.flavour).set(1)
        self.operation_duration = Histogram(
            "nicplug_operation_duration_seconds",
            "From an operation's opening to its end (Applied, Detached, Failed, Cancelled…), "
            "waits for a person included",
            ["direction", "flavour", "outcome"],
            buckets=_OPERATION_BUCKETS,
            registry=r,
        )
        self.operation_failures = Counter(
            "nicplug_operation_failures_total",
            "Operations that ended Failed, by direction and reason (SDNError, SDNTimeout…)",
            ["direction", "reason"],
            registry=r,
        )
        self.pending_effects = Gauge(
            "nicplug_pending_effects",
            "Effects started and not done yet (being sent, or waiting to be retried)",
            registry=r,
        )
        self.oldest_pending_effect = Gauge(
            "nicplug_pending_effect_oldest_age_seconds",
            "Seconds since the oldest pending effect was first attempted (0: none pending)",
            registry=r,
        )
        self.api_requests = Counter(
            "nicplug_api_requests_total",
            "Every request to the API server (effects, lists, watches, the Lease), by verb, "
            "resource and HTTP status ('error': no answer)",
            ["verb", "resource", "code"],
            registry=r,
        )
        self.api_request_latency = Histogram(
            "nicplug_api_request_duration_seconds",
            "Time to each API response's headers (a watch: until it opened)",
            ["verb", "resource"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.operations = Gauge(
            "nicplug_operations", "Interface operations by current state", ["state"], registry=r
        )
        self.transitions = Counter(
            "nicplug_transitions_total", "State transitions by target state", ["to"], registry=r
        )
        self.transition_latency = Histogram(
            "nicplug_transition_latency_seconds",
            "Time from the observation that moved an operation to the committed transition",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.effect_latency = Histogram(
            "nicplug_effect_latency_seconds",
            "Effect execution time against the API server",
            ["type", "outcome"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.commit_latency = Histogram(
            "nicplug_journal_commit_latency_seconds",
            "Journal append latency (queueing plus group commit)",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.watch_lag = Gauge(
            "nicplug_watch_lag_seconds",
            "Seconds since the last event or bookmark of each watch",
            ["kind"],
            registry=r,
        )
        self.api_errors = Counter(
            "nicplug_api_errors_total", "API errors by HTTP status", ["code"], registry=r
        )
        self.mode_info = Gauge(
            "nicplug_mode_info",
            "1 for the mode this replica runs in: observe (the platform hot-plugs, nicplug "
            "follows and tells) or drive (nicplug writes the pods and KVVMs), its flavour, "
            "and where the mode comes from (setting, flavour, clusterrole, fallback)",
            ["mode", "flavour", "source"],
            registry=r,
        )
        self.refused = Counter(
            "nicplug_effects_refused_total",
            "Writes the API server refused for good (a 403, or a 422 that is not a lost "
            "compare-and-swap: RBAC, an admission policy), by effect type and HTTP status",
            ["type", "code"],
            registry=r,
        )
        self.observation_errors = Counter(
            "nicplug_observation_errors_total",
            "Malformed objects or annotations that were reported and skipped",
            ["kind"],
            registry=r,
        )
        self.rollout_bypassed = Counter(
            "nicplug_rollout_bypassed",
            "Network changes KubeVirt applied to a running VM although vmRolloutStrategy "
            "is Stage",
            registry=r,
        )
        self.migrations_failed = Counter(
            "nicplug_migrations_failed",
            "Migrations of a tracked network change that failed (nicplug's or KubeVirt's)",
            registry=r,
        )
        self.migrations_given_up = Counter(
            "nicplug_migrations_given_up",
            "Network changes whose migrations failed --migration-attempts times: Failed, "
            "not retried",
            registry=r,
        )
        self.snapshot_rebuilds = Counter(
            "nicplug_snapshot_rebuilds_total",
            "VMs whose stored snapshots could not be trusted and were folded from events",
            registry=r,
        )
        self.leader = Gauge("nicplug_leader", "1 while this replica leads", registry=r)
        self.journal_writable = Gauge(
            "nicplug_journal_writable", "0 while the journal refuses writes (disk full…)",
            registry=r,
        )
        self.loop_lag = Histogram(
            "nicplug_event_loop_lag_seconds",
            "How much later than asked a 10 ms ticker woke: the event loop's stalls",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.loop_lag_max = Gauge(
            "nicplug_event_loop_lag_max_seconds",
            "The largest stall of the event loop since the process started",
            registry=r,
        )
        self.frozen_objects = Gauge(
            "nicplug_gc_frozen_objects",
            "Objects frozen out of the cyclic collector's way and still alive, counted at "
            "each hourly thaw (growing from hour to hour while the VMs do not: reference "
            "cycles among them, freed only by the thaw)",
            registry=r,
        )
        self._request_series: dict[tuple[str, str, str], tuple[Counter, Histogram]] = {}
        self._effect_series: dict[tuple[str, str], Histogram] = {}

    def request_seen(self, verb: str, resource: str, code: str, seconds: float) -> None:
        """One request to the API server (`kube/requests_seen.py`). The series of each
        (verb, resource, code) are looked up once: `labels()` takes a lock and builds a
        key on every call, twice per request."""
        series = self._request_series.get((verb, resource, code))
        if series is None:
            series = self._request_series[verb, resource, code] = (
                self.api_requests.labels(verb, resource, code),
                self.api_request_latency.labels(verb, resource))
        series[0].inc()
        series[1].observe(seconds)

    def effect_timed(self, type_: str, outcome: str, seconds: float) -> None:
        """One effect executed (`effect_latency`), its series looked up once."""
        series = self._effect_series.get((type_, outcome))
        if series is None:
            series = self._effect_series[type_, outcome] = self.effect_latency.labels(
                type_, outcome)
        series.observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)


@dataclass
class Health:
    """`/healthz` answers while the process serves; `/readyz` once `ready()` holds, and
    says why not with `why()` when it does not."""

    ready: Callable[[], bool] = lambda: False
    live: Callable[[], bool] = lambda: True
    why: Callable[[], str] = lambda: ""
    note: Callable[[], str] = lambda: ""
    """What a ready answer adds (the mode the controller runs in, and why)."""


def make_http_app(metrics: Metrics, health: Health) -> web.Application:
    async def metrics_view(_: web.Request) -> web.Response:
        body = metrics.render()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        ok = health.live()
        return web.Response(status=200 if ok else 503, text="ok\n" if ok else "unhealthy\n")

    async def readyz(_: web.Request) -> web.Response:
        if health.ready():
            note = health.note()
            return web.Response(status=200, text=f"ready: {note}\n" if note else "ready\n")
        why = health.why()
        return web.Response(status=503, text=f"not ready: {why}\n" if why else "not ready\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics_view)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


class MetricsAddressError(Exception):
    """The metrics address cannot be served: in use, not this host's, unknown."""


def bind_refused(value: str, error: OSError, option: str = "--metrics-addr",
                 ) -> MetricsAddressError:
    """Why `HOST:PORT` could not be bound, in one line that says what to change."""
    host, _ = parse_addr(value)
    if isinstance(error, socket.gaierror):
        problem = f"unknown host {host!r}"
    elif error.errno == errno.EADDRINUSE:
        problem = "the address is in use (another nicplug on this host?); choose another port"
    elif error.errno == errno.EADDRNOTAVAIL:
        problem = f"{host} is not an address of this host"
    elif error.errno == errno.EACCES:
        problem = "permission denied (ports below 1024 need privileges); choose another port"
    else:
        problem = error.strerror or str(error)
    return MetricsAddressError(f"{option} {value}: {problem}")


def parse_addr(value: str) -> tuple[str, int]:
    """`HOST:PORT` (IPv6 as `[::1]:8080`); a clear ValueError otherwise."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)
