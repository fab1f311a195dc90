"""The machine's quicker fold of one stream (`operation.fold_view`, what `journal rebuild`
and `journal verify` fold with) gives exactly the row the decider's fold gives
(`audit.fold_stream`: `decider.evolve` event by event, then `views`), for random
histories: legal walks through every flavour's graph, effects issued, pauses and
resumes, bypass reports, "not yet" messages, interface names learnt, migrations held
by the cap, an operation
opened again, and events no fold accepts (an
illegal move, a missing or mistyped field, an unknown type), which must fail alike."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nicplug.engine.audit import Step, fold_stream
from nicplug.engine.model import Key, StreamId, StreamView
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.graph import MOVES_BY_FLAVOUR
from nicplug.machines.operation import (
    EFFECTS_ISSUED,
    EVENT_TYPES,
    GRACE_EXPIRED,
    INITIAL_STATE,
    MIGRATION_HELD,
    NAMED,
    OPENED,
    PAUSED,
    RESUMED,
    ROLLOUT_BYPASSED,
    TRANSITIONED,
    WAITING,
    fold_view,
)

KEY = Key("ns/vm-1")
DECIDER = HotplugDecider()
STATES = sorted({s for by_direction in MOVES_BY_FLAVOUR.values()
                 for by_state in by_direction.values() for s in by_state} | {"Attached"})
times = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)


def _opened(flavour: str, direction: str, attempt: int, at: float) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "vm": "ns/vm-1", "vm_uid": "uid-1", "network": "Network/x", "if_name": "veth_x",
        "direction": direction, "attempt": attempt, "target": "", "at": at,
    }
    if flavour != "deckhouse":
        payload["flavour"] = flavour
    return payload


@st.composite
def histories(draw: st.DrawFn) -> tuple[StreamId, list[tuple[str, Any]]]:
    flavour = draw(st.sampled_from(sorted(MOVES_BY_FLAVOUR)))
    direction = draw(st.sampled_from(sorted(MOVES_BY_FLAVOUR[flavour])))
    moves = MOVES_BY_FLAVOUR[flavour][direction]
    stream = StreamId(f"uid-1/Network/x/{direction}/1")
    events: list[tuple[str, Any]] = []
    if draw(st.booleans()):  # an event before the stream opened: no fold keeps it
        events.append((EFFECTS_ISSUED, {"digests": [1], "at": 1.0}))
    state = None
    for _ in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(
            ["open", "move", "move", "move", "issue", "issue", "grace", "bypass", "pause",
             "resume", "wait", "name", "hold", "illegal", "broken", "unknown"]))
        at = draw(times)
        if kind == "open" or state is None:
            events.append((OPENED, _opened(flavour, direction, 1, at)))
            state = INITIAL_STATE
        elif kind == "move":
            dests = [m.dest for m in moves.get(state, ())]
            if not dests:
                continue
            dest = draw(st.sampled_from(dests))
            payload: dict[str, Any] = {"from": state, "to": dest, "at": at}
            payload.update(draw(st.fixed_dictionaries({}, optional={
                "reason": st.sampled_from(["Timeout", "Rejected", None]),
                "message": st.text(max_size=8),
                "migration": st.sampled_from(["mig-1", None]),
                "retry_at": st.one_of(st.none(), times),
            })))
            events.append((TRANSITIONED, payload))
            state = dest
        elif kind == "issue":
            events.append((EFFECTS_ISSUED, {
                "digests": draw(st.lists(st.integers(0, 2**32 - 1), max_size=4)), "at": at}))
        elif kind == "grace":
            events.append((GRACE_EXPIRED, {"at": at}))
        elif kind == "bypass":
            events.append((ROLLOUT_BYPASSED, {"at": at, "strategy": "Stage", "vmi": "vmi-1"}))
        elif kind == "wait":
            events.append((WAITING, {"at": at, "message": draw(st.sampled_from(
                ["", "SDN: not yet (Pending)"]))}))
        elif kind == "name":
            events.append((NAMED, {"at": at, "if_name": draw(st.sampled_from(
                ["veth_a", "veth_b"])), "mac": "02:00:00:00:00:01"}))
        elif kind == "hold":
            events.append((MIGRATION_HELD, {"at": at, "in_flight": draw(st.integers(0, 9)),
                                            "cap": draw(st.integers(1, 9))}))
        elif kind == "pause":
            events.append((PAUSED, {"at": at}))
        elif kind == "resume":
            events.append((RESUMED, {"at": at}))
        elif kind == "illegal":
            events.append((TRANSITIONED, {"from": draw(st.sampled_from(STATES)),
                                          "to": draw(st.sampled_from(STATES)), "at": at}))
        elif kind == "broken":
            type_ = draw(st.sampled_from([TRANSITIONED, EFFECTS_ISSUED, PAUSED, RESUMED,
                                          ROLLOUT_BYPASSED, OPENED, WAITING, NAMED,
                                          MIGRATION_HELD]))
            events.append((type_, draw(st.sampled_from(
                [{}, [], "text", {"at": "soon", "digests": ["x"], "from": state, "to": 3}]))))
        else:
            events.append(("Renamed", {"at": at}))
    return stream, events


def _outcome(fold: Any, stream: StreamId, steps: list[Step]) -> StreamView | tuple[str, str]:
    try:
        result: StreamView | None = fold(KEY, stream, steps)
    except (ValueError, KeyError, TypeError) as error:
        return type(error).__name__, str(error)
    assert result is None or isinstance(result, StreamView)
    return result if result is not None else ("no row", "")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_the_quick_fold_gives_what_the_decider_gives(
    history: tuple[StreamId, list[tuple[str, Any]]],
) -> None:
    stream, events = history
    steps = [Step(n, stream, KEY, n, type_, 1, payload)
             for n, (type_, payload) in enumerate(events, 1)]
    quick = _outcome(fold_view, stream, steps)
    slow = _outcome(lambda k, s, e: fold_stream(DECIDER, k, s, e), stream, steps)
    assert quick == slow


GENERATED = {OPENED, TRANSITIONED, EFFECTS_ISSUED, GRACE_EXPIRED, ROLLOUT_BYPASSED, PAUSED,
             RESUMED, WAITING, NAMED, MIGRATION_HELD}


def test_the_histories_hold_every_event_type_the_machines_write() -> None:
    # a new event type needs its rule in fold_view and its place in `histories`
    assert set(EVENT_TYPES) == GENERATED
