"""Operation records: the fold, the read-model rows and recovery from them."""

from __future__ import annotations

import pytest

from nicplug.engine.model import Cause, EffectOutcome, Input, Key, Observed, StreamId, TimerFired
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.operation import IllegalTransition, VMState, apply
from nicplug.machines.world import World
from tests.unit.machines.sim import KEY, MAIN, Driver, Sim, net

X = net("x", 2)


def test_views_restore_round_trip() -> None:
    d = Driver(HotplugDecider(), Sim(networks=(MAIN, X), sdn_silent=frozenset({"Network/x"})))
    d.run(3)
    views = d.decider.views(d.state)
    [row] = views
    assert (row.state, row.terminal, row.key) == ("AnnotationPatched", False, KEY)
    assert row.snapshot["history"] == ["Requested", "AnnotationPatched"]
    assert row.snapshot["network"] == "Network/x" and row.snapshot["direction"] == "plug"
    restored = d.decider.restore(KEY, views)
    assert restored == d.state
    world = d.sim.world()
    trigger = Observed(Cause("observation", "x"))
    assert d.decider.decide(restored, Input(KEY, world, trigger), d.now) == d.decider.decide(
        d.state, Input(KEY, world, trigger), d.now
    )


def test_an_illegal_transition_is_refused() -> None:
    d = Driver(HotplugDecider(), Sim(networks=(MAIN, X)))
    d.observe()
    op = d.op("Network/x", "plug")
    with pytest.raises(IllegalTransition):
        apply(op, "Transitioned", {"from": "Requested", "to": "Detached", "at": 1.0})


def test_events_of_an_unknown_stream_are_ignored_and_unknown_types_refused() -> None:
    state = VMState(Key("k"), {})
    assert state.fold(StreamId("nope"), "Transitioned", {}) == state
    d = Driver(HotplugDecider(), Sim(networks=(MAIN, X)))
    d.observe()
    with pytest.raises(ValueError, match="unknown event type"):
        apply(d.op("Network/x", "plug"), "Exploded", {})


def test_no_world_or_no_kvvm_decides_nothing() -> None:
    decider = HotplugDecider()
    state = decider.initial(KEY)
    trigger = Observed(Cause("observation", "x"))
    assert decider.decide(state, Input(KEY, None, trigger), 0.0).empty
    world = Sim(networks=(MAIN, X)).world()
    assert decider.decide(state, Input(KEY, World(world.vm), trigger), 0.0).empty


def test_stray_timers_and_outcomes_change_nothing() -> None:
    d = Driver(HotplugDecider(), Sim(networks=(MAIN, X)))
    d.run(8)
    before = d.state
    d.feed(TimerFired(StreamId("elsewhere/1"), "deadline", 0.0))
    d.feed(EffectOutcome(9, StreamId("elsewhere/1"), "PatchVirtualMachine", False, True, "x"))
    assert d.state == before


def test_a_transition_and_an_issue_fold_to_the_fields_they_name() -> None:
    """`apply` builds the two most folded events' operations field by field in order
    (`_new_op`): each must equal the operation named field by field."""
    d = Driver(HotplugDecider(), Sim(networks=(MAIN, X)))
    d.observe()
    op = d.op("Network/x", "plug")._replace(paused_at=3.0, credit=2.0, waiting="w", held=(1, 2))
    moved = apply(op, "Transitioned", {"from": "Requested", "to": "AnnotationPatched",
                                       "at": 5.0, "reason": "r", "message": "m"})
    assert moved == op._replace(
        state="AnnotationPatched", reason="r", message="m", history=(*op.history,
        "AnnotationPatched"), entered_at=5.0, issued=(), paused_at=5.0, credit=0.0,
        waiting="", held=None)  # fmt: skip
    assert type(moved) is type(op) and len(moved) == len(op._fields)
    issued = apply(op, "EffectsIssued", {"digests": [7, 8], "at": 6.0})
    assert issued == op._replace(issued=(7, 8), issued_at=6.0)
    assert type(issued) is type(op) and len(issued) == len(op._fields)
