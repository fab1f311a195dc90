"""Hooks for observability: the runtime reports, listeners count.

Metrics, logs and Kubernetes Events are added by subclassing `RuntimeListener` and
overriding what they need; the runtime never changes for them. A listener must be
quick and must not raise: it runs on the runtime's path (exceptions are swallowed and
logged so that a broken metric never stops a machine).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Literal

from nicplug.engine.errors import JournalError
from nicplug.engine.journal import PendingEffect
from nicplug.engine.model import Key, RecordedEvent

EffectPhase = Literal["started", "succeeded", "retrying", "failed", "superseded"]

log = logging.getLogger("nicplug.engine")


class RuntimeListener:
    """No-op base: override any of the hooks."""

    def on_transition(self, event: RecordedEvent) -> None:
        """An event was committed (with its final position)."""

    def on_commit(self, key: Key, seconds: float, events: int) -> None:
        """A decision of `key` was committed; `seconds` from append to acknowledgement."""

    def on_effect(self, effect: PendingEffect, phase: EffectPhase, error: str | None) -> None:
        """An effect started, succeeded, will be retried, failed for good, or was
        superseded (the world moved; the machine decides again)."""

    def on_rebuild(self, key: Key, reason: str) -> None:
        """The snapshots of `key` could not be trusted (`reason`); its state was folded
        from its events instead."""

    def on_error(self, key: Key, error: BaseException) -> None:
        """Deciding for `key` failed (a bug, or conflicts without end); the input is
        dropped (the next observation of the key decides again)."""

    def on_rest(self, key: Key) -> None:
        """`key` came to rest (nothing of it is live) and left the runtime's memory:
        what was kept only to decide it again may go too."""

    def on_journal(self, error: JournalError | None) -> None:
        """The journal stopped taking writes (`error` says why and names it) or, with
        None, takes them again. Called on each change only, not per input: the inputs
        it refused are decided again by the runtime once it takes writes."""


class Listeners(RuntimeListener):
    """Fans every hook out to several listeners, shielding the runtime from their bugs."""

    def __init__(self, listeners: Sequence[RuntimeListener]) -> None:
        self._listeners = tuple(listeners)

    def on_transition(self, event: RecordedEvent) -> None:
        for listener in self._listeners:
            _shielded(listener.on_transition, event)

    def on_commit(self, key: Key, seconds: float, events: int) -> None:
        for listener in self._listeners:
            _shielded(listener.on_commit, key, seconds, events)

    def on_effect(self, effect: PendingEffect, phase: EffectPhase, error: str | None) -> None:
        for listener in self._listeners:
            _shielded(listener.on_effect, effect, phase, error)

    def on_rebuild(self, key: Key, reason: str) -> None:
        log.warning("key %s: state rebuilt from its events: %s", key, reason)
        for listener in self._listeners:
            _shielded(listener.on_rebuild, key, reason)

    def on_error(self, key: Key, error: BaseException) -> None:
        log.error("key %s: %s", key, error, exc_info=error)
        for listener in self._listeners:
            _shielded(listener.on_error, key, error)

    def on_rest(self, key: Key) -> None:
        for listener in self._listeners:
            _shielded(listener.on_rest, key)

    def on_journal(self, error: JournalError | None) -> None:
        for listener in self._listeners:
            _shielded(listener.on_journal, error)


def _shielded(hook: object, *args: object) -> None:
    try:
        hook(*args)  # type: ignore[operator]
    except Exception:
        log.exception("listener hook %r failed", hook)
