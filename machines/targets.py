"""What the world should look like now, for one VM, given its operations' states.

All operations of a VM are looked at together: one pod patch carries every SDN entry
that should be on that pod, one KVVM patch every interface the KVVM should carry. An
effect is needed only where the world differs from that target, and each is owned by
the operation that caused the difference. The two ordering invariants live here:

* an interface is added to the KVVM of a running VM only once the SDN reports its
  entry ready on every active launcher pod;
* an SDN entry leaves a pod only once the unplug has seen the guest detach it, and
  never while the VMI status still shows it attached, nor while the KVVM or the VMI
  carries it without `state: absent`.

Both hold in the deckhouse flavour, where nicplug drives the whole order. In the
kubevirt flavour the desired state is the KVVM template itself (`DesiredVM.in_template`),
KubeVirt owns the pod's networks annotation and the order: nicplug writes neither the
template nor a pod, and KubeVirt's virt-handler attaches only what multus reports.

Pure: returns effects, never executes them.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import replace

from nicplug.machines.comparator import Comparison
from nicplug.machines.effects import (
    CONDITION_FAILED,
    CONDITION_MIGRATION,
    CONDITION_RESTART,
    CONDITION_ROLLOUT,
    CONDITION_WAITING,
    NICPLUG_CONDITIONS,
    REASON_RESTART,
    AnyEffect,
    CreateMigration,
    PatchPodNetworks,
    PatchVirtualMachine,
    RemoveVMCondition,
    RestartVM,
    SetVMCondition,
    VMNetworkEntry,
)
from nicplug.machines.facts import Facts, migration_grace, template_read
from nicplug.machines.operation import Operation
from nicplug.machines.policy import MIGRATION_OPT_IN_LABEL, MachineConfig
from nicplug.machines.world import (
    KVVM,
    MAIN_IF_NAME,
    RESTARTABLE,
    STOPPABLE_POLICIES,
    DesiredVM,
    Migration,
    NetworkSpec,
    SDNRequest,
    VMOperation,
    World,
    nad_identity,
)

Ops = Mapping[tuple[str, str], Operation]
Owned = list[tuple[Operation, AnyEffect]]

RESTART_PREFIX = "Restart the VM to apply network changes: "
RESTART_ONLY_POLICY = "AlwaysOn"
"""The run policy under which Deckhouse refuses a `Stop` but runs a `Restart`
`VirtualMachineOperation` (`IsApplicableForRunPolicy`, `vmop/powerstate/internal/service/
restart.go` against `stop.go`): nicplug restarts such a VM with one `Restart`."""
DROPPING = frozenset({"GuestDetached", "AnnotationPatched", "SDNReleased"})
CONDITIONED = frozenset({"RestartRequired", "MigrationRequired", "Failed"})


def _live(ops: Ops, network: str, direction: str) -> Operation | None:
    op = ops.get((network, direction))
    return op if op is not None and not op.terminal else None


def _unplug_of(ops: Ops, identity: str, if_name: str, comparison: Comparison
               ) -> Operation | None:
    """The live unplug of the entry `identity` named `if_name`. A network still desired
    is unplugged only under the name the MAC pool no longer gives it (`renamed`): its
    entry under the new name is its plug's."""
    unplug = _live(ops, identity, "unplug")
    if unplug is not None and unplug.if_name != if_name and (
            comparison.desired_entry(identity) is not None):
        return None
    return unplug


def _request(vm: DesiredVM, spec: NetworkSpec) -> SDNRequest:
    return SDNRequest(spec.identity, spec.if_name, spec.id, _mac(vm, spec),
                      spec.ip_assignment_mode, spec.ip_address_names)


def _mac(vm: DesiredVM, spec: NetworkSpec) -> str | None:
    """The entry's MAC: the one the platform allocated for it, else the VM's status'."""
    return spec.mac or vm.macs.get(spec.identity)


def pod_patches(facts: Facts, ops: Ops, vm: DesiredVM, comparison: Comparison) -> Owned:
    out: Owned = []
    if vm.in_template:
        return out  # KubeVirt's virt-controller writes the pods' networks annotation
    # a network whose MAC is not allocated yet has no name: nothing is written for it;
    # nor for one whose IPAM address is not (Deckhouse leaves it out: `ipam.py`)
    desired = [d for d in comparison.desired
               if d.type != "Main" and not d.awaits_mac and not d.awaits_address]
    for pod in facts.pods:
        if pod.observation_error is not None:
            continue  # never overwrite an annotation nicplug could not read
        kept: list[SDNRequest] = []
        owner: Operation | None = None
        for entry in pod.requested:
            unplug = _unplug_of(ops, entry.identity, entry.if_name, comparison)
            if unplug and unplug.state in DROPPING and _let_go(facts, entry.if_name):
                owner = owner or unplug
                continue
            kept.append(entry)
        renamed = _renamed(kept, desired, ops, facts)
        if renamed:  # the pool named it anew: Deckhouse rewrites the entry, so does nicplug
            kept = [renamed.get(e.identity, e) for e in kept]
            owner = owner or _live(ops, next(iter(renamed)), "plug")
        held = {e.identity for e in kept} | {e.identity for e in pod.requested}
        # a name the MAC pool handed on is asked for only once the entry of the network
        # that had it leaves the pod (its unplug saw the guest let go) or is renamed in
        # this very patch: one entry per interface name on a pod (an annotation listing
        # one ifName twice is unreadable, to the SDN and to nicplug, which then never
        # writes that pod again)
        named = {e.if_name for e in kept}
        for spec in desired:
            plug = _live(ops, spec.identity, "plug")
            if plug and plug.state != "RestartRequired" and spec.identity not in held and (
                    spec.if_name not in named):
                named.add(spec.if_name)
                kept.append(_request(vm, spec))
                owner = owner or plug
        if owner is not None:
            rank = {spec.identity: index for index, spec in enumerate(desired)}
            kept.sort(key=lambda e: rank.get(e.identity, len(rank)))  # desired order first
            patch = PatchPodNetworks(pod.namespace, pod.name, pod.uid, tuple(kept), pod.requested)
            out.append((owner, patch))
    return out


def _renamed(kept: list[SDNRequest], desired: list[NetworkSpec], ops: Ops, facts: Facts
             ) -> dict[str, SDNRequest]:
    """identity → the entry as now named, for each entry of a network being plugged that
    the MAC pool names otherwise since it was requested (`mac_pool.go` holds only the
    VM's `status.networks`, so an unlisted network may take another VMMAC): Deckhouse
    writes the whole `networks-spec` from the pool on every reconcile. Not while the
    guest, the KVVM or the VMI holds the first name: that interface is unplugged first
    (`comparator.renamed`), and its link stays until the guest let it go."""
    renamed: dict[str, SDNRequest] = {}
    if not any(d.named_by_mac for d in desired):
        return renamed  # no name of the pool's: nothing is named anew
    by_identity = {d.identity: d for d in desired}
    for entry in kept:
        spec = by_identity.get(entry.identity)
        plug = _live(ops, entry.identity, "plug")
        if spec is not None and spec.named_by_mac and spec.if_name != entry.if_name and (
                plug is not None and plug.state != "RestartRequired") and (
                _let_go(facts, entry.if_name)):
            renamed[entry.identity] = SDNRequest(
                spec.identity, spec.if_name, spec.id, spec.mac,
                spec.ip_assignment_mode, spec.ip_address_names)
    return renamed


def asked_as(facts: Facts, identity: str, if_name: str) -> bool:
    """Every pod asks the SDN for `identity` under `if_name`: the SDN's readiness is for
    that very interface, not for one a name the MAC pool gave before (Deckhouse writes
    the KVVM only once the pod's `networks-spec` is the one it derived,
    `patchPodNetworkAnnotation` before `isNetworkReadyOnPod`)."""
    return all(any(r.identity == identity and r.if_name == if_name for r in pod.requested)
               for pod in facts.pods)


def _let_go(facts: Facts, if_name: str) -> bool:
    """The guest has let go of `if_name` as far as the world shows: the VMI status does
    not report it attached, and neither the KVVM nor the running VMI carries it without
    `state: absent` (a KVVM write attaching it landed after the unplug saw the guest
    detached: the SDN entry stays until the interface is marked absent again)."""
    return (if_name not in facts.attached and if_name not in facts.kvvm_present
            and if_name not in facts.vmi_present)


def _identify(kvvm: KVVM, comparison: Comparison, ops: Ops) -> dict[str, str]:
    """interface name → the network the KVVM carries under it. The template's SDN
    requests say it first, as `comparator.carried_networks` reads them: a name the MAC
    pool handed on to a desired network (`mac_pool.go` holds only `status.networks`,
    which drops every entry once the spec asks Main alone) is still the removed
    network's interface in the KVVM until its unplug marks it absent and takes it out."""
    names = {op.if_name: op.network for op in ops.values() if op.if_name}
    names.update({d.if_name: d.identity for d in comparison.desired if d.if_name})
    names.update({r.if_name: r.identity for r in kvvm.template_requests})
    names[MAIN_IF_NAME] = "Main"
    return names


def _insert(entries: list[VMNetworkEntry], new: VMNetworkEntry, order: list[str]) -> None:
    """Insert after the last entry that precedes `new` in the desired order."""
    before = order[: order.index(new.identity)] if new.identity in order else order
    at = 0
    for index, entry in enumerate(entries):
        if entry.identity in before:
            at = index + 1
    entries.insert(at, new)


def template_identities(facts: Facts, namespace: str, config: MachineConfig) -> dict[str, str]:
    """identity → interface name of every multus network the KVVM template or the running
    VMI's spec names (absent ones too), where the template is the desired list: the
    user names the interfaces, the NAD says the network (`nad_identity`)."""
    found: dict[str, str] = {}
    world = facts.world
    networks = list(world.kvvm.networks) if world.kvvm is not None else []
    if world.vmi is not None and facts.live:
        networks += world.vmi.networks
    for network in networks:
        if network.multus_network is None:
            continue
        identity = nad_identity(
            network.multus_network, namespace, config.cluster_network_nad_namespace,
            network.name)
        if identity is not None:
            found.setdefault(identity, network.name)
    return found


def kvvm_patch(facts: Facts, ops: Ops, vm: DesiredVM, comparison: Comparison) -> Owned:
    kvvm = facts.world.kvvm
    if kvvm is None or vm.in_template:
        return []  # the template is the user's: nicplug follows it, never writes it
    live_ops = [op for op in ops.values() if not op.terminal]
    if not live_ops:
        return []
    adding: list[tuple[NetworkSpec, Operation]] = []
    if facts.live:
        for spec in comparison.desired:
            plug = _live(ops, spec.identity, "plug")
            if plug is None or plug.state == "RestartRequired" or spec.type == "Main":
                continue
            if spec.awaits_mac or spec.awaits_address:
                continue
            if spec.if_name in facts.kvvm_present or not facts.sdn_ready(spec.identity):
                continue
            if spec.named_by_mac and not asked_as(facts, spec.identity, spec.if_name):
                continue  # the pool named it anew: the pod is asked for that name first
            adding.append((spec, plug))
        # an id-only update Deckhouse applies with no restart (`guards.id_only`): the new
        # id is written to the KVVM (its acpiIndex and SDN request), for the next boot
        updating = [op for op in live_ops if op.direction == "update" and op.state == "Requested"]
        if not adding and not updating and not any(
            op.direction == "unplug" and op.state != "RestartRequired" for op in live_ops
        ):
            return []  # no operation asks anything of a running VM's KVVM
    names = _identify(kvvm, comparison, ops)
    current = [VMNetworkEntry(i.name, names.get(i.name, ""), i.absent) for i in kvvm.interfaces]
    owner: Operation | None = None
    if not facts.live:
        entries = [
            VMNetworkEntry(d.if_name, d.identity) for d in comparison.desired
            if not d.awaits_mac and not d.awaits_address
        ]
        entries += [e for e in current if not e.identity]  # not nicplug's to remove
        owner = min(live_ops, key=lambda o: o.stream)
    else:
        entries = list(current)
        order = [d.identity for d in comparison.desired]
        for spec, plug in adding:
            entries = [e for e in entries if e.if_name != spec.if_name]
            _insert(entries, VMNetworkEntry(spec.if_name, spec.identity), order)
            owner = owner or plug
        for entry in list(entries):
            unplug = _unplug_of(ops, entry.identity, entry.if_name, comparison)
            if unplug is None or unplug.state == "RestartRequired" or entry.identity == "Main":
                continue
            if unplug.state == "SDNReleased":
                entries.remove(entry)
                owner = owner or unplug
            elif not entry.absent:
                entries[entries.index(entry)] = replace(entry, absent=True)
                owner = owner or unplug
        owner = owner or (updating[0] if updating else None)
    if owner is None:
        return []
    # each interface's request: as desired, where it is the desired name; else as the
    # template has it (an interface being unplugged, under a name the pool took back)
    by_name = {d.if_name: d for d in comparison.desired if d.if_name}
    known = {r.if_name: r for r in kvvm.template_requests}
    requests = tuple(
        _request(vm, by_name[e.if_name])
        if e.if_name in by_name and by_name[e.if_name].identity == e.identity
        else known.get(e.if_name, SDNRequest(e.identity, e.if_name))
        for e in entries
        if e.identity and e.identity != "Main" and not e.absent
    )
    if entries == current and requests == kvvm.template_requests:
        return []
    pods = tuple(p.uid for p in facts.pods) if adding else ()  # whose SDN was ready
    patch = PatchVirtualMachine(
        vm.namespace, vm.name, tuple(entries), requests, template_read(kvvm), pods,
        stopped=not facts.live,
    )
    return [(owner, patch)]


def _condition(
    vm: DesiredVM, type_: str, wanted: tuple[str, str] | None, clear_reason: str
) -> SetVMCondition | RemoveVMCondition | None:
    """The SetVMCondition needed to bring `type_` to `wanted` (reason, message), if any."""
    current = next((c for c in vm.conditions if c.type == type_), None)
    if wanted is not None:
        reason, message = wanted
        if current and (current.status, current.reason, current.message) == ("True", *wanted):
            return None
        return SetVMCondition(vm.namespace, vm.name, type_, "True", reason, message)
    if current is None or current.status != "True":
        return None
    if type_ == CONDITION_RESTART:
        if not current.message.startswith(RESTART_PREFIX):
            return None  # someone else's pending restart: not nicplug's to clear
        # as the platform clears it; only the condition as it was seen
        return RemoveVMCondition(vm.namespace, vm.name, type_, current.message)
    return SetVMCondition(vm.namespace, vm.name, type_, "False", clear_reason, "")


def conditions_kept(vm: DesiredVM) -> bool:
    """Would a condition nicplug sets on the VM stay there? Not on a KubeVirt VM (the
    kubevirt flavour): at every sync of a VM that has a VMI — any write to the VM, its
    status included, is one — KubeVirt's VM controller copies the VMI's conditions and
    removes every other one but `Ready`, `Failure` and `RestartRequired`
    (`syncConditions`, `pkg/virt-controller/watch/vm/vm.go`). A condition written there
    is undone at once, and writing it again would be a write loop with KubeVirt; a VM
    without a VMI keeps its conditions, but then nothing runs that a condition of
    nicplug's could report on (a stopped VM takes its networks from the template at its
    next boot). So the kubevirt flavour writes none: its operations' Events, `explain`
    and the metrics say it. The Deckhouse VM is nicplug's to write."""
    return not vm.in_template


def conditions(
    facts: Facts, ops: Ops, vm: DesiredVM, config: MachineConfig, asked: frozenset[tuple[str, str]]
) -> Owned:
    if not conditions_kept(vm):
        return []
    vmi = facts.world.vmi
    bypassed = [o for o in ops.values() if vmi is not None and o.bypassed_vmi == vmi.uid]
    if not ops or not (
        bypassed
        or any(o.state in CONDITIONED or o.waiting for o in ops.values())
        or any(c.type in NICPLUG_CONDITIONS and c.status == "True" for c in vm.conditions)
    ):
        return []  # nothing to say and nothing to clear
    ordered = sorted(ops.values(), key=lambda o: o.stream)
    out: Owned = []
    restart = [o for o in ordered if o.state == "RestartRequired"]
    wanted_restart = None
    if restart:
        named = ", ".join(f"{o.network} ({o.message or o.direction})" for o in restart)
        kvvm = facts.world.kvvm
        if vm.approval == "Automatic" and kvvm is not None:
            named += why_not_restarted(facts, vm, config, _streams(restart))
        wanted_restart = (REASON_RESTART, RESTART_PREFIX + named)
    why_blocked = migration_blocked(facts, config)
    blocked = [o for o in ordered if o.state == "MigrationRequired" and why_blocked]
    wanted_migration = None
    if blocked and why_blocked:
        named = ", ".join(f"{o.network} {o.direction}" for o in blocked)
        wanted_migration = (
            "MigrationRequired",
            f"{named} waits for a live migration that nicplug will not start: {why_blocked}. "
            f"{MIGRATION_ADVICE}",
        )
    held = [o for o in ordered if o.state == "MigrationRequired" and o.held and not why_blocked]
    if held:
        blocked = held
        named = ", ".join(f"{o.network} {o.direction}" for o in held)
        assert held[0].held is not None
        wanted_migration = (REASON_SLOT, f"{named} {migration_slot_wait(held[0].held)}")
    failed = [o for o in ordered if o.state == "Failed" and (o.network, o.direction) in asked]
    wanted_failed = None
    if failed:
        named = "; ".join(f"{o.network} {o.direction}: {o.reason}: {o.message}" for o in failed)
        if any(o.reason in ("MigrationFailed", "MigrationTimeout") for o in failed):
            named += f". {MIGRATION_ADVICE}"
        wanted_failed = (failed[0].reason or "Failed", named)
    wanted_rollout = None
    if bypassed:
        bypassed.sort(key=lambda o: o.stream)
        named = ", ".join(f"{o.network} {o.direction}" for o in bypassed)
        wanted_rollout = (
            "AppliedDespiteStage",
            f"{named} applied to the running VM although vmRolloutStrategy is Stage "
            f"(KubeVirt applies NIC changes live); {ROLLOUT_ADVICE}",
        )
    waiting = [o for o in ordered if o.waiting and not o.terminal]
    wanted_waiting = None
    if waiting:
        named = "; ".join(f"{o.network} {o.direction} ({o.state}): {o.waiting}" for o in waiting)
        wanted_waiting = ("SDNNotReady", f"Not yet, the SDN says: {named}")
    for type_, wanted, owners, clear in (
        (CONDITION_RESTART, wanted_restart, restart, ""),  # removed once applied
        (CONDITION_WAITING, wanted_waiting, waiting, "NoLongerWaiting"),
        (CONDITION_MIGRATION, wanted_migration, blocked, "MigrationNotRequired"),
        (CONDITION_FAILED, wanted_failed, failed, "Recovered"),
        (CONDITION_ROLLOUT, wanted_rollout, bypassed, "Restarted"),
    ):
        effect = _condition(vm, type_, wanted, clear)
        if effect is not None:
            restarted = _restarted_for(facts) if type_ == CONDITION_RESTART else ()
            out.append((owners[0] if owners else _keeper(ordered, restarted), effect))
    return out


def _restarted_for(facts: Facts) -> tuple[str, ...]:
    """The operations nicplug's latest restart of the VM was for (its `Stop` says them;
    () when it does not: a restart through the KVVM's run strategy)."""
    stop = facts.world.latest_stop
    return stop.for_streams if stop is not None else ()


def _keeper(ordered: list[Operation], named: tuple[str, ...] = (),
            unfinished_first: bool = False) -> Operation:
    """Whose a VM-wide effect is that no waiting operation asks for (a restart's start,
    a condition cleared once nothing waits): the operations `named`, else (with
    `unfinished_first`) one not finished, else the newest. Never simply the oldest: an
    operation finished long ago was then journaled as starting and clearing after every
    later change's restart, its history telling of restarts it never asked for and its
    effects growing with each change (seed 25834)."""
    among = ([o for o in ordered if str(o.stream) in named]
             or (unfinished_first and [o for o in ordered if not o.terminal])
             or ordered)
    return max(among, key=lambda o: (o.opened_at, str(o.stream)))


ROLLOUT_ADVICE = "restart the VM to bring it in line with its rollout strategy"
REASON_SLOT = "WaitingForMigrationSlot"
"""`NetworkHotplugAwaitingMigration`'s reason while nicplug's cap holds the migration."""


def migration_slot_wait(held: tuple[int, int]) -> str:
    """What a migration held back by nicplug's cluster-wide cap waits for, in words."""
    in_flight, cap = held
    return (
        f"waits for a migration slot: {in_flight} of nicplug's migrations are in flight "
        f"cluster-wide (KubeVirt's workload-update ones count too) and at most {cap} run "
        f"at once (--max-migrations); it is asked for "
        f"again until one ends"
    )

MIGRATION_ADVICE = (
    "To apply it, ask a cluster admin to migrate the VM (virtctl migrate), or restart the VM"
)


WORKLOAD_UPDATER = (
    "KubeVirt's workload updater migrates it (the KubeVirt CR's "
    "spec.workloadUpdateStrategy.workloadUpdateMethods holds LiveMigrate)"
)


def kubevirt_migrates(facts: Facts) -> bool:
    """Will KubeVirt migrate the VMI by itself? Its workload updater does, for a VMI
    whose `MigrationRequired` is `True` and that is live-migratable, where the KubeVirt
    CR says `LiveMigrate` (`workload-updater.go`); it raises that condition for the
    upstream KubeVirt VM's multus interfaces only (the kubevirt flavour). nicplug then
    creates no migration: it follows KubeVirt's."""
    world = facts.world
    return (
        world.vm is not None and world.vm.in_template
        and "LiveMigrate" in world.cluster.workload_update_methods
        and world.vmi is not None and world.vmi.live_migratable
    )


def kubevirt_overrides(facts: Facts, config: MachineConfig) -> str | None:
    """Where nicplug's policy would not migrate the VM but KubeVirt's workload updater
    will anyway: what says so, and which setting decides it (None: no disagreement)."""
    if not kubevirt_migrates(facts):
        return None
    blocked = migration_blocked(facts, config)
    if blocked is None:
        return None
    return (
        f"nicplug would not migrate the VM ({blocked}), but KubeVirt will migrate it anyway: "
        f"{WORKLOAD_UPDATER}; that setting decides it, not --migrations"
    )


def migration_blocked(facts: Facts, config: MachineConfig) -> str | None:
    """Why nicplug may not or cannot migrate the VM now (None: it may): its policy,
    the VM's opt-in and eviction settings, KubeVirt's `LiveMigratable`."""
    world = facts.world
    vmi, kvvm, vm = world.vmi, world.kvvm, world.vm
    if config.migrations in ("never", "manual"):
        return f"nicplug's migrations are off (--migrations={config.migrations})"
    if config.migrations == "opt-in":
        # the VM's own label decides; else its namespace's
        labels = {**world.namespace_labels, **(vm.labels if vm else {}),
                  **(kvvm.labels if kvvm else {})}
        if labels.get(MIGRATION_OPT_IN_LABEL) != "true":
            return (
                f"the VM has not opted in to nicplug's migrations (label "
                f"{MIGRATION_OPT_IN_LABEL}=true on the VM or its namespace, "
                f"--migrations=opt-in)"
            )
    if kvvm is not None and kvvm.eviction_strategy == "None":
        return "the VM's evictionStrategy is None: it is not to be migrated"
    if vmi is None or not vmi.live_migratable:
        cond = vmi.condition("LiveMigratable") if vmi else None
        said = cond is not None and (cond.reason or cond.message)
        detail = f" ({cond.reason}: {cond.message})" if cond is not None and said else ""
        return f"the VMI is not LiveMigratable{detail}"
    return None


def restartable(facts: Facts, vm: DesiredVM, config: MachineConfig) -> bool:
    """nicplug may restart this VM: through Deckhouse's operations, its run policy lets
    Deckhouse stop and start it; through the run strategy, that brings a halted VM back."""
    if config.restarts == "operations":
        return vm.run_policy in STOPPABLE_POLICIES or vm.run_policy == RESTART_ONLY_POLICY
    kvvm = facts.world.kvvm
    return kvvm is not None and kvvm.run_strategy in RESTARTABLE


WAITS_FOR_OPERATION = "nicplug waits for VirtualMachineOperation "
"""How `why_not_restarted` names the unfinished operation a restart waits for (the
simulation's liveness check reads the name back from the VM's condition)."""


def why_not_restarted(
    facts: Facts, vm: DesiredVM, config: MachineConfig, streams: tuple[str, ...] = ()
) -> str:
    """What the `NetworkHotplugRestartRequired` message adds when nicplug, asked
    to restart (`Automatic`) for the operations `streams`, cannot: nothing when it can."""
    world = facts.world
    if config.restarts == "operations":
        taken = _taken_back_from(world, streams)
        if taken is not None:
            return (f"; the user started, stopped or restarted the VM while nicplug"
                    f" restarted it for this change (VirtualMachineOperation {taken.name}),"
                    " so nicplug leaves the restart to you")
        if not restartable(facts, vm, config):
            return (f"; runPolicy {vm.run_policy} does not let Deckhouse stop and start the"
                    " VM (only Manual, AlwaysOnUnlessStoppedManually and, with a Restart,"
                    " AlwaysOn do), so nicplug leaves the restart to you")
        type_ = "Restart" if vm.run_policy == RESTART_ONLY_POLICY else "Stop"
        stop = world.vm_operation(type_, world.vmi.uid) if world.vmi is not None else None
        unfinished = world.operation_unfinished
        if stop is None and unfinished is not None:
            return (f"; {WAITS_FOR_OPERATION}{unfinished.name}"
                    f" ({unfinished.type}) to finish: Deckhouse runs a VM's operations"
                    " one at a time")
        if stop is not None and stop.phase in ("Failed", "Superseded"):
            return (f"; Deckhouse did not stop it (VirtualMachineOperation {stop.name}"
                    f" {stop.phase}: {stop.message or 'no message'}), so nicplug leaves"
                    " the restart to you")
        return ""
    kvvm = world.kvvm
    if kvvm is not None and not restartable(facts, vm, config):
        return (f"; runStrategy {kvvm.run_strategy or 'unset'} would not bring a"
                " halted VM back, so nicplug leaves the restart to you")
    return ""


def _start_again(facts: Facts, vm: DesiredVM, config: MachineConfig) -> RestartVM | None:
    """The start of a restart nicplug began (it stopped the VM): None when it began none."""
    world = facts.world
    if config.restarts == "operations":
        stopped = world.stopped_for_restart
        if stopped is None:
            return None
        return RestartVM(vm.namespace, vm.name, stopped.vmi_uid, "start", by="operation")
    kvvm = world.kvvm
    if kvvm is None or kvvm.resumes is None:
        return None
    return RestartVM(vm.namespace, vm.name, "", "start", kvvm.resumes)


def _streams(ops: list[Operation]) -> tuple[str, ...]:
    return tuple(sorted(str(o.stream) for o in ops))


def _taken_back_from(world: World, streams: tuple[str, ...]) -> VMOperation | None:
    """nicplug's `Stop` the user took the VM back from (`World.taken_back`), when its
    restart was for every one of the operations `streams`: one stop per change."""
    taken = world.taken_back
    if taken is None or not streams or not set(streams) <= set(taken.for_streams):
        return None
    return taken


def _halt(facts: Facts, vm: DesiredVM, config: MachineConfig,
          streams: tuple[str, ...]) -> RestartVM | None:
    """The first step of a restart of the running VMI for the operations `streams`,
    unless one began already, or the user took the VM back from nicplug's restart for
    them (nicplug stops a VM once for one change). Through Deckhouse's operations, not
    while one of the VM's operations is unfinished (`World.operation_unfinished`)."""
    world = facts.world
    vmi, kvvm = world.vmi, world.kvvm
    if vmi is None or kvvm is None or not restartable(facts, vm, config):
        return None
    if config.restarts == "operations":
        if _taken_back_from(world, streams) is not None or world.operation_unfinished:
            return None
        # one Stop (or Restart) per VMI uid, ever: a refused one is not asked again
        if vm.run_policy == RESTART_ONLY_POLICY:
            if world.vm_operation("Restart", vmi.uid) is not None:
                return None
            return RestartVM(vm.namespace, vm.name, vmi.uid, "restart", by="operation")
        if world.vm_operation("Stop", vmi.uid) is not None:
            return None
        return RestartVM(vm.namespace, vm.name, vmi.uid, "halt", by="operation",
                         for_streams=streams, number=world.next_stop_number,
                         after=world.latest_user_operations)
    if kvvm.resumes is not None:
        return None
    return RestartVM(vm.namespace, vm.name, vmi.uid, "halt", kvvm.run_strategy)


def restarts_and_migrations(facts: Facts, ops: Ops, vm: DesiredVM, config: MachineConfig) -> Owned:
    waits = ("RestartRequired", "MigrationRequired")
    if facts.live and not any(o.state in waits for o in ops.values()):
        return []  # a running VM none of whose operations waits for a restart or migration
    out: Owned = []
    ordered = sorted(ops.values(), key=lambda o: o.stream)
    restart = [o for o in ordered if o.state == "RestartRequired"]
    if not facts.live and not restart:
        # stopped by nicplug, and the change is written: start it again
        comparison = facts.comparison
        start = _start_again(facts, vm, config)
        if start is not None and ordered and comparison is not None and not comparison.changes:
            out.append((_keeper(ordered, _restarted_for(facts), unfinished_first=True), start))
    if not any(o.state in waits for o in ops.values()):
        return out
    vmi = facts.world.vmi
    if restart and vm.approval == "Automatic" and facts.live:
        halt = _halt(facts, vm, config, _streams(restart))
        if halt is not None:
            out.append((restart[0], halt))
    waiting = [o for o in ordered if o.state == "MigrationRequired"]
    if (
        waiting
        and vmi is not None
        and facts.live
        and migration_blocked(facts, config) is None
        and facts.running_migration() is None
        and not kubevirt_migrates(facts)  # never a second migrator on one VMI
    ):
        name = migration_name(facts, vm, waiting[0])
        out.append((waiting[0], CreateMigration(vm.namespace, vm.name, name)))
    return out


KUBEVIRT_GRACE = 15.0
"""KubeVirt's `DynamicNetworkControllerGracePeriod` (`pkg/network/migration/evaluator.go`):
how long `MigrationRequired` stays `False` before it turns `True` (and KubeVirt's VMI
controller looks again every 10 s while it is `False`)."""
GRACE_WAIT = "KubeVirt gives the dynamic-networks controller until"
"""How an operation waiting out KubeVirt's grace says so (`Waiting`; `explain`)."""
GRACE_STATES = frozenset({"Requested", "VMIPatched", "AnnotationPatched", "GuestDetached"})


def grace_wait(facts: Facts, op: Operation) -> str:
    """What an operation of the kubevirt flavour waits for while KubeVirt's VMI says
    `MigrationRequired=False` (`AutoMigrationPending`): the dynamic-networks controller
    may still plug (or unplug) the interface in place; only after the grace does
    KubeVirt ask for a migration. "" when KubeVirt gives no grace."""
    if op.flavour != "kubevirt" or op.state not in GRACE_STATES or not facts.live:
        return ""
    cond = migration_grace(facts.world.vmi)
    if cond is None:
        return ""
    until = _later(cond.since, KUBEVIRT_GRACE) or f"{KUBEVIRT_GRACE:g} s after it raised it"
    return (
        f"{GRACE_WAIT} {until} to {op.direction} the interface in place (the VMI's "
        f"MigrationRequired is False, {cond.reason or 'AutoMigrationPending'}); then it asks "
        f"for a migration"
    )


def _later(rfc3339: str, seconds: float) -> str:
    """`rfc3339` moved on by `seconds`, in the same form ("" when it cannot be read)."""
    import datetime

    try:
        moment = datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))
    except ValueError:
        return ""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    later = moment.astimezone(datetime.UTC) + datetime.timedelta(seconds=seconds)
    return later.strftime("%Y-%m-%dT%H:%M:%SZ")


def migration_base(vm_name: str, op: Operation) -> str:
    """The name of the migration nicplug creates for an attempt (`-2`, `-3`… after it)."""
    return f"nicplug-{vm_name}-{zlib.crc32(op.stream.encode()):08x}"


def own_failed_migration(facts: Facts, op: Operation) -> Migration | None:
    """A migration nicplug created for this attempt that ended `Failed`, perhaps before
    nicplug saw it run (KubeVirt refused or failed it at once)."""
    vm = facts.world.vm
    if vm is None:
        return None
    base = migration_base(vm.name, op)
    return next((m for m in facts.world.migrations if m.phase == "Failed" and (
        m.name == base or m.name.startswith(base + "-"))), None)


def migration_name(facts: Facts, vm: DesiredVM, op: Operation) -> str:
    """The operation's migration: a fixed name, so asking twice finds the first; a
    migration of that name that already ended (failed before nicplug saw it run) is
    never asked for again under the same name: the next free `-2`, `-3`… is."""
    base = migration_base(vm.name, op)
    taken = {m.name for m in facts.world.migrations if m.finished}
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    return name
