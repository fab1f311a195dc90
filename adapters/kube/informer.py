"""List-then-watch of one kind, kept in an in-memory cache of raw JSON objects.

The informer lists the kind (paged), then watches from the list's resourceVersion with
bookmarks, and keeps going for as long as it runs:

* a watch that ends normally (the server's `timeoutSeconds`) is resumed from the last
  resourceVersion seen, bookmarks included;
* `410 Gone` / `Expired` — as an HTTP status or as an ERROR event inside the stream —
  means the version left the server's history: the informer lists again and reports
  the difference as ADDED / MODIFIED / DELETED, so its consumer converges.
  (kubernetes_asyncio's own Watch retries a 410 once, with the same stale version; it
  is not used for that reason, and because it builds models nicplug does not need.)
* no event nor bookmark for `inactivity` seconds: the watch is abandoned and resumed;
* a kind marked `optional` (a NetworkAttachmentDefinition: multus may not be
  installed; an IPAddress: the SDN may have no IPAM) whose list answers 404 is
  absent: the informer says so once
  (`on_presence(kind, False)`), counts as synced, and lists again at the longest
  backoff; a list that succeeds says `on_presence(kind, True)`;
* other failures back off exponentially (the sleep is injected), honouring
  `Retry-After`; a watch that delivered nothing before ending backs off too, so a
  server that keeps closing streams cannot drive a hot loop.

It never interprets objects beyond their metadata: a malformed object is counted,
logged and skipped, never fatal. Consumers get `on_change(kind, event_type, obj)`
synchronously (they must not block) and the `synced` event after the first list.

The cache holds each object as its JSON encoding (after the transform; `encoded.py`),
decoded again on `get`. A consumer that keeps the objects itself (the controller's
world index) asks for `keep_objects=False`: then the cache holds only what a re-list
compares (each object's resourceVersion, under its key), and an object deleted while no
watch ran is handed on as what that tells: its apiVersion, kind, name, namespace and
resourceVersion.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from kubernetes_asyncio.client.api.core_v1_api import CoreV1Api
from kubernetes_asyncio.client.api.custom_objects_api import CustomObjectsApi

from nicplug.adapters.kube.client import ApiConnection
from nicplug.adapters.kube.encoded import decode, encode
from nicplug.adapters.kube.errors import Expired, KubeError, NotFound, Temporary, translate
from nicplug.adapters.kube.resources import KindRef, object_key
from nicplug.adapters.kube.wire import JsonObject, failure, fetch_object, send
from nicplug.engine.backoff import Backoff

log = logging.getLogger(__name__)

EMIT_SLICE = 256
"""Objects taken in (projected) or changes handed on between yields to the event loop
while a list is applied: each takes tens of microseconds, so a slice stays within a
few milliseconds."""

Sleep = Callable[[float], Awaitable[None]]
Clock = Callable[[], float]
ChangeHandler = Callable[[KindRef, str, JsonObject], None]


@dataclass(frozen=True, slots=True)
class WatchSettings:
    timeout_seconds: int = 300  # asked of the server; it then ends the stream normally
    inactivity: float = 150.0  # watchdog: no event nor bookmark for this long → re-watch
    page_size: int = 500
    backoff_initial: float = 0.5
    backoff_max: float = 30.0

    def __post_init__(self) -> None:
        if self.timeout_seconds < 1 or self.inactivity <= 0 or self.page_size < 1:
            raise ValueError("watch settings must be positive")
        if not 0 < self.backoff_initial <= self.backoff_max:
            raise ValueError("backoff_initial must be positive and at most backoff_max")


@dataclass(frozen=True, slots=True)
class WatchProgress:
    """One event or bookmark received: `gap` is the silence (seconds) before it."""

    event_type: str
    resource_version: str
    gap: float


@dataclass(slots=True)
class InformerStats:
    lists: int = 0
    watches: int = 0
    events: int = 0
    bookmarks: int = 0
    expired: int = 0
    stalls: int = 0
    errors: int = 0
    malformed: int = 0


class Stalled(Exception):
    """The watch stayed silent longer than the inactivity limit."""


class Informer:
    """The cache of one kind in one scope, kept current by list-then-watch."""

    def __init__(
        self,
        connection: ApiConnection,
        kind: KindRef,
        *,
        namespace: str | None = None,
        on_change: ChangeHandler | None = None,
        on_progress: Callable[[KindRef, WatchProgress], None] | None = None,
        settings: WatchSettings = WatchSettings(),
        sleep: Sleep = asyncio.sleep,
        clock: Clock = time.monotonic,
        transform: Callable[[JsonObject], JsonObject] | None = None,
        keep_objects: bool = True,
        on_presence: Callable[[KindRef, bool], None] | None = None,
        known: Mapping[str, bytes] | None = None,
    ) -> None:
        """`transform` is applied to each object as it arrives, before it is cached or
        handed on: a projection keeps only what the consumer reads. `on_presence` hears
        whether the server serves the kind, after each first list and each change.
        `known`: the objects (key → encoded) the consumer holds of the kind already, from
        informers before this one (a replica's earlier term): the first list reports
        those it no longer finds as DELETED, as every later re-list does, instead of
        leaving them to the consumer for ever."""
        self.kind = kind
        self._transform = transform
        self._keep_objects = keep_objects
        self.namespace = namespace if kind.namespaced else None
        self.settings = settings
        self.stats = InformerStats()
        self.synced = asyncio.Event()
        self.resource_version: str | None = None
        self._connection = connection
        self._cache: dict[str, bytes] = {  # key → the object encoded, or its version
            key: obj if keep_objects else _held_version(decode(obj))
            for key, obj in (known or {}).items()}
        self._on_change = on_change
        self._on_progress = on_progress
        self._on_presence = on_presence
        self.absent: bool | None = None  # None: not listed yet
        self._sleep = sleep
        self._clock = clock
        self._delivered = False
        self._backoff = Backoff(base=settings.backoff_initial, cap=settings.backoff_max)
        self._failures = 0  # rounds in a row that delivered nothing
        self._core = CoreV1Api(connection.client)
        self._custom = CustomObjectsApi(connection.client)

    # -- the cache ---------------------------------------------------------------------

    def get(self, key: str) -> JsonObject | None:
        """The object as last seen (a new dict on every call: change it freely)."""
        encoded = self._cache.get(key)
        return None if encoded is None else self._held(key, encoded)

    def keys(self) -> Iterator[str]:
        return iter(self._cache)

    def __len__(self) -> int:
        return len(self._cache)

    # -- the loop ----------------------------------------------------------------------

    async def run(self) -> None:
        """List, then watch, forever (until cancelled)."""
        while True:
            self._delivered = False
            try:
                if self.resource_version is None:
                    await self._relist()
                await self._watch()
            except Expired as exc:
                self.stats.expired += 1
                log.info("%s: resourceVersion expired (%s); listing again", self.kind.name, exc)
                self.resource_version = None
            except Stalled:
                self.stats.stalls += 1
                log.warning("%s: watch silent for %.1fs; watching again",
                            self.kind.name, self.settings.inactivity)
            except KubeError as exc:
                if isinstance(exc, NotFound) and self.kind.optional:
                    self._absent(exc)
                    await self._sleep(self.settings.backoff_max)
                    continue
                self.stats.errors += 1
                log.warning("%s: %s", self.kind.name, exc)
                # Retry-After is honoured, but never below the backoff: a server that
                # keeps answering "retry after 0" must not drive a hot loop.
                hint = exc.delay if isinstance(exc, Temporary) else None
                await self._sleep(max(self._next_backoff(), hint or 0.0))
                continue
            if self._delivered:
                self._failures = 0
            else:
                await self._sleep(self._next_backoff())

    def _absent(self, exc: NotFound) -> None:
        """The server does not serve the optional kind: said once, not an error."""
        self.resource_version = None
        if self.absent is not True:
            log.warning("%s: not served by this cluster (%s); what it would tell is unknown "
                     "until it is", self.kind.name, exc)
            self._presence(absent=True)
        self.synced.set()

    def _presence(self, *, absent: bool) -> None:
        self.absent = absent
        if self._on_presence is not None:
            self._on_presence(self.kind, not absent)

    def _next_backoff(self) -> float:
        """The engine's schedule, doubling from `backoff_initial` to `backoff_max`, no
        jitter; a round that delivers something starts it over."""
        self._failures += 1
        return self._backoff.delay(self._failures)

    # -- list --------------------------------------------------------------------------

    async def _relist(self) -> None:
        listed: dict[str, bytes] = {}  # whole (transformed), to hand on
        fresh: dict[str, bytes] = {}  # as the cache keeps them
        token: str | None = None
        while True:
            page = await fetch_object(self._list_call(
                limit=self.settings.page_size, _continue=token,
                _request_timeout=self._connection.request_timeout,
            ))
            self.stats.lists += 1
            for number, item in enumerate(page.get("items") or (), 1):
                key = self._key_of(item)
                if key is not None:
                    obj = self._with_kind(item)
                    listed[key] = encode(obj)
                    fresh[key] = listed[key] if self._keep_objects else _held_version(obj)
                if number % EMIT_SLICE == 0:
                    await asyncio.sleep(0)  # a server may ignore `limit`: one huge page
            metadata = page.get("metadata") or {}
            token = metadata.get("continue") or None
            if token is None:
                version = metadata.get("resourceVersion")
                break
        if not isinstance(version, str) or not version:
            raise KubeError(f"{self.kind.name}: the list carries no resourceVersion")
        previous, self._cache = self._cache, fresh
        self.resource_version = version
        emitted = 0
        for key, encoded in previous.items():
            if key not in fresh:
                self._emit("DELETED", self._held(key, encoded))
                emitted += 1
        for key, encoded in listed.items():
            old, obj = previous.get(key), decode(encoded)
            if old is None:
                self._emit("ADDED", obj)
            elif _version_of(self._held(key, old)) != _version_of(obj):
                self._emit("MODIFIED", obj)
            else:
                continue
            emitted += 1
            if emitted % EMIT_SLICE == 0:
                await asyncio.sleep(0)  # a list of 10,000 objects must not stall the loop
        if self.absent is not False:
            if self.absent:
                log.info("%s: served by this cluster now", self.kind.name)
            self._presence(absent=False)
        self.synced.set()

    def _list_call(self, **kwargs: Any) -> Awaitable[Any]:
        kind, ns = self.kind, self.namespace
        kwargs.update(_preload_content=False, label_selector=kind.label_selector)
        if kind.core:
            if kind.plural == "namespaces":
                return self._core.list_namespace(**kwargs)
            if kind.plural != "pods":
                raise ValueError(f"core kind {kind.plural} is not watched")
            if ns is None:
                return self._core.list_pod_for_all_namespaces(**kwargs)
            return self._core.list_namespaced_pod(ns, **kwargs)
        if ns is not None:
            return self._custom.list_namespaced_custom_object(
                kind.group, kind.version, ns, kind.plural, **kwargs)
        return self._custom.list_cluster_custom_object(
            kind.group, kind.version, kind.plural, **kwargs)

    # -- watch -------------------------------------------------------------------------

    async def _watch(self) -> None:
        """One watch request, read to its end (or to an error)."""
        try:
            # A server that accepts the watch but never answers is as stuck as a silent
            # stream: the same watchdog bounds the wait for the response headers.
            async with asyncio.timeout(self.settings.inactivity):
                response = await send(self._list_call(
                    watch=True, allow_watch_bookmarks=True,
                    resource_version=self.resource_version,
                    timeout_seconds=self.settings.timeout_seconds,
                    _request_timeout=self._connection.watch_timeout(None),
                ))
        except TimeoutError as exc:
            raise Stalled() from exc
        self.stats.watches += 1
        last = self._clock()
        try:
            while True:
                try:
                    async with asyncio.timeout(self.settings.inactivity):
                        line = await response.content.readline()
                except TimeoutError as exc:
                    raise Stalled() from exc
                except Exception as exc:
                    raise translate(exc) from exc
                if not line:
                    return
                if not line.strip():
                    continue
                now = self._clock()
                self._apply(line, gap=now - last)
                last, self._delivered = now, True
        finally:
            response.close()

    def _apply(self, line: bytes, *, gap: float) -> None:
        try:
            event = orjson.loads(line)
            event_type, obj = event["type"], event["object"]
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            self.stats.malformed += 1
            log.warning("%s: malformed watch line skipped: %s", self.kind.name, exc)
            return
        if event_type == "ERROR":
            status = obj if isinstance(obj, dict) else {}
            raise failure(int(status.get("code") or 0), str(status.get("reason") or ""),
                          status, None)
        version = _version_of(obj)
        if version:
            self.resource_version = version
        if self._on_progress is not None and version:
            self._on_progress(self.kind, WatchProgress(event_type, version, gap))
        if event_type == "BOOKMARK":
            self.stats.bookmarks += 1
            return
        key = self._key_of(obj)
        if key is None:
            return
        self.stats.events += 1
        obj = self._with_kind(obj)
        if event_type == "DELETED":
            self._cache.pop(key, None)
        elif event_type in ("ADDED", "MODIFIED"):
            self._cache[key] = encode(obj) if self._keep_objects else _held_version(obj)
        else:
            self.stats.malformed += 1
            log.warning("%s: unknown watch event type %r skipped", self.kind.name, event_type)
            return
        self._emit(event_type, obj)

    # -- objects -----------------------------------------------------------------------

    def _key_of(self, obj: Any) -> str | None:
        try:
            return object_key(obj)
        except (ValueError, AttributeError) as exc:
            self.stats.malformed += 1
            log.warning("%s: malformed object skipped: %s", self.kind.name, exc)
            return None

    def _held(self, key: str, held: bytes) -> JsonObject:
        """The object `key` as the cache holds it: whole, or (`keep_objects=False`) what
        its key and version tell of it."""
        if self._keep_objects:
            return decode(held)
        namespace, _, name = key.rpartition("/") if self.kind.namespaced else ("", "", key)
        metadata = {"name": name, **({"namespace": namespace} if namespace else {}),
                    **({"resourceVersion": held.decode()} if held else {})}
        return {"apiVersion": self.kind.api_version, "kind": self.kind.kind,
                "metadata": metadata}

    def _with_kind(self, obj: JsonObject) -> JsonObject:
        """Lists omit apiVersion/kind on items; put them back so consumers can tell.
        Then the transform, if any."""
        obj.setdefault("apiVersion", self.kind.api_version)
        obj.setdefault("kind", self.kind.kind)
        return obj if self._transform is None else self._transform(obj)

    def _emit(self, event_type: str, obj: JsonObject) -> None:
        if self._on_change is None:
            return
        try:
            self._on_change(self.kind, event_type, obj)
        except Exception:
            log.exception("%s: change handler failed on %s", self.kind.name, event_type)


async def all_synced(informers: Sequence[Informer]) -> None:
    """Return once every informer has listed. One coroutine awaits each in turn, not a
    gather of one task per informer: cancelled, it ends cancelled, where a gather
    cancelled ends with its children's `CancelledError` as an exception that nobody
    reads once its waiter has gone, and asyncio says so at the teardown."""
    for informer in informers:
        await informer.synced.wait()


def _held_version(obj: JsonObject) -> bytes:
    """What a re-list compares of an object (its key tells the rest): its
    resourceVersion, empty when it has none (~40 bytes where the envelope took ~170)."""
    version = _version_of(obj)
    return version.encode() if version is not None else b""


def _version_of(obj: Any) -> str | None:
    if not isinstance(obj, dict):
        return None
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return None
    version = metadata.get("resourceVersion")
    return version if isinstance(version, str) and version else None
