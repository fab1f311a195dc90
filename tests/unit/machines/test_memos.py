"""The decider's memos change no answer: a quiet observation seen again, a world that
differs only in resource versions, the facts kept on records, the folds reused by
`evolve` all give what a decider without them gives."""

from __future__ import annotations

import ast
from dataclasses import fields, replace
from pathlib import Path

import pytest

from nicplug.engine.model import Cause, Input, Observed, RecordedEvent
from nicplug.machines import facts as facts_module
from nicplug.machines.candidates import changes_needing_operations
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.facts import COMPARED_WORLD_FIELDS, facts_of, same_for_decisions
from nicplug.machines.operation import VMState
from nicplug.machines.policy import MachineConfig, Timeouts
from nicplug.machines.world import World
from tests.unit.machines.sim import KEY, MAIN, Driver, Sim, net

X = net("x", 2)
MACHINES = Path(facts_module.__file__).parent
TIMEOUTS = Timeouts(sdn_ready_timeout=6, attach_timeout=6, effect_reissue_after=4)


def bumped(world: World, version: str) -> World:
    """The same world as the API server would send it after a status-only write."""
    assert world.vm is not None and world.kvvm is not None and world.vmi is not None
    return replace(
        world,
        vm=replace(world.vm, resource_version=version),
        kvvm=replace(world.kvvm, resource_version=version),
        vmi=replace(world.vmi, resource_version=version),
        pods=tuple(replace(p, resource_version=version) for p in world.pods),
    )


def test_every_world_field_is_compared() -> None:
    assert {f.name for f in fields(World)} == set(COMPARED_WORLD_FIELDS)


def test_no_decision_reads_a_resource_version() -> None:
    """`same_for_decisions` ignores resource versions: only true while nothing else in
    the machines reads one (world.py declares them)."""
    readers = []
    for path in MACHINES.glob("*.py"):
        if path.name in ("world.py", "facts.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("resource_version", "derived"):
                readers.append(f"{path.name}:{node.lineno}")
    assert readers == []


def test_worlds_differing_in_versions_only_are_the_same_for_decisions() -> None:
    world = Sim(networks=(MAIN, X)).world()
    assert same_for_decisions(world, bumped(world, "7"))
    other = Sim(networks=(MAIN,)).world()
    assert not same_for_decisions(world, other)
    assert world.pods
    stopped = replace(world, pods=(replace(world.pods[0], phase="Succeeded"),))
    assert not same_for_decisions(world, stopped)
    assert not same_for_decisions(world, replace(world, pods=()))


def plain(state: VMState) -> VMState:
    """The same state without any memo on it."""
    return VMState(state.key, dict(state.ops))


@pytest.mark.parametrize("steps", [1, 2, 3, 4, 6, 12])
def test_a_quiet_observation_seen_again_decides_as_a_fresh_decider(steps: int) -> None:
    config = MachineConfig(timeouts=TIMEOUTS)
    sim = Sim(networks=(MAIN, X), sdn_silent=frozenset({"Network/x"}))
    d = Driver(HotplugDecider(config), sim)
    d.run(steps)
    world = sim.world()
    cause = Observed(Cause("observation", "again"))
    first = d.decider.decide(d.state, Input(KEY, world, cause), d.now)
    for later in (0.0, 0.5, 1.0, 3.9, 4.0, 5.9, 6.0, 9.0, 30.0):
        now = d.now + later
        again = d.decider.decide(d.state, Input(KEY, bumped(world, f"v{later}"), cause), now)
        fresh = HotplugDecider(config).decide(plain(d.state), Input(KEY, world, cause), now)
        assert again == fresh, (steps, later)
    assert first == HotplugDecider(config).decide(plain(d.state), Input(KEY, world, cause), d.now)


def test_evolve_reuses_a_decisions_folds_only_for_its_own_events() -> None:
    decider = HotplugDecider(MachineConfig())
    state = decider.initial(KEY)
    world = Sim(networks=(MAIN, X)).world()
    decision = decider.decide(state, Input(KEY, world, Observed(Cause("observation", "o"))), 0.0)
    assert decision.events
    ours = theirs = state
    for position, e in enumerate(decision.events, 1):
        recorded = RecordedEvent(e.stream, KEY, position, position, e.type, e.schema_version,
                                 e.payload, Cause("observation", "o"), 0.0, 0.0)  # fmt: skip
        copied = replace(recorded, payload=dict(e.payload))
        ours = decider.evolve(ours, recorded)
        theirs = theirs.fold(copied.stream, copied.type, copied.payload)
        assert decider.evolve(plain(state), copied) is not ours
    assert ours == theirs


def test_the_candidates_kept_with_a_comparison_are_those_of_a_fresh_one() -> None:
    """`Comparison.memo`: the candidates of the comparator's changes are kept with the
    comparison, and a decision that reuses them opens what a fresh comparison opens."""
    config = MachineConfig()
    world = Sim(networks=(MAIN, X)).world()
    state = HotplugDecider(config).initial(KEY)
    facts = facts_of(world)
    assert facts.comparison is not None and facts.comparison.changes
    first = changes_needing_operations(state, facts, facts.comparison, config)
    assert facts.comparison.memo is not None
    again = changes_needing_operations(state, facts, facts.comparison, config)
    fresh = replace(facts.comparison)  # the same value, nothing kept on it
    assert fresh.memo is None and fresh == facts.comparison
    assert first == again == changes_needing_operations(state, facts, fresh, config)
    assert [(c.network, c.direction) for c in first] == [("Network/x", "plug")]
