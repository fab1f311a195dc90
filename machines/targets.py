"""What the world should look like now, for one VM, given its operations' states.

All operations of a VM are looked at together: one pod patch carries every SDN entry
that should be on that pod, one KVVM patch every interface the KVVM should carry. An
effect is needed only where the world differs from that target, and each is owned by
the operation that caused the difference. The two ordering invariants live here:

* an interface is added to the KVVM of a running VM only once the SDN reports its
  entry ready on every active launcher pod (multus: or once the grace period waived it);
* an SDN entry leaves a pod only once the unplug has seen the guest detach it, and
  never while the VMI status still shows it attached.

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
from nicplug.machines.facts import Facts
from nicplug.machines.operation import Operation
from nicplug.machines.policy import MachineConfig
from nicplug.machines.world import KVVM, MAIN_IF_NAME, DesiredVM, NetworkSpec, SDNRequest

Ops = Mapping[tuple[str, str], Operation]
Owned = list[tuple[Operation, AnyEffect]]

RESTART_PREFIX = "Restart the VM to apply network changes: "
DROPPING = frozenset({"GuestDetached", "AnnotationPatched", "SDNReleased"})
CONDITIONED = frozenset({"RestartRequired", "MigrationRequired", "Failed"})


def _live(ops: Ops, network: str, direction: str) -> Operation | None:
    op = ops.get((network, direction))
    return op if op is not None and not op.terminal else None


def _request(vm: DesiredVM, spec: NetworkSpec) -> SDNRequest:
    return SDNRequest(spec.identity, spec.if_name, spec.id, vm.macs.get(spec.identity))


def multus_network(config: MachineConfig, vm: DesiredVM, spec: NetworkSpec) -> str | None:
    if config.dialect_kind != "multus" or spec.type == "Main":
        return None
    namespace = vm.namespace if spec.type == "Network" else config.cluster_network_nad_namespace
    return f"{namespace}/{spec.name}"


def pod_patches(facts: Facts, ops: Ops, vm: DesiredVM, comparison: Comparison) -> Owned:
    out: Owned = []
    desired = [d for d in comparison.desired if d.type != "Main"]
    for pod in facts.pods:
        if pod.observation_error is not None:
            continue  # never overwrite an annotation nicplug could not read
        kept: list[SDNRequest] = []
        owner: Operation | None = None
        for entry in pod.requested:
            unplug = _live(ops, entry.identity, "unplug")
            if unplug and unplug.state in DROPPING and entry.if_name not in facts.attached:
                owner = owner or unplug
                continue
            kept.append(entry)
        held = {e.identity for e in kept} | {e.identity for e in pod.requested}
        for spec in desired:
            plug = _live(ops, spec.identity, "plug")
            if plug and plug.state != "RestartRequired" and spec.identity not in held:
                kept.append(_request(vm, spec))
                owner = owner or plug
        if owner is not None:
            rank = {spec.identity: index for index, spec in enumerate(desired)}
            kept.sort(key=lambda e: rank.get(e.identity, len(rank)))  # desired order first
            out.append((owner, PatchPodNetworks(pod.namespace, pod.name, pod.uid, tuple(kept))))
    return out


def _identify(kvvm: KVVM, comparison: Comparison, ops: Ops) -> dict[str, str]:
    names = {op.if_name: op.network for op in ops.values() if op.if_name}
    names.update({r.if_name: r.identity for r in kvvm.template_requests})
    names.update({d.if_name: d.identity for d in comparison.desired})
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


def kvvm_patch(
    facts: Facts, ops: Ops, vm: DesiredVM, comparison: Comparison, config: MachineConfig
) -> Owned:
    kvvm = facts.world.kvvm
    if kvvm is None:
        return []
    live_ops = sorted((op for op in ops.values() if not op.terminal), key=lambda o: o.stream)
    if not live_ops:
        return []
    adding: list[tuple[NetworkSpec, Operation]] = []
    if facts.live:
        for spec in comparison.desired:
            plug = _live(ops, spec.identity, "plug")
            if plug is None or plug.state == "RestartRequired" or spec.type == "Main":
                continue
            if spec.if_name in facts.kvvm_present:
                continue
            waived = config.may_skip_sdn_ready and plug.waived
            if not (facts.sdn_ready(spec.identity) or waived):
                continue
            adding.append((spec, plug))
        if not adding and not any(
            op.direction == "unplug" and op.state != "RestartRequired" for op in live_ops
        ):
            return []  # no operation asks anything of a running VM's KVVM
    names = _identify(kvvm, comparison, ops)
    multus = {n.name: n.multus_network for n in kvvm.networks}
    current = [
        VMNetworkEntry(i.name, names.get(i.name, ""), i.absent, multus.get(i.name))
        for i in kvvm.interfaces
    ]
    owner: Operation | None = None
    if not facts.live:
        entries = [
            VMNetworkEntry(d.if_name, d.identity, False, multus_network(config, vm, d))
            for d in comparison.desired
        ]
        entries += [e for e in current if not e.identity]  # not nicplug's to remove
        owner = live_ops[0]
    else:
        entries = list(current)
        order = [d.identity for d in comparison.desired]
        for spec, plug in adding:
            entries = [e for e in entries if e.if_name != spec.if_name]
            _insert(entries, VMNetworkEntry(spec.if_name, spec.identity, False,
                                            multus_network(config, vm, spec)), order)  # fmt: skip
            owner = owner or plug
        for entry in list(entries):
            unplug = _live(ops, entry.identity, "unplug")
            if unplug is None or unplug.state == "RestartRequired" or entry.identity == "Main":
                continue
            if unplug.state == "SDNReleased":
                entries.remove(entry)
                owner = owner or unplug
            elif not entry.absent:
                entries[entries.index(entry)] = replace(entry, absent=True)
                owner = owner or unplug
    if owner is None:
        return []
    by_identity = {d.identity: d for d in comparison.desired}
    known = {r.identity: r for r in kvvm.template_requests}
    requests = tuple(
        _request(vm, by_identity[e.identity])
        if e.identity in by_identity
        else known.get(e.identity, SDNRequest(e.identity, e.if_name))
        for e in entries
        if e.identity and e.identity != "Main" and not e.absent
    )
    if entries == current and requests == kvvm.template_requests:
        return []
    patch = PatchVirtualMachine(vm.namespace, vm.name, tuple(entries), requests)
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
        return RemoveVMCondition(vm.namespace, vm.name, type_)  # as the platform clears it
    return SetVMCondition(vm.namespace, vm.name, type_, "False", clear_reason, "")


def conditions(
    facts: Facts, ops: Ops, vm: DesiredVM, config: MachineConfig, asked: frozenset[tuple[str, str]]
) -> Owned:
    if not ops or not (
        any(o.state in CONDITIONED for o in ops.values())
        or any(c.type in NICPLUG_CONDITIONS and c.status == "True" for c in vm.conditions)
    ):
        return []  # nothing to say and nothing to clear
    ordered = sorted(ops.values(), key=lambda o: o.stream)
    out: Owned = []
    restart = [o for o in ordered if o.state == "RestartRequired"]
    wanted_restart = None
    if restart:
        named = ", ".join(f"{o.network} ({o.message or o.direction})" for o in restart)
        wanted_restart = (REASON_RESTART, RESTART_PREFIX + named)
    blocked = [
        o for o in ordered if o.state == "MigrationRequired" and migration_blocked(facts, config)
    ]
    wanted_migration = None
    if blocked:
        why = (
            "migrations are manual (--migrations=manual)"
            if config.migrations == "manual"
            else "the VMI is not LiveMigratable"
        )
        named = ", ".join(f"{o.network} {o.direction}" for o in blocked)
        wanted_migration = ("MigrationRequired", f"{named} waits for a live migration: {why}")
    failed = [o for o in ordered if o.state == "Failed" and (o.network, o.direction) in asked]
    wanted_failed = None
    if failed:
        named = "; ".join(f"{o.network} {o.direction}: {o.reason}: {o.message}" for o in failed)
        wanted_failed = (failed[0].reason or "Failed", named)
    for type_, wanted, owners, clear in (
        (CONDITION_RESTART, wanted_restart, restart, ""),  # removed once applied
        (CONDITION_MIGRATION, wanted_migration, blocked, "MigrationNotRequired"),
        (CONDITION_FAILED, wanted_failed, failed, "Recovered"),
    ):
        effect = _condition(vm, type_, wanted, clear)
        if effect is not None:
            out.append(((owners or ordered)[0], effect))
    return out


def migration_blocked(facts: Facts, config: MachineConfig) -> bool:
    vmi = facts.world.vmi
    return config.migrations == "manual" or vmi is None or not vmi.live_migratable


def restarts_and_migrations(facts: Facts, ops: Ops, vm: DesiredVM, config: MachineConfig) -> Owned:
    out: Owned = []
    if not any(o.state in ("RestartRequired", "MigrationRequired") for o in ops.values()):
        return out
    vmi = facts.world.vmi
    ordered = sorted(ops.values(), key=lambda o: o.stream)
    restart = [o for o in ordered if o.state == "RestartRequired"]
    if restart and vm.approval == "Automatic" and facts.live and vmi is not None:
        out.append((restart[0], RestartVM(vm.namespace, vm.name, vmi.uid)))
    waiting = [o for o in ordered if o.state == "MigrationRequired"]
    if (
        waiting
        and vmi is not None
        and facts.live
        and not migration_blocked(facts, config)
        and facts.running_migration() is None
    ):
        digest = zlib.crc32(waiting[0].stream.encode())
        name = f"nicplug-{vm.name}-{digest:08x}"
        out.append((waiting[0], CreateMigration(vm.namespace, vm.name, name)))
    return out
