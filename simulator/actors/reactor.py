"""The loop every simulated component runs: watch, group by VM, reconcile, repeat.

An actor names the resources it watches and how an object maps to the VM it belongs to;
the reactor keeps an index of object names per VM, collapses bursts of events into one
reconcile per VM, re-runs a VM's reconcile when a simulated delay elapses, and retries a
reconcile that lost a write race (409) by reading the world again. Reconciles are
synchronous (the store is), so one VM's reconcile never interleaves with another's.

It must never swallow a bug silently: an unexpected exception is logged and kept in
`errors`, which the cluster exposes to tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Hashable
from typing import Any, ClassVar

from nicplug.simulator.clock import SimClock
from nicplug.simulator.errors import ApiError, Conflict, NotFound
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.networking import VM_NAME_LABEL, Json
from nicplug.simulator.resources import (
    IP_ADDRESSES,
    OPERATIONS,
    PODS,
    VMIMS,
    VMMACS,
    VMOPS,
    Resource,
)
from nicplug.simulator.store import Store
from nicplug.simulator.watching import WatchEvent

log = logging.getLogger(__name__)

VMKey = tuple[str, str]  # (namespace, VM name): KVVM, VMI, pods and migrations share it
MERGE = "application/merge-patch+json"
_CONFLICT_RETRIES = 20


def vm_key(res: Resource, obj: Json) -> VMKey | None:
    """The VM an object belongs to: by name, by label (pods) or by `spec.vmiName`."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    if res == PODS:
        name = (meta.get("labels") or {}).get(VM_NAME_LABEL)
    elif res == VMIMS:
        name = (obj.get("spec") or {}).get("vmiName")
    elif res == VMOPS:
        name = (obj.get("spec") or {}).get("virtualMachineName")
    elif res in (VMMACS, IP_ADDRESSES, OPERATIONS):  # owned by its VM (made so)
        owners = meta.get("ownerReferences") or []
        name = next((o.get("name") for o in owners if o.get("kind") == "VirtualMachine"), None)
        if name is None and res == IP_ADDRESSES:
            name = meta.get("name")  # a user's static address: a key of its own
    else:
        name = meta.get("name")
    return (namespace, name) if isinstance(name, str) and name else None


class Reactor(ABC):
    """Base of the actors; a subclass sets `watches` and implements `reconcile`."""

    watches: ClassVar[tuple[Resource, ...]] = ()
    indexed: ClassVar[tuple[Resource, ...]] = (PODS,)  # kinds with many objects per VM

    def __init__(self, store: Store, knobs: Knobs, clock: SimClock) -> None:
        self.store = store
        self.knobs = knobs
        self.clock = clock
        self.errors: list[str] = []
        self._queue: asyncio.Queue[tuple[Resource, WatchEvent] | VMKey] = asyncio.Queue()
        self._dirty: dict[VMKey, None] = {}
        self._names: dict[tuple[Resource, VMKey], set[str]] = {}
        self._first_seen: dict[Hashable, float] = {}
        self._wakeups: dict[tuple[VMKey, float], asyncio.Task[None]] = {}
        self._busy = False

    # ------------------------------------------------------------- the loop

    @property
    def idle(self) -> bool:
        """Nothing queued, nothing dirty, no reconcile running."""
        return not self._busy and not self._dirty and self._queue.empty()

    async def run(self) -> None:
        # subscribe before listing (the store registers at call time): no write is missed
        streams = [(res, self.store.subscribe(res)) for res in self.watches]
        pumps = [asyncio.create_task(self._pump(res, stream)) for res, stream in streams]
        try:
            for res in self.watches:
                items, _ = self.store.list_shared(res)  # read-only: only names are kept
                for obj in items:
                    self._note(res, WatchEvent("ADDED", obj))
            while True:
                await self._drain()
                item = await self._queue.get()
                self._take(item)
        finally:
            for task in (*pumps, *self._wakeups.values()):
                task.cancel()

    async def _pump(self, res: Resource, stream: AsyncIterator[WatchEvent]) -> None:
        async for event in stream:
            self._queue.put_nowait((res, event))

    def _take(self, item: tuple[Resource, WatchEvent] | VMKey) -> None:
        if isinstance(item[1], WatchEvent):
            res, event = item
            assert isinstance(res, Resource)
            self._note(res, event)
        else:
            self._dirty[(str(item[0]), str(item[1]))] = None

    def _note(self, res: Resource, event: WatchEvent) -> None:
        key = vm_key(res, event.object)
        if key is None:
            return
        if res in self.indexed:
            names = self._names.setdefault((res, key), set())
            name = event.object["metadata"]["name"]
            if event.type == "DELETED":
                names.discard(name)
            else:
                names.add(name)
        if event.type == "DELETED":
            uid = event.object["metadata"].get("uid")
            self._first_seen = {
                t: at for t, at in self._first_seen.items()
                if not (isinstance(t, tuple) and t and t[0] == uid)
            }
        self._dirty[key] = None

    async def _drain(self) -> None:
        while not self._queue.empty():
            self._take(self._queue.get_nowait())
        while self._dirty:
            self._busy = True
            try:
                key = next(iter(self._dirty))
                del self._dirty[key]
                self._reconcile_safely(key)
            finally:
                self._busy = False
            await asyncio.sleep(0)
            while not self._queue.empty():
                self._take(self._queue.get_nowait())

    def _reconcile_safely(self, key: VMKey) -> None:
        for _ in range(_CONFLICT_RETRIES):
            try:
                self.reconcile(key)
                return
            except (Conflict, NotFound):
                continue  # someone wrote first, or an object went away: read again
            except ApiError as e:
                self._fail(key, f"{type(e).__name__}: {e.message}")
                return
            except Exception as e:
                self._fail(key, f"{type(e).__name__}: {e}")
                log.exception("%s failed on %s/%s", type(self).__name__, *key)
                return
        self._fail(key, f"gave up after {_CONFLICT_RETRIES} conflicting writes")

    def _fail(self, key: VMKey, message: str) -> None:
        self.errors.append(f"{type(self).__name__} {key[0]}/{key[1]}: {message}")

    @abstractmethod
    def reconcile(self, key: VMKey) -> None:
        """Bring what this component owns for the VM in line with the world; synchronous."""

    # ------------------------------------------------------------- time

    def due(self, token: Hashable, delay: float, key: VMKey) -> bool:
        """Has `delay` passed since `token` was first asked about? If not, wake `key`
        then. Tokens are tuples whose first item is the uid of the object they concern,
        so they are forgotten with it; `forget` one once its action is done."""
        if delay <= 0:
            return True
        now = self.clock.now()
        first = self._first_seen.setdefault(token, now)
        if now >= first + delay:
            return True
        self._wake(key, first + delay)
        return False

    def forget(self, token: Hashable) -> None:
        self._first_seen.pop(token, None)

    def _wake(self, key: VMKey, at: float) -> None:
        if (key, at) in self._wakeups:
            return

        async def later() -> None:
            try:
                await self.clock.sleep(at - self.clock.now())
                self._queue.put_nowait(key)
            finally:
                self._wakeups.pop((key, at), None)

        self._wakeups[(key, at)] = asyncio.create_task(later())

    # ------------------------------------------------------------- the store

    def find(self, res: Resource, namespace: str, name: str) -> Json | None:
        try:
            return self.store.get(res, namespace, name)
        except NotFound:
            return None

    def members(self, res: Resource, key: VMKey) -> list[Json]:
        """The objects of an indexed kind that belong to the VM, by name."""
        found = [self.find(res, key[0], n) for n in sorted(self._names.get((res, key), ()))]
        return [o for o in found if o is not None]

    def edit(
        self,
        res: Resource,
        obj: Json,
        change: Callable[[Json], Any],
        *,
        status: bool = False,
    ) -> Json:
        """Apply `change` (which mutates its argument) to `obj` and write it with a
        resourceVersion precondition, unless nothing changed. A 409 propagates, and the
        reconcile starts over from a fresh read."""
        before = repr(obj)
        change(obj)
        if repr(obj) == before:
            return obj
        return self.store.update(res, obj, subresource="status" if status else None)

    def merge_patch(self, res: Resource, obj: Json, patch: Json) -> Json:
        meta = obj["metadata"]
        return self.store.patch(res, meta.get("namespace"), meta["name"], patch,
                                content_type=MERGE)

    def delete(self, res: Resource, obj: Json) -> None:
        meta = obj["metadata"]
        with contextlib.suppress(NotFound):
            self.store.delete(res, meta.get("namespace"), meta["name"], uid=meta.get("uid"))

