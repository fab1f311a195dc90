"""The timers a decision arms and cancels: the durable deadlines of its operations.

An operation whose state has a budget (`guards.budget`: the SDN's readiness, the
guest's attach or detach, a migration) gets a `deadline` timer at the end of it, moved
as the budget's start moves; one whose effects were issued gets a `reissue` timer, so
someone looks again after `reissue_after` (`effect_reissue_after`, growing with the
time the operation has waited in its state); a failed one a `retry` timer at its
retry time (`Timeouts.backoff`). An operation that ended cancels the others. Only
operations this decision moved are looked at. Pure: no I/O, no clock.
"""

from __future__ import annotations

from nicplug.engine.model import EffectRequest, TimerCancel, TimerRequest
from nicplug.machines.effects import EmitEvent
from nicplug.machines.facts import Facts
from nicplug.machines.guards import budget
from nicplug.machines.operation import Operation
from nicplug.machines.policy import MachineConfig
from nicplug.machines.session import Session

DEADLINE, GRACE, REISSUE, RETRY = "deadline", "grace", "reissue", "retry"


def reissue_after(op: Operation, config: MachineConfig) -> float:
    """How long the effects `op` issued count as issued: `effect_reissue_after`, or the
    time the operation had waited in its state when it issued them if that is longer,
    at most `backoff_max`. An effect the world does not show is asked again 30, 60,
    120, 240 s after the state began rather than every 30 s: a write that landed while
    the informers are blind (a stalled watch, which their watchdog cannot cure while
    the server stalls every watch) is not repeated a hundred times an hour, and a lost
    one is still asked again. A migration nicplug's cap held back (`Operation.held`)
    is asked for every `effect_reissue_after`: a slot freed elsewhere is no change of
    this VM's world, and only asking again finds it. A clock set back since the state
    began (issued before it began, by the clock) cannot tell how long it waited: the
    longest spacing, or a write the informers do not show would be asked every 30 s
    for as long as the clock stays behind (hours, for an NTP step)."""
    t = config.timeouts
    if op.held is not None:
        return t.effect_reissue_after
    waited = op.issued_at - op.entered_at
    if waited < 0:
        waited = t.backoff_max
    return min(max(t.effect_reissue_after, waited), max(t.effect_reissue_after, t.backoff_max))


def issued_recently(op: Operation, config: MachineConfig, now: float) -> bool:
    """Whether the effects `op` issued still count as issued at `now`: for
    `reissue_after`, and only if they were issued at or before `now` by the clock. Issued
    later than `now`, the clock has been set back since: how long ago is unknown, and
    counting from that time would hold a request back as long as the clock ran ahead
    (seed 51803: a pod patch refused while the informers did not show nicplug's own
    write, issued while the clock ran an hour ahead, was not asked again for that hour
    once the clock was set right; an unplug waiting on it failed 20 times). Asked again
    at once, it counts from the clock as it reads now."""
    return bool(op.issued) and now - reissue_after(op, config) < op.issued_at <= now


def timers_of(
    config: MachineConfig, session: Session, facts: Facts, now: float, effects: list[EffectRequest]
) -> tuple[tuple[TimerRequest, ...], tuple[TimerCancel, ...]]:
    arm: list[TimerRequest] = []
    cancel: list[TimerCancel] = []
    for stream in session.paths:
        op = session.state.by_stream(stream)
        if op is None:
            continue
        if op.terminal:
            cancel += [TimerCancel(stream, n) for n in (DEADLINE, GRACE, REISSUE)]
            if op.retry_at is not None:
                arm.append(TimerRequest(stream, RETRY, op.retry_at))
            continue
        limit = budget(op, facts, config)
        if limit is None:
            cancel.append(TimerCancel(stream, DEADLINE))
        else:
            arm.append(TimerRequest(stream, DEADLINE, op.deadline_base + limit))
    reissued = {e.stream for e in effects if e.type != EmitEvent.TYPE}
    for stream in sorted(reissued):
        op = session.state.by_stream(stream)
        if op is not None and not op.terminal:
            arm.append(TimerRequest(stream, REISSUE, now + reissue_after(op, config)))
    return tuple(arm), tuple(cancel)
