"""The effect executor: turns the machines' effects (data) into Kubernetes requests.

Every effect is idempotent: patches carry whole desired lists, a migration has a name
of the machine's choosing (creating it twice finds it; KubeVirt refusing it because the
VMI migrates already is "decide again"), a restart is a compare-and-swap
on the VMI's uid. A patch also carries what its decision read (the pod's requests, the
KVVM template and its resourceVersion, the launcher pods whose SDN was ready): each
attempt checks that against the object as the informers hold it now (`Cached`; read
fresh from the server only when no cache is given or the object is not in it), and a
world that moved since is `RetryAfterObservation` — decide again — however long the
effect waited or retried. The write itself pins what was read (JSON-patch `test` ops
on the pod's uid and request annotation, on the KVVM's resourceVersion; a status merge
patch carries the VM's resourceVersion), so a cache behind the server makes the
server refuse the write (422 / 409): nothing is written, and the VM is decided again
from the next world. No GET precedes a write.

HTTP errors become the engine's: a conflict is `RetryAfterObservation`, 429/5xx and
timeouts `TemporaryError` (with `Retry-After`), rejections `PermanentError`. This module
decides nothing about *what* to do; it only does what an effect says.

A KVVM patch waits for the pod patches of its VM decided before it that have not
finished (one on the wire, or one the outbox retries), and a pod patch for the KVVM
patches: a decision taken while the other write was in flight read the world as it
was before that write lands. Once they have finished, an interface the KVVM patch would
hold that a landed pod patch no longer requests, or an entry the pod patch would
release that a landed KVVM patch attached, means the world moved (a change reverted
while a write of it was on the wire): decide again, so no interface is attached over a
pod entry being released, nor an entry released under an interface being attached.
A write that landed stays known to the later writes of the other kind until the
informers show its object past the state it was built on: a decision taken from a
world that does not show it yet (the watch behind, re-listing or cut off) is checked
against it as against an unfinished one.
And a write older than a landed write of the other kind on the same VM is never sent
(an older attach retried by the outbox after a newer release gave up waiting for it):
the newer one's decision took it as not landed, so it is decided again.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import logging
import time
import zlib
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any, Final

from nicplug.adapters.core.observability import Metrics
from nicplug.adapters.kube import errors as kube_errors
from nicplug.adapters.kube.calls import EventNote, KubeCalls, pointer
from nicplug.adapters.kube.events import EventRecorder
from nicplug.adapters.kube.flavour import Flavour
from nicplug.adapters.kube.resources import (
    MANAGED_BY_LABEL,
    OPERATION_ANNOTATION,
    VMOP_VMI_UID_ANNOTATION,
    WORKLOAD_UPDATE_ANNOTATION,
    KindRef,
)
from nicplug.adapters.kube.translate import records
from nicplug.adapters.kube.translate.objects import (
    KVVMObject,
    MalformedObject,
    VirtualMachineObject,
    VMIObject,
    read,
)
from nicplug.adapters.sdn import Dialect, MalformedAnnotation, WritingDialect
from nicplug.engine.errors import (
    EffectUndecodable,
    PermanentError,
    RetryAfterObservation,
    TemporaryError,
)
from nicplug.engine.journal import PendingEffect
from nicplug.machines.effects import (
    CreateMigration,
    EmitEvent,
    PatchPodNetworks,
    PatchVirtualMachine,
    RemoveVMCondition,
    RestartVM,
    SetVMCondition,
    effect_from_payload,
)
from nicplug.machines.facts import FINISHED_PHASES
from nicplug.machines.world import MAIN_IF_NAME, RESTART_ANNOTATION, RUNNING, SDNRequest

log = logging.getLogger("nicplug.adapters.executor")  # the name log pipelines filter on

JSON_PATCH: Final = "application/json-patch+json"
CONDITION_WRITE_ATTEMPTS: Final = 3
"""Reads and writes of a VM's conditions before a 409 goes back to the decider."""
IN_FLIGHT_MIGRATION: Final = "in-flight migration detected"
"""How KubeVirt's migration-create webhook refuses a migration of a VMI that migrates."""
Result = Mapping[str, Any]
Cached = Callable[[KindRef, str, str], Mapping[str, Any] | None]
"""The informers' copy of an object (kind, namespace, name), or None if they hold none.
It must keep whole every part a write is built from: see `worldview.WRITTEN_FROM`."""
Reader = Callable[[KindRef, str, str], Awaitable[Mapping[str, Any]]]
"""How a VM is read for a condition write: from the cache, or from the server."""


class _Write:
    """A pod or KVVM patch started and not finished; once finished, the ifNames it left
    requested on the pod or attached in the KVVM (None: it did not land). `built_on`:
    the object it was built on (kind, namespace, name) and what of it the write pinned
    (the KVVM's resourceVersion; the pod's request annotation, or its resourceVersion
    when it had none): an informer copy that no longer reads so shows the write."""

    def __init__(self, *, pod: bool) -> None:
        self.pod = pod
        self.done = asyncio.Event()
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


class KubeExecutor:
    """Executes effects against the API server through `KubeCalls`."""

    def __init__(
        self,
        calls: KubeCalls,
        dialect: Dialect,
        *,
        flavour: Flavour,
        metrics: Metrics | None = None,
        now: Callable[[], datetime.datetime] | None = None,
        max_migrations: int = 5,
        cached: Cached | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wait_for_earlier: float = 30.0,
        reporting_instance: str = "",
    ) -> None:
        self._calls = calls
        self._wait_for_earlier = wait_for_earlier
        self._cached = cached
        self._events = EventRecorder(calls, monotonic=monotonic, instance=reporting_instance)
        self._max_migrations = max_migrations
        self._migrating = asyncio.Lock()
        self._dialect = dialect
        # where nicplug writes pods and KVVMs (deckhouse); None where KubeVirt does
        self._writer = dialect if isinstance(dialect, WritingDialect) else None
        self._kinds = flavour
        # whose status carries nicplug's conditions and whom its Events are about: the
        # VM the user edits (Deckhouse's; in the kubevirt flavour KubeVirt's own, which
        # gets Events only: KubeVirt removes conditions it did not set, `targets.py`)
        self._vm_kind = flavour.kvvms if dialect.kubevirt_owns_requests else (
            flavour.virtual_machines)
        self._metrics = metrics
        self._now = now or (lambda: datetime.datetime.now(datetime.UTC))
        # (effect type, target) -> the newest effect started on it: see `_superseded`.
        self._newest: dict[tuple[str, str], int] = {}
        # VM key -> its pod and KVVM patches started and not finished, or landed and not
        # yet shown by the informers (those also in `_unshown`, in landing order): see
        # `_ordered`
        self._writes: dict[str, dict[int, _Write]] = {}
        self._unshown: collections.deque[tuple[str, int, _Write]] = collections.deque()
        # (VM key, pod?) -> the newest pod or KVVM patch of the VM that landed: an older
        # write of the other kind is not sent after it (`_wait_for_others`)
        self._landed: dict[tuple[str, bool], int] = {}
        # VM key -> uid -> name of the launcher pods nicplug's pod patches landed on: see
        # `_check_requested`
        self._written_pods: dict[str, dict[str, str]] = {}

    async def execute(self, effect: PendingEffect) -> Result:
        started = time.perf_counter()
        outcome = "error"
        try:
            result = await self._execute(effect)
            outcome = "ok"
            return result
        finally:
            if self._metrics is not None:
                self._metrics.effect_latency.labels(effect.type, outcome).observe(
                    time.perf_counter() - started
                )

    async def _execute(self, effect: PendingEffect) -> Result:
        try:
            decoded = effect_from_payload(effect.type, effect.payload)
        except (KeyError, TypeError, ValueError) as exc:
            raise EffectUndecodable(
                f"effect {effect.id} ({effect.type}, schema {effect.schema_version}) has a "
                f"payload this nicplug cannot read ({exc!r}); dropped, the VM is decided again"
            ) from exc
        if isinstance(decoded, PatchPodNetworks | PatchVirtualMachine):
            slot = (effect.type, decoded.target)
            if self._superseded(effect, slot):
                self._abandoned(effect)
                return {"superseded": True}
            self._newest[slot] = effect.id
        try:
            match decoded:
                case PatchPodNetworks():
                    requested = frozenset(r.if_name for r in decoded.entries)
                    result = await self._ordered(
                        effect, requested, partial(self._patch_pod, decoded, effect), pod=True)
                    if not result.get("superseded"):
                        self._written_pods.setdefault(str(effect.key), {})[
                            decoded.pod_uid] = decoded.pod
                    return result
                case PatchVirtualMachine():
                    return await self._ordered(
                        effect, _attached(decoded), partial(self._patch_kvvm, decoded, effect),
                        pod=False)
                case SetVMCondition():
                    return await self._set_condition(decoded)
                case RemoveVMCondition():
                    return await self._remove_condition(decoded)
                case RestartVM():
                    return await self._restart(decoded)
                case CreateMigration():
                    return await self._migrate(decoded, str(effect.stream))
                case EmitEvent():
                    return await self._event(decoded)
        except kube_errors.KubeError as exc:
            raise self._translated(exc, effect.type) from exc
        raise PermanentError(f"effect type {effect.type!r} has no executor")

    def _superseded(self, effect: PendingEffect, slot: tuple[str, str]) -> bool:
        """Whether a newer effect of the same type has started on the same object.

        Pod and KVVM patches write whole lists computed from the world their decision
        saw, and a later decision on the VM (a higher effect id: decisions of one VM
        are serial) saw a newer one. An older patch retried after a backoff, or racing
        a newer one after a restart, would write its stale list over the newer: it
        must not be sent. Checked when it starts and again just before it writes.
        """
        return effect.id < self._newest.get(slot, 0)

    async def _ordered(self, effect: PendingEffect, holds: frozenset[str],
                       write: Callable[[_Write], Awaitable[Result]], *, pod: bool) -> Result:
        """Do `write` (a pod patch, `pod`, or a KVVM patch) once the unfinished writes of
        the other kind on the same VM, decided before it or on the wire, have finished
        (`_wait_for_others`); known as
        unfinished to the later ones until it lands or fails for good (a temporary
        failure is retried by the outbox: still unfinished). A write not finished after
        `wait_for_earlier` seconds (its retry later, parked, or given up) is forgotten and
        this one decided again, so no write waits for ever nor holds a request slot
        long. A write that landed stays known to the later ones until the informers show
        it (`_Write.shown`): their decisions may not have seen it. `holds`: the ifNames it
        leaves requested (pod) or attached (KVVM)."""
        self._forget_shown()
        writes = self._writes.setdefault(str(effect.key), {})
        try:
            await self._wait_for_others(effect, holds, writes, pod=pod)
        except RetryAfterObservation:
            retried = writes.pop(effect.id, None)  # its last attempt failed for now
            if retried is not None:  # decided again: it never lands
                retried.finish(None)
            raise
        # afresh: the VM's entry goes when its last write ends, maybe while this one waited
        writes = self._writes.setdefault(str(effect.key), {})
        mine: _Write | None = writes.setdefault(effect.id, _Write(pod=pod))
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
            mine = None  # retried by the outbox: not finished
            raise
        finally:
            if mine is not None:
                mine.sending = False
                mine.finish(landed)
                if written and not mine.shown(self._cached):
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
                               writes: dict[int, _Write], *, pod: bool) -> None:
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
                raise RetryAfterObservation(
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

    def _check_requested(self, e: PatchVirtualMachine, vm: str) -> None:
        """A KVVM patch attaches nothing that a launcher pod the VMI runs in, as the
        informers hold it now, no longer requests, when nicplug's pod patches landed on
        that pod (nicplug alone writes a running pod's requests). The order book
        forgets a landed pod patch once the informers show it, but a decision made in
        between (from a world read before they heard of it: the same instant, a watch
        behind) still saw the entry requested and ready, and would attach it as the SDN
        tears it down."""
        written = self._written_pods.get(vm)
        if not written or self._cached is None:
            return
        for uid in [u for u in written if u not in e.pods]:
            del written[uid]  # a pod the VMI no longer runs in
        holds = _attached(e)
        for uid, name in written.items():
            pod = self._cached(self._kinds.launcher_pods, e.namespace, name)
            meta = (pod or {}).get("metadata") or {}
            if meta.get("uid") != uid:
                continue
            try:
                requested = self._dialect.parse_requests(
                    value=(meta.get("annotations") or {}).get(self._dialect.request_annotation),
                    namespace=e.namespace)
            except MalformedAnnotation:
                continue  # never written over (`_patch_pod`), nor judged here
            released = holds - {r.if_name for r in requested}
            if released:
                raise RetryAfterObservation(
                    f"VM {vm}: launcher pod {name} no longer requests {sorted(released)}, "
                    f"which this KVVM patch attaches")

    def _forget_shown(self) -> None:
        """Landed writes leave the order book once the informers show them (oldest
        first; one still not shown keeps those behind it a little longer)."""
        while self._unshown:
            key, effect_id, write = self._unshown[0]
            if not write.shown(self._cached):
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

    def _translated(self, exc: kube_errors.KubeError, type_: str) -> Exception:
        if self._metrics is not None and exc.status:
            self._metrics.api_errors.labels(str(exc.status)).inc()
        if isinstance(exc, kube_errors.PatchRejected) and exc.status in (403, 422):
            # a refusal (RBAC, an admission policy): the same request is refused again,
            # so the effect ends now with the server's words (`explain`, a Warning Event)
            if self._metrics is not None:
                self._metrics.refused.labels(type_, str(exc.status)).inc()
            return PermanentError(f"refused by the API server: {exc}")
        if isinstance(exc, kube_errors.Conflict):
            return RetryAfterObservation(str(exc))
        if isinstance(exc, kube_errors.Temporary):
            return TemporaryError(str(exc), delay=exc.delay)
        if isinstance(exc, kube_errors.NotFound):
            # The object is gone (a launcher pod of a stopping VM, a migration's source):
            # the request cannot succeed as decided, and the next observation shows the
            # world without it, so the machine decides again from that.
            return RetryAfterObservation(str(exc))
        return PermanentError(str(exc))

    async def _read(self, kind: KindRef, namespace: str, name: str) -> Mapping[str, Any]:
        """The object as the informers hold it (one they do not hold is gone, or not
        seen yet: `NotFound`, decided again from the next world); from the server only
        when no cache was given."""
        if self._cached is None:
            return await self._calls.get(kind, namespace, name)
        held = self._cached(kind, namespace, name)
        if held is None:
            raise kube_errors.NotFound(f"{kind.kind} {namespace}/{name} is not in the cache")
        return held

    # -- the effects -------------------------------------------------------------------

    def _writing(self) -> WritingDialect:
        if self._writer is None:
            raise PermanentError(
                f"the {self._dialect.name} dialect's pods and KubeVirt VMs are KubeVirt's "
                f"and the user's to write, never nicplug's")
        return self._writer

    async def _patch_pod(self, e: PatchPodNetworks, effect: PendingEffect,
                         mine: _Write) -> Result:
        writer = self._writing()
        value = writer.render_requests(requests=e.entries, namespace=e.namespace)
        if value is None:
            value = writer.empty_pod_requests
        pod = await self._read(self._kinds.launcher_pods, e.namespace, e.pod)
        key = self._dialect.request_annotation
        mine.pin(self._kinds.launcher_pods, e.namespace, e.pod, pod, annotation=key)
        current = ((pod.get("metadata") or {}).get("annotations") or {}).get(key)
        if e.observed is not None:
            try:
                requested = self._dialect.parse_requests(value=current, namespace=e.namespace)
            except MalformedAnnotation as exc:
                raise RetryAfterObservation(f"pod {e.target}: {exc}") from exc
            if requested != e.observed:
                raise RetryAfterObservation(f"pod {e.target}: its SDN requests changed")
            released = {r.if_name for r in e.observed} - {r.if_name for r in e.entries}
            if released:
                self._check_let_go(str(effect.key), frozenset(released))
        ops = _annotation_ops(pod, "/metadata", key, value)
        if not ops:
            return {"unchanged": True}
        patch: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": e.pod_uid}]
        if isinstance(current, str):
            patch.append({"op": "test", "path": "/metadata" + pointer("annotations", key),
                          "value": current})
        else:  # nothing to pin but the whole pod: the annotation may have come since
            patch.append({"op": "test", "path": "/metadata/resourceVersion",
                          "value": (pod.get("metadata") or {}).get("resourceVersion")})
        patch += ops
        if self._superseded(effect, (effect.type, e.target)):
            return {"superseded": True}
        await self._calls.patch_pod(e.namespace, e.pod, patch, content_type=JSON_PATCH)
        return {"annotation": value}

    def _check_let_go(self, vm: str, released: frozenset[str]) -> None:
        """A pod entry leaves only while the VM's KVVM and running VMI, as the informers
        hold them now, neither carry the interface (without `state: absent`) nor report
        it attached: the decision may have read them before a KVVM write attaching it
        showed (its own world older than the write, the informers caught up since)."""
        if self._cached is None:
            return
        namespace, _, name = vm.partition("/")
        carried: set[str] = set()
        try:
            kvvm = self._cached(self._kinds.kvvms, namespace, name)
            if kvvm is not None:
                record, _ = records.kvvm(read(KVVMObject, kvvm, kind="KubeVirt VirtualMachine"),
                                         dialect=self._dialect, vmi_exists=True)
                carried |= {i.name for i in record.interfaces if not i.absent}
            vmi = self._cached(self._kinds.vmis, namespace, name)
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

    async def _patch_kvvm(self, e: PatchVirtualMachine, effect: PendingEffect,
                          mine: _Write) -> Result:
        writer = self._writing()
        kvvm = await self._read(self._kinds.kvvms, e.namespace, e.name)
        mine.pin(self._kinds.kvvms, e.namespace, e.name, kvvm)
        self._check_template(e, kvvm)
        if e.stopped:
            await self._check_stopped(e)
        if e.pods:
            vmi = await self._read(self._kinds.vmis, e.namespace, e.name)
            serving = (vmi.get("status") or {}).get("activePods") or {}
            if not isinstance(serving, dict) or set(serving) != set(e.pods):
                raise RetryAfterObservation(
                    f"VMI {e.target} moved to other launcher pods since the decision")
            self._check_requested(e, str(effect.key))
        template = (kvvm.get("spec") or {}).get("template") or {}
        tspec = template.get("spec") or {}
        old_ifaces = {
            i.get("name"): i
            for i in ((tspec.get("domain") or {}).get("devices") or {}).get("interfaces") or ()
        }
        old_nets = {n.get("name"): n for n in tspec.get("networks") or ()}
        interfaces: list[dict[str, Any]] = []
        networks: list[dict[str, Any]] = []
        wanted = {r.if_name: r for r in e.template_requests}
        for entry in e.networks:
            current = old_ifaces.get(entry.if_name)
            if entry.identity in ("", "Main") or entry.if_name == MAIN_IF_NAME or (
                    entry.absent and current):
                iface = dict(current or {"name": entry.if_name, "bridge": {}})
            else:
                request = wanted.get(entry.if_name) or SDNRequest(entry.identity, entry.if_name)
                iface = writer.kubevirt_interface(request=request, current=current)
            if entry.absent:
                iface["state"] = "absent"
            else:
                iface.pop("state", None)
            interfaces.append(iface)
            if entry.identity == "" and entry.if_name in old_nets:
                networks.append(old_nets[entry.if_name])
            elif entry.identity == "Main" or entry.if_name == MAIN_IF_NAME:
                networks.append(old_nets.get(entry.if_name) or {"name": MAIN_IF_NAME, "pod": {}})
            else:
                request = SDNRequest(entry.identity, entry.if_name)
                networks.append(writer.kubevirt_network(request=request, namespace=e.namespace))
        annotation = writer.render_requests(requests=e.template_requests, namespace=e.namespace)
        version = (kvvm.get("metadata") or {}).get("resourceVersion")
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": version},
            # `add` replaces a member that exists and creates one that does not.
            {"op": "add", "path": "/spec/template/spec/domain/devices/interfaces",
             "value": interfaces},
            {"op": "add", "path": "/spec/template/spec/networks", "value": networks},
        ]
        ops += _annotation_ops(
            template, "/spec/template/metadata", writer.request_annotation, annotation)
        if self._superseded(effect, (effect.type, e.target)):
            return {"superseded": True}
        await self._calls.patch(
            self._kinds.kvvms, e.namespace, e.name, ops, content_type=JSON_PATCH)
        return {"interfaces": [i["name"] for i in interfaces]}

    async def _check_stopped(self, e: PatchVirtualMachine) -> None:
        """The decision wrote for the next boot: the VM must still have no live VMI,
        neither as the informers hold it nor as the server answers (either may be
        behind, or wrong: a live VMI either shows refuses the write). Read after the
        KVVM, whose resourceVersion the patch pins: a VMI KubeVirt creates later
        changes the KVVM's status (`created`), so the patch fails."""
        if self._cached is not None and _live(self._cached(self._kinds.vmis, e.namespace,
                                                           e.name)):
            raise RetryAfterObservation(
                f"VM {e.target} started since the decision wrote for its next boot "
                f"(its VMI is in the cache)")
        try:
            vmi = await self._calls.get(self._kinds.vmis, e.namespace, e.name)
        except kube_errors.NotFound:
            return
        if _live(vmi):
            raise RetryAfterObservation(
                f"VM {e.target} started since the decision wrote for its next boot")

    def _check_template(self, e: PatchVirtualMachine, kvvm: Mapping[str, Any]) -> None:
        """The KVVM template still reads as the decision saw it (when its
        resourceVersion moved: status churn alone is no reason to decide again)."""
        seen = e.observed
        if seen is None or (kvvm.get("metadata") or {}).get("resourceVersion") == seen.version:
            return
        try:
            now, _ = records.kvvm(
                read(KVVMObject, kvvm, kind="KubeVirt VirtualMachine"),
                dialect=self._dialect, vmi_exists=True,
            )
        except MalformedObject as exc:
            raise RetryAfterObservation(str(exc)) from exc
        if not seen.same_template(now.interfaces, now.networks, now.template_requests):
            raise RetryAfterObservation(f"KVVM {e.target}: its template changed")

    async def _conditions_written(
        self, write: Callable[[Reader], Awaitable[Result]]
    ) -> Result:
        """A VM's conditions are a read-modify-write of one list that the platform's
        controller also writes (its status churns): a 409 means someone else wrote the
        status between the read and the patch, not that the condition is wrong, so it is
        read afresh from the server (the cache may not hold the newer write yet) and
        written again a few times before the decision is asked again. The fresh VM is
        read as the informers read it first (`_readable_vm`): one that turned malformed
        behind the cache is written nothing."""
        read: Reader = self._read
        for _ in range(CONDITION_WRITE_ATTEMPTS - 1):
            try:
                return await write(read)
            except kube_errors.Conflict:
                read = self._readable_vm
        return await write(read)

    async def _readable_vm(self, kind: KindRef, namespace: str, name: str) -> Mapping[str, Any]:
        """The VM read afresh from the server, if nicplug can read it. The cache's copy
        passed the informers' reading (a VM they find malformed is held still, and its
        effects are not sent); a copy from the server has not, and the server's may have
        turned malformed since the cache last heard of it (a watch stalled or behind):
        a write built on it would change a VM nicplug cannot read. So it is read with
        the model the observer reads it with, and a malformed one is
        `RetryAfterObservation`: the next world shows it, and holds the VM still."""
        body = await self._calls.get(kind, namespace, name)
        model = KVVMObject if kind.name == self._kinds.kvvms.name else VirtualMachineObject
        try:
            read(model, body, kind=kind.kind)
        except MalformedObject as exc:
            raise RetryAfterObservation(f"read afresh: {exc}") from exc
        return body

    async def _set_condition(self, e: SetVMCondition) -> Result:
        return await self._conditions_written(lambda read: self._set_condition_once(e, read))

    async def _remove_condition(self, e: RemoveVMCondition) -> Result:
        return await self._conditions_written(lambda read: self._remove_condition_once(e, read))

    async def _set_condition_once(self, e: SetVMCondition, read: Reader) -> Result:
        vm = await read(self._vm_kind, e.namespace, e.name)
        status = vm.get("status") or {}
        conditions: list[dict[str, Any]] = [
            c for c in status.get("conditions") or () if isinstance(c, dict)
        ]
        current = next((c for c in conditions if c.get("type") == e.type), None)
        wanted = {"type": e.type, "status": e.status, "reason": e.reason, "message": e.message}
        if current is not None and all(current.get(k) == v for k, v in wanted.items()):
            return {"unchanged": True}
        stamp = self._now().strftime("%Y-%m-%dT%H:%M:%SZ")
        if current is not None and current.get("status") == e.status:
            stamp = current.get("lastTransitionTime", stamp)
        updated = {**wanted, "lastTransitionTime": stamp}
        conditions = [updated if c is current else c for c in conditions]
        if current is None:
            conditions.append(updated)
        version = (vm.get("metadata") or {}).get("resourceVersion")
        patch = {"metadata": {"resourceVersion": version}, "status": {"conditions": conditions}}
        await self._calls.patch_status(self._vm_kind, e.namespace, e.name, patch)
        return {"condition": e.type, "status": e.status}

    async def _remove_condition_once(self, e: RemoveVMCondition, read: Reader) -> Result:
        vm = await read(self._vm_kind, e.namespace, e.name)
        status = vm.get("status") or {}
        conditions = [c for c in status.get("conditions") or () if isinstance(c, dict)]
        kept = [c for c in conditions if c.get("type") != e.type]
        if len(kept) == len(conditions):
            return {"unchanged": True}
        version = (vm.get("metadata") or {}).get("resourceVersion")
        patch = {"metadata": {"resourceVersion": version}, "status": {"conditions": kept}}
        await self._calls.patch_status(self._vm_kind, e.namespace, e.name, patch)
        return {"removed": e.type}

    async def _restart(self, e: RestartVM) -> Result:
        """Halt (noting the strategy to put back) or start the KVVM, as `virtctl stop`
        and `start` do; each a JSON patch testing what it changes. Through Deckhouse's
        operations: `_restart_by_operation`."""
        if e.by == "operation":
            return await self._restart_by_operation(e)
        kvvm = await self._read(self._kinds.kvvms, e.namespace, e.name)
        metadata = kvvm.get("metadata") or {}
        spec = kvvm.get("spec") or {}
        noted = (metadata.get("annotations") or {}).get(RESTART_ANNOTATION)
        field = "running" if e.resumes == RUNNING else "runStrategy"
        if e.step == "halt":
            if noted is not None:
                return {"halted": False, "reason": "halted for a restart already"}
            try:
                vmi = await self._read(self._kinds.vmis, e.namespace, e.name)
            except kube_errors.NotFound:
                return {"halted": False, "reason": "no VMI"}
            if (vmi.get("metadata") or {}).get("uid") != e.vmi_uid:
                return {"halted": False, "reason": "the VMI was already replaced"}
            running, halted = (True, False) if field == "running" else (e.resumes, "Halted")
            value: str | None = e.resumes
        else:
            if noted != e.resumes:
                return {"started": False, "reason": "not halted by nicplug for this restart"}
            running, halted = (False, True) if field == "running" else ("Halted", e.resumes)
            value = None
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/resourceVersion",
             "value": metadata.get("resourceVersion")},
            {"op": "test", "path": f"/spec/{field}", "value": running},
            {"op": "replace", "path": f"/spec/{field}", "value": halted},
            *_annotation_ops(kvvm, "/metadata", RESTART_ANNOTATION, value),
        ]
        if spec.get(field) != running:
            raise RetryAfterObservation(f"KVVM {e.target}: {field} is not {running!r} any more")
        await self._calls.patch(
            self._kinds.kvvms, e.namespace, e.name, ops, content_type=JSON_PATCH
        )
        return {"halted" if e.step == "halt" else "started": True}

    async def _restart_by_operation(self, e: RestartVM) -> Result:
        """A `Stop` (step `halt`) or `Start` `VirtualMachineOperation`, as `d8 v stop` /
        `start` make them: Deckhouse deletes the VMI, and later starts the VM again.

        The name is fixed by the VM, the VMI whose restart it is, and the step, so a retry
        (after a timeout, a crash, a new leader) finds the one made before: it counts as
        made only when it is nicplug's, of the same type for the same VMI. A `Stop` is
        asked only while that VMI is the VM's; a `Start` only while no VMI runs."""
        kind = self._kinds.vm_operations
        if kind is None:
            raise PermanentError(
                f"VM {e.target}: this KubeVirt API flavour ({self._kinds.name}) has no "
                "VirtualMachineOperations to restart it with")
        type_ = {"halt": "Stop", "start": "Start", "restart": "Restart"}[e.step]
        try:
            vmi: Mapping[str, Any] | None = await self._read(self._kinds.vmis, e.namespace, e.name)
        except kube_errors.NotFound:
            vmi = None
        if type_ in ("Stop", "Restart"):
            if vmi is None:
                return {"stopped": False, "reason": "no VMI"}
            if (vmi.get("metadata") or {}).get("uid") != e.vmi_uid:
                return {"stopped": False, "reason": "the VMI was already replaced"}
        elif vmi is not None and (vmi.get("status") or {}).get("phase") not in (
                "Succeeded", "Failed"):
            raise RetryAfterObservation(f"VM {e.target} runs again: it is not nicplug's to start")
        name = vm_operation_name(e.name, e.vmi_uid, type_)
        spec = {"type": type_, "virtualMachineName": e.name}
        try:
            await self._calls.create_vm_operation(
                kind, e.namespace, name, spec,
                labels={MANAGED_BY_LABEL: "nicplug"},
                annotations={VMOP_VMI_UID_ANNOTATION: e.vmi_uid})
        except kube_errors.AlreadyExists:
            found = await self._calls.get(kind, e.namespace, name)
            annotations = (found.get("metadata") or {}).get("annotations") or {}
            found_spec = found.get("spec") or {}
            mine = all(found_spec.get(k) == v for k, v in spec.items())
            if not mine or annotations.get(VMOP_VMI_UID_ANNOTATION) != e.vmi_uid:
                raise PermanentError(
                    f"VirtualMachineOperation {e.namespace}/{name} exists and is not "
                    f"nicplug's {type_} of VM {e.name} for VMI {e.vmi_uid}") from None
            return {"operation": name, "created": False}
        return {"operation": name, "created": True}

    async def _migrate(self, e: CreateMigration, stream: str) -> Result:
        # one check-and-create at a time, so that the cap holds within this leader
        async with self._migrating:
            # nicplug's own, and KubeVirt's workload-update migrations, which it follows
            # in their stead where KubeVirt migrates by itself
            listed = await self._calls.list_migrations(self._kinds.vmims, label_selector="")
            running = [
                m for m in listed
                if ((m.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))
                and (m.get("metadata") or {}).get("name") != e.migration
                and _counted(m)
            ]
            if len(running) >= self._max_migrations:
                # not an error: the decider journals it on the operation (`MigrationHeld`),
                # says it on the VM and asks again with the operation's other effects
                log.info("migration %s/%s held back: %d of nicplug's migrations in flight, "
                         "the cap is %d", e.namespace, e.migration, len(running),
                         self._max_migrations)
                return {"created": False, "held": True, "in_flight": len(running),
                        "cap": self._max_migrations}
            try:
                await self._calls.create_migration(
                    self._kinds.vmims, e.namespace, e.migration, e.vmi,
                    labels={MANAGED_BY_LABEL: "nicplug"},
                    annotations={OPERATION_ANNOTATION: stream},
                )
            except kube_errors.AlreadyExists:
                return {"created": False}
            except kube_errors.PatchRejected as exc:
                if exc.status == 400 and IN_FLIGHT_MIGRATION in str(exc):
                    # KubeVirt's webhook: the VMI migrates already (someone else's, or
                    # this very one still running: admission answers before storage),
                    # so the decision's "no migration running" no longer holds
                    raise RetryAfterObservation(f"VMI {e.namespace}/{e.vmi}: {exc}") from exc
                raise
            return {"created": True}

    async def _event(self, e: EmitEvent) -> Result:
        kind = self._vm_kind
        vm = self._cached(kind, e.namespace, e.name) if self._cached is not None else None
        uid = ((vm or {}).get("metadata") or {}).get("uid")  # `kubectl describe` matches it
        involved = {
            "apiVersion": self._vm_kind.api_version,
            "kind": self._vm_kind.kind,
            "metadata": {"namespace": e.namespace, "name": e.name,
                         **({"uid": uid} if uid else {})},
        }
        return await self._events.record(
            EventNote(involved=involved, reason=e.reason, message=e.message, type=e.type)
        )


def _live(vmi: Mapping[str, Any] | None) -> bool:
    """A VMI that exists and has not finished."""
    return vmi is not None and (vmi.get("status") or {}).get("phase") not in (
        "Succeeded", "Failed")


def _attached(e: PatchVirtualMachine) -> frozenset[str]:
    """The interfaces a KVVM patch leaves attached that an SDN entry must back."""
    return frozenset(n.if_name for n in e.networks if not n.absent
                     and n.identity not in ("", "Main") and n.if_name != MAIN_IF_NAME)


def vm_operation_name(vm: str, vmi_uid: str, type_: str) -> str:
    """The name of nicplug's `type_` operation in the restart of VM `vm`'s VMI
    `vmi_uid`: the same on every attempt, by any replica."""
    return f"nicplug-{vm}-{zlib.crc32(vmi_uid.encode()):08x}-{type_.lower()}"


def _annotation_ops(
    template: Mapping[str, Any], meta_path: str, key: str, value: str | None
) -> list[dict[str, Any]]:
    metadata = template.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    current = annotations.get(key) if isinstance(annotations, dict) else None
    if current == value:
        return []
    ops: list[dict[str, Any]] = []
    if not isinstance(metadata, dict):
        ops.append({"op": "add", "path": meta_path, "value": {}})
    if not isinstance(annotations, dict):
        if value is None:
            return ops
        ops.append({"op": "add", "path": f"{meta_path}/annotations", "value": {}})
    path = meta_path + pointer("annotations", key)
    if value is None:
        ops.append({"op": "remove", "path": path})
    else:
        ops.append({"op": "add", "path": path, "value": value})
    return ops


def _counted(migration: Mapping[str, Any]) -> bool:
    """Does `--max-migrations` count this migration: nicplug's, or one KubeVirt's
    workload updater created (`kubevirt.io/workloadUpdateMigration`)?"""
    meta = migration.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    return bool(labels.get(MANAGED_BY_LABEL) == "nicplug"
                or WORKLOAD_UPDATE_ANNOTATION in annotations)
