"""What one observed `World` says about each network, computed once per decision.

The guards and the effect targets ask the same questions (does every active launcher
pod request this entry? does the SDN report it ready? does the guest have it?); this
module answers them from sets built once, so a decision costs a few set lookups per
operation. Reads the world only; never decides.
"""

from __future__ import annotations

from dataclasses import dataclass

from nicplug.machines.comparator import Comparison, compare
from nicplug.machines.world import KVVM, VMI, LauncherPod, Migration, World

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


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
    return tuple(sorted(pods, key=lambda p: p.name))


def _kvvm_names(kvvm: KVVM | None) -> tuple[frozenset[str], frozenset[str]]:
    if kvvm is None:
        return frozenset(), frozenset()
    present = frozenset(i.name for i in kvvm.interfaces if not i.absent)
    anywhere = frozenset(
        [i.name for i in kvvm.interfaces]
        + [n.name for n in kvvm.networks]
        + [r.if_name for r in kvvm.template_requests]
    )
    return present, anywhere


@dataclass(frozen=True, slots=True)
class Facts:
    """Answers about one world. `comparison` is None until the VM and KVVM are seen."""

    world: World
    comparison: Comparison | None
    live: bool
    pods: tuple[LauncherPod, ...]
    kvvm_present: frozenset[str]
    kvvm_anywhere: frozenset[str]
    vmi_present: frozenset[str]
    vmi_anywhere: frozenset[str]
    attached: frozenset[str]
    requested_by: dict[str, int]
    ready_on: dict[str, int]
    reported_by: dict[str, int]
    errors: dict[str, str]
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


def facts_of(world: World) -> Facts:
    vmi = world.vmi
    live = is_live(vmi)
    pods = active_pods(world)
    readable = [p for p in pods if p.observation_error is None]
    requested_by: dict[str, int] = {}
    ready_on: dict[str, int] = {}
    reported_by: dict[str, int] = {}
    errors: dict[str, str] = {}
    for pod in readable:
        for r in {r.identity for r in pod.requested}:
            requested_by[r] = requested_by.get(r, 0) + 1
        for s in pod.reported:
            reported_by[s.identity] = reported_by.get(s.identity, 0) + 1
            if s.ready and s.error is None:
                ready_on[s.identity] = ready_on.get(s.identity, 0) + 1
            if s.error is not None:
                errors.setdefault(s.identity, f"{pod.name}: {s.error}")
    unfinished = [p for p in world.pods if p.phase not in FINISHED_PHASES]
    lingering = frozenset(
        [r.identity for p in unfinished for r in p.requested]
        + [s.identity for p in unfinished for s in p.reported]
    )
    kvvm_present, kvvm_anywhere = _kvvm_names(world.kvvm)
    vmi_present: frozenset[str] = frozenset()
    vmi_anywhere: frozenset[str] = frozenset()
    attached: frozenset[str] = frozenset()
    migration_required = False
    if vmi is not None and live:
        vmi_present = frozenset(i.name for i in vmi.interfaces if not i.absent)
        vmi_anywhere = frozenset([i.name for i in vmi.interfaces] + [n.name for n in vmi.networks])
        attached = frozenset(s.name for s in vmi.status_interfaces if s.attached)
        migration_required = vmi.condition("MigrationRequired") is not None
    comparison = None
    if world.vm is not None and world.kvvm is not None:
        comparison = compare(world.vm.networks, world.kvvm)
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
        desired_identities=frozenset(d.identity for d in comparison.desired)
        if comparison is not None
        else frozenset(),
    )
