"""The effects a decision asks for, and the Events it tells the user.

For all operations together: what the pods, the KVVM, the restarts and migrations and
the VM's conditions should hold (`targets.py`; observing, only the conditions' words
and Events, as the platform writes), each effect issued once — again after
`effect_reissue_after` if the world did not move — and the issued ones journaled on
their owner (`EffectsIssued`, the last `KEEP_ISSUED` keys). Then the Events: one per
outcome reached in this decision (operations reaching the same outcome together share
it), a Warning when a change was applied live although the rollout strategy is Stage,
and one when an operation starts waiting (for the SDN, for a migration slot). The
words an operator reads are made here too (`change_in_words`, `outcome_in_words`).
Pure: no I/O.
"""

from __future__ import annotations

from typing import Literal

from nicplug.engine.model import EffectRequest, StreamId
from nicplug.machines.effects import AnyEffect, EmitEvent
from nicplug.machines.facts import Facts
from nicplug.machines.graph import TERMINAL
from nicplug.machines.operation import (
    EFFECTS_ISSUED,
    MIGRATION_HELD,
    ROLLOUT_BYPASSED,
    WAITING,
    Operation,
    key_digest,
)
from nicplug.machines.policy import MachineConfig
from nicplug.machines.session import Session
from nicplug.machines.targets import (
    GRACE_WAIT,
    MIGRATION_ADVICE,
    ROLLOUT_ADVICE,
    WORKLOAD_UPDATER,
    conditions,
    kubevirt_migrates,
    kubevirt_overrides,
    kvvm_patch,
    migration_blocked,
    migration_slot_wait,
    pod_patches,
    restarts_and_migrations,
)
from nicplug.machines.timers import issued_recently
from nicplug.machines.walking import NOT_HOT_PLUGGED

KEEP_ISSUED = 6
OUTCOMES = TERMINAL | {"RestartRequired", "MigrationRequired"}
"""States an operation's Event is emitted in: where it ended, or waits for someone (a
restart, a migration). The steps between are in the journal (`explain`), not Events;
operations of one decision reaching the same outcome share one Event."""


def effects_of(
    config: MachineConfig,
    session: Session,
    facts: Facts,
    asked: frozenset[tuple[str, str]],
    now: float,
) -> list[EffectRequest]:
    vm = facts.world.vm
    if vm is None:
        return []
    ops = session.state.ops
    comparison = facts.comparison
    needed = []
    if not config.observes:  # (observing, the platform writes: nicplug only tells)
        if comparison is not None and comparison.invalid is None:
            needed += pod_patches(facts, ops, vm, comparison)
            needed += kvvm_patch(facts, ops, vm, comparison)
            needed += restarts_and_migrations(facts, ops, vm, config)
        needed += conditions(facts, ops, vm, config, asked)
    requests = _issued(config, session, needed, now) if needed else []
    ended: dict[str, list[Operation]] = {}  # Event reason -> operations, in order
    for stream, path in session.paths.items():
        op = session.state.by_stream(stream)
        if op is None or len(path) < 2:
            continue
        if op.state in OUTCOMES:
            ended.setdefault(f"{op.direction.capitalize()}{op.state}", []).append(op)
        if any(e.stream == stream and e.type == ROLLOUT_BYPASSED for e in session.events):
            bypassed = EmitEvent(
                vm.namespace, vm.name, "RolloutBypassed",
                f"{change_in_words(op)} was applied to the running VM although "
                f"vmRolloutStrategy is Stage (KubeVirt applies NIC changes live); "
                f"{ROLLOUT_ADVICE}",
                "Warning", str(stream), len(op.history),
            )  # fmt: skip
            requests.append(bypassed.request(stream))
    for reason, together in ended.items():
        event = _outcome_event(config, facts, reason, together)
        requests.append(event.request(together[0].stream))
    for event_ in session.events:
        op = session.state.by_stream(event_.stream)
        told = _waits_for(event_.type, op) if op is not None else None
        if op is None or told is None:
            continue
        reason, detail = told
        warning = EmitEvent(
            vm.namespace, vm.name, f"{op.direction.capitalize()}{reason}",
            f"{change_in_words(op)} is waiting: {detail}",
            "Warning", str(op.stream), len(op.history),
        )  # fmt: skip
        requests.append(warning.request(op.stream))
    return requests


def _outcome_event(
    config: MachineConfig, facts: Facts, reason: str, ops: list[Operation]) -> EmitEvent:
    """One Event for the operations of this decision that ended up in the same
    outcome (`OUTCOMES`; one user edit asking for two networks gets one Event when
    both attach together), each with the path it took: Warning when they failed or
    wait for a migration."""
    vm = facts.world.vm
    assert vm is not None
    state = ops[0].state
    overridden = (
        kubevirt_overrides(facts, config) if state == "MigrationRequired" else None)
    kind: Literal["Normal", "Warning"] = (
        "Warning" if state == "Failed" or overridden or any(
            o.message.startswith(NOT_HOT_PLUGGED) for o in ops) or (
            state == "MigrationRequired" and not kubevirt_migrates(facts)) else "Normal"
    )
    parts = []
    for op in ops:
        part = outcome_in_words(op)
        if op.message:
            part += f": {op.message}"
        parts.append(part + (f" ({op.reason})" if op.reason else ""))
    message = "; ".join(parts)
    blocked = migration_blocked(facts, config) if state == "MigrationRequired" else None
    said = [op.message for op in ops if op.message]
    if overridden:
        if not any(overridden in m for m in said):
            message += f"; {overridden}"
    elif state == "MigrationRequired" and kubevirt_migrates(facts):
        if not any(WORKLOAD_UPDATER in m for m in said):
            message += f"; {WORKLOAD_UPDATER}: nicplug follows it"
    elif blocked:
        if not any(blocked in m for m in said):
            message += f"; nicplug will not migrate the VM: {blocked}"
        message += f". {MIGRATION_ADVICE}"
    message += f". Every step: nicplug explain {vm.namespace}/{vm.name}"
    first = ops[0]
    return EmitEvent(vm.namespace, vm.name, reason, message, kind, str(first.stream),
                     len(first.history))


def _issued(
    config: MachineConfig, session: Session, needed: list[tuple[Operation, AnyEffect]], now: float
) -> list[EffectRequest]:
    """The requests of the needed effects not issued recently; journals them."""
    # an effect counts as issued for `reissue_after` (`effect_reissue_after`, longer as
    # the operation waits); then it is asked for again if the world still needs it (the
    # `reissue` timer makes sure someone looks)
    ops = session.state.ops
    recent = {op.stream for op in ops.values() if issued_recently(op, config, now)}
    issued = {d for op in ops.values() if op.stream in recent for d in op.issued}
    requests: list[EffectRequest] = []
    fresh: dict[StreamId, list[int]] = {}
    owners: dict[StreamId, Operation] = {}
    for owner, effect in needed:
        request = effect.request(owner.stream)
        digest = key_digest(request.idempotency_key)
        if digest in issued:
            continue
        issued.add(digest)
        requests.append(request)
        fresh.setdefault(owner.stream, []).append(digest)
        owners[owner.stream] = owner
    for stream, digests in fresh.items():
        previous = ops[_slot(owners[stream])].issued if stream in recent else ()
        keys = [*previous, *digests][-KEEP_ISSUED:]
        session.append(stream, EFFECTS_ISSUED, {"digests": keys, "at": now})
    return requests


def _slot(op: Operation) -> tuple[str, str]:
    return (op.network, op.direction)


def _waits_for(type_: str, op: Operation) -> tuple[str, str] | None:
    """What an event saying the operation waits tells the user: the Event's reason (after
    the direction) and its words; None for any other event."""
    if type_ == MIGRATION_HELD and op.held is not None:
        return "WaitingForMigrationSlot", migration_slot_wait(op.held)
    if type_ == WAITING and op.waiting and not op.waiting.startswith(GRACE_WAIT):
        return "WaitingForSDN", f"not yet, the SDN says: {op.waiting}"
    return None


_VERBS = {"plug": "Adding", "unplug": "Removing", "update": "Changing"}
_OUTCOME_WORDS = {
    "Attached": "is done: the running VM has it",
    "Detached": "is done: the running VM no longer has it",
    "RestartRequired": "takes effect at the VM's next restart",
    "MigrationRequired": "waits for the VM to be migrated",
    "Failed": "failed",
    "Cancelled": "was cancelled",
}


def change_in_words(op: Operation) -> str:
    """`Adding Network/user-net`, `Removing the Main network`: an operation as an
    operator names the change (Event notes: `kubectl describe vm`)."""
    network = "the Main network" if op.network == "Main" else op.network
    return f"{_VERBS.get(op.direction, op.direction.capitalize())} {network}"


def outcome_in_words(op: Operation) -> str:
    """Where an operation came to, in words: `Adding Network/x is done: the running VM
    has it`, `Removing the Main network takes effect at the VM's next restart`."""
    return f"{change_in_words(op)} {_OUTCOME_WORDS.get(op.state, f'is {op.state}')}"
