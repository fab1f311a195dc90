"""Prometheus metrics and the controller's small HTTP face (`/metrics`, `/healthz`,
`/readyz`, and the read-only journal views `/operations` when given the journal).

Metrics live in a registry of their own (never the process-global one) so that two
controllers in one test process do not collide. This module only records and serves;
it never decides anything and never blocks the controller: a failing scrape is the
scraper's problem.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from nicplug.adapters.queries.http import JournalSource, add_operation_routes

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
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

    def render(self) -> bytes:
        return generate_latest(self.registry)


@dataclass
class Health:
    """`/healthz` answers while the process serves; `/readyz` once `ready()` holds, and
    says why not with `why()` when it does not."""

    ready: Callable[[], bool] = lambda: False
    live: Callable[[], bool] = lambda: True
    why: Callable[[], str] = lambda: ""


def make_http_app(
    metrics: Metrics, health: Health, *, journal: Path | str | JournalSource | None = None
) -> web.Application:
    async def metrics_view(_: web.Request) -> web.Response:
        body = metrics.render()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        ok = health.live()
        return web.Response(status=200 if ok else 503, text="ok\n" if ok else "unhealthy\n")

    async def readyz(_: web.Request) -> web.Response:
        if health.ready():
            return web.Response(status=200, text="ready\n")
        why = health.why()
        return web.Response(status=503, text=f"not ready: {why}\n" if why else "not ready\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics_view)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    if journal is not None:
        add_operation_routes(app, journal)
    return app


class MetricsAddressError(Exception):
    """The metrics address cannot be served: in use, not this host's, unknown."""


def bind_refused(value: str, error: OSError) -> MetricsAddressError:
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
    return MetricsAddressError(f"--metrics-addr {value}: {problem}")


def parse_addr(value: str) -> tuple[str, int]:
    """`HOST:PORT` (IPv6 as `[::1]:8080`); a clear ValueError otherwise."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)
