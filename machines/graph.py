"""The machine graphs, declared with `transitions` and validated when this module loads.

A graph is only states, triggers, sources, destinations and guard names. No
`transitions` model is ever created per operation: the per-operation state is a small
immutable record (`operation.py`), and the decider looks up the allowed moves of its
state in the index built here from the `transitions.Machine`. A trigger that ends in
`Failed` is named after the failure reason (`SDNTimeout`, `PatchRejected`, ...).

Triggers are declared in priority order (cancel, then progress, then failure): the
decider takes the first move whose guards hold. Never import anything that does I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from transitions import Machine

TERMINAL = frozenset({"Attached", "Detached", "Failed", "Cancelled"})
STRANDED = "LinkStranded"
GUEST_KEEPS = "GuestKeepsInterface"
STRANDED_REASONS = frozenset({STRANDED, GUEST_KEEPS})
"""Unplugs the platform will not finish while the VM runs in the pod and domain it has:
a link no one releases, a NIC the guest keeps. Only a migration or a restart ends them,
and that is the operator's call."""
NOT_RETRIED = frozenset({"InvalidSpec"}) | STRANDED_REASONS
"""Failures no new attempt can mend while the world stays as it is: a retry would
fail the same way. They rest `Failed` until the user or the world changes."""


class InvalidMachine(ValueError):
    """A machine graph breaks a structural rule; raised when it loads."""


@dataclass(frozen=True, slots=True)
class Edge:
    trigger: str
    sources: tuple[str, ...]
    dest: str
    guards: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Move:
    trigger: str
    dest: str
    guards: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MachineGraph:
    """A declared machine: what `transitions` gets, and the index the decider uses."""

    name: str
    states: tuple[str, ...]
    initial: str
    edges: tuple[Edge, ...]

    def machine(self, cls: type[Machine] = Machine, **kwargs: Any) -> Machine:
        """A `transitions` machine of this graph (model-less unless asked)."""
        kwargs.setdefault("model", None)
        kwargs.setdefault("name", self.name)
        return cls(
            states=list(self.states),
            initial=self.initial,
            transitions=[
                {
                    "trigger": e.trigger,
                    "source": list(e.sources),
                    "dest": e.dest,
                    "conditions": list(e.guards),
                }
                for e in self.edges
            ],
            auto_transitions=False,
            **kwargs,
        )


def _index(machine: Machine) -> dict[str, tuple[Move, ...]]:
    """The moves out of every state, in trigger declaration order."""
    moves: dict[str, list[Move]] = {name: [] for name in machine.states}
    for trigger, event in machine.events.items():
        for source, transitions in event.transitions.items():
            for t in transitions:
                guards = tuple(str(c.func) for c in t.conditions)
                moves[source].append(Move(trigger, str(t.dest), guards))
    return {state: tuple(found) for state, found in moves.items()}


def validate(machine: Machine, terminal: frozenset[str] = TERMINAL) -> dict[str, tuple[Move, ...]]:
    """Check the structural rules and return the move index.

    One initial state; every state reachable from it; every non-terminal state has an
    exit; terminal states have none (they absorb); every guard is named.
    """
    states = list(machine.states)
    initial = machine.initial
    name = str(machine.name).removesuffix(": ")
    if not isinstance(initial, str) or initial not in machine.states:
        raise InvalidMachine(f"{name!r}: needs exactly one initial state")
    moves = _index(machine)
    seen = {initial}
    queue = deque([initial])
    while queue:
        for move in moves[queue.popleft()]:
            if move.dest not in seen:
                seen.add(move.dest)
                queue.append(move.dest)
    unreachable = [s for s in states if s not in seen]
    if unreachable:
        raise InvalidMachine(f"{name!r}: unreachable states {unreachable}")
    for state in states:
        if state in terminal and moves[state]:
            raise InvalidMachine(f"{name!r}: terminal state {state} has exits")
        if state not in terminal and not moves[state]:
            raise InvalidMachine(f"{name!r}: state {state} has no exit")
        for move in moves[state]:
            if not move.guards or not all(move.guards):
                raise InvalidMachine(f"{name!r}: {state} -{move.trigger}-> needs a guard")
    return moves


def _edges(*rows: tuple[str, str | Sequence[str], str, str | Sequence[str]]) -> tuple[Edge, ...]:
    def names(value: str | Sequence[str]) -> tuple[str, ...]:
        return (value,) if isinstance(value, str) else tuple(value)

    return tuple(Edge(t, names(s), d, names(g)) for t, s, d, g in rows)


PLUG_LIVE: tuple[str, ...] = ("Requested", "AnnotationPatched", "SDNReady", "VMIPatched")
PLUG_LIVE += ("RestartRequired", "MigrationRequired", "Migrating")

PLUG = MachineGraph(
    name="plug",
    states=(
        "Requested", "AnnotationPatched", "SDNReady", "VMIPatched", "Attached",
        "RestartRequired", "MigrationRequired", "Migrating", "Failed", "Cancelled",
    ),
    initial="Requested",
    edges=_edges(
        ("VMDeleted", PLUG_LIVE, "Cancelled", "vm_deleted"),
        ("Reverted", PLUG_LIVE, "Cancelled", "change_reverted"),
        # (the platform plugged it before nicplug saw it in flight: recorded, done)
        ("observed_done", "Requested", "Attached", "observed_done"),
        # (a network the cluster lacks, or that is not Ready: said at once, nothing written)
        ("NetworkNotFound", "Requested", "Failed", "network_missing"),
        ("NetworkNotReady", "Requested", "Failed", "network_not_ready"),
        ("defer", "Requested", "RestartRequired", "restart_needed"),
        ("go_live", "RestartRequired", "Requested", "hotplug_allowed"),
        ("annotate", "Requested", "AnnotationPatched", "pod_holds_entry"),
        ("sdn_ready", "AnnotationPatched", "SDNReady", "sdn_reports_ready"),
        ("patch_vm", "SDNReady", "VMIPatched", "vm_spec_holds_interface"),
        ("write_for_boot", ("Requested", "RestartRequired"), "VMIPatched", "change_written"),
        # (the VM stopped half-way: what it waited for comes with the next boot)
        ("write_for_boot", ("AnnotationPatched", "SDNReady"), "VMIPatched",
         ("vm_stopped", "change_written")),
        ("attach", ("VMIPatched", "MigrationRequired"), "Attached", "guest_has_interface"),
        ("need_migration", "VMIPatched", "MigrationRequired", "vmi_requires_migration"),
        ("migrate", "MigrationRequired", "Migrating", "migration_running"),
        ("migrated", "Migrating", "Attached", ("migration_succeeded", "guest_has_interface")),
        # (an SDN error reported after the KVVM patch is still the SDN's, with its message)
        ("SDNError", ("Requested", "AnnotationPatched", "SDNReady", "VMIPatched"), "Failed",
         "sdn_reports_error"),
        ("SDNTimeout", ("Requested", "AnnotationPatched"), "Failed", "deadline_passed"),
        ("AttachTimeout", ("SDNReady", "VMIPatched"), "Failed", "deadline_passed"),
        ("MigrationFailed", "Migrating", "Failed", "migration_failed"),
        ("MigrationFailed", "MigrationRequired", "Failed", "migration_rejected"),
        ("MigrationFailed", "MigrationRequired", "Failed", "own_migration_failed"),
        ("MigrationTimeout", ("Migrating", "MigrationRequired"), "Failed", "deadline_passed"),
        ("PatchRejected", PLUG_LIVE, "Failed", "effect_rejected"),
    ),
)  # fmt: skip

UNPLUG_LIVE: tuple[str, ...] = ("Requested", "VMIPatched", "GuestDetached", "AnnotationPatched")
UNPLUG_LIVE += ("SDNReleased",)
UNPLUG_LIVE += ("RestartRequired", "MigrationRequired", "Migrating")

UNPLUG = MachineGraph(
    name="unplug",
    states=(
        "Requested", "VMIPatched", "GuestDetached", "AnnotationPatched", "SDNReleased",
        "Detached", "RestartRequired", "MigrationRequired", "Migrating", "Failed", "Cancelled",
    ),
    initial="Requested",
    edges=_edges(
        ("VMDeleted", UNPLUG_LIVE, "Cancelled", "vm_deleted"),
        ("Reverted", UNPLUG_LIVE, "Cancelled", "change_reverted"),
        ("observed_done", "Requested", "Detached", "observed_done"),
        ("defer", "Requested", "RestartRequired", "restart_needed"),
        ("go_live", "RestartRequired", "Requested", "hotplug_allowed"),
        ("mark_absent", "Requested", "VMIPatched", "interface_released_in_spec"),
        ("write_for_boot", "RestartRequired", "VMIPatched", "change_written"),
        ("detach", "VMIPatched", "GuestDetached", "guest_lost_interface"),
        # (a guest detached before the migration was asked for waits for it here)
        ("detach", "MigrationRequired", "GuestDetached",
         ("guest_lost_interface", "vmi_requires_no_migration")),
        ("need_migration", "VMIPatched", "MigrationRequired", "vmi_requires_migration"),
        ("migrate", "MigrationRequired", "Migrating", "migration_running"),
        ("migrated", "Migrating", "GuestDetached", ("migration_succeeded", "guest_lost_interface")),
        ("drop_entry", "GuestDetached", "AnnotationPatched", "pod_dropped_entry"),
        ("sdn_released", "AnnotationPatched", "SDNReleased", "sdn_released"),
        # multus without a dynamic-networks controller: the guest let go, the pod's link
        # stays until a new pod replaces it, and KubeVirt asks for that migration
        ("need_migration", "AnnotationPatched", "MigrationRequired", "vmi_requires_migration"),
        ("forget", "SDNReleased", "Detached", "nothing_carries_it"),
        # (Deckhouse's KubeVirt does not detach a bpfbridge NIC from a running domain,
        # and an SDN agent may keep a link nobody asks for: no retry moves either; it
        # ends saying what would, and is not retried: `opening.py`)
        (GUEST_KEEPS, UNPLUG_LIVE[:5], "Failed", ("deadline_passed", "guest_keeps_interface")),
        (STRANDED, UNPLUG_LIVE[:5], "Failed", ("deadline_passed", "link_stranded")),
        ("DetachTimeout", UNPLUG_LIVE[:5], "Failed", "deadline_passed"),
        ("MigrationFailed", "Migrating", "Failed", "migration_failed"),
        ("MigrationFailed", "MigrationRequired", "Failed", "migration_rejected"),
        ("MigrationFailed", "MigrationRequired", "Failed", "own_migration_failed"),
        ("MigrationTimeout", ("Migrating", "MigrationRequired"), "Failed", "deadline_passed"),
        ("PatchRejected", UNPLUG_LIVE, "Failed", "effect_rejected"),
    ),
)  # fmt: skip

UPDATE_LIVE: tuple[str, ...] = ("Requested", "RestartRequired", "VMIPatched")

UPDATE = MachineGraph(
    name="update",
    states=("Requested", "RestartRequired", "VMIPatched", "Attached", "Failed", "Cancelled"),
    initial="Requested",
    edges=_edges(
        ("InvalidSpec", "Requested", "Failed", "spec_invalid"),
        ("VMDeleted", UPDATE_LIVE, "Cancelled", "vm_deleted"),
        ("Reverted", UPDATE_LIVE, "Cancelled", "change_reverted"),
        # (the platform applied a new id before nicplug saw it in flight: recorded, done)
        ("observed_done", "Requested", "Attached", "observed_done"),
        ("defer", "Requested", "RestartRequired", "restart_needed"),
        ("write_for_boot", ("Requested", "RestartRequired"), "VMIPatched", "change_written"),
        ("attach", "VMIPatched", "Attached", "guest_has_interface"),
        ("PatchRejected", UPDATE_LIVE, "Failed", "effect_rejected"),
    ),
)

# -- the kubevirt flavour (multus on upstream KubeVirt) ------------------------------------
#
# KubeVirt does the plumbing there, so the same states come in KubeVirt's order: the
# KVVM template → virt-controller syncs the VMI spec → it regenerates the pod's networks
# annotation → multus (its dynamic-networks controller) reports network-status → the
# VMI status reports it `multus-status` and virt-handler attaches it to the domain. An
# unplug marks the interface absent, virt-controller drops it from the annotation at
# once, virt-handler detaches it, multus releases it, KubeVirt forgets it. Without a
# dynamic-networks controller the pod never changes, and KubeVirt asks for a migration.
# nicplug writes nothing of the VM there (no patch to be rejected), and KubeVirt applies
# a NIC change whatever the rollout strategy: no `PatchRejected`, no `go_live`.

PLUG_KUBEVIRT = MachineGraph(
    name="plug",
    states=PLUG.states,
    initial="Requested",
    edges=_edges(
        ("VMDeleted", PLUG_LIVE, "Cancelled", "vm_deleted"),
        ("Reverted", PLUG_LIVE, "Cancelled", "change_reverted"),
        # (the platform plugged it before nicplug saw it in flight: recorded, done)
        ("observed_done", "Requested", "Attached", "observed_done"),
        # (a NAD the cluster lacks: KubeVirt syncs the VMI and the pod's annotation
        # without looking, and multus would never attach it; said at once instead)
        ("NetworkNotFound", ("Requested", "VMIPatched", "AnnotationPatched"), "Failed",
         "network_missing"),
        # (only a restart-only change defers, and it never goes live: KubeVirt gates nothing)
        ("defer", "Requested", "RestartRequired", "restart_needed"),
        ("sync_vmi", "Requested", "VMIPatched",
         ("vm_spec_holds_interface", "vmi_spec_holds_interface")),
        ("write_for_boot", ("Requested", "RestartRequired"), "VMIPatched", "change_written"),
        # (the VM stopped half-way: its next boot brings the NIC with the template)
        ("write_for_boot", ("AnnotationPatched", "SDNReady"), "VMIPatched",
         ("vm_stopped", "change_written")),
        ("annotate", "VMIPatched", "AnnotationPatched", "pod_holds_entry"),
        ("sdn_ready", "AnnotationPatched", "SDNReady", "sdn_reports_ready"),
        # a VM restarted with the change boots with the NIC: the guest shows the goal
        ("attach", ("SDNReady", "MigrationRequired", "VMIPatched"), "Attached",
         "guest_has_interface"),
        ("need_migration", ("VMIPatched", "AnnotationPatched"), "MigrationRequired",
         "vmi_requires_migration"),
        # an unplug KubeVirt took is never taken back: the VMI keeps the interface absent
        # until the guest and the pod let go of it, and plugs it anew from the template
        # only then; without a dynamic-networks controller the pod lets go in a migration
        ("need_migration", "Requested", "MigrationRequired",
         ("vmi_keeps_interface_absent", "guest_lost_interface", "vmi_requires_migration")),
        ("migrate", "MigrationRequired", "Migrating", "migration_running"),
        ("migrated", "Migrating", "Attached", ("migration_succeeded", "guest_has_interface")),
        # (the migration took the unplugged interface away with the old pod: KubeVirt
        # plugs it anew, and the plug follows it from the start; a VMI that holds it
        # present is a plug the migration brings, seen before the target pod's link is)
        ("replug", "Migrating", "Requested",
         ("migration_succeeded", "guest_lost_interface", "pod_lacks_link",
          "vmi_spec_lacks_interface")),
        ("SDNTimeout", ("Requested", "AnnotationPatched"), "Failed", "deadline_passed"),
        ("AttachTimeout", ("VMIPatched", "SDNReady"), "Failed", "deadline_passed"),
        ("MigrationFailed", "Migrating", "Failed", "migration_failed"),
        ("MigrationFailed", "MigrationRequired", "Failed", "migration_rejected"),
        ("MigrationFailed", "MigrationRequired", "Failed", "own_migration_failed"),
        ("MigrationTimeout", ("Migrating", "MigrationRequired"), "Failed", "deadline_passed"),
    ),
)  # fmt: skip

UNPLUG_KUBEVIRT = MachineGraph(
    name="unplug",
    states=UNPLUG.states,
    initial="Requested",
    edges=_edges(
        ("VMDeleted", UNPLUG_LIVE, "Cancelled", "vm_deleted"),
        ("Reverted", UNPLUG_LIVE, "Cancelled", "change_reverted"),
        ("observed_done", "Requested", "Detached", "observed_done"),
        ("defer", "Requested", "RestartRequired", "restart_needed"),
        ("mark_absent", "Requested", "VMIPatched", "interface_released_in_spec"),
        ("write_for_boot", "RestartRequired", "VMIPatched", "change_written"),
        ("drop_entry", "VMIPatched", "AnnotationPatched", "pod_dropped_entry"),
        ("detach", "AnnotationPatched", "GuestDetached", "guest_lost_interface"),
        ("sdn_released", "GuestDetached", "SDNReleased", "sdn_released"),
        # without a dynamic-networks controller the pod keeps the link until a new pod
        # replaces it, and KubeVirt asks for that migration
        ("need_migration", ("VMIPatched", "AnnotationPatched", "GuestDetached"),
         "MigrationRequired", "vmi_requires_migration"),
        ("migrate", "MigrationRequired", "Migrating", "migration_running"),
        ("sdn_released", "MigrationRequired", "SDNReleased",
         ("guest_lost_interface", "sdn_released")),
        ("migrated", "Migrating", "SDNReleased",
         ("migration_succeeded", "guest_lost_interface", "sdn_released")),
        ("forget", "SDNReleased", "Detached", "nothing_carries_it"),
        # (KubeVirt forgot the interface while a pod keeps a link nobody asks for, and
        # asks no migration that would replace the pod: no retry can move it; it ends
        # saying what would, and is not retried: `opening.py`)
        (STRANDED, UNPLUG_LIVE[:5], "Failed", ("deadline_passed", "link_stranded")),
        ("DetachTimeout", UNPLUG_LIVE[:5], "Failed", "deadline_passed"),
        ("MigrationFailed", "Migrating", "Failed", "migration_failed"),
        ("MigrationFailed", "MigrationRequired", "Failed", "migration_rejected"),
        ("MigrationFailed", "MigrationRequired", "Failed", "own_migration_failed"),
        ("MigrationTimeout", ("Migrating", "MigrationRequired"), "Failed", "deadline_passed"),
    ),
)  # fmt: skip

UPDATE_KUBEVIRT_LIVE: tuple[str, ...] = ("Requested", "RestartRequired", "VMIPatched")
UPDATE_KUBEVIRT_LIVE += ("MigrationRequired", "Migrating")

UPDATE_KUBEVIRT = MachineGraph(
    name="update",
    states=("Requested", "RestartRequired", "VMIPatched", "MigrationRequired", "Migrating",
            "Attached", "Failed", "Cancelled"),
    initial="Requested",
    # KubeVirt's networks have no ids and the comparator ignores their order there, so an
    # update is a template nicplug cannot read as a list (the same NAD twice), or a NAD
    # swap: an interface's `networkName` changed (`LiveUpdateNADRef`). KubeVirt copies the
    # new name into a migratable VMI and asks for a migration at once (the pod still
    # runs the old NAD); a VMI that cannot migrate gets it at its next boot
    # (`RestartRequired` on the VM)
    edges=_edges(
        ("InvalidSpec", "Requested", "Failed", "spec_invalid"),
        ("VMDeleted", UPDATE_KUBEVIRT_LIVE, "Cancelled", "vm_deleted"),
        ("Reverted", UPDATE_KUBEVIRT_LIVE, "Cancelled", "change_reverted"),
        ("defer", "Requested", "RestartRequired", "restart_needed"),
        ("sync_vmi", "Requested", "VMIPatched", "vmi_names_new_nad"),
        ("write_for_boot", "RestartRequired", "VMIPatched", "vmi_names_new_nad"),
        ("attach", ("VMIPatched", "MigrationRequired"), "Attached", "pod_on_new_nad"),
        ("need_migration", "VMIPatched", "MigrationRequired", "vmi_requires_migration"),
        ("migrate", "MigrationRequired", "Migrating", "migration_running"),
        ("migrated", "Migrating", "Attached", ("migration_succeeded", "pod_on_new_nad")),
        ("AttachTimeout", "VMIPatched", "Failed", "deadline_passed"),
        ("MigrationFailed", "Migrating", "Failed", "migration_failed"),
        ("MigrationFailed", "MigrationRequired", "Failed", "migration_rejected"),
        ("MigrationFailed", "MigrationRequired", "Failed", "own_migration_failed"),
        ("MigrationTimeout", ("Migrating", "MigrationRequired"), "Failed", "deadline_passed"),
    ),
)  # fmt: skip

# -- the deckhouse flavour observed (the platform hot-plugs: Deckhouse since #2187) --------
#
# Deckhouse's virtualization controller plugs in nicplug's own order (the pod's
# networks-spec, the SDN's networks-status, then the KVVM: `applyVMChangesToKVVM` in
# `sync_kvvm.go`), so the plug and update graphs are the drive mode's. It unplugs the
# other way round: the networks-spec is rewritten without the entry first, the KVVM
# marks the interface absent once the SDN reports what stays ready (not waiting for the
# release), KubeVirt detaches it from the guest and forgets it. The SDN lets the link
# go in its own time, before or after the guest: `SDNReleased` is recorded once both
# hold, so the path is the same whatever the timing. nicplug writes nothing there: no
# `PatchRejected`, and no migration of its own.

UNPLUG_OBSERVED_LIVE = ("Requested", "AnnotationPatched", "VMIPatched", "GuestDetached",
                        "SDNReleased", "RestartRequired")

UNPLUG_OBSERVED = MachineGraph(
    name="unplug",
    states=(
        "Requested", "AnnotationPatched", "VMIPatched", "GuestDetached", "SDNReleased",
        "Detached", "RestartRequired", "Failed", "Cancelled",
    ),
    initial="Requested",
    edges=_edges(
        ("VMDeleted", UNPLUG_OBSERVED_LIVE, "Cancelled", "vm_deleted"),
        ("Reverted", UNPLUG_OBSERVED_LIVE, "Cancelled", "change_reverted"),
        ("observed_done", "Requested", "Detached", "observed_done"),
        ("defer", "Requested", "RestartRequired", "restart_needed"),
        ("write_for_boot", "RestartRequired", "VMIPatched", "change_written"),
        ("drop_entry", "Requested", "AnnotationPatched", "pod_dropped_entry"),
        # (Deckhouse writes the KVVM without waiting for the SDN to let go)
        ("mark_absent", "AnnotationPatched", "VMIPatched", "interface_released_in_spec"),
        ("detach", "VMIPatched", "GuestDetached", "guest_lost_interface"),
        ("sdn_released", "GuestDetached", "SDNReleased", "sdn_released"),
        ("forget", "SDNReleased", "Detached", "nothing_carries_it"),
        # (what the drive mode cannot finish, Deckhouse cannot either: said, not retried)
        (GUEST_KEEPS, UNPLUG_OBSERVED_LIVE[:5], "Failed",
         ("deadline_passed", "guest_keeps_interface")),
        (STRANDED, UNPLUG_OBSERVED_LIVE[:5], "Failed", ("deadline_passed", "link_stranded")),
        ("DetachTimeout", UNPLUG_OBSERVED_LIVE[:5], "Failed", "deadline_passed"),
    ),
)  # fmt: skip

OBSERVED: Mapping[str, Mapping[str, MachineGraph]] = {
    "deckhouse": {g.name: g for g in (PLUG, UNPLUG_OBSERVED, UPDATE)},
}
"""The machines of a flavour in observe mode, where they differ from its drive mode's
(the kubevirt flavour always observes: its graphs are already KubeVirt's order)."""

FLAVOURS: Mapping[str, Mapping[str, MachineGraph]] = {
    "deckhouse": {g.name: g for g in (PLUG, UNPLUG, UPDATE)},
    "kubevirt": {g.name: g for g in (PLUG_KUBEVIRT, UNPLUG_KUBEVIRT, UPDATE_KUBEVIRT)},
}
"""Every registered machine, by flavour and direction: the same states and directions,
in the order each flavour's cluster moves. The flavour's name is what the journal
records on an operation (`Opened.flavour`); `kubevirt` was recorded as `multus` before
(`versions.py` reads the older name)."""

GRAPHS: Mapping[str, MachineGraph] = FLAVOURS["deckhouse"]
"""The deckhouse flavour's machines, by direction."""

MOVES_BY_FLAVOUR: Mapping[str, Mapping[str, Mapping[str, tuple[Move, ...]]]] = {
    flavour: {name: validate(graph.machine()) for name, graph in graphs.items()}
    for flavour, graphs in FLAVOURS.items()
}
"""flavour → direction → state → the allowed moves, validated at import."""

MOVES: Mapping[str, Mapping[str, tuple[Move, ...]]] = MOVES_BY_FLAVOUR["deckhouse"]
"""direction → state → the allowed moves of the deckhouse flavour."""

MOVES_OBSERVED: Mapping[str, Mapping[str, Mapping[str, tuple[Move, ...]]]] = {
    flavour: {name: validate(graph.machine()) for name, graph in graphs.items()}
    for flavour, graphs in OBSERVED.items()
}
"""flavour → direction → state → the allowed moves in observe mode, validated at import."""


def moves_of(flavour: str, mode: str) -> Mapping[str, Mapping[str, tuple[Move, ...]]]:
    """The moves an operation of `flavour` walks in `mode` (`observe` | `drive`); an
    unknown flavour reads as deckhouse, as journals before flavours were recorded."""
    if mode == "observe" and flavour in MOVES_OBSERVED:
        return MOVES_OBSERVED[flavour]
    return MOVES_BY_FLAVOUR.get(flavour, MOVES_BY_FLAVOUR["deckhouse"])


def graphs_of(flavour: str, mode: str) -> Mapping[str, MachineGraph]:
    """The graphs behind `moves_of` (what `nicplug diagram` draws)."""
    if mode == "observe" and flavour in OBSERVED:
        return OBSERVED[flavour]
    return FLAVOURS.get(flavour, FLAVOURS["deckhouse"])


ALLOWED: frozenset[tuple[str, str, str]] = frozenset(
    (direction, state, move.dest)
    for by_direction in (*MOVES_BY_FLAVOUR.values(), *MOVES_OBSERVED.values())
    for direction, by_state in by_direction.items()
    for state, moves in by_state.items()
    for move in moves
)
"""(direction, from, to) of every allowed transition, in any flavour."""
