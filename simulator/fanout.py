"""The store's commits fanned out: the watch history, live subscriptions and taps.

The object table (`store.py`) commits one write at a time; each commit becomes a
`Change` published here, in order: kept in the bounded history a watch resumes from
(older ones are compacted away: `Expired`), offered to every live subscription of its
resource (each filtering by namespace and selectors, `watching.py`), and handed to
the taps synchronously, before the write returns. Subscriptions are kept by weak
reference in the order they were made, so watchers hear of a change in the same order
on every run. Nothing here writes an object; the stored dicts it passes on are shared,
read-only, and a watcher's own events are copies (`copies`).
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator, Callable, Iterator

from nicplug.simulator.documents import deep_copy
from nicplug.simulator.errors import BadRequest, Expired
from nicplug.simulator.resources import Resource
from nicplug.simulator.selectors import combine, field_predicate, label_predicate
from nicplug.simulator.watching import Change, History, Subscription, WatchEvent

SLOW_WATCHER_BACKLOG = 100_000
"""Events a watcher over HTTP may fall behind by before it is dropped."""


class Fanout:
    """Where the store's changes go: history, subscriptions, taps."""

    def __init__(self, history: int) -> None:
        self.history = History(history)
        # Weak keys in subscription order (a WeakSet would iterate by address, so the
        # order in which watchers hear of a change would vary from run to run).
        self._watchers: dict[Resource, weakref.WeakKeyDictionary[Subscription, None]] = {}
        self._taps: list[Callable[[Change], None]] = []

    def publish(self, change: Change) -> None:
        """One committed write: remembered, offered to its watchers, tapped."""
        self.history.append(change)
        for subscription in list(self._watchers.get(change.resource, ())):
            subscription.offer(change)
        for tap in self._taps:
            tap(change)

    def resume_point(self, resource_version: str | None) -> int | None:
        """The resourceVersion a watch resumes after (None: from a fresh listing).
        `BadRequest` when it is not a number, `Expired` when the history no longer
        reaches back to it."""
        if resource_version in (None, "", "0"):
            return None
        try:
            since = int(str(resource_version))
        except ValueError as e:
            raise BadRequest(f"invalid resourceVersion {resource_version!r}") from e
        if since < self.history.compacted_rv:
            raise Expired(f"too old resource version: {since} ({self.history.compacted_rv})")
        return since

    def subscribe(
        self,
        res: Resource,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        limit: int | None,
    ) -> Subscription:
        """A live subscription to `res`'s changes from now on (`BadRequest` for a
        malformed selector)."""
        predicate = combine(
            label_predicate(label_selector), field_predicate(field_selector, res.kind)
        )
        subscription = Subscription(namespace if res.namespaced else None, predicate, limit)
        self._watchers.setdefault(res, weakref.WeakKeyDictionary())[subscription] = None
        return subscription

    def replay(self, subscription: Subscription, since: int, res: Resource) -> None:
        """Queue on `subscription` the changes of `res` after `since` still in history."""
        for change in self.history.since(since, res):
            subscription.offer(change)

    def tap(self, observer: Callable[[Change], None]) -> None:
        self._taps.append(observer)

    def subscriptions(self) -> Iterator[tuple[Resource, int]]:
        for res, subs in self._watchers.items():
            yield res, len(subs)


async def copies(subscription: Subscription) -> AsyncIterator[WatchEvent]:
    """The subscription's events, each object the watcher's own copy; closes it when
    the watcher stops."""
    try:
        while True:
            try:
                event = await subscription.next()
            except StopAsyncIteration:
                return
            if event is not None:
                yield WatchEvent(event[0], deep_copy(event[1]))
    finally:
        subscription.close()
