"""`explain`: what an operation is waiting for, in words, from its state and its graph.

The moves out of the current state come from the machine graph the decider runs on
(`machines.graph.moves_of` the operation's flavour and mode), so the answer cannot
drift from the code: the progress moves
are what the operation waits for, the moves to `Failed` / `Cancelled` what would end
it. Every guard name has a phrase here (a test checks that none is missing). The
journal adds the effects still pending, the timers armed and the last observation.
Never decides and never reads the journal itself.
"""

from __future__ import annotations

from collections.abc import Mapping

from nicplug.adapters.queries.records import (
    Answer,
    EffectEntry,
    OperationSummary,
    Timeline,
    rfc3339,
)
from nicplug.engine.inspection import StreamRecord
from nicplug.machines.facts import SDN_SAYS
from nicplug.machines.graph import GUEST_KEEPS, STRANDED, moves_of
from nicplug.machines.operation import AWAITING_MAC
from nicplug.machines.targets import GRACE_WAIT, migration_slot_wait

GUARD_PHRASES: Mapping[str, str] = {
    "vm_deleted": "the VM is deleted",
    "change_reverted": "the desired networks no longer ask for the change",
    "spec_invalid": "the VM's spec.networks is invalid",
    "restart_needed": "the change can only be applied by a restart",
    "hotplug_allowed": "the rollout strategy lets the change apply in place",
    "pod_holds_entry": "every launcher pod's SDN request annotation holds the entry",
    "sdn_reports_ready": "the SDN status annotation reports the entry ready",
    "vm_spec_holds_interface": "the KVVM/VMI spec holds the interface",
    "interface_released_in_spec": "the KVVM/VMI spec releases the interface",
    "vmi_keeps_interface_absent": "the running VMI still holds the interface marked absent",
    "pod_lacks_link": "the pod the VM runs in has no ready link for the interface",
    "vmi_spec_lacks_interface":
        "the VMI's spec holds the interface only marked absent, or not at all",
    "change_written": "the change is written to the KVVM for the next boot",
    "vm_stopped": "the VM is stopped (no live VMI)",
    "guest_has_interface": "the VMI reports the interface attached (infoSource domain)",
    "guest_lost_interface": "the VMI no longer reports the interface attached",
    "pod_dropped_entry": "the launcher pods' request annotation no longer holds the entry",
    "sdn_released": "the SDN status no longer lists the entry",
    "nothing_carries_it": "neither the KVVM, the VMI nor a pod carries the interface",
    "link_stranded": ("a pod still reports the link, which no pod requests (or still "
                      "requests it where KubeVirt will not drop the entry), and no "
                      "migration will release it"),
    "observed_done": ("the platform finished the change before nicplug saw it in flight, "
                      "and the world still shows it done"),
    "guest_keeps_interface": ("the guest still has the interface the VMI holds absent, "
                              "and no migration will remove it"),
    "vmi_requires_migration":
        "the VMI carries MigrationRequired=True (KubeVirt asks for a migration)",
    "vmi_requires_no_migration": "the VMI no longer carries MigrationRequired=True",
    "migration_running": "a migration of the VMI is running",
    "migration_succeeded": "the migration succeeded",
    "migration_failed": "the migration failed",
    "migration_rejected": "creating the migration was rejected",
    "own_migration_failed": "the migration nicplug created for this attempt failed",
    "vmi_names_new_nad": "the VMI's spec names the interface's new NAD (KubeVirt copied it)",
    "pod_on_new_nad": "the pod the VM runs in is plumbed on the new NAD (after a migration "
                      "or a restart)",
    "sdn_reports_error": "the SDN reports an error for the entry",
    "network_missing": "the cluster has no Network/ClusterNetwork of that name",
    "network_not_ready": "the network exists but is not Ready",
    "deadline_passed": "the state's deadline passes (counting only time the VM was live)",
    "effect_rejected": "the API server rejects one of its patches for good",
}

TIMER_PHRASES: Mapping[str, str] = {
    "deadline": "fails the operation with a timeout unless it moved on",
    "grace": "lets the KVVM be patched without SDNReady (multus grace period)",
    "reissue": "issues the effects still needed again",
    "retry": "opens a new attempt if the desired state still asks for the change",
}

_ENDINGS = frozenset({"Failed", "Cancelled"})


class Move(Answer):
    trigger: str
    to: str
    guards: list[str]
    meaning: str


class Timer(Answer):
    name: str
    deadline: float
    due_in: float
    meaning: str


class Observation(Answer):
    ref: str
    at: float
    wall: str


class Explanation(Answer):
    operation: OperationSummary
    summary: str
    superseded_by: str | None
    in_state_for: float
    waits_for: list[Move]
    ends_if: list[Move]
    pending_effects: list[EffectEntry]
    timers: list[Timer]
    next_timer: Timer | None
    last_observation: Observation | None


class Dossier(Answer):
    """An operation's timeline and its explanation, read from one snapshot."""

    timeline: Timeline
    explain: Explanation


def _move(trigger: str, to: str, guards: tuple[str, ...]) -> Move:
    meaning = " and ".join(GUARD_PHRASES.get(g, g.replace("_", " ")) for g in guards)
    return Move(trigger=trigger, to=to, guards=list(guards), meaning=meaning)


def explain(
    record: StreamRecord, *, now: float, superseded_by: str | None = None
) -> Explanation | None:
    """The explanation of the stream in `record` at logical time `now` (None: no view).
    `superseded_by` names a later attempt of the same change, if one opened."""
    if record.view is None:
        return None
    op = OperationSummary.of(record.view)
    graphs = moves_of(op.flavour, op.mode)
    moves = graphs.get(op.direction, {}).get(op.state, ())
    waits = [_move(m.trigger, m.dest, m.guards) for m in moves if m.dest not in _ENDINGS]
    ends = [_move(m.trigger, m.dest, m.guards) for m in moves if m.dest in _ENDINGS]
    pending = [EffectEntry.of(r) for r in record.effects if r.status == "issued"]
    timers = [
        Timer(name=t.name, deadline=t.deadline, due_in=t.deadline - now,
              meaning=TIMER_PHRASES.get(t.name, ""))
        for t in sorted(record.timers, key=lambda t: (t.deadline, t.name))
    ]
    seen = record.last_observation
    summary = (
        f"{op.state} ({op.reason}); superseded by attempt {superseded_by}"
        if superseded_by else _summary(op, waits, pending, now)
    )
    if op.bypassed_vmi is not None:
        summary += (
            f"; KubeVirt applied it to the running VMI {op.bypassed_vmi} although "
            "vmRolloutStrategy is Stage (it applies NIC changes live whatever the strategy): "
            "restart the VM to bring it in line with its rollout strategy"
        )
    return Explanation(
        operation=op,
        summary=summary,
        superseded_by=superseded_by,
        in_state_for=max(0.0, now - op.entered_at),
        waits_for=waits,
        ends_if=ends,
        pending_effects=pending,
        timers=timers,
        next_timer=timers[0] if timers else None,
        last_observation=Observation(
            ref=seen.cause.ref, at=seen.logical_time, wall=rfc3339(seen.wall_time)
        ) if seen else None,
    )


def _summary(op: OperationSummary, waits: list[Move], pending: list[EffectEntry],
             now: float) -> str:
    if op.terminal:
        if op.state == "Failed":
            why = f"Failed ({op.reason}: {op.message})" if op.message else f"Failed ({op.reason})"
            if op.retry_at is None and op.reason == STRANDED:
                return (f"{why}; no retry: a new attempt opens once no pod reports the link "
                        f"(it then ends Detached) or the network is asked for again")
            if op.retry_at is None and op.reason == GUEST_KEEPS:
                return (f"{why}; no retry: a new attempt opens once the guest no longer has "
                        f"the interface (it then ends Detached) or the network is asked "
                        f"for again")
            if op.retry_at is None:
                return f"{why}; no retry: a new attempt opens only once the spec changes"
            due = op.retry_at - now
            when = f"in {due:.0f}s" if due > 0 else "now"
            if op.direction == "plug" and SDN_SAYS in op.message:
                # (opening.py: not while the SDN says of it what this failure quotes)
                return (f"{why}; a new attempt may open {when} if the change is still asked, "
                        f"once the SDN says something else of it")
            return f"{why}; a new attempt may open {when} if the change is still asked"
        return f"done: {op.state} is terminal"
    said = f" ({op.message})" if op.message else ""
    if not op.if_name and op.direction == "plug":
        said += f"; before anything: {AWAITING_MAC}"
    if op.waiting.startswith(GRACE_WAIT):
        said += f"; {op.waiting}"
    elif op.waiting:
        said += f"; not yet, the SDN says: {op.waiting}"
    if op.held is not None:
        said += f"; nicplug's migration {migration_slot_wait(op.held)}"
    text = f"in {op.state}{said}, waiting until " + "; or until ".join(
        f"{m.meaning} (→ {m.to})" for m in waits
    ) if waits else f"in {op.state}{said}, waiting only for a failure or a cancel"
    if pending:
        text += "; effects not yet done: " + ", ".join(
            f"{e.type} {e.target} ({e.outcome})" for e in pending
        )
    return text
