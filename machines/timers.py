"""The timers a decision arms and cancels: the durable deadlines of its operations.

An operation whose state has a budget (`guards.budget`: the SDN's readiness, the
guest's attach or detach, a migration) gets a `deadline` timer at the end of it, moved
as the budget's start moves; one whose effects were issued gets a `reissue` timer, so
someone looks again after `effect_reissue_after`; a failed one a `retry` timer at its
retry time (`Timeouts.backoff`). An operation that ended cancels the others. Only
operations this decision moved are looked at. Pure: no I/O, no clock.
"""

from __future__ import annotations

from nicplug.engine.model import EffectRequest, TimerCancel, TimerRequest
from nicplug.machines.effects import EmitEvent
from nicplug.machines.facts import Facts
from nicplug.machines.guards import budget
from nicplug.machines.policy import MachineConfig
from nicplug.machines.session import Session

DEADLINE, GRACE, REISSUE, RETRY = "deadline", "grace", "reissue", "retry"


def timers_of(
    config: MachineConfig, session: Session, facts: Facts, now: float, effects: list[EffectRequest]
) -> tuple[tuple[TimerRequest, ...], tuple[TimerCancel, ...]]:
    t = config.timeouts
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
            arm.append(TimerRequest(stream, REISSUE, now + t.effect_reissue_after))
    return tuple(arm), tuple(cancel)
