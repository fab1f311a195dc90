"""The order book: how the pod and KVVM writes of one VM are ordered against each other.

The rule, for the pod patches and the KVVM patches of one VM:

1. An older patch of an object is never sent after a newer one of it started.
2. A patch waits for the VM's unfinished patches of the other kind that were decided
   before it or are on the wire; at most `wait_for_earlier` seconds, then decide again.
3. A landed patch of the other kind that moved what this one relies on (an interface
   it attaches no longer requested, an entry it releases attached) means decide again;
   so does any landed patch of the other kind decided after it.
4. A landed patch stays in the book until the informers show it.
5. A patch waits for an earlier patch of the same object on the wire; once that one
   landed, a patch built on the object as it was before it is decided again, unsent.

Why: a decision taken while the other write was in flight read the world as it was
before that write lands. Once they have finished, an interface the KVVM patch would
hold that a landed pod patch no longer requests, or an entry the pod patch would
release that a landed KVVM patch attached, means the world moved (a change reverted
while a write of it was on the wire): decide again, so no interface is attached over a
pod entry being released, nor an entry released under an interface being attached.
A write that landed stays known to the later writes of the other kind until the
informers show its object past the state it was built on: a decision taken from a
world that does not show it yet (the watch behind, re-listing or cut off) is checked
against it as against an unfinished one. And a write older than a landed write of the
other kind on the same VM is never sent (an older attach retried by the outbox after a
newer release gave up waiting for it): the newer one's decision took it as not landed,
so it is decided again. Two checks against the informers' copies back rule 4 for a
decision taken from a world read before they heard of a landed write (`check_let_go`,
`check_requested`). Rule 5 is the same for two writes of one object: a decision taken
while nicplug's own patch of that pod or KVVM was on the wire (one network's MAC
address named, the next one a few milliseconds later) built its patch on the object
without that write, so its preconditions (the annotation or resourceVersion it pins)
fail on the server: a request for a refusal. Waiting for the write on the wire and
comparing what the two were built on (`check_fresh`) refuses it here instead, and the
decision taken again from a world showing the landed write sends one patch that holds.
The book only orders and refuses; what is written is the handlers'.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from nicplug.adapters.core.executor.cluster import Cached, Cluster, Result
from nicplug.adapters.kube import errors as kube_errors
from nicplug.adapters.kube.resources import KindRef
from nicplug.adapters.kube.translate import records
from nicplug.adapters.kube.translate.objects import KVVMObject, MalformedObject, VMIObject, read
from nicplug.adapters.sdn import MalformedAnnotation
from nicplug.engine.errors import OwnWriteUnseen, RetryAfterObservation
from nicplug.engine.journal import PendingEffect
from nicplug.machines.effects import PatchVirtualMachine
from nicplug.machines.facts import FINISHED_PHASES
from nicplug.machines.world import MAIN_IF_NAME


class Write:
    """A pod or KVVM patch started and not finished; once finished, the ifNames it left
    requested on the pod or attached in the KVVM (None: it did not land). `built_on`:
    the object it was built on (kind, namespace, name) and what of it the write pinned
    (the KVVM's resourceVersion; the pod's request annotation, or its resourceVersion
    when it had none): an informer copy that no longer reads so shows the write."""

    def __init__(self, *, pod: bool, target: str = "") -> None:
        self.pod = pod
        self.target = target  # `namespace/name` of the pod or KVVM it patches
        self.done = asyncio.Event()
        self.off_wire = asyncio.Event()  # its last sending ended (finished or to retry)
        self.landed: frozenset[str] | None = None
        self.built_on: tuple[KindRef, str, str, str, object] | None = None
        self.sending = False  # on the wire now (not waiting, nor waiting to be retried)

    def finish(self, landed: frozenset[str] | None) -> None:
        self.landed = landed
        self.done.set()

    def pin(self, kind: KindRef, namespace: str, name: str, obj: Mapping[str, Any],
            annotation: str | None = None) -> None:
        """Note what the write pinned of `obj`, as read (`annotation`: the pod's)."""
        metadata = obj.get("metadata") or {}
        if annotation is not None:
            value = (metadata.get("annotations") or {}).get(annotation)
            if isinstance(value, str):
                self.built_on = (kind, namespace, name, annotation, value)
                return
        self.built_on = (kind, namespace, name, "", metadata.get("resourceVersion"))

    def shown(self, cached: Cached | None) -> bool:
        """Whether the informers show this landed write (or a later state of its object),
        so that a decision taken from them saw it; true without a cache to ask."""
        if cached is None or self.built_on is None:
            return True
        kind, namespace, name, annotation, pinned = self.built_on
        now = cached(kind, namespace, name)
        if now is None:
            return True  # gone (or not listed): nothing of it to decide from
        metadata = now.get("metadata") or {}
        if annotation:
            return (metadata.get("annotations") or {}).get(annotation) != pinned
        return metadata.get("resourceVersion") != pinned


class OrderBook:
    """The pod and KVVM patches of every VM, started and not finished or landed and not
    yet shown by the informers, and the newest patch started on each object."""

    def __init__(self, cluster: Cluster, *, wait_for_earlier: float) -> None:
        self._cluster = cluster
        self._wait_for_earlier = wait_for_earlier
        # (effect type, target) -> the newest effect started on it: see `superseded`.
        self._newest: dict[tuple[str, str], int] = {}
        # VM key -> its pod and KVVM patches started and not finished, or landed and not
        # yet shown by the informers (those also in `_unshown`, in landing order): see
        # `ordered`
        self._writes: dict[str, dict[int, Write]] = {}
        self._unshown: collections.deque[tuple[str, int, Write]] = collections.deque()
        # (VM key, pod?) -> the newest pod or KVVM patch of the VM that landed: an older
        # write of the other kind is not sent after it (`_wait_for_others`)
        self._landed: dict[tuple[str, bool], int] = {}
        # VM key -> uid -> name of the launcher pods nicplug's pod patches landed on: see
        # `check_requested`
        self._written_pods: dict[str, dict[str, str]] = {}

    def start(self, effect: PendingEffect, target: str) -> bool:
        """Note `effect` as the newest patch of `target`; False (and it never lands) when
        a newer one started already."""
        slot = (effect.type, target)
        if self.superseded(effect, target):
            self._abandoned(effect)
            return False
        self._newest[slot] = effect.id
        return True

    def pod_written(self, vm: str, uid: str, name: str) -> None:
        """A pod patch of VM `vm` landed on launcher pod `name` (`uid`)."""
        self._written_pods.setdefault(vm, {})[uid] = name

    def superseded(self, effect: PendingEffect, target: str) -> bool:
        """Whether a newer effect of the same type has started on the same object.

        Pod and KVVM patches write whole lists computed from the world their decision
        saw, and a later decision on the VM (a higher effect id: decisions of one VM
        are serial) saw a newer one. An older patch retried after a backoff, or racing
        a newer one after a restart, would write its stale list over the newer: it
        must not be sent. Checked when it starts and again just before it writes.
        """
        return effect.id < self._newest.get((effect.type, target), 0)

    async def ordered(self, effect: PendingEffect, holds: frozenset[str],
                       write: Callable[[Write], Awaitable[Result]], *, pod: bool,
                       target: str = "") -> Result:
        """Do `write` (a pod patch, `pod`, or a KVVM patch) once the unfinished writes of
        the other kind on the same VM, decided before it or on the wire, have finished
        (`_wait_for_others`); known as
        unfinished to the later ones until it lands or fails for good (a temporary
        failure is retried by the outbox: still unfinished). A write not finished after
        `wait_for_earlier` seconds (its retry later, parked, or given up) is forgotten and
        this one decided again, so no write waits for ever nor holds a request slot
        long. A write that landed stays known to the later ones until the informers show
        it (`Write.shown`): their decisions may not have seen it. `holds`: the ifNames it
        leaves requested (pod) or attached (KVVM). With `target` (the object's
        `namespace/name`), it first waits for an earlier write of that object on the
        wire (`_wait_for_same`), so that `check_fresh` can tell whether it landed."""
        self._forget_shown()
        writes = self._writes.setdefault(str(effect.key), {})
        try:
            await self._wait_for_others(effect, holds, writes, pod=pod)
            if target:
                await self._wait_for_same(effect, target, writes, pod=pod)
        except RetryAfterObservation:
            retried = writes.pop(effect.id, None)  # its last attempt failed for now
            if retried is not None:  # decided again: it never lands
                retried.finish(None)
            raise
        # afresh: the VM's entry goes when its last write ends, maybe while this one waited
        writes = self._writes.setdefault(str(effect.key), {})
        mine: Write | None = writes.setdefault(effect.id, Write(pod=pod, target=target))
        assert mine is not None
        landed: frozenset[str] | None = None
        written = False
        try:
            mine.sending = True
            result = await write(mine)
            if not result.get("superseded"):
                landed = holds
                written = not result.get("unchanged")
                mark = (str(effect.key), pod)
                self._landed[mark] = max(effect.id, self._landed.get(mark, 0))
            return result
        except kube_errors.Temporary:
            mine.sending = False
            mine.off_wire.set()
            mine = None  # retried by the outbox: not finished
            raise
        finally:
            if mine is not None:
                mine.sending = False
                mine.off_wire.set()
                mine.finish(landed)
                if written and not mine.shown(self._cluster.cached):
                    # known to the later writes until the informers show it; the object
                    # now holds what this one wrote, not what an earlier one did
                    for earlier, other in list(writes.items()):
                        if (earlier != effect.id and other.done.is_set()
                                and other.built_on is not None and mine.built_on is not None
                                and other.built_on[:3] == mine.built_on[:3]):
                            del writes[earlier]
                    self._unshown.append((str(effect.key), effect.id, mine))
                else:
                    writes.pop(effect.id, None)
            if not writes:
                self._writes.pop(str(effect.key), None)  # no VM kept once its writes end

    async def _wait_for_others(self, effect: PendingEffect, holds: frozenset[str],
                               writes: dict[int, Write], *, pod: bool) -> None:
        """Wait for the VM's unfinished writes of the other kind: those decided before
        this one, and newer ones on the wire (a newer one waiting for others, or for its
        retry, is not: it waits for this one in turn, so two never wait for each other);
        then refuse this one if a landed write of the other kind (finished, or not yet
        shown by the informers) moved what it relies on."""
        for other_id, other in sorted(writes.items()):
            if other_id == effect.id or other.pod == pod:
                continue
            if other_id > effect.id and not other.sending and not other.done.is_set():
                continue
            when = "decided before" if other_id < effect.id else "started before"
            try:
                await asyncio.wait_for(other.done.wait(), self._wait_for_earlier)
            except TimeoutError:
                # retried later, parked, or given up by the outbox: it may never finish
                # here, and this attempt holds one of the requests in flight meanwhile
                writes.pop(other_id, None)
                raise RetryAfterObservation(
                    f"VM {effect.key}: a {'pod' if not pod else 'KVVM'} patch {when} "
                    f"this one (effect {other_id}) has not finished in "
                    f"{self._wait_for_earlier:g}s") from None
            if other.landed is None:
                continue
            # a KVVM holding what the pods no longer request; pods releasing what it holds
            moved = holds - other.landed if not pod else other.landed - holds
            if moved:
                what = "released" if not pod else "attached"
                # the informers not showing it yet, a decision taken now asks the same
                unseen = other.done.is_set() and not other.shown(self._cluster.cached)
                raise (OwnWriteUnseen if unseen else RetryAfterObservation)(
                    f"VM {effect.key}: a {'pod' if not pod else 'KVVM'} patch {when} "
                    f"this one (effect {other_id}) {what} {sorted(moved)} meanwhile")
        # A newer write of the other kind landed while this one waited for its retry (and
        # was forgotten by that newer one's wait): its decision took this one as not
        # landed, and once the informers show it the order book no longer holds it.
        newer = self._landed.get((str(effect.key), not pod), 0)
        if newer > effect.id:
            raise RetryAfterObservation(
                f"VM {effect.key}: a newer {'KVVM' if pod else 'pod'} patch (effect {newer}) "
                f"landed since this one was decided")

    async def _wait_for_same(self, effect: PendingEffect, target: str,
                             writes: dict[int, Write], *, pod: bool) -> None:
        """Wait until the VM's earlier writes of the same object that are on the wire
        now are off it (landed, refused, or to be retried). At most `wait_for_earlier`
        seconds: then this one goes, and the server's preconditions judge it, as they
        would have without the wait. Only earlier writes on the wire are waited for,
        never a newer one nor one waiting for its retry: two never wait for each other
        (a write on the wire waits for nothing more)."""
        for other_id, other in sorted(writes.items()):
            if other_id >= effect.id or other.pod != pod or other.target != target \
                    or not other.sending:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(other.off_wire.wait(), self._wait_for_earlier)

    def check_fresh(self, effect: PendingEffect, mine: Write) -> None:
        """Refuse `mine` (pinned on the object as read) when another patch of the same
        object landed over that very state and the informers do not show it yet: built
        on the object without that write, its preconditions would fail on the server.
        Decided again, from a world that shows the landed write."""
        for other_id, other in self._writes.get(str(effect.key), {}).items():
            if (other_id != effect.id and other.pod == mine.pod and other.done.is_set()
                    and other.landed is not None and other.built_on is not None
                    and other.built_on == mine.built_on):
                kind = "pod" if mine.pod else "KVVM"
                raise OwnWriteUnseen(
                    f"VM {effect.key}: a {kind} patch of {mine.target or 'the same object'} "
                    f"(effect {other_id}) landed over the state this one was built on")

    def check_requested(self, e: PatchVirtualMachine, vm: str) -> None:
        """A KVVM patch attaches nothing that a launcher pod the VMI runs in, as the
        informers hold it now, no longer requests, when nicplug's pod patches landed on
        that pod (nicplug alone writes a running pod's requests). The order book
        forgets a landed pod patch once the informers show it, but a decision made in
        between (from a world read before they heard of it: the same instant, a watch
        behind) still saw the entry requested and ready, and would attach it as the SDN
        tears it down."""
        written = self._written_pods.get(vm)
        if not written or self._cluster.cached is None:
            return
        for uid in [u for u in written if u not in e.pods]:
            del written[uid]  # a pod the VMI no longer runs in
        holds = attached(e)
        for uid, name in written.items():
            pod = self._cluster.cached(self._cluster.kinds.launcher_pods, e.namespace, name)
            meta = (pod or {}).get("metadata") or {}
            if meta.get("uid") != uid:
                continue
            try:
                dialect = self._cluster.dialect
                requested = dialect.parse_requests(
                    value=(meta.get("annotations") or {}).get(dialect.request_annotation),
                    namespace=e.namespace)
            except MalformedAnnotation:
                continue  # never written over (`_patch_pod`), nor judged here
            released = holds - {r.if_name for r in requested}
            if released:
                raise RetryAfterObservation(
                    f"VM {vm}: launcher pod {name} no longer requests {sorted(released)}, "
                    f"which this KVVM patch attaches")

    def check_let_go(self, vm: str, released: frozenset[str]) -> None:
        """A pod entry leaves only while the VM's KVVM and running VMI, as the informers
        hold them now, neither carry the interface (without `state: absent`) nor report
        it attached: the decision may have read them before a KVVM write attaching it
        showed (its own world older than the write, the informers caught up since)."""
        if self._cluster.cached is None:
            return
        namespace, _, name = vm.partition("/")
        carried: set[str] = set()
        try:
            kvvm = self._cluster.cached(self._cluster.kinds.kvvms, namespace, name)
            if kvvm is not None:
                record, _ = records.kvvm(read(KVVMObject, kvvm, kind="KubeVirt VirtualMachine"),
                                         dialect=self._cluster.dialect, vmi_exists=True)
                carried |= {i.name for i in record.interfaces if not i.absent}
            vmi = self._cluster.cached(self._cluster.kinds.vmis, namespace, name)
            if vmi is not None:
                running = records.vmi(read(VMIObject, vmi, kind="VirtualMachineInstance"))
                if running.phase not in FINISHED_PHASES:
                    carried |= {i.name for i in running.interfaces if not i.absent}
                    carried |= {i.name for i in running.status_interfaces if i.attached}
        except MalformedObject as exc:
            raise RetryAfterObservation(str(exc)) from exc
        kept = released & carried
        if kept:
            raise RetryAfterObservation(
                f"VM {vm}: the KubeVirt VM or VMI carries {sorted(kept)}, whose SDN entries "
                f"this pod patch would release")

    def _forget_shown(self) -> None:
        """Landed writes leave the order book once the informers show them (oldest
        first; one still not shown keeps those behind it a little longer)."""
        while self._unshown:
            key, effect_id, write = self._unshown[0]
            if not write.shown(self._cluster.cached):
                return
            self._unshown.popleft()
            writes = self._writes.get(key)
            if writes is not None and writes.get(effect_id) is write:
                del writes[effect_id]
                if not writes:
                    del self._writes[key]

    def _abandoned(self, effect: PendingEffect) -> None:
        """A write retried after a temporary failure and then superseded never lands:
        the writes waiting for it go on."""
        write = self._writes.get(str(effect.key), {}).pop(effect.id, None)
        if write is not None:
            write.finish(None)


def attached(e: PatchVirtualMachine) -> frozenset[str]:
    """The interfaces a KVVM patch leaves attached that an SDN entry must back."""
    return frozenset(n.if_name for n in e.networks if not n.absent
                     and n.identity not in ("", "Main") and n.if_name != MAIN_IF_NAME)
