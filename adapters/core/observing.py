"""From object changes to observations: index → dirty VMs → assembled worlds → runtime.

`nicplug run` (objects from informers) and `nicplug replay` (objects from a tape) both
feed the runtime through this one path, so a replay decides with exactly the code a
live controller runs. A change is recorded in the `WorldIndex`, every VM it touches is
marked dirty (a burst of changes of one VM coalesces into one observation), and
`feed` hands each dirty VM's assembled `World` to `runtime.observe`, with the VM's desired
networks as first seen (`World.first_seen`). A VM whose objects
are malformed is held still (`runtime.hold`: no observation, and no timer decision from
its last readable world) until they are readable again; the other VMs go on. A
malformed KubeVirt CR concerns every VM, so it holds none: the last readable version
stays in the index (none yet: KubeVirt's defaults) and the problem is reported. It never
decides anything and never talks to a server.

What the objects read as is remembered (`ReadMemo`) while their VM is live in the
runtime; once it comes to rest there (`Rested`: nothing of it is live), that goes too,
and its next change reads its objects again from the index (a fraction of a
millisecond, for what at 10,000 idle VMs was most of the memory).

A live controller gives `feed` a time slice: assembling 10,000 worlds after the
initial lists is seconds of work, and the watches, the journal's acknowledgements and
the Lease renewal share the loop, so `feed` yields to them after each slice. A replay
feeds in one go: its journal must not depend on how the work interleaves.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from nicplug.adapters.core.scope import VMScope
from nicplug.adapters.core.worldview import WorldIndex
from nicplug.adapters.kube.flavour import Flavour
from nicplug.adapters.kube.resources import KindRef
from nicplug.adapters.kube.translate.assemble import ReadMemo, assemble_world
from nicplug.adapters.kube.translate.objects import KubeVirtObject, MalformedObject, read
from nicplug.adapters.sdn import Dialect
from nicplug.engine.listening import RuntimeListener
from nicplug.engine.model import Cause, Key
from nicplug.engine.runtime import Runtime
from nicplug.machines.observed_done import first_seen_of
from nicplug.machines.operation import VMState
from nicplug.machines.world import FirstSeen, World

log = logging.getLogger("nicplug.adapters.controller")


def object_ref(kind: KindRef, obj: Mapping[str, Any]) -> str:
    """`Kind/namespace/name@resourceVersion`: the cause journaled with an observation."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return kind.kind
    where = f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") \
        else str(meta.get("name"))
    return f"{kind.kind}/{where}@{meta.get('resourceVersion')}"


class Observing:
    """The dirty set of VMs between object changes and the runtime.

    `on_hold(vm_key, problem)` is called each time a VM is held still,
    `on_unreadable_pods(vm_key, problem)` each time its world has pods whose SDN
    annotations cannot be read (for metrics).
    """

    def __init__(
        self,
        dialect: Dialect,
        flavour: Flavour,
        *,
        on_hold: Callable[[str, str], None] | None = None,
        on_unreadable_pods: Callable[[str, str], None] | None = None,
        scope: VMScope | None = None,
        time_slice: float | None = None,
        now: Callable[[], float] = time.perf_counter,
    ) -> None:
        """`time_slice`: seconds of `feed`'s work between yields to the event loop
        (None: no yield); `now` is the clock it is measured with."""
        self.dialect = dialect
        self.scope = scope or VMScope()
        self._time_slice = time_slice
        self._now = now
        self.index = WorldIndex(flavour)
        self._kubevirts = flavour.kubevirts
        self._memo = ReadMemo()
        self.wake = asyncio.Event()
        self._dirty: dict[str, str] = {}
        self._held: set[str] = set()
        self._on_hold = on_hold
        self._on_unreadable_pods = on_unreadable_pods
        self._unreadable_pods: dict[str, str] = {}
        self._first_seen: dict[str, tuple[str, FirstSeen]] = {}
        """vm key → (VM uid, its desired networks in the first world assembled of it)."""

    def changed(self, kind: KindRef, event_type: str, obj: dict[str, Any]) -> None:
        """One object changed (ADDED / MODIFIED / DELETED): mark the VMs it touches."""
        kubevirt = kind.name == self._kubevirts.name
        if kubevirt and event_type != "DELETED" and not self._readable(obj):
            return  # the last readable configuration stands for every VM
        if event_type == "DELETED":
            self._memo.forget(obj)
        touched = self.index.apply(kind, event_type, obj)
        if not touched:
            if self.index.any_moved:
                self.wake.set()  # its resourceVersion alone moved: `feed` tells the runtime
            return  # no VM's world changed in what a decision reads
        ref = object_ref(kind, obj)
        # Sorted: a set's order changes with the process's string hashing, and the order
        # VMs are observed in must not (a replay's journal and report are compared).
        for vm_key in sorted(touched) if len(touched) > 1 else touched:
            self.mark(vm_key, ref)

    def presence(self, kind: KindRef, present: bool) -> None:
        """The server serves an optional kind now, or no longer (multus's NADs)."""
        touched = self.index.presence(kind, present)
        for vm_key in sorted(touched):
            self.mark(vm_key, f"{kind.name} {'served' if present else 'not served'}")

    def mark(self, vm_key: str, ref: str) -> None:
        self._dirty[vm_key] = ref
        self.wake.set()

    @property
    def pending(self) -> int:
        return len(self._dirty)

    async def feed(self, runtime: Runtime[VMState, World]) -> int:
        """Observe every dirty VM once, in the order they became dirty; return how many."""
        dirty, self._dirty = self._dirty, {}
        self.wake.clear()
        # VMs whose objects moved in resourceVersion alone: the same worlds for
        # decisions, so none is assembled; what waits for a newer world goes on
        for vm_key in sorted(self.index.moved()):
            if vm_key not in dirty and self.in_scope(vm_key):
                runtime.seen(Key(vm_key))
        fed = 0
        budget = self._time_slice
        began = self._now() if budget is not None else 0.0
        for vm_key, ref in dirty.items():
            if not self.in_scope(vm_key):
                continue  # another controller's VM: never observed, never touched
            world = self.world(vm_key)
            if world is None:
                runtime.hold(Key(vm_key))
            else:
                await runtime.observe(Key(vm_key), world, Cause("observation", ref))
                if _nothing_left(world):
                    runtime.forget(Key(vm_key))  # once its operations have ended
                    self._first_seen.pop(vm_key, None)
                fed += 1
            if budget is not None and self._now() - began >= budget:
                await asyncio.sleep(0)
                began = self._now()
        return fed

    def in_scope(self, vm_key: str) -> bool:
        """Is the VM one nicplug manages? A VM already gone is judged by its namespace
        alone, so that the operations of a managed VM can still end."""
        if self.scope.everything:
            return True
        namespace = vm_key.partition("/")[0]
        vm = self.index.vm_body(vm_key)
        if vm is None and self.dialect.kubevirt_owns_requests:
            # the kubevirt flavour: the user's VM is KubeVirt's own (its labels decide)
            vm = self.index.get(self.index.flavour.kvvms, vm_key)
        if vm is None:
            return not self.scope.namespaces or namespace in self.scope.namespaces
        meta = vm.get("metadata")
        labels = meta.get("labels") if isinstance(meta, dict) else None
        return self.scope.covers(namespace, labels if isinstance(labels, dict) else {})

    def world(self, vm_key: str) -> World | None:
        """The VM's assembled world, or None while it must be held still."""
        world, problem = self._read(vm_key)
        if world is None:
            self._hold(vm_key, problem)
            return None
        if vm_key in self._held:
            self._held.discard(vm_key)
            log.info("vm=%s readable again", vm_key, extra={"vm": vm_key})
        self._report_pods(vm_key, [p.observation_error for p in world.pods if p.observation_error])
        return self._with_first_sight(vm_key, world)

    def _with_first_sight(self, vm_key: str, world: World) -> World:
        """The world with the VM's desired networks as this process first saw them: a
        change the platform finishes before nicplug decides on it shows against them
        (`observed_done.py`), however many observations the runtime folds together."""
        vm = world.vm
        if vm is None:
            return world
        seen = self._first_seen.get(vm_key)
        if seen is None or seen[0] != vm.uid:
            seen = (vm.uid, first_seen_of(vm))
            self._first_seen[vm_key] = seen
        return replace(world, first_seen=seen[1])

    def unreadable_unobserved(self, vm_key: str) -> str | None:
        """Why the VM's objects, as the informers hold them now, cannot be read, when
        they changed since its last observation (which held it, or not, from what it
        read): an effect decided before that change is checked against it the instant
        before it writes, not only once the change is observed. None: readable, or
        judged by the last observation."""
        if vm_key not in self._dirty:
            return None
        world, problem = self._read(vm_key)
        return problem if world is None else None

    def _read(self, vm_key: str) -> tuple[World, str] | tuple[None, str]:
        """The VM's world as the informers hold it, or None and why it cannot be read."""
        try:
            translation = assemble_world(
                self.index.objects_of(vm_key), dialect=self.dialect, memo=self._memo
            )
        except MalformedObject as exc:
            return None, str(exc)
        world = translation.world
        if world.observation_errors:
            return None, "; ".join(world.observation_errors)
        return world, ""

    def rested(self, vm_key: str) -> None:
        """The runtime let the VM go (nothing of it is live): forget what its own objects
        read as. Its next change reads them again; the networks and the KubeVirt CR,
        which other VMs read too, stay remembered."""
        self._memo.drop(self.index.addresses_of(vm_key))

    @property
    def held(self) -> frozenset[str]:
        return frozenset(self._held)

    def _report_pods(self, vm_key: str, problems: list[str]) -> None:
        """The machines never overwrite a pod annotation they cannot read, so an
        operation waits on it: say so (once per distinct problem), or it waits unseen."""
        if not problems:
            if self._unreadable_pods.pop(vm_key, None) is not None:
                log.info("vm=%s pod annotations readable again", vm_key, extra={"vm": vm_key})
            return
        problem = "; ".join(problems)
        if self._on_unreadable_pods is not None:
            self._on_unreadable_pods(vm_key, problem)
        if self._unreadable_pods.get(vm_key) != problem:
            self._unreadable_pods[vm_key] = problem
            log.warning("vm=%s waits on an unreadable pod annotation: %s", vm_key, problem,
                        extra={"vm": vm_key})

    def _readable(self, kubevirt: dict[str, Any]) -> bool:
        """Whether the KubeVirt CR reads; if not, say so (it is not indexed)."""
        try:
            read(KubeVirtObject, kubevirt, kind="KubeVirt")
        except MalformedObject as exc:
            if self._on_hold is not None:
                self._on_hold("cluster", str(exc))
            log.warning("%s unreadable, the last readable configuration stands: %s",
                        object_ref(self._kubevirts, kubevirt), exc)
            return False
        return True

    def _hold(self, vm_key: str, problem: str) -> None:
        if self._on_hold is not None:
            self._on_hold(vm_key, problem)
        if vm_key not in self._held:
            self._held.add(vm_key)
            log.warning("vm=%s held still: %s", vm_key, problem, extra={"vm": vm_key})


class Rested(RuntimeListener):
    """Tells `observing` each VM that came to rest in the runtime (`Runtime(rest=True)`)."""

    def __init__(self, observing: Observing) -> None:
        self._observing = observing

    def on_rest(self, key: Key) -> None:
        self._observing.rested(str(key))


def _nothing_left(world: World) -> bool:
    """Nothing of the VM is in the cluster any more: no VM, KVVM, VMI or launcher pod."""
    return world.vm is None and world.kvvm is None and world.vmi is None and not world.pods
