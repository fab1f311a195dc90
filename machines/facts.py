"""What one observed `World` says about each network, computed once per decision.

The guards and the effect targets ask the same questions (does every active launcher
pod request this entry? does the SDN report it ready? does the guest have it?); this
module answers them from sets built once, so a decision costs a few set lookups per
operation. Reads the world only; never decides.

What a single record says (the names a KVVM carries, what a pod requests, the
comparison of the desired list with a KVVM) is kept in the record's `derived` slot: a
record the translation reuses while its object does not change is not read twice.
Everything kept there is a pure function of the record, and refers to nothing that
refers back to it (no cycle keeps a record alive).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any

from nicplug.machines.comparator import Comparison, compare
from nicplug.machines.effects import KVVMTemplate
from nicplug.machines.world import (
    KVVM,
    VMI,
    Condition,
    DesiredVM,
    LauncherPod,
    Migration,
    NetworkSpec,
    World,
)

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
_EMPTY: frozenset[str] = frozenset()


def is_live(vmi: VMI | None) -> bool:
    """A VMI exists and has not finished: the VM runs (or is starting)."""
    return vmi is not None and vmi.phase not in FINISHED_PHASES


def active_pods(world: World) -> tuple[LauncherPod, ...]:
    """The launcher pods that serve the VMI (the target pod too during a migration)."""
    vmi = world.vmi
    if not is_live(vmi) or vmi is None:
        return ()
    pods = [p for p in world.pods if p.phase not in FINISHED_PHASES]
    if vmi.active_pods:
        pods = [p for p in pods if p.uid in vmi.active_pods]
    if len(pods) < 2:
        return tuple(pods)
    return tuple(sorted(pods, key=lambda p: p.name))


@dataclass(slots=True)
class _KVVMFacts:
    """The names a KVVM carries, and its latest comparison with a desired list."""

    present: frozenset[str]
    anywhere: frozenset[str]
    compared: tuple[NetworkSpec, ...] | bool | None = False  # False: nothing compared yet
    comparison: Comparison | None = None
    desired_identities: frozenset[str] = _EMPTY


def _kvvm_facts(kvvm: KVVM) -> _KVVMFacts:
    derived: _KVVMFacts | None = kvvm.derived
    if derived is None:
        derived = _KVVMFacts(
            frozenset(i.name for i in kvvm.interfaces if not i.absent),
            frozenset(
                [i.name for i in kvvm.interfaces]
                + [n.name for n in kvvm.networks]
                + [r.if_name for r in kvvm.template_requests]
            ),
        )
        object.__setattr__(kvvm, "derived", derived)
    return derived


def comparison_of(
    networks: tuple[NetworkSpec, ...] | None, kvvm: KVVM, *, ordered: bool = True
) -> tuple[Comparison, frozenset[str]]:
    """`compare(networks, kvvm)` and the desired identities, kept with the KVVM for the
    latest desired list (a KVVM is compared either ordered or not, never both)."""
    derived = _kvvm_facts(kvvm)
    compared = derived.compared
    if derived.comparison is None or not (compared is networks or compared == networks):
        derived.comparison = compare(networks, kvvm, ordered=ordered)
        derived.desired_identities = frozenset(d.identity for d in derived.comparison.desired)
        derived.compared = networks
    return derived.comparison, derived.desired_identities


@dataclass(slots=True)
class _VMIFacts:
    """The names a VMI carries and attaches; `applied` is made on first use (only the
    kubevirt flavour compares with it). Not frozen: one is built per new VMI record."""

    present: frozenset[str]
    anywhere: frozenset[str]
    attached: frozenset[str]
    migration_required: bool
    applied: KVVM | None = None


def applied(vmi: VMI) -> KVVM:
    """What a running VMI's spec holds, as the KVVM-shaped record the comparator reads.

    Where the desired list is the KVVM template itself (the kubevirt flavour), the
    changes still to apply are those between the template and the running VMI's spec:
    KubeVirt syncs one into the other, and nicplug follows. Kept with the VMI record,
    so its comparisons are kept too."""
    derived = _vmi_facts(vmi)
    if derived.applied is None:
        derived.applied = KVVM(vmi.resource_version, True, vmi.interfaces, vmi.networks)
    return derived.applied


def migration_asked(vmi: VMI) -> bool:
    """KubeVirt asks for a migration: `MigrationRequired` is `True`. While it is `False`
    (`AutoMigrationPending`) KubeVirt gives the dynamic-networks controller its grace
    to plug the interface in place (`pkg/network/migration/evaluator.go`): no migration
    is asked for yet, and with a dynamic-networks controller none will be."""
    cond = vmi.condition("MigrationRequired")
    return cond is not None and cond.status == "True"


def migration_grace(vmi: VMI | None) -> Condition | None:
    """The `MigrationRequired=False` / `AutoMigrationPending` condition, while KubeVirt
    gives the dynamic-networks controller its grace; None otherwise."""
    cond = vmi.condition("MigrationRequired") if vmi is not None else None
    return cond if cond is not None and cond.status == "False" else None


def _vmi_facts(vmi: VMI) -> _VMIFacts:
    derived: _VMIFacts | None = vmi.derived
    if derived is None:
        derived = _VMIFacts(
            frozenset(i.name for i in vmi.interfaces if not i.absent),
            frozenset([i.name for i in vmi.interfaces] + [n.name for n in vmi.networks]),
            frozenset(s.name for s in vmi.status_interfaces if s.attached),
            migration_asked(vmi),
        )
        object.__setattr__(vmi, "derived", derived)
    return derived


@dataclass(frozen=True, slots=True)
class _PodFacts:
    """One pod's SDN entries, counted as `Facts` counts them over the active pods:
    requested, reported, ready (and not failed), the first error of each; and every
    identity it mentions.

    An entry is ready only as the interface the pod requests: the status entry's
    ifName is the request's. A network's interface name is not fixed (Deckhouse names
    it after the MAC of its VirtualMachineMACAddress, which a network removed and
    added again does not keep), and the SDN answers a changed request some time
    later: until then its status still reports the old name ready, which is a link
    for an interface nobody asks for, not for the one asked now."""

    requested_by: Mapping[str, int]
    reported_by: Mapping[str, int]
    ready_on: Mapping[str, int]
    errors: Mapping[str, str]
    mentioned: frozenset[str]


def _pod_facts(pod: LauncherPod) -> _PodFacts:
    derived: _PodFacts | None = pod.derived
    if derived is None:
        reported_by: dict[str, int] = {}
        ready_on: dict[str, int] = {}
        errors: dict[str, str] = {}
        asked = {r.identity: r.if_name for r in pod.requested}
        for s in pod.reported:
            reported_by[s.identity] = reported_by.get(s.identity, 0) + 1
            if s.ready and s.error is None and s.identity in asked and (
                    not s.if_name or s.if_name == asked[s.identity]):
                ready_on[s.identity] = ready_on.get(s.identity, 0) + 1
            if s.error is not None:
                errors.setdefault(s.identity, f"{pod.name}: {s.error}")
        requested = frozenset(asked)
        derived = _PodFacts(
            dict.fromkeys(requested, 1),
            reported_by,
            ready_on,
            errors,
            requested | frozenset(reported_by),
        )
        object.__setattr__(pod, "derived", derived)
    return derived


def _add(into: dict[str, int], counts: Mapping[str, int]) -> None:
    for identity, count in counts.items():
        into[identity] = into.get(identity, 0) + count


@dataclass(slots=True)
class Facts:
    """Answers about one world. `comparison` is None until the VM and KVVM are seen.

    Not frozen: one is built per decision, and a frozen dataclass pays a call per field
    to build; nothing changes it once built.
    """

    world: World
    comparison: Comparison | None
    live: bool
    pods: tuple[LauncherPod, ...]
    kvvm_present: frozenset[str]
    kvvm_anywhere: frozenset[str]
    vmi_present: frozenset[str]
    vmi_anywhere: frozenset[str]
    attached: frozenset[str]
    requested_by: Mapping[str, int]
    ready_on: Mapping[str, int]
    reported_by: Mapping[str, int]
    errors: Mapping[str, str]
    lingering: frozenset[str]
    migration_required: bool
    desired_identities: frozenset[str]

    def pod_holds(self, identity: str) -> bool:
        return bool(self.pods) and self.requested_by.get(identity, 0) == len(self.pods)

    def pod_requests_any(self, identity: str) -> bool:
        return self.requested_by.get(identity, 0) > 0

    def sdn_ready(self, identity: str) -> bool:
        return bool(self.pods) and self.ready_on.get(identity, 0) == len(self.pods)

    def sdn_reports_any(self, identity: str) -> bool:
        return self.reported_by.get(identity, 0) > 0

    def running_migration(self) -> Migration | None:
        running = [m for m in self.world.migrations if not m.finished]
        return min(running, key=lambda m: m.name) if running else None

    def migration(self, name: str | None) -> Migration | None:
        return next((m for m in self.world.migrations if m.name == name), None)


SDN_SAYS = "the SDN says: "
"""What precedes the SDN's words (`sdn_messages`) in the message of a failure on a wait
for the SDN: a later decision reads from it whether the SDN still says the same."""


def sdn_messages(facts: Facts, identity: str) -> str:
    """What the SDN last said about `identity` on each active pod not ready with it
    (`pod: message`), for the operator; never a reason to fail."""
    said = [
        f"{pod.name}: {s.message}"
        for pod in facts.pods for s in pod.reported
        if s.identity == identity and not s.ready and s.message
    ]
    return "; ".join(said)


def facts_of(world: World) -> Facts:
    vmi = world.vmi
    live = is_live(vmi)
    pods = active_pods(world)
    readable = [_pod_facts(p) for p in pods if p.observation_error is None]
    requested_by: Mapping[str, int]
    ready_on: Mapping[str, int]
    reported_by: Mapping[str, int]
    errors: Mapping[str, str]
    if len(readable) == 1:  # one launcher pod (no migration): its own counts, shared
        only = readable[0]
        requested_by, ready_on = only.requested_by, only.ready_on
        reported_by, errors = only.reported_by, only.errors
    else:
        requested: dict[str, int] = {}
        ready: dict[str, int] = {}
        reported: dict[str, int] = {}
        failed: dict[str, str] = {}
        for pod_facts in readable:
            _add(requested, pod_facts.requested_by)
            _add(reported, pod_facts.reported_by)
            _add(ready, pod_facts.ready_on)
            for identity, error in pod_facts.errors.items():
                failed.setdefault(identity, error)
        requested_by, ready_on, reported_by, errors = requested, ready, reported, failed
    lingering = _EMPTY
    for pod in world.pods:
        if pod.phase not in FINISHED_PHASES:
            mentioned = _pod_facts(pod).mentioned
            lingering = lingering | mentioned if lingering else mentioned
    kvvm_present = kvvm_anywhere = _EMPTY
    if world.kvvm is not None:
        kvvm_facts = _kvvm_facts(world.kvvm)
        kvvm_present, kvvm_anywhere = kvvm_facts.present, kvvm_facts.anywhere
    vmi_present = vmi_anywhere = attached = _EMPTY
    migration_required = False
    if vmi is not None and live:
        vmi_facts = _vmi_facts(vmi)
        vmi_present, vmi_anywhere = vmi_facts.present, vmi_facts.anywhere
        attached, migration_required = vmi_facts.attached, vmi_facts.migration_required
    comparison = None
    desired_identities = _EMPTY
    if world.vm is not None and world.kvvm is not None:
        if world.vm.in_template and vmi is not None and live:
            comparison, desired_identities = comparison_of(
                world.vm.networks, applied(vmi), ordered=False)
        else:
            comparison, desired_identities = comparison_of(world.vm.networks, world.kvvm)
    return Facts(
        world=world,
        comparison=comparison,
        live=live,
        pods=pods,
        kvvm_present=kvvm_present,
        kvvm_anywhere=kvvm_anywhere,
        vmi_present=vmi_present,
        vmi_anywhere=vmi_anywhere,
        attached=attached,
        requested_by=requested_by,
        ready_on=ready_on,
        reported_by=reported_by,
        errors=errors,
        lingering=lingering,
        migration_required=migration_required,
        desired_identities=desired_identities,
    )


def template_read(kvvm: KVVM) -> KVVMTemplate:
    """The KVVM template a decision read, as the precondition of its patch. The
    resourceVersion is carried, never decided on (see `UNREAD_FIELDS`)."""
    return KVVMTemplate(
        kvvm.resource_version, kvvm.interfaces, kvvm.networks, kvvm.template_requests
    )


UNREAD_FIELDS = frozenset({"resource_version", "derived"})
"""Record fields no decision reads: a `resourceVersion` only orders the object's
changes, `derived` is the machines' own memo (a test checks nothing reads them)."""


def _decision_fields(cls: type) -> Callable[[Any], tuple[Any, ...]]:
    """The values of every field of `cls` a decision may read, as one tuple."""
    names = [f.name for f in fields(cls) if f.name not in UNREAD_FIELDS]
    assert len(names) > 1, "attrgetter of one name returns the value, not a tuple"
    return attrgetter(*names)


_READ: Mapping[type, Callable[[Any], tuple[Any, ...]]] = {
    cls: _decision_fields(cls) for cls in (DesiredVM, KVVM, VMI, LauncherPod)
}
COMPARED_WORLD_FIELDS = (
    "vm", "kvvm", "vmi", "pods", "migrations", "cluster", "networks_ready", "networks_missing",
    "observation_errors", "namespace_labels", "vm_operations", "user_vm_operations",
    "first_seen",
)  # fmt: skip
"""What `same_for_decisions` compares: every field of `World` (a test checks it)."""


def _same_record(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if a is None or b is None or type(a) is not type(b):
        return False
    read = _READ[type(a)]
    return bool(read(a) == read(b))


def same_for_decisions(a: World, b: World) -> bool:
    """`a` and `b` differ at most in what no decision reads (resource versions):
    every decision taken from one is the decision taken from the other."""
    if a is b:
        return True
    return (
        _same_record(a.vm, b.vm)
        and _same_record(a.kvvm, b.kvvm)
        and _same_record(a.vmi, b.vmi)
        and len(a.pods) == len(b.pods)
        and all(_same_record(p, q) for p, q in zip(a.pods, b.pods, strict=True))
        and a.migrations == b.migrations
        and a.cluster == b.cluster
        and a.networks_ready == b.networks_ready
        and a.networks_missing == b.networks_missing
        and a.observation_errors == b.observation_errors
        and a.namespace_labels == b.namespace_labels
        and a.vm_operations == b.vm_operations
        and a.user_vm_operations == b.user_vm_operations
        and a.first_seen == b.first_seen
    )
