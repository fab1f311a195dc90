"""What must hold in a simulated run: safety after every write, liveness at the end.

Safety is checked on every change the simulated store commits (its `tap`) and on every
request a replica sends, so a violation is caught at the write that makes it, not at
the end of a step that may hide it:

* `link-before-sdn` — a running VMI's spec holds an interface whose launcher pod the
  domain runs in (the active pod on the VMI's node; a migration target only once the
  domain moved there) has no link for it: the SDN never reported its entry ready on that
  pod, or the entry left the pod's requests since (deckhouse);
* `sdn-released-early` — an SDN request entry leaves a pod while the guest still has
  the interface;
* `write-without-lease` — a replica writes (anything but the Lease) while another holds
  the Lease, or while its own has expired;
* `write-before-sync` — a replica writes before its informers have listed everything;
* `write-while-unreadable` — a replica writes to a VM's objects while one of them is
  malformed (held still means still), or to a launcher pod whose SDN annotation it
  cannot read (an unreadable pod annotation does not hold the VM: that pod is left
  alone, the rest of the world is read and decided from). A write to the malformed
  object itself counts whatever the replica had seen: it must be pinned to the
  resourceVersion or value the replica read, so that one sent before its informers
  heard of the change (a stalled watch, a race) fails its precondition. A write to
  another of the VM's objects counts once the replica's informers hold the malformed
  version: no patch can pin an object it does not address, and a controller cannot
  hold still for what it has not been shown; such a write counts when it is sent,
  whatever the server did with it (the fence must keep it from leaving). A write to
  the malformed object is judged on what the server did: one it refused, or never
  handled (the connection cut while it waited), changed nothing; one it answered 2xx
  counts, as of the instant it was sent;
* `restart-repeated` — more than one restart (a VMI deleted, or nicplug's `Stop`
  VirtualMachineOperation Deckhouse ran: one it refused stopped nothing) for one VMI
  uid, or a VM stopped twice for one change of its desired networks (one restart
  applies a change; the user's own start, stop or restart in between does not ask for
  another);
* `user-overridden` — a replica starts (a `Start` VirtualMachineOperation) a VM whose
  user's latest operation Deckhouse ran was a `Stop`;
* `left-stopped` (judged at the end) — a VM a replica stopped for a restart (its `Stop`
  VirtualMachineOperation completed) has no VMI, and neither the replicas nor the user
  started it since (nor did the user ask anything else of it);
* `migrations-in-flight` — a replica creates a migration while one is unfinished;
* `migrations-per-operation` — more migrations a replica created for one operation
  (`nicplug.io/operation` on the migration, over its attempts, between two user edits
  of the VM) failed than `--migration-attempts` allows (`MigrationCount`);
* `untraceable-effect` — a replica sent a write (anything but the Lease) that no effect
  its journal holds as issued at that instant asks for: each write is matched, when it
  is sent, to an outbox row of that replica's own journal of an effect type that makes
  such a write to that object (a pod patch to a `PatchPodNetworks` of that pod, a KVVM
  patch to a `PatchVirtualMachine` or `RestartVM` of that VM, a status patch to a
  condition effect of that VM, a VirtualMachineOperation to a `RestartVM`, a migration
  to a `CreateMigration`, an Event to an `EmitEvent`, in that namespace). A write sent
  before its decision committed, after its outcome was recorded, or by no decision at
  all is untraceable. The `NetworkInterfaceOperation` objects are no effect (the
  journal's projection, `operation_objects.py`): judged by the Lease alone.

At the end (`liveness.py`) every journal must verify, and every operation must have
come to rest.
"""

from __future__ import annotations

import datetime
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from nicplug.adapters.kube.resources import OPERATION_ANNOTATION, VMOP_VMI_UID_ANNOTATION
from nicplug.machines.policy import MachineConfig
from nicplug.simulator import networking as nw
from nicplug.simulator import objects as ob
from nicplug.simulator.apis import ServedApi, served_api
from nicplug.simulator.resources import (
    KVVMS,
    LEASES,
    OPERATIONS,
    PODS,
    VMIMS,
    VMIS,
    VMOPS,
    VMS,
    Resource,
)
from nicplug.simulator.store import Store
from nicplug.simulator.watching import Change

Json = dict[str, Any]
USER_MIGRATION = "user-migration-"
USER_OPERATION = "user-operation-"


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: str
    detail: str
    at: float  # virtual seconds
    step: int  # index of the last step taken (-1: before the first)

    def line(self) -> str:
        return f"{self.invariant}: {self.detail} (t={self.at:.3f}s, after step {self.step})"


@dataclass(frozen=True, slots=True)
class Spoiled:
    """One of a VM's objects made malformed, and the resourceVersion it then got."""

    resource: Resource
    name: str
    version: int


Seen = Callable[[Resource, str, str], int | None]
"""(resource, namespace, name) -> the resourceVersion of the object a replica's
informers hold, or None."""


@dataclass
class Watchman:
    """Checks every store change and every replica request against the invariants."""

    store: Store
    dialect: str
    lease: tuple[str, str]
    now: Any  # () -> virtual seconds
    step: int = -1
    violations: list[Violation] = field(default_factory=list)
    # (namespace, vm) -> its objects made malformed
    malformed: dict[tuple[str, str], list[Spoiled]] = field(default_factory=dict)
    malformed_pods: set[tuple[str, str]] = field(default_factory=set)  # (namespace, pod)
    restarts_by_uid: Counter[str] = field(default_factory=Counter)
    user_asked: dict[str, str] = field(default_factory=dict)  # VM key -> the user's last op
    # VM key -> nicplug's Stop that stopped it, until the VM runs again or the user acts
    stopped_by_nicplug: dict[str, str] = field(default_factory=dict)
    journals: dict[str, Callable[[], list[tuple[int, str, str]]]] = field(default_factory=dict)
    """Each replica's issued effects (id, type, target), by identity: what backs a create."""
    backed: set[tuple[str, int]] = field(default_factory=set)  # (replica, effect id) used
    restarts_by_change: Counter[tuple[str, int]] = field(default_factory=Counter)
    changes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    linked: dict[str, set[str]] = field(default_factory=dict)  # pod uid -> ifNames with a tap
    # (pod uid, ifName) -> since when the SDN has reported an error for it, without a break
    sdn_error_since: dict[tuple[str, str], float] = field(default_factory=dict)
    on_violation: Callable[[], None] = lambda: None  # the run stops at the first one
    closed: bool = False  # after the judgement nothing counts
    migration_count: MigrationCount = field(default_factory=lambda: MigrationCount())
    api: ServedApi = field(default_factory=lambda: served_api("upstream"))
    """The names the server gives KubeVirt's kinds: a request's path is judged in the
    store's (Deckhouse's renamed copy is renamed back)."""

    def report(self, invariant: str, detail: str) -> None:
        if self.closed:
            return
        if not any(v.invariant == invariant for v in self.violations):
            self.violations.append(Violation(invariant, detail, self.now(), self.step))
            self.on_violation()

    # -- the store's writes ------------------------------------------------------------

    def on_change(self, change: Change) -> None:
        if change.resource is PODS and change.prev is not None:
            self._released(change)
        if change.resource is VMIMS and change.type == "ADDED":
            self._migration_created(change.obj)
            if not change.obj["metadata"]["name"].startswith(USER_MIGRATION):
                # (its effect's target is the migration itself, named from the VM)
                self._backed(change.obj, "CreateMigration", change.obj["metadata"]["name"])
        if change.resource is VMIMS:
            self.migration_count.on_change(self, change)
        if change.resource is VMOPS and change.obj["metadata"]["name"].startswith(
                USER_OPERATION):
            self._user_operation(change)
        if change.resource is VMOPS:
            self._operation_ran(change)
            self._operation_completed(change)
        if change.resource is VMIS and change.type == "ADDED":
            self.stopped_by_nicplug.pop(
                f"{change.obj['metadata'].get('namespace', '')}/{change.obj['metadata']['name']}",
                None)
        if change.resource is VMOPS and change.type == "ADDED":
            self._operation_created(change.obj)
            if not change.obj["metadata"]["name"].startswith(USER_OPERATION):
                self._backed(change.obj, "RestartVM",
                             ob.dig(change.obj, "spec", "virtualMachineName"))
        if change.resource is PODS and self.dialect == "deckhouse":
            self._tap(change)
            self._sdn_errors(change)
        if change.resource in (VMIS, PODS) and self.dialect == "deckhouse":
            vm = _vm_of(change.obj) if change.resource is PODS else change.obj["metadata"]["name"]
            if vm:
                self._links(change.obj["metadata"].get("namespace", ""), vm)

    def _released(self, change: Change) -> None:
        raw = nw.annotations_of(change.obj).get(ob.request_annotation(self.dialect))
        if change.type != "DELETED" and raw is not None and not _readable(raw):
            return  # an unreadable annotation (a fault) releases nothing: the SDN keeps it
        before = _requested(change.prev, self.dialect)
        after = _requested(change.obj, self.dialect) if change.type != "DELETED" else before
        gone = before - after
        if not gone:
            return
        ns, vm = change.obj["metadata"].get("namespace", ""), _vm_of(change.obj)
        vmi = self.store.peek(VMIS, ns, vm) if vm else None
        if vmi is None or ob.dig(vmi, "status", "phase") != "Running":
            return
        attached = {str(i.get("name")) for i in ob.dig(vmi, "status", "interfaces") or []
                    if "domain" in str(i.get("infoSource", ""))}
        uid = change.obj["metadata"].get("uid")
        if uid not in (ob.dig(vmi, "status", "activePods") or {}):
            return
        for if_name in gone & attached:
            self.report("sdn-released-early",
                        f"{ns}/{vm}: pod {change.obj['metadata']['name']} lost the SDN entry "
                        f"{if_name} while the guest still has it")

    def _tap(self, change: Change) -> None:
        """The links a pod has: an entry the SDN once reported ready has its tap until
        its request leaves the pod (an error the SDN reports later does not take back
        a link the guest may already use: that is the SDN's fault, not a plug order)."""
        uid = str(change.obj["metadata"].get("uid"))
        if change.type == "DELETED":
            self.linked.pop(uid, None)
            return
        linked = self.linked.get(uid, set()) | nw.deckhouse_taps(change.obj)
        raw = nw.annotations_of(change.obj).get(ob.request_annotation(self.dialect))
        if raw is None or _readable(raw):  # an unreadable request tears nothing down
            linked &= _requested(change.obj, self.dialect)
        self.linked[uid] = linked

    def _sdn_errors(self, change: Change) -> None:
        """When each error the SDN reports on a pod began (an operation that failed
        before it could not say it)."""
        uid = str(change.obj["metadata"].get("uid"))
        erred = set(sdn_said(change.obj)) if change.type != "DELETED" else set()
        for key in [k for k in self.sdn_error_since if k[0] == uid and k[1] not in erred]:
            del self.sdn_error_since[key]
        for if_name in erred:
            self.sdn_error_since.setdefault((uid, if_name), self.now())

    def _links(self, ns: str, vm: str) -> None:
        vmi = self.store.peek(VMIS, ns, vm)
        if vmi is None or ob.dig(vmi, "status", "phase") != "Running":
            return
        wanted = {str(i["name"]) for i in ob.interfaces_of(vmi.get("spec"))
                  if i.get("name") != nw.MAIN_IF_NAME and i.get("state") != "absent"}
        if not wanted:
            return
        pods = [p for p in self.store.list_shared(PODS, ns)[0] if _vm_of(p) == vm]
        pod = ob.domain_pod(vmi, pods)
        if pod is not None:
            missing = wanted - self.linked.get(str(pod["metadata"].get("uid")), set())
            if missing:
                self.report("link-before-sdn",
                            f"{ns}/{vm}: the running VMI holds {sorted(missing)} but its launcher "
                            f"pod {pod['metadata']['name']} has no link (ready SDN entry) for them")

    def _backed(self, created: Json, effect_type: str, vm: object) -> None:
        """A migration or VirtualMachineOperation the controller created is backed by
        exactly one issued effect of that type for that object (the VM; a migration's
        own name), which backs no other create: one for another VM, or a second one for
        the same effect, is `untraceable-effect`."""
        if not self.journals:
            return
        target = f"{created['metadata'].get('namespace', '')}/{vm}"
        for identity, issued in self.journals.items():
            for effect_id, kind, effect_target in issued():
                if kind == effect_type and effect_target == target \
                        and (identity, effect_id) not in self.backed:
                    self.backed.add((identity, effect_id))
                    return
        self.report("untraceable-effect",
                    f"{created['metadata']['name']} was created for {target}, which no issued "
                    f"{effect_type} asks for that has not made one already")

    def _operation_created(self, operation: Json) -> None:
        """A replica's `Start` must not follow a `Stop` the user asked for
        (`user-overridden`)."""
        name = operation["metadata"]["name"]
        ns = operation["metadata"].get("namespace", "")
        vm = str(ob.dig(operation, "spec", "virtualMachineName"))
        kind = ob.dig(operation, "spec", "type")
        if name.startswith(USER_OPERATION):
            return
        if kind == "Start" and self.user_asked.get(f"{ns}/{vm}") == "Stop":
            self.report("user-overridden",
                        f"{ns}/{vm}: {name} starts the VM the user stopped")

    def _operation_ran(self, change: Change) -> None:
        """Deckhouse ran a replica's `Stop` (the first step of its restart): once per VMI
        uid, and once per change of the VM's networks. Counted when Deckhouse runs it,
        not when it is made: one it refused without running (`Failed`: the VM stopped
        already, `NotApplicableForVirtualMachinePhase`) stopped nothing. A `Stop` asked
        from a world the informers had not caught up with yet (the user's restart and
        nicplug's own `Stop` of the VMI before, which Deckhouse ran on the user's new
        VMI: a `Stop` stops whatever VMI the VM runs) is one such; it names another VMI,
        and nicplug asks one per VMI."""
        ran = ("InProgress", "Completed")
        operation = change.obj
        if operation["metadata"]["name"].startswith(USER_OPERATION) \
                or ob.dig(operation, "spec", "type") != "Stop" \
                or ob.dig(operation, "status", "phase") not in ran \
                or (change.prev is not None and ob.dig(change.prev, "status", "phase") in ran):
            return
        ns = operation["metadata"].get("namespace", "")
        vm = str(ob.dig(operation, "spec", "virtualMachineName"))
        uid = str((operation["metadata"].get("annotations") or {}).get(
            VMOP_VMI_UID_ANNOTATION, "unknown"))
        self._restarted(ns, vm, uid, counted=True)

    def _user_operation(self, change: Change) -> None:
        """What the user last asked of the VM is the last of their operations Deckhouse
        ran (one it refused, say behind an unfinished one, asked nothing)."""
        ran = ("InProgress", "Completed")
        if ob.dig(change.obj, "status", "phase") not in ran or (
                change.prev is not None and ob.dig(change.prev, "status", "phase") in ran):
            return
        ns = change.obj["metadata"].get("namespace", "")
        vm = str(ob.dig(change.obj, "spec", "virtualMachineName"))
        self.user_asked[f"{ns}/{vm}"] = str(ob.dig(change.obj, "spec", "type"))
        self.stopped_by_nicplug.pop(f"{ns}/{vm}", None)  # the user's now

    def _operation_completed(self, change: Change) -> None:
        """nicplug's `Stop` completed: the VM is stopped for nicplug's restart, which
        must start it again (`left-stopped`, judged at the end), unless the user acts."""
        name = change.obj["metadata"]["name"]
        completed = ob.dig(change.obj, "status", "phase") == "Completed" and (
            change.prev is None or ob.dig(change.prev, "status", "phase") != "Completed")
        if name.startswith(USER_OPERATION) or not completed \
                or ob.dig(change.obj, "spec", "type") != "Stop":
            return
        ns = change.obj["metadata"].get("namespace", "")
        vm = str(ob.dig(change.obj, "spec", "virtualMachineName"))
        self.stopped_by_nicplug[f"{ns}/{vm}"] = name

    def left_stopped(self) -> list[str]:
        """At the end: each VM nicplug stopped for a restart and never started again,
        with no act of the user's since."""
        return [f"{key}: stopped by {name}, never started again"
                for key, name in sorted(self.stopped_by_nicplug.items())
                if self.store.peek(VMIS, *key.split("/", 1)) is None]

    def _restarted(self, ns: str, vm: str, uid: str, *, counted: bool) -> None:
        self.restarts_by_uid[uid] += 1
        key = (f"{ns}/{vm}", self.changes[f"{ns}/{vm}"])
        self.restarts_by_change[key] += 1
        if counted and self.restarts_by_uid[uid] > 1:
            self.report("restart-repeated", f"{ns}/{vm}: VMI {uid} restarted twice")
        if self.restarts_by_change[key] > 1:
            self.report("restart-repeated",
                        f"{key[0]}: stopped {self.restarts_by_change[key]} times for one "
                        f"change of its networks (VMI {uid})")

    def _migration_created(self, migration: Json) -> None:
        """The controller created a migration (the user's are named `user-migration-*`):
        no other migration of that VMI may be unfinished."""
        if migration["metadata"]["name"].startswith(USER_MIGRATION):
            return
        ns = migration["metadata"].get("namespace", "")
        vmi = ob.dig(migration, "spec", "vmiName")
        for other in self.store.list_shared(VMIMS, ns)[0]:
            if other["metadata"]["uid"] == migration["metadata"]["uid"]:
                continue
            if (ob.dig(other, "spec", "vmiName") == vmi
                    and ob.dig(other, "status", "phase") not in ("Succeeded", "Failed")):
                self.report("migrations-in-flight",
                            f"{ns}/{vmi}: {migration['metadata']['name']} created while "
                            f"{other['metadata']['name']} is unfinished")

    # -- the replicas' requests ----------------------------------------------------------

    def on_request(self, identity: str, listed: bool, method: str, path: str,
                   issued: Callable[[], Iterable[tuple[str, str]]] = lambda: (),
                   seen: Seen = lambda resource, namespace, name: None,
                   ) -> Callable[[], None] | None:
        """`issued()`: (type, target) of each effect the replica's journal holds as
        issued now (`journal.issued_effects`); `seen`: what its informers hold. Returns
        what to call if the server applies the write (answers it 2xx), for the
        invariants judged on what a write did, not on its sending."""
        if method not in ("POST", "PUT", "PATCH", "DELETE") or "/leases" in path:
            return None
        path = self.api.stored_path(path)
        self._traced(identity, method, path, issued)
        holder, expires = self._lease()
        if holder != identity or expires < self.now():
            self.report("write-without-lease",
                        f"{identity} sent {method} {path} while the Lease is held by "
                        f"{holder or 'nobody'} (until t={expires:.1f}s)")
        if not listed:
            self.report("write-before-sync",
                        f"{identity} sent {method} {path} before its informers had listed")
        target = _vm_target(path)
        unreadable: list[str] = []
        spoiled_now = self.malformed.get(target, ()) if target is not None else ()
        if target is not None and "/events" not in path:
            if any(not _addresses(path, spoiled) and _knew(seen, target[0], spoiled)
                   for spoiled in spoiled_now):
                # another object: nothing pins what it was not shown, so the fence must
                # keep the write from leaving at all; refused or cut off, it was sent
                self.report("write-while-unreadable",
                            f"{identity} sent {method} {path} while its informers hold "
                            f"{target[0]}/{target[1]}'s malformed objects")
            elif any(_addresses(path, spoiled) for spoiled in spoiled_now):
                unreadable.append(f"{identity} sent {method} {path} while "
                                  f"{target[0]}/{target[1]}'s objects are malformed")
        if _pod_target(path) in self.malformed_pods:
            unreadable.append(
                f"{identity} sent {method} {path} over an SDN annotation it cannot read")
        if method == "DELETE" and "/virtualmachineinstances/" in path and target is not None:
            vmi = self.store.peek(VMIS, *target)
            uid = str(ob.dig(vmi, "metadata", "uid")) if vmi else "gone"
            self._restarted(target[0], target[1], uid, counted=vmi is not None)
        if not unreadable:
            return None

        def landed() -> None:
            # (not called when refused: a precondition that no longer holds, pinned to
            # what the replica read before the object turned unreadable; a fault)
            for detail in unreadable:
                self.report("write-while-unreadable", detail)

        return landed

    def _traced(self, identity: str, method: str, path: str,
                issued: Callable[[], Iterable[tuple[str, str]]]) -> None:
        if f"/{OPERATIONS.plural}" in path:
            return  # the journal's projection, written by no effect
        wanted = effects_for(method, path)
        if wanted is not None:
            types, namespace, name = wanted
            for kind, target in issued():
                ns, _, target_name = target.partition("/")
                if kind in types and ns == namespace and name in (None, target_name):
                    return
        self.report("untraceable-effect",
                    f"{identity} sent {method} {path}, which no effect issued in its journal "
                    f"asks for")

    def _lease(self) -> tuple[str, float]:
        lease = self.store.peek(LEASES, *self.lease)
        if lease is None:
            return "", 0.0
        spec = lease.get("spec") or {}
        renewed = spec.get("renewTime")
        if not renewed:
            return str(spec.get("holderIdentity") or ""), 0.0
        moment = datetime.datetime.fromisoformat(str(renewed).replace("Z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.UTC)
        from nicplug.adapters.simulation.loop import EPOCH
        ends = moment.timestamp() - EPOCH + float(spec.get("leaseDurationSeconds") or 0)
        return str(spec.get("holderIdentity") or ""), ends


def _vm_of(pod: Json | None) -> str:
    return str(((pod or {}).get("metadata", {}).get("labels") or {}).get(nw.VM_NAME_LABEL, ""))


def _requested(pod: Json | None, dialect: str) -> set[str]:
    """The ifNames a pod's SDN request annotation lists."""
    if pod is None:
        return set()
    annotations = nw.annotations_of(pod)
    raw = annotations.get(ob.request_annotation(dialect))
    try:
        entries = nw.parse_list(raw) or []
    except Exception:
        return set()
    if dialect == "deckhouse":
        return {str(e.get("ifName")) for e in entries if isinstance(e, dict)}
    return {str(e.get("interface")) for e in entries if isinstance(e, dict)}


def _readable(raw: object) -> bool:
    return isinstance(raw, str) and nw.parse_list(raw) is not None


_VM_KINDS = {"virtualmachines", "virtualmachineinstances", "pods"}

# (method, plural, subresource, the path names the object) -> the effect types that send it
_WRITES: dict[tuple[str, str, str | None, bool], frozenset[str]] = {
    ("PATCH", "pods", None, True): frozenset({"PatchPodNetworks"}),
    ("PATCH", "virtualmachines", None, True): frozenset({"PatchVirtualMachine", "RestartVM"}),
    ("PATCH", "virtualmachines", "status", True): frozenset(
        {"SetVMCondition", "RemoveVMCondition"}),
    ("POST", "virtualmachineoperations", None, False): frozenset({"RestartVM"}),
    # (a Stop made for other operations names those that join it: `restarts.py`)
    ("PATCH", "virtualmachineoperations", None, True): frozenset({"RestartVM"}),
    ("POST", "virtualmachineinstancemigrations", None, False): frozenset({"CreateMigration"}),
    ("POST", "events", None, False): frozenset({"EmitEvent"}),
    ("PATCH", "events", None, True): frozenset({"EmitEvent"}),  # a repeat counted
}


def effects_for(method: str, path: str) -> tuple[frozenset[str], str, str | None] | None:
    """The effect types that send a `method` to `path`, the namespace, and the name of
    the object when the path names one (a create names it in the body, an Event's name
    is the server's, a VM operation's is not its VM's: those match by namespace); None
    when no effect sends it."""
    parts = path.strip("/").split("/")
    if "namespaces" not in parts:
        return None
    rest = parts[parts.index("namespaces") + 1:]
    if len(rest) < 2 or len(rest) > 4:
        return None
    namespace, plural = rest[0], rest[1]
    name = rest[2] if len(rest) >= 3 else None
    sub = rest[3] if len(rest) == 4 else None
    types = _WRITES.get((method, plural, sub, name is not None))
    if types is None:
        return None
    return types, namespace, name if plural not in ("events", "virtualmachineoperations") else None


def _pod_target(path: str) -> tuple[str, str] | None:
    """(namespace, pod name) a write to a pod concerns."""
    parts = path.strip("/").split("/")
    if "namespaces" not in parts:
        return None
    rest = parts[parts.index("namespaces") + 1:]
    return (rest[0], rest[2]) if len(rest) >= 3 and rest[1] == "pods" else None


def sdn_said(pod: Json) -> dict[str, set[str]]:
    """ifName -> what the SDN says of it on `pod`, for each entry it reports an error
    for (a condition `False` with a message)."""
    said: dict[str, set[str]] = {}
    for e in nw.parse_list(nw.annotations_of(pod).get(nw.DECKHOUSE_STATUS)) or []:
        if not isinstance(e, dict):
            continue
        messages = {str(c["message"]) for c in (e.get("conditions") or [])
                    if isinstance(c, dict) and c.get("status") == "False" and c.get("message")}
        if messages:
            said.setdefault(str(e.get("ifName")), set()).update(messages)
    return said


def _addresses(path: str, spoiled: Spoiled) -> bool:
    """Whether the write at `path` is to the malformed object itself (or its status):
    /api/v1/namespaces/NS/PLURAL/NAME[/...] or /apis/GROUP/VERSION/namespaces/..."""
    parts = path.strip("/").split("/")
    group = parts[1] if parts[:1] == ["apis"] and len(parts) > 1 else ""
    if group != spoiled.resource.group or "namespaces" not in parts:
        return False
    rest = parts[parts.index("namespaces") + 2:]
    return rest[:2] == [spoiled.resource.plural, spoiled.name]


def _knew(seen: Seen, namespace: str, spoiled: Spoiled) -> bool:
    """Whether the replica's informers hold the malformed version (or a later one)."""
    version = seen(spoiled.resource, namespace, spoiled.name)
    return version is not None and version >= spoiled.version


def _vm_target(path: str) -> tuple[str, str] | None:
    """(namespace, VM name) a write concerns, from its path (pods: by the VM's name in
    the launcher pod's name)."""
    parts = path.strip("/").split("/")
    if "namespaces" not in parts:
        return None
    i = parts.index("namespaces")
    rest = parts[i + 1:]
    if len(rest) < 3:
        return None
    ns, plural, name = rest[0], rest[1], rest[2]
    if plural not in _VM_KINDS:
        return None
    if plural == "pods":
        if not name.startswith("virt-launcher-"):
            return None
        name = name[len("virt-launcher-"):].rsplit("-", 1)[0]
    return ns, name


__all__ = ["KVVMS", "VMS", "Seen", "Spoiled", "Violation", "Watchman", "sdn_said"]


@dataclass
class MigrationCount:
    """`migrations-per-operation`: the failed migrations of each operation, as the
    replicas' migrations name it (`OPERATION_ANNOTATION`: its stream, whose last part,
    the attempt, is dropped), counted afresh after every user edit of the VM."""

    cap: int = MachineConfig().migration_attempts
    failed: Counter[tuple[str, str, int]] = field(default_factory=Counter)

    def on_change(self, watchman: Watchman, change: Change) -> None:
        stream = (change.obj["metadata"].get("annotations") or {}).get(OPERATION_ANNOTATION)
        ended = ob.dig(change.obj, "status", "phase") == "Failed"
        if not stream or not ended or (
                change.prev is not None and ob.dig(change.prev, "status", "phase") == "Failed"):
            return
        ns = change.obj["metadata"].get("namespace", "")
        vm = f"{ns}/{ob.dig(change.obj, 'spec', 'vmiName')}"
        key = (vm, str(stream).rpartition("/")[0], watchman.changes[vm])
        self.failed[key] += 1
        if self.failed[key] > self.cap:
            watchman.report("migrations-per-operation",
                            f"{vm}: {self.failed[key]} migrations of {key[1]} failed, more "
                            f"than the {self.cap} --migration-attempts allows")
