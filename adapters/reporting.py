"""What the runtime reports, turned into Prometheus metrics and structured log lines.

A `RuntimeListener`: quick, never raising, never deciding. Operations by state is a
gauge kept from the `Opened` / `Transitioned` events as they commit, seeded from the
read model when the replica starts to lead.

It runs for every committed event, so it is kept cheap: the labelled series are
looked up once per state, and at INFO an operation says only where it opened and where
it came to an outcome (the states its Events are emitted in); every step between is a
DEBUG line, built only when DEBUG is on. The journal keeps every step (`nicplug
explain`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from nicplug.adapters.observability import Metrics
from nicplug.engine.journal import PendingEffect
from nicplug.engine.listening import EffectPhase, RuntimeListener
from nicplug.engine.model import Key, RecordedEvent
from nicplug.machines.decider import OUTCOMES
from nicplug.machines.operation import INITIAL_STATE, OPENED, ROLLOUT_BYPASSED, TRANSITIONED

log = logging.getLogger("nicplug.operations")


class MetricsListener(RuntimeListener):
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        # state -> its series of `nicplug_operations` and `nicplug_transitions_total`
        # (`labels()` takes a lock and builds a key on every call)
        self._in_state: dict[str, Any] = {}
        self._into_state: dict[str, Any] = {}

    def seed(self, states: Iterable[str]) -> None:
        for state in states:
            self._operations(state).inc()

    def _operations(self, state: str) -> Any:
        series = self._in_state.get(state)
        if series is None:
            series = self._in_state[state] = self._metrics.operations.labels(state)
        return series

    def _transitions(self, state: str) -> Any:
        series = self._into_state.get(state)
        if series is None:
            series = self._into_state[state] = self._metrics.transitions.labels(state)
        return series

    def on_transition(self, event: RecordedEvent) -> None:
        p = event.payload
        if event.type == OPENED:
            self._operations(INITIAL_STATE).inc()
            log.info("vm=%s op=%s opened network=%s direction=%s attempt=%s",
                     event.key, event.stream, p.get("network"), p.get("direction"),
                     p.get("attempt"))
        elif event.type == ROLLOUT_BYPASSED:
            self._metrics.rollout_bypassed.inc()
            log.warning("vm=%s op=%s applied live although vmRolloutStrategy is Stage",
                        event.key, event.stream)
        elif event.type == TRANSITIONED:
            source, target = str(p.get("from")), str(p.get("to"))
            self._operations(source).dec()
            self._operations(target).inc()
            self._transitions(target).inc()
            log.log(logging.INFO if target in OUTCOMES else logging.DEBUG,
                    "vm=%s op=%s %s -> %s reason=%s", event.key, event.stream, source, target,
                    p.get("reason") or "-")
            if p.get("reason") == "MigrationFailed" and "migrations_failed" in p:
                self._metrics.migrations_failed.inc()
                if p.get("retry_at") is None:
                    self._metrics.migrations_given_up.inc()
                    log.warning("vm=%s op=%s gave up after %s failed migrations: %s",
                                event.key, event.stream, p["migrations_failed"],
                                p.get("message") or "-")

    def on_commit(self, key: Key, seconds: float, events: int) -> None:
        if events:
            self._metrics.transition_latency.observe(seconds)

    def on_effect(self, effect: PendingEffect, phase: EffectPhase, error: str | None) -> None:
        if phase in ("failed", "retrying", "superseded"):
            log.warning("vm=%s op=%s effect=%s %s: %s", effect.key, effect.stream, effect.type,
                        phase, error or "-")

    def on_rebuild(self, key: Key, reason: str) -> None:
        self._metrics.snapshot_rebuilds.inc()
        log.warning("vm=%s snapshot not trusted, state folded from its events: %s", key, reason)

    def on_error(self, key: Key, error: BaseException) -> None:
        log.error("vm=%s decide/journal failed: %s", key, error)
