"""The simulated cluster's object store: what etcd plus the API server's registry would be.

Objects are plain JSON dicts, one table per `Resource`, under one global
resourceVersion counter. Every write replaces the stored dict with a new one (stored
dicts are never mutated), so the history and watchers can share them; every dict handed
out through the public methods is a deep copy, and every dict taken in is copied first.
The `*_shared` methods hand out the stored dicts themselves for the HTTP layer to
serialise without copying; their callers must not mutate them.

Semantics follow the API server: uid / creationTimestamp / generation, the status
subresource split, resourceVersion preconditions (Conflict), AlreadyExists, no-op writes
that change nothing and emit nothing, finalizers delaying deletion, a bounded watch
history (Expired). Methods are synchronous (one event loop) except iteration of watches.
It never does I/O and never knows about faults: those belong to the HTTP layer.

This module is the object table: reads, lists and pages, and each write committed under
the next resourceVersion. What an update or a patch leaves is `writes.py`'s, the
documents taken in and handed out are checked and copied by `documents.py`, and each
commit is handed to `fanout.py` (the watch history, live subscriptions, taps).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from nicplug.simulator.documents import (
    Obj,
    deep_copy,
    key_of,
    ordered,
    owned,
    read_token,
    table_key,
    timestamp,
    valid_name,
    write_token,
)
from nicplug.simulator.errors import (
    AlreadyExists,
    BadRequest,
    Conflict,
    Expired,
    Invalid,
    NotFound,
)
from nicplug.simulator.fanout import SLOW_WATCHER_BACKLOG, Fanout, copies
from nicplug.simulator.resources import NAMESPACES, Resource
from nicplug.simulator.selectors import combine, field_predicate, label_predicate
from nicplug.simulator.watching import Change, EventType, Subscription, WatchEvent
from nicplug.simulator.writes import patched, replaced

__all__ = ["Store", "WatchEvent"]


class Store:
    """In-memory objects per resource, a global resourceVersion and a watch history."""

    def __init__(
        self, *, history: int = 10_000, clock: Callable[[], float] = time.time,
        uids: Callable[[], uuid.UUID] = uuid.uuid4,
    ) -> None:
        """`clock` stamps creation and deletion times; `uids` draws uids and generated
        name suffixes (a seeded source makes a run repeatable)."""
        self.resource_version = 0
        self._clock = clock
        self._uids = uids
        self._objects: dict[Resource, dict[tuple[str, str], Obj]] = {}
        self.fanout = Fanout(history)

    # ------------------------------------------------------------------ reading

    def now(self) -> float:
        """The time on the clock that stamps objects (tables print ages from it)."""
        return self._clock()

    def _table(self, res: Resource) -> dict[tuple[str, str], Obj]:
        return self._objects.setdefault(res, {})

    def _stored(self, res: Resource, namespace: str | None, name: str) -> Obj:
        if res.namespaced and not namespace:
            raise BadRequest(f"{res.key} are namespaced: a namespace is required")
        found = self._table(res).get(table_key(namespace if res.namespaced else None, name))
        if found is None:
            raise NotFound(
                f'{res.key} "{name}" not found',
                details={"name": name, "group": res.group, "kind": res.plural},
            )
        return found

    def get(self, res: Resource, namespace: str | None, name: str) -> Obj:
        return deep_copy(self._stored(res, namespace, name))

    def peek(self, res: Resource, namespace: str | None, name: str) -> Obj | None:
        """The stored dict itself (read-only), or None: for observers that only look."""
        return self._table(res).get(table_key(namespace if res.namespaced else None, name))

    def list_shared(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[Obj], str]:
        """Like `list`, but the stored dicts themselves (read-only), for serialising."""
        predicate = combine(
            label_predicate(label_selector), field_predicate(field_selector, res.kind)
        )
        table = self._table(res)
        items = []
        for key in sorted(table):
            if namespace and res.namespaced and key[0] != namespace:
                continue
            obj = table[key]
            if predicate is None or predicate(obj):
                items.append(obj)
        return items, str(self.resource_version)

    def page(
        self,
        res: Resource,
        namespace: str | None,
        *,
        limit: int,
        token: str | None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[Obj], str, str | None, int]:
        """One page of a chunked list: (items, resourceVersion, continue token or None,
        remaining item count). The token carries the list's resourceVersion and the last
        key served; one whose resourceVersion has left the history is `Expired` (410),
        as the real server answers a continue token older than etcd's compaction. Pages
        after the first come from the current state after that key."""
        items, rv = self.list_shared(
            res, namespace, label_selector=label_selector, field_selector=field_selector)
        after: tuple[str, str] | None = None
        if token:
            since, after = read_token(token)
            if since < self.fanout.history.compacted_rv:
                raise Expired(
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter.")
            rv = str(since)
            items = [o for o in items if key_of(o) > after]
        page, rest = items[:limit], items[limit:]
        if not rest:
            return page, rv, None, 0
        return page, rv, write_token(int(rv), key_of(page[-1])), len(rest)

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[Obj], str]:
        items, rv = self.list_shared(
            res, namespace, label_selector=label_selector, field_selector=field_selector
        )
        return deep_copy(items), rv

    def __len__(self) -> int:
        return sum(len(t) for t in self._objects.values())

    # ------------------------------------------------------------------ writing

    def _commit(self, res: Resource, kind: EventType, new: Obj, prev: Obj | None) -> Obj:
        """Stamp `new` (a dict owned by the store) with the next version and publish it."""
        self.resource_version += 1
        rv = self.resource_version
        new["metadata"]["resourceVersion"] = str(rv)
        meta = new["metadata"]
        key = table_key(meta.get("namespace"), meta["name"])
        if kind == "DELETED":
            self._table(res).pop(key, None)
        else:
            self._table(res)[key] = new
        self.fanout.publish(Change(rv, res, kind, new, prev))
        return new

    def create(self, res: Resource, obj: Obj, *, drop_status: bool = False) -> Obj:
        """Create `obj`. `drop_status` discards `.status`, as the HTTP endpoint does for
        kinds with a status subresource; in-process callers may set an initial status."""
        body = owned(res, obj)
        meta = body["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{self._uids().hex[:5]}"
        name = meta.get("name")
        if not valid_name(res, name):
            raise Invalid(f"metadata.name {name!r} is not a valid name")
        if res.namespaced and not meta.get("namespace"):
            raise Invalid(f"metadata.namespace is required for {res.key}")
        if table_key(meta.get("namespace"), name) in self._table(res):
            raise AlreadyExists(
                f'{res.key} "{name}" already exists',
                details={"name": name, "group": res.group, "kind": res.plural},
            )
        if drop_status and res.has_status:
            body.pop("status", None)
        if res == NAMESPACES:
            body.setdefault("status", {"phase": "Active"})
        for field in ("resourceVersion", "deletionTimestamp", "managedFields"):
            meta.pop(field, None)
        meta["uid"] = str(self._uids())
        meta["creationTimestamp"] = timestamp(self._clock())
        meta["generation"] = 1
        return deep_copy(self._commit(res, "ADDED", ordered(res, body), None))

    def _replace(
        self, res: Resource, current: Obj, body: Obj, subresource: str | None
    ) -> Obj:
        """Write `body` over `current` with update semantics; returns the stored dict."""
        new = replaced(res, current, body, subresource)
        if new == current:
            return current
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            return self._commit(res, "DELETED", new, current)
        return self._commit(res, "MODIFIED", new, current)

    def update(self, res: Resource, obj: Obj, *, subresource: str | None = None) -> Obj:
        body = owned(res, obj)
        meta = body["metadata"]
        if not isinstance(meta.get("name"), str):
            raise Invalid("metadata.name is required for an update")
        current = self._stored(res, meta.get("namespace"), meta["name"])
        return deep_copy(self._replace(res, current, body, subresource))

    def patch(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        patch: Any,
        *,
        content_type: str,
        subresource: str | None = None,
    ) -> Obj:
        current = self._stored(res, namespace, name)
        result = patched(res, current, patch, content_type)
        body = owned(res, result)
        return deep_copy(self._replace(res, current, body, subresource))

    def delete(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> Obj:
        """Delete now, or mark for deletion while finalizers remain (preconditions: uid,
        resourceVersion → Conflict)."""
        current = self._stored(res, namespace, name)
        meta = current["metadata"]
        if (uid and uid != meta["uid"]) or (
            resource_version and resource_version != meta["resourceVersion"]
        ):
            raise Conflict(f'precondition failed for {res.key} "{name}"')
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return deep_copy(current)
            marked = {
                **current,
                "metadata": {**meta, "deletionTimestamp": timestamp(self._clock())},
            }
            return deep_copy(self._commit(res, "MODIFIED", marked, current))
        gone = {**current, "metadata": dict(meta)}
        return deep_copy(self._commit(res, "DELETED", gone, current))

    # ----------------------------------------------------------------- watching

    def watch_shared(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Subscription:
        """A registered subscription, already holding the events to replay.

        Raises `Expired` now (not on iteration) when `resource_version` is older than
        the history; `BadRequest` when it is not a number or a selector is malformed.
        The queued objects are the stored dicts (read-only), for serialising.
        """
        since = self.fanout.resume_point(resource_version)
        subscription = self.fanout.subscribe(
            res, namespace, label_selector, field_selector, SLOW_WATCHER_BACKLOG
        )
        if since is None:
            items, _ = self.list_shared(
                res,
                namespace,
                label_selector=label_selector,
                field_selector=field_selector,
            )
            for obj in items:
                subscription.push(("ADDED", obj))
            subscription.initial = len(items)
            subscription.listed_rv = str(self.resource_version)
        else:
            self.fanout.replay(subscription, since, res)
        return subscription

    def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Events of `res` from `resource_version` on (see `watch_shared`); registered at
        call time, so no write between the call and the first iteration is missed."""
        subscription = self.watch_shared(
            res,
            namespace,
            resource_version=resource_version,
            label_selector=label_selector,
            field_selector=field_selector,
        )
        return copies(subscription)

    def subscribe(self, res: Resource) -> AsyncIterator[WatchEvent]:
        """Live events of `res` only, for in-process actors; never dropped or faulted."""
        return copies(self.fanout.subscribe(res, None, None, None, None))

    def tap(self, observer: Callable[[Change], None]) -> None:
        """Call `observer(change)` synchronously at every commit, before the write
        returns (benchmarks timestamp writes with it). It must not write or raise."""
        self.fanout.tap(observer)

    def subscriptions(self) -> Iterator[tuple[Resource, int]]:
        """How many live subscriptions each resource has (for tests and reports)."""
        return self.fanout.subscriptions()
