"""What the runtime reports, turned into Prometheus metrics and structured log lines.

A `RuntimeListener`: quick, never raising, never deciding. Operations by state is a
gauge kept from the `Opened` / `Transitioned` events as they commit, seeded from the
read model when the replica starts to lead. An operation's end to end duration runs
from its `Opened` event's decision time (or its snapshot's `opened_at`, for one opened
before this term) to the terminal transition's. Pending effects are those started and
not yet done, counted from the effect hooks; an effect whose term ended unsent is
forgotten with the term (`forget_effects`).

Log records carry `vm`, `operation`, `network` and `state` as fields (`extra`), which
`--log-format json` writes as keys; the text line names them in its message.

It runs for every committed event, so it is kept cheap: the labelled series are
looked up once per state, and at INFO an operation says only where it opened and where
it came to an outcome (the states its Events are emitted in); every step between is a
DEBUG line, built only when DEBUG is on. The journal keeps every step (`nicplug
explain`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from nicplug.adapters.core.observability import Metrics
from nicplug.engine.journal import PendingEffect
from nicplug.engine.listening import EffectPhase, RuntimeListener
from nicplug.engine.model import Key, RecordedEvent, StreamView
from nicplug.machines.decider import OUTCOMES
from nicplug.machines.graph import TERMINAL
from nicplug.machines.operation import INITIAL_STATE, OPENED, ROLLOUT_BYPASSED, TRANSITIONED

log = logging.getLogger("nicplug.operations")


class MetricsListener(RuntimeListener):
    def __init__(self, metrics: Metrics, *, monotonic: Callable[[], float] = time.monotonic,
                 ) -> None:
        self._metrics = metrics
        self._monotonic = monotonic
        # state -> its series of `nicplug_operations` and `nicplug_transitions_total`
        # (`labels()` takes a lock and builds a key on every call)
        self._in_state: dict[str, Any] = {}
        self._into_state: dict[str, Any] = {}
        # stream -> (direction, network, decision time it opened at), while it is live
        self._opened: dict[str, tuple[str, str, float]] = {}
        self._pending: dict[int, float] = {}  # effect id -> first attempted (monotonic)
        metrics.pending_effects.set_function(lambda: float(len(self._pending)))
        metrics.oldest_pending_effect.set_function(self._oldest_pending)

    def seed(self, views: Iterable[StreamView]) -> None:
        for view in views:
            self._operations(view.state).inc()
            snapshot = view.snapshot
            if not view.terminal:
                self._opened[str(view.stream)] = (
                    str(snapshot.get("direction", "")), str(snapshot.get("network", "")),
                    float(snapshot.get("opened_at", 0.0) or 0.0))

    def forget_effects(self) -> None:
        """The term ended: what it had in flight is the next leader's to re-issue."""
        self._pending.clear()

    def _oldest_pending(self) -> float:
        if not self._pending:
            return 0.0
        return max(0.0, self._monotonic() - min(self._pending.values()))

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
            network, direction = str(p.get("network")), str(p.get("direction"))
            self._opened[str(event.stream)] = (
                direction, network, float(p.get("at", event.logical_time)))
            log.info("vm=%s op=%s opened network=%s direction=%s attempt=%s",
                     event.key, event.stream, network, direction, p.get("attempt"),
                     extra=_fields(event, network=network, state=INITIAL_STATE))
        elif event.type == ROLLOUT_BYPASSED:
            self._metrics.rollout_bypassed.inc()
            log.warning("vm=%s op=%s applied live although vmRolloutStrategy is Stage",
                        event.key, event.stream, extra=_fields(
                            event, network=self._network_of(str(event.stream))))
        elif event.type == TRANSITIONED:
            source, target = str(p.get("from")), str(p.get("to"))
            self._operations(source).dec()
            self._operations(target).inc()
            self._transitions(target).inc()
            stream = str(event.stream)
            opened = self._opened.get(stream)
            if target in TERMINAL:
                self._ended(stream, target, p, event)
            if log.isEnabledFor(logging.INFO if target in OUTCOMES else logging.DEBUG):
                log.log(logging.INFO if target in OUTCOMES else logging.DEBUG,
                        "vm=%s op=%s %s -> %s reason=%s", event.key, event.stream, source,
                        target, p.get("reason") or "-", extra=_fields(
                            event, network=opened[1] if opened else None, state=target))
            if p.get("reason") == "MigrationFailed" and "migrations_failed" in p:
                self._metrics.migrations_failed.inc()
                if p.get("retry_at") is None:
                    self._metrics.migrations_given_up.inc()
                    log.warning("vm=%s op=%s gave up after %s failed migrations: %s",
                                event.key, event.stream, p["migrations_failed"],
                                p.get("message") or "-")

    def _network_of(self, stream: str) -> str | None:
        opened = self._opened.get(stream)
        return opened[1] if opened else None

    def _ended(self, stream: str, outcome: str, payload: Any, event: RecordedEvent) -> None:
        opened = self._opened.pop(stream, None)
        direction = opened[0] if opened else ""
        if outcome == "Failed":
            self._metrics.operation_failures.labels(
                direction, str(payload.get("reason") or "Unknown")).inc()
        if opened is not None and opened[2] > 0:
            ended_at = float(payload.get("at", event.logical_time))
            self._metrics.operation_duration.labels(
                direction, self._metrics.flavour, outcome).observe(max(0.0, ended_at - opened[2]))

    def on_commit(self, key: Key, seconds: float, events: int) -> None:
        if events:
            self._metrics.transition_latency.observe(seconds)

    def on_effect(self, effect: PendingEffect, phase: EffectPhase, error: str | None) -> None:
        if phase in ("started", "retrying"):
            self._pending.setdefault(effect.id, self._monotonic())
        else:  # done: succeeded, failed for good, or superseded (decided again)
            self._pending.pop(effect.id, None)
        if phase in ("failed", "retrying", "superseded"):
            log.warning("vm=%s op=%s effect=%s %s: %s", effect.key, effect.stream, effect.type,
                        phase, error or "-", extra={
                            "vm": str(effect.key), "operation": str(effect.stream),
                            "network": self._network_of(str(effect.stream)),
                            "effect": effect.type})

    def on_rebuild(self, key: Key, reason: str) -> None:
        self._metrics.snapshot_rebuilds.inc()
        log.warning("vm=%s snapshot not trusted, state folded from its events: %s", key, reason,
                    extra={"vm": str(key)})

    def on_error(self, key: Key, error: BaseException) -> None:
        log.error("vm=%s decide/journal failed: %s", key, error, extra={"vm": str(key)})


def _fields(event: RecordedEvent, *, network: str | None = None,
            state: str | None = None) -> dict[str, Any]:
    """The structured fields of an operation's log record."""
    fields: dict[str, Any] = {"vm": str(event.key), "operation": str(event.stream)}
    if network is not None:
        fields["network"] = network
    if state is not None:
        fields["state"] = state
    return fields
