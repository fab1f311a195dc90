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
"""

from __future__ import annotations

import base64
import gc
import re
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import orjson

from nicplug.simulator import patching
from nicplug.simulator.errors import (
    AlreadyExists,
    BadRequest,
    Conflict,
    Expired,
    Invalid,
    NotFound,
    UnsupportedMediaType,
)
from nicplug.simulator.resources import NAMESPACES, Resource
from nicplug.simulator.selectors import combine, field_predicate, label_predicate
from nicplug.simulator.watching import (
    Change,
    EventType,
    History,
    Subscription,
    WatchEvent,
)

__all__ = ["Store", "WatchEvent"]

_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
# RBAC objects take any name that is a valid path segment (`ValidatePathSegmentName`)
_PATH_SEGMENT_RE = re.compile(r"^(?!\.\.?$)[^/%]+$")
_PATH_SEGMENT_GROUPS = frozenset({"rbac.authorization.k8s.io"})
_BUILT_IN_GROUPS = frozenset({"", "coordination.k8s.io"})
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
_SLOW_WATCHER_BACKLOG = 100_000

Obj = dict[str, Any]
_T = TypeVar("_T")


def deep_copy(obj: _T) -> _T:
    """A deep copy of a JSON document: an orjson round trip (several times faster than
    `copy.deepcopy`), with the cyclic garbage collector paused, since a JSON tree holds
    no cycles and a full collection triggered mid-copy would walk every stored object."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return cast(_T, orjson.loads(orjson.dumps(obj)))
    except TypeError as e:
        raise BadRequest(f"the object is not plain JSON: {e}") from e
    finally:
        if collecting:
            gc.enable()


def _timestamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _key_of(obj: Obj) -> tuple[str, str]:
    meta = obj["metadata"]
    return _key(meta.get("namespace"), meta["name"])


def _write_token(rv: int, key: tuple[str, str]) -> str:
    raw = orjson.dumps({"rv": rv, "start": list(key)})
    return base64.urlsafe_b64encode(raw).decode()


def _read_token(token: str) -> tuple[int, tuple[str, str]]:
    try:
        data = orjson.loads(base64.urlsafe_b64decode(token.encode()))
        return int(data["rv"]), (str(data["start"][0]), str(data["start"][1]))
    except (ValueError, TypeError, KeyError, IndexError, orjson.JSONDecodeError) as e:
        raise BadRequest(f"invalid continue token {token!r}") from e


def _key(namespace: str | None, name: str) -> tuple[str, str]:
    return (namespace or "", name)


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
        self._history = History(history)
        # Weak keys in subscription order (a WeakSet would iterate by address, so the
        # order in which watchers hear of a change would vary from run to run).
        self._watchers: dict[Resource, weakref.WeakKeyDictionary[Subscription, None]] = {}
        self._taps: list[Callable[[Change], None]] = []

    # ------------------------------------------------------------------ reading

    def now(self) -> float:
        """The time on the clock that stamps objects (tables print ages from it)."""
        return self._clock()

    def _table(self, res: Resource) -> dict[tuple[str, str], Obj]:
        return self._objects.setdefault(res, {})

    def _stored(self, res: Resource, namespace: str | None, name: str) -> Obj:
        if res.namespaced and not namespace:
            raise BadRequest(f"{res.key} are namespaced: a namespace is required")
        found = self._table(res).get(_key(namespace if res.namespaced else None, name))
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
        return self._table(res).get(_key(namespace if res.namespaced else None, name))

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
            since, after = _read_token(token)
            if since < self._history.compacted_rv:
                raise Expired(
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter.")
            rv = str(since)
            items = [o for o in items if _key_of(o) > after]
        page, rest = items[:limit], items[limit:]
        if not rest:
            return page, rv, None, 0
        return page, rv, _write_token(int(rv), _key_of(page[-1])), len(rest)

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
        key = _key(meta.get("namespace"), meta["name"])
        if kind == "DELETED":
            self._table(res).pop(key, None)
        else:
            self._table(res)[key] = new
        change = Change(rv, res, kind, new, prev)
        self._history.append(change)
        for subscription in list(self._watchers.get(res, ())):
            subscription.offer(change)
        for tap in self._taps:
            tap(change)
        return new

    def _owned(self, res: Resource, obj: Any) -> Obj:
        """A private copy of a client's object, checked for shape and kind."""
        if not isinstance(obj, dict):
            raise BadRequest(f"a {res.kind} must be a JSON object")
        body: Obj = deep_copy(obj)
        meta = body.get("metadata")
        if meta is None:
            meta = body["metadata"] = {}
        if not isinstance(meta, dict):
            raise BadRequest("metadata must be a JSON object")
        if body.get("kind", res.kind) != res.kind:
            raise BadRequest(f"the body is a {body['kind']}, expected a {res.kind}")
        if body.get("apiVersion", res.api_version) != res.api_version:
            raise BadRequest(f"the body is {body['apiVersion']}, expected {res.api_version}")
        for field in ("labels", "annotations"):
            value = meta.get(field)
            if value is not None and not (
                isinstance(value, dict)
                and all(isinstance(v, str) for v in value.values())
            ):
                raise Invalid(f"metadata.{field} must map strings to strings")
        if not res.namespaced:
            meta.pop("namespace", None)
        return body

    def _ordered(self, res: Resource, body: Obj) -> Obj:
        """apiVersion, kind and metadata first, as the real server prints them."""
        head = {"apiVersion": res.api_version, "kind": res.kind, "metadata": body["metadata"]}
        return head | {k: v for k, v in body.items() if k not in head}

    def create(self, res: Resource, obj: Obj, *, drop_status: bool = False) -> Obj:
        """Create `obj`. `drop_status` discards `.status`, as the HTTP endpoint does for
        kinds with a status subresource; in-process callers may set an initial status."""
        body = self._owned(res, obj)
        meta = body["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{self._uids().hex[:5]}"
        name = meta.get("name")
        valid = _PATH_SEGMENT_RE if res.group in _PATH_SEGMENT_GROUPS else _NAME_RE
        if not isinstance(name, str) or not valid.match(name) or len(name) > 253:
            raise Invalid(f"metadata.name {name!r} is not a valid name")
        if res.namespaced and not meta.get("namespace"):
            raise Invalid(f"metadata.namespace is required for {res.key}")
        if _key(meta.get("namespace"), name) in self._table(res):
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
        meta["creationTimestamp"] = _timestamp(self._clock())
        meta["generation"] = 1
        return deep_copy(self._commit(res, "ADDED", self._ordered(res, body), None))

    def _spec_of(self, res: Resource, obj: Obj) -> Obj:
        """What bumps `generation`: everything but metadata (and status, when it is a
        subresource)."""
        skip = ("metadata", "status") if res.has_status else ("metadata",)
        return {k: v for k, v in obj.items() if k not in skip}

    def _replace(
        self, res: Resource, current: Obj, body: Obj, subresource: str | None
    ) -> Obj:
        """Write `body` over `current` with update semantics; returns the stored dict."""
        if subresource not in (None, "status"):
            raise NotFound(f"{res.key} has no subresource {subresource!r}")
        if subresource == "status" and not res.has_status:
            raise NotFound(f"{res.key} has no status subresource")
        meta, old_meta = body["metadata"], current["metadata"]
        if meta.get("name", old_meta["name"]) != old_meta["name"]:
            raise BadRequest("metadata.name does not match the object being written")
        if res.namespaced and meta.get("namespace", old_meta["namespace"]) != old_meta[
            "namespace"
        ]:
            raise BadRequest("metadata.namespace does not match the object being written")
        wanted_uid = meta.get("uid")
        if wanted_uid and wanted_uid != old_meta["uid"]:
            raise Conflict(
                f'Precondition failed for {res.key} "{old_meta["name"]}": UID in '
                f"precondition: {wanted_uid}, UID in object meta: {old_meta['uid']}"
            )
        wanted_rv = meta.get("resourceVersion")
        if wanted_rv and str(wanted_rv) != old_meta["resourceVersion"]:
            raise Conflict(
                f'Operation cannot be fulfilled on {res.key} "{old_meta["name"]}": the object '
                "has been modified; please apply your changes to the latest version and try "
                "again",
                details={"name": old_meta["name"], "group": res.group, "kind": res.plural},
            )
        if subresource == "status":
            new = {k: v for k, v in current.items() if k != "status"}
            if body.get("status") is not None:
                new["status"] = body["status"]
            new["metadata"] = dict(old_meta)
        else:
            new = self._ordered(res, body)
            if res.has_status:
                new.pop("status", None)
                if "status" in current:
                    new["status"] = current["status"]
            kept = ("uid", "creationTimestamp", "generation", "deletionTimestamp", "namespace")
            new_meta = {"name": old_meta["name"]}
            new_meta.update({k: old_meta[k] for k in kept if k in old_meta})
            new_meta.update(
                {k: v for k, v in meta.items() if k not in new_meta and k not in kept}
            )
            new["metadata"] = new_meta
            if self._spec_of(res, new) != self._spec_of(res, current):
                new_meta["generation"] = old_meta.get("generation", 1) + 1
        new["metadata"]["resourceVersion"] = old_meta["resourceVersion"]
        if new == current:
            return current
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            return self._commit(res, "DELETED", new, current)
        return self._commit(res, "MODIFIED", new, current)

    def update(self, res: Resource, obj: Obj, *, subresource: str | None = None) -> Obj:
        body = self._owned(res, obj)
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
        media = content_type.split(";", 1)[0].strip().lower()
        if media == MERGE_PATCH:
            if not isinstance(patch, dict):
                raise BadRequest("a merge patch must be a JSON object")
            result = patching.merge_patch(current, patch)
        elif media == JSON_PATCH:
            result = patching.json_patch(current, patch)
        elif media == STRATEGIC_PATCH:
            if res.group not in _BUILT_IN_GROUPS:
                raise UnsupportedMediaType(
                    f"the body of the request was in an unknown format - accepted media "
                    f"types for {res.key} are {MERGE_PATCH} and {JSON_PATCH}"
                )
            if not isinstance(patch, dict):
                raise BadRequest("a strategic merge patch must be a JSON object")
            result = patching.strategic_merge_patch(current, patch)
        else:
            raise UnsupportedMediaType(f"unsupported patch type {content_type!r}")
        if not isinstance(result, dict):
            raise Invalid("the patched object is not a JSON object")
        body = self._owned(res, result)
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
                "metadata": {**meta, "deletionTimestamp": _timestamp(self._clock())},
            }
            return deep_copy(self._commit(res, "MODIFIED", marked, current))
        gone = {**current, "metadata": dict(meta)}
        return deep_copy(self._commit(res, "DELETED", gone, current))

    # ----------------------------------------------------------------- watching

    def _subscribe(
        self,
        res: Resource,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        limit: int | None,
    ) -> Subscription:
        predicate = combine(
            label_predicate(label_selector), field_predicate(field_selector, res.kind)
        )
        subscription = Subscription(namespace if res.namespaced else None, predicate, limit)
        self._watchers.setdefault(res, weakref.WeakKeyDictionary())[subscription] = None
        return subscription

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
        since: int | None = None
        if resource_version not in (None, "", "0"):
            try:
                since = int(str(resource_version))
            except ValueError as e:
                raise BadRequest(f"invalid resourceVersion {resource_version!r}") from e
            if since < self._history.compacted_rv:
                raise Expired(
                    f"too old resource version: {since} ({self._history.compacted_rv})"
                )
        subscription = self._subscribe(
            res, namespace, label_selector, field_selector, _SLOW_WATCHER_BACKLOG
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
            for change in self._history.since(since, res):
                subscription.offer(change)
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
        return _copies(subscription)

    def subscribe(self, res: Resource) -> AsyncIterator[WatchEvent]:
        """Live events of `res` only, for in-process actors; never dropped or faulted."""
        return _copies(self._subscribe(res, None, None, None, None))

    def tap(self, observer: Callable[[Change], None]) -> None:
        """Call `observer(change)` synchronously at every commit, before the write
        returns (benchmarks timestamp writes with it). It must not write or raise."""
        self._taps.append(observer)

    def subscriptions(self) -> Iterator[tuple[Resource, int]]:
        """How many live subscriptions each resource has (for tests and reports)."""
        for res, subs in self._watchers.items():
            yield res, len(subs)


async def _copies(subscription: Subscription) -> AsyncIterator[WatchEvent]:
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

