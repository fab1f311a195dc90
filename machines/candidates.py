"""Which changes need an operation, read off one world (and the operations already there).

The comparator's changes; a plug adopted half-way (in the KVVM, not in the guest); SDN
entries, KVVM or VMI interfaces left for networks no longer desired; a restart nicplug
began that nobody tracks any more; and a failed operation whose goal the world shows
since (its next attempt adopts that at once). Pure: opens nothing itself, the decider
does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from nicplug.engine.records import quick_init
from nicplug.machines.comparator import Comparison, Direction
from nicplug.machines.facts import Facts
from nicplug.machines.graph import GUEST_KEEPS, STRANDED
from nicplug.machines.guards import OBSERVED_DONE, OBSERVED_DONE_ASKING, SWAP, goal_shown_for
from nicplug.machines.observed_done import REASON, observed_done
from nicplug.machines.operation import Operation, VMState
from nicplug.machines.policy import MachineConfig
from nicplug.machines.targets import template_identities
from nicplug.machines.world import nad_identity


@quick_init
@dataclass(frozen=True, slots=True)
class Candidate:
    """A change that needs an operation: (network, direction) plus what it asks."""

    network: str
    direction: Direction
    if_name: str
    target: str
    why: str
    goal_shown: bool = False
    """A failed attempt whose goal the world shows since, or that failed on what the
    platform would not finish and sees it gone since (`stranding_ended`): the next
    attempt opens at once, without waiting for the backoff."""


def changes_needing_operations(
    state: VMState, facts: Facts, comparison: Comparison, config: MachineConfig
) -> list[Candidate]:
    """Every (network, direction) an operation should be open for, in slot order."""
    found = dict(_of_changes(comparison))
    world = facts.world
    running = world.vmi is not None and world.vmi.phase == "Running"
    for spec in comparison.desired:
        slot: tuple[str, Direction] = (spec.identity, "plug")
        if spec.type == "Main" or slot in found or not running:
            continue
        if spec.if_name in facts.kvvm_present and spec.if_name not in facts.attached:
            # in the KVVM but not in the guest: a plug adopted half-way
            found[slot] = Candidate(spec.identity, "plug", spec.if_name,
                                    plug_target(spec.id), "not attached")
    kvvm = world.kvvm
    stopped_by_nicplug = kvvm is not None and (
        world.stopped_for_restart is not None if config.restarts == "operations"
        else kvvm.resumes is not None)
    if (
        stopped_by_nicplug
        and not facts.live
        and not state.ops
        and not found
    ):
        # halted by nicplug for a restart nobody tracks (the journal was lost) and no
        # change left to drive it: adopt it through a change it wrote, so that someone
        # starts the VM again
        written = [w for w in comparison.desired if w.if_name in facts.kvvm_present]
        adopt = next((w for w in written if w.type != "Main"), written[0] if written else None)
        if adopt is not None and (adopt.identity, "plug") not in found:
            found[(adopt.identity, "plug")] = Candidate(
                adopt.identity, "plug", adopt.if_name, plug_target(adopt.id), "restart adopted")
    swapped = nad_swaps(facts, config) if running and world.vm is not None and (
        world.vm.in_template) else {}
    for identity, (if_name, old) in swapped.items():
        slot = (identity, "update")
        found.setdefault(slot, Candidate(identity, "update", if_name, f"{SWAP}{old}",
                                         f"{old} → {identity}"))
    names: dict[str, str] = {}
    if world.kvvm is not None:
        names.update({r.identity: r.if_name for r in world.kvvm.template_requests})
    for pod in world.pods:
        for r in pod.requested:
            names[r.identity] = r.if_name
        for s in pod.reported:
            names[s.identity] = s.if_name
    if world.kvvm is not None and world.vm is not None and world.vm.in_template:
        names.update(template_identities(facts, world.vm.namespace, config))
    desired = facts.desired_identities
    swapped_out = {(old, if_name) for if_name, old in swapped.values()}
    for identity, if_name in sorted(names.items()):
        if identity in desired or identity == "Main" or (identity, "unplug") in found:
            continue
        if (identity, if_name) in swapped_out:
            continue  # the interface stays: only its NAD changes (the swap's update)
        if (
            if_name in facts.kvvm_anywhere
            or if_name in facts.vmi_anywhere
            or if_name in facts.attached
            or identity in facts.lingering
        ):
            found[(identity, "unplug")] = Candidate(identity, "unplug", if_name, "", "removed")
    for op in state.ops.values():
        slot = (op.network, op.direction)
        if op.state != "Failed" or op.direction == "update":
            continue
        if slot not in found and goal_shown(op, facts):
            found[slot] = Candidate(
                op.network, op.direction, op.if_name, op.target, "done since", goal_shown=True
            )
        elif slot in found and stranding_ended(op, facts):
            found[slot] = replace(found[slot], why="moved since", goal_shown=True)
    for network, direction, if_name in observed_done(state, facts, comparison, set(found)):
        # done by the platform before nicplug saw it in flight: recorded all the same
        found[(network, direction)] = Candidate(
            network, direction, if_name, _observed_done_target(comparison, network, direction),
            REASON, goal_shown=True)
    return [found[k] for k in sorted(found)]


_NONE: Mapping[tuple[str, Direction], Candidate] = {}  # (never changed: copied)


def _of_changes(comparison: Comparison) -> Mapping[tuple[str, Direction], Candidate]:
    """The candidate of each of the comparator's changes: a function of the comparison
    alone, so kept with it (`Comparison.memo`) for as long as its KVVM and desired
    list do not change (candidates are frozen: each decision copies the mapping)."""
    made: Mapping[tuple[str, Direction], Candidate] | None = comparison.memo
    if made is None:
        made = {
            (c.identity, c.direction): Candidate(
                c.identity,
                c.direction,
                c.if_name,
                comparison.signature(c.identity) if c.direction == "update" else (
                    plug_target(c.id) if c.direction == "plug" else ""),
                c.why,
            )
            for c in comparison.changes
        } if comparison.changes else _NONE
        object.__setattr__(comparison, "memo", made)
    return made


def _observed_done_target(comparison: Comparison, network: str, direction: Direction) -> str:
    """`observed-done`, and what the change asks for where the network has an id (an
    update's signature, a plug's id): what a later id change is told from."""
    spec = comparison.desired_entry(network)
    if direction == "update":
        asks = comparison.signature(network)
    elif direction == "plug" and spec is not None:
        asks = plug_target(spec.id)
    else:
        asks = ""
    return OBSERVED_DONE_ASKING + asks if asks else OBSERVED_DONE


def plug_target(id_: int | None) -> str:
    """What a plug asks for: the id it plugs the network under (`id=2`; none: not
    said), so that an id change the platform applies unseen later is told from it
    (`observed_done.known_id`)."""
    return "" if id_ is None else f"id={id_}"


def stranding_ended(op: Operation, facts: Facts) -> bool:
    """An unplug that failed on what the platform would not finish sees that gone
    since (the guest let go of the NIC, no pod reports the link): the rest is a step
    of its own to take, and the next attempt follows the world from there."""
    if op.reason == GUEST_KEEPS:
        return op.if_name not in facts.attached
    if op.reason == STRANDED:
        return op.network not in facts.lingering
    return False


def goal_shown(op: Operation, facts: Facts) -> bool:
    """The world shows what the operation was for, though it failed on the way (a
    deadline passed, then the NIC attached): a plug's interface in the KVVM and the
    running guest, an unplug's gone from everything."""
    return goal_shown_for(op.direction, op.network, op.if_name, facts)


def nad_swaps(facts: Facts, config: MachineConfig) -> dict[str, tuple[str, str]]:
    """The interfaces of the running upstream KubeVirt VM whose NAD the user changed
    (`networkName`, `LiveUpdateNADRef`): new identity → (interface, old identity). The
    old one is what the VMI's spec still names (KubeVirt did not copy the change: a VMI
    that cannot migrate), else what the pod the VM runs in asks for (KubeVirt copied it
    and the pod has yet to be replaced by a migration)."""
    world = facts.world
    vm, vmi = world.vm, world.vmi
    if vm is None or vmi is None or facts.comparison is None:
        return {}
    nad_ns = config.cluster_network_nad_namespace
    running = {n.name: n.multus_network for n in vmi.networks if n.multus_network}
    asked = {r.if_name: r.identity for pod in facts.pods for r in pod.requested}
    found: dict[str, tuple[str, str]] = {}
    for spec in facts.comparison.desired:
        if spec.type == "Main" or spec.if_name not in facts.vmi_present:
            continue
        in_vmi = running.get(spec.if_name)
        old = nad_identity(in_vmi, vm.namespace, nad_ns, spec.if_name) if in_vmi else None
        if old is None or old == spec.identity:
            old = asked.get(spec.if_name)
        if old is not None and old != spec.identity:
            found[spec.identity] = (spec.if_name, old)
    return found
