"""Operations as Kubernetes objects: the journal projected to `NetworkInterfaceOperation`s.

The journal stays the truth; each object is written from it, never the other way round,
and never read back by a decision. A projection task of the leader's term, not an
effect: the machines know nothing of it, the outbox carries nothing for it, and a write
that fails costs no decision (docs/decisions/operation-objects.md says why).

* Woken by the runtime's commits (`on_transition`, a hint only), it reads the journal
  after the global position it has projected up to (`read_all`), takes the streams
  whose events change what an object shows (`PROJECTED`: opened, moved, named, told
  to wait), waits `batch` seconds so that steps close together are one write, and
  writes each from the journal's record of it: created once, then merge-patched.
* At the start of each term (`reconcile`), it lists the objects and rewrites those
  whose stream moved since (the version annotation), creates the missing and deletes
  those whose operation the journal no longer holds whole (retention archived it), so
  a crash or a lost write loses nothing for longer than a term's start. The controller
  runs `reconcile` again after each retention run.
* A failed write is logged and left for the next step or the next reconcile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from nicplug.adapters.kube.calls import MERGE_PATCH, KubeCalls
from nicplug.adapters.kube.errors import AlreadyExists, KubeError, NotFound
from nicplug.adapters.kube.resources import OPERATIONS
from nicplug.adapters.kube.wire import JsonObject
from nicplug.adapters.queries.operation_object import (
    PROJECTED,
    operation_object,
    stream_of,
    written_version,
)
from nicplug.engine.clock import Clock
from nicplug.engine.errors import JournalError
from nicplug.engine.inspection import JournalInspection
from nicplug.engine.journal import Journal
from nicplug.engine.listening import RuntimeListener
from nicplug.engine.model import RecordedEvent, StreamId

log = logging.getLogger("nicplug.adapters.operation_objects")  # the name log pipelines filter on

BATCH = 1.0
"""Seconds a woken projection waits before writing: the steps of one hotplug that
follow each other within it are one write."""
_READ_LIMIT = 1000


class ProjectedJournal(Journal, JournalInspection, Protocol):
    """What the projection reads: the journal port and its read side (either backend)."""


class OperationObjects(RuntimeListener):
    """The projection of one term: `run` it as a task, hand it to the runtime as a
    listener so that commits wake it."""

    def __init__(
        self, calls: KubeCalls, journal: ProjectedJournal, clock: Clock, *,
        namespace: str | None = None, batch: float = BATCH,
        on_write: Callable[[str], None] | None = None,
    ) -> None:
        self._calls = calls
        self._journal = journal
        self._clock = clock
        self._namespace = namespace
        self._batch = batch
        self._on_write = on_write or (lambda _verb: None)
        self._wake = asyncio.Event()
        self._position = 0
        self._names: dict[str, tuple[str, str]] = {}  # stream -> (namespace, name) written
        self._writing = asyncio.Lock()  # a reconcile (after retention) and the tail

    def on_transition(self, event: RecordedEvent) -> None:
        if event.type in PROJECTED:
            self._wake.set()

    async def run(self) -> None:
        """Reconcile, then follow the journal until cancelled. Nothing here ends the
        term: a failure is logged and the objects catch up at the next step."""
        self._position = (await self._journal.census()).last_position
        await self._shielded(self.reconcile)
        while True:
            await self._wake.wait()
            if self._batch > 0:
                await self._clock.sleep_until(self._clock.now() + self._batch)
            self._wake.clear()
            await self._shielded(self.catch_up)

    @staticmethod
    async def _shielded(work: Callable[[], Awaitable[object]]) -> None:
        try:
            await work()
        except JournalError as error:
            log.error("operation objects: the journal cannot be read: %s", error)
        except Exception:  # a projection's bug must not end the leader's term
            log.exception("operation objects: projecting failed; tried again at the next step")

    async def catch_up(self) -> int:
        """Write the object of every stream that moved since the last position; how many."""
        async with self._writing:
            return await self._catch_up()

    async def _catch_up(self) -> int:
        streams: dict[str, None] = {}
        while True:
            events = await self._journal.read_all(after=self._position, limit=_READ_LIMIT)
            for event in events:
                if event.type in PROJECTED:
                    streams[str(event.stream)] = None
            if events:
                self._position = events[-1].position
            if len(events) < _READ_LIMIT:
                break
        for stream in streams:
            await self._write(stream)
        return len(streams)

    async def reconcile(self) -> None:
        """Make the objects what the journal says: rewrite the stale, create the
        missing, delete those of operations the journal holds no longer."""
        async with self._writing:
            await self._reconcile()

    async def _reconcile(self) -> None:
        try:
            listed = await self._calls.list_objects(OPERATIONS, self._namespace)
        except KubeError as error:
            log.error("operation objects: cannot list them (%s); tried again at the next "
                      "reconcile", error)
            return
        self._on_write("list")
        found = {stream_of(o): o for o in listed if stream_of(o)}
        views = {str(v.view.stream): v for v in await self._journal.views()
                 if v.archived is None}
        for stream, obj in found.items():
            meta = obj.get("metadata", {})
            self._names[stream] = (str(meta.get("namespace", "")), str(meta.get("name", "")))
            view = views.get(stream)
            if view is None:
                await self._delete(stream)
            elif written_version(obj) != view.version:
                await self._write(stream)
        for stream in sorted(views.keys() - found.keys()):  # (a set: its order is the hash seed's)
            await self._write(stream)

    async def _write(self, stream: str) -> None:
        record = await self._journal.stream_record(StreamId(stream))
        body = operation_object(record, now=self._clock.now()) if record is not None else None
        if body is None:
            return
        meta = body["metadata"]
        if self._namespace is not None and meta["namespace"] != self._namespace:
            return
        try:
            if stream in self._names:
                await self._patch(stream, body)
            else:
                await self._create(stream, body)
        except KubeError as error:
            log.warning("operation objects: %s/%s not written (%s); written again at its "
                        "next step or the next reconcile", meta["namespace"], meta["name"],
                        error)

    async def _create(self, stream: str, body: JsonObject) -> None:
        meta = body["metadata"]
        try:
            await self._calls.create_object(OPERATIONS, body)
            self._on_write("create")
        except AlreadyExists:
            self._names[stream] = (meta["namespace"], meta["name"])
            await self._patch(stream, body)
            return
        self._names[stream] = (meta["namespace"], meta["name"])

    async def _patch(self, stream: str, body: JsonObject) -> None:
        namespace, name = self._names[stream]
        patch = {k: body[k] for k in ("metadata", "spec", "status")}
        try:
            await self._calls.patch(OPERATIONS, namespace, name, patch,
                                    content_type=MERGE_PATCH)
            self._on_write("patch")
        except NotFound:  # deleted meanwhile: by its VM's garbage collection, or by hand
            del self._names[stream]
            if not body["status"]["terminal"]:  # a finished one stays gone until a reconcile
                await self._create(stream, body)

    async def _delete(self, stream: str) -> None:
        found = self._names.pop(stream, None)
        if found is None:
            return
        namespace, name = found
        try:
            await self._calls.delete(OPERATIONS, namespace, name)
            self._on_write("delete")
        except NotFound:
            pass
        except KubeError as error:
            log.warning("operation objects: %s/%s not deleted (%s)", namespace, name, error)

