"""A small machine of the tests' own: count up to the observed target, one effect a step.

The world of a key is an int target. Each step asks for a `Bump` effect; the step is
counted when the effect succeeds. A reminder timer is armed with every request; a
permanent failure fails the stream; a superseded effect is asked for again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from nicplug.engine.model import (
    Decision,
    EffectOutcome,
    EffectRequest,
    Input,
    Key,
    NewEvent,
    RecordedEvent,
    StreamId,
    StreamView,
    TimerCancel,
    TimerFired,
    TimerRequest,
)

REMINDER = 30.0


@dataclass(frozen=True)
class Counter:
    key: Key
    count: int = 0
    pending: bool = False
    failed: bool = False
    reminders: int = 0
    reissues: int = 0

    @property
    def stream(self) -> StreamId:
        return StreamId(f"{self.key}/count")

    @property
    def state(self) -> str:
        if self.failed:
            return "Failed"
        return "Pending" if self.pending else "Idle"


class CounterMachine:
    snapshot_schema = 1

    def __init__(self) -> None:
        self.decisions = 0

    def initial(self, key: Key) -> Counter:
        return Counter(key)

    def decide(self, state: Counter, input: Input[int], now: float) -> Decision:
        self.decisions += 1
        target = input.world or 0
        trigger = input.trigger
        stream = state.stream
        if state.failed:
            return Decision()
        if isinstance(trigger, TimerFired):
            return Decision(events=(NewEvent(stream, "Reminded", {"at": now}),))
        events: list[NewEvent] = []
        count, pending = state.count, state.pending
        if isinstance(trigger, EffectOutcome):
            if trigger.ok:
                events.append(NewEvent(stream, "Bumped", {"to": count + 1}))
                count, pending = count + 1, False
            elif trigger.permanent:
                return Decision(
                    events=(NewEvent(stream, "Failed", {"error": trigger.error}),),
                    cancel_timers=(TimerCancel(stream, "reminder"),),
                )
            else:
                pending = False
        if pending or count >= target:
            cancel = (TimerCancel(stream, "reminder"),) if events and count >= target else ()
            return Decision(events=tuple(events), cancel_timers=cancel)
        reissue = isinstance(trigger, EffectOutcome) and not trigger.ok
        events.append(NewEvent(stream, "Requested", {"step": count + 1, "reissue": reissue}))
        suffix = f"/again{state.reissues + 1}" if reissue else ""
        return Decision(
            events=tuple(events),
            effects=(EffectRequest(stream, "Bump", {"step": count + 1},
                                   f"{stream}/bump/{count + 1}{suffix}"),),
            timers=(TimerRequest(stream, "reminder", now + REMINDER),),
        )

    def evolve(self, state: Counter, event: RecordedEvent) -> Counter:
        match event.type:
            case "Requested":
                reissues = state.reissues + (1 if event.payload["reissue"] else 0)
                return replace(state, pending=True, reissues=reissues)
            case "Bumped":
                return replace(state, count=event.payload["to"], pending=False)
            case "Failed":
                return replace(state, failed=True, pending=False)
            case "Reminded":
                return replace(state, reminders=state.reminders + 1)
        raise ValueError(f"unknown event {event.type}")

    def views(self, state: Counter) -> Sequence[StreamView]:
        if state == Counter(state.key):
            return ()
        return (StreamView(state.stream, state.key, state.state, state.failed, {
            "count": state.count, "reminders": state.reminders, "reissues": state.reissues,
        }),)

    def restore(self, key: Key, views: Sequence[StreamView]) -> Counter:
        (view,) = views
        return Counter(
            key, count=view.snapshot["count"], pending=view.state == "Pending",
            failed=view.state == "Failed", reminders=view.snapshot["reminders"],
            reissues=view.snapshot["reissues"],
        )

