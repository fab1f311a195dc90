"""Watch plumbing of the store: the change record, the bounded history and subscriptions.

A `Change` is one committed write. The store keeps the last N of them (the history a
watch resumes from) and offers each to the live subscriptions of its resource. A
subscription filters by namespace and selectors the way the API server's watch cache
does: an object that starts matching arrives as ADDED, one that stops matching as
DELETED. Nothing here writes objects; stored dicts are shared, read-only.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from nicplug.simulator.resources import Resource

EventType = Literal["ADDED", "MODIFIED", "DELETED"]
Predicate = Callable[[dict[str, Any]], bool]


@dataclass(frozen=True)
class WatchEvent:
    """One event as a watcher sees it; `object` is the watcher's own copy."""

    type: EventType
    object: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Change:
    """One committed write. `obj` and `prev` are the store's shared, read-only dicts."""

    rv: int
    resource: Resource
    type: EventType
    obj: dict[str, Any]
    prev: dict[str, Any] | None


def with_resource_version(obj: dict[str, Any], rv: int) -> dict[str, Any]:
    """A shallow variant of `obj` whose metadata carries `rv` (the original is untouched)."""
    return {**obj, "metadata": {**obj.get("metadata", {}), "resourceVersion": str(rv)}}


class Subscription:
    """A queue of (type, shared object) for one watcher of one resource.

    `limit` bounds the backlog of a slow HTTP watcher: past it the subscription is
    closed, as a real API server closes a watcher that cannot keep up. In-process
    subscribers pass no limit and are never dropped.
    """

    def __init__(
        self, namespace: str | None, predicate: Predicate | None, limit: int | None
    ) -> None:
        self.namespace = namespace
        self.predicate = predicate
        self.limit = limit
        self.pending: deque[tuple[EventType, dict[str, Any]]] = deque()
        self.closed = False
        self.initial = 0  # how many of the queued events are the initial state (a list)
        self.listed_rv = ""  # the resourceVersion that initial state is as of
        self._nudged = False
        self._wake = asyncio.Event()

    def _matches(self, obj: dict[str, Any] | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        return self.predicate is None or self.predicate(obj)

    def translate(self, change: Change) -> tuple[EventType, dict[str, Any]] | None:
        """What this watcher sees of `change`, or None when it sees nothing."""
        now = self._matches(change.obj)
        if change.type != "MODIFIED":
            return (change.type, change.obj) if now else None
        before = self._matches(change.prev)
        if now and before:
            return ("MODIFIED", change.obj)
        if now:
            return ("ADDED", change.obj)
        if before and change.prev is not None:
            return ("DELETED", with_resource_version(change.prev, change.rv))
        return None

    def push(self, event: tuple[EventType, dict[str, Any]]) -> None:
        if self.closed:
            return
        if self.limit is not None and len(self.pending) >= self.limit:
            self.close()
            return
        self.pending.append(event)
        self._wake.set()

    def offer(self, change: Change) -> None:
        event = self.translate(change)
        if event is not None:
            self.push(event)

    def nudge(self) -> None:
        """Make a waiting `next` return None now (something outside changed)."""
        self._nudged = True
        self._wake.set()

    def close(self) -> None:
        self.closed = True
        self._wake.set()

    async def next(
        self, patience: float | None = None
    ) -> tuple[EventType, dict[str, Any]] | None:
        """The next event; None when `patience` seconds pass with nothing pending.

        Also None after a `nudge`. Raises `StopAsyncIteration` once the subscription is
        closed and drained. When
        it returns None, every write up to the store's current resourceVersion has been
        offered, so a bookmark at that version is truthful.
        """
        while not self.pending:
            if self.closed:
                raise StopAsyncIteration
            if self._nudged:
                self._nudged = False
                return None
            self._wake.clear()
            if patience is None:
                await self._wake.wait()
            else:
                try:
                    await asyncio.wait_for(self._wake.wait(), patience)
                except TimeoutError:
                    if not self.pending and not self.closed:
                        return None
        return self.pending.popleft()


class History:
    """The last `size` changes, oldest first, and the newest version already forgotten."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.changes: deque[Change] = deque()
        self.compacted_rv = 0

    def append(self, change: Change) -> None:
        self.changes.append(change)
        while len(self.changes) > self.size:
            self.compacted_rv = self.changes.popleft().rv

    def since(self, rv: int, resource: Resource) -> list[Change]:
        """Changes of `resource` newer than `rv`, oldest first."""
        newer: list[Change] = []
        for change in reversed(self.changes):
            if change.rv <= rv:
                break
            if change.resource == resource:
                newer.append(change)
        newer.reverse()
        return newer
