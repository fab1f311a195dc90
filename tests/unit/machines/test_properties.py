"""Property tests over random sequences of world observations.

Sequences mix the simulated controllers' progress, user edits of `spec.networks`
(including reverts), repeated observations, stale observations (the pods and the VMI
as they were a few steps ago: their decisions are journaled, their patches fail the
resourceVersion precondition), time jumps that fire timeouts, and restarts. Checked
on every decision: the two ordering invariants (`sim.check_invariants`) and
determinism. Checked at the end: terminal states absorb; the run converges to the
desired world; a decider that lost its journal at any point converges to the same
world from wherever it was.
"""

from __future__ import annotations

import copy
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nicplug.engine.model import Cause, Observed
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.graph import TERMINAL
from nicplug.machines.operation import TRANSITIONED, VMState
from nicplug.machines.policy import MachineConfig, Timeouts
from nicplug.machines.world import World
from tests.unit.machines.sim import KEY, MAIN, Driver, Sim, net

X = net("x", 2)
Y = net("y", 3, "ClusterNetwork")
DESIRES = [None, (MAIN,), (MAIN, X), (MAIN, X, Y), (MAIN, Y), (MAIN, Y, X), (X,)]
TIMEOUTS = Timeouts(
    sdn_ready_timeout=6, attach_timeout=6, detach_timeout=6, migration_timeout=8,
    dynamic_networks_grace=3, effect_reissue_after=4, backoff_base=2, backoff_max=8,
)  # fmt: skip

actions = st.lists(
    st.one_of(
        st.tuples(st.just("settle"), st.just(0)),
        st.tuples(st.just("observe"), st.just(0)),
        st.tuples(st.just("desire"), st.integers(0, len(DESIRES) - 1)),
        st.tuples(st.just("stale"), st.integers(1, 4)),
        st.tuples(st.just("time"), st.integers(1, 12)),
        st.tuples(st.just("restart"), st.just(0)),
    ),
    max_size=40,
)
setups = st.fixed_dictionaries(
    {
        "dialect": st.sampled_from(["deckhouse", "multus"]),
        "dynamic": st.booleans(),
        "strategy": st.sampled_from(["LiveUpdate", "Stage"]),
        "approval": st.sampled_from(["Manual", "Automatic"]),
        "gating": st.sampled_from(["rollout-strategy", "always-live"]),
    }
)


def build(setup: dict[str, object]) -> Driver:
    multus = setup["dialect"] == "multus"
    sim = Sim(
        networks=None,
        strategy=setup["strategy"],  # type: ignore[arg-type]
        approval=setup["approval"],  # type: ignore[arg-type]
        dynamic_networks=bool(setup["dynamic"]),
        kubevirt_owns_pod=multus,
        in_template=multus,  # the user's edits of `networks` are edits of the template
    )
    config = MachineConfig(
        gating=setup["gating"],  # type: ignore[arg-type]
        dialect_kind=setup["dialect"],  # type: ignore[arg-type]
        timeouts=TIMEOUTS,
    )
    return Driver(HotplugDecider(config), sim, multus=multus, check_determinism=True)


def step(d: Driver, action: tuple[str, int], worlds: list[World]) -> None:
    kind, arg = action
    if kind == "settle":
        d.sim.settle()
        d.now += 1
        d.fire_due()
    elif kind == "observe":
        d.observe()
    elif kind == "desire":
        d.sim.networks = DESIRES[arg]
        d.observe()
    elif kind == "stale" and len(worlds) > arg:
        old, now = worlds[-arg], d.sim.world()
        mixed = replace(now, vmi=old.vmi, pods=old.pods)
        d.feed(Observed(Cause("observation", "stale")), world=mixed, execute=False)
    elif kind == "time":
        d.now += arg
        d.fire_due()
    elif kind == "restart" and d.sim.vmi_uid is not None:
        d.sim.restart()
    worlds.append(d.sim.world())


def quiesce(d: Driver) -> None:
    for _ in range(80):
        d.observe()
        d.sim.settle()
        d.now += 3
        d.fire_due()
        waiting = any(op.state == "RestartRequired" for op in d.state.ops.values())
        if waiting and d.sim.vmi_uid is not None and not d.sim.restarting:
            d.sim.restart()


def end_world(d: Driver) -> tuple[object, ...]:
    sim = d.sim
    names = [i.name for i in sim.kvvm_ifaces if not i.absent]
    return (
        # (in the kubevirt flavour the user's template: KubeVirt appends, order is moot)
        tuple(sorted(names) if sim.in_template else names),
        tuple(sorted(sim.attached)),
        tuple(sorted(r.identity for r in sim.requested)),  # the annotation's order is moot
        tuple((r.identity, r.id) for r in sim.template),
    )


def expected_world(d: Driver) -> tuple[object, ...]:
    desired = d.sim.networks or (MAIN,)
    names = [n.if_name for n in desired]
    return (
        tuple(sorted(names) if d.sim.in_template else names),
        tuple(sorted(n.if_name for n in desired)),
        tuple(sorted(n.identity for n in desired if n.type != "Main")),
        # KubeVirt generates new pods' networks from the VMI: the template holds none
        ()
        if d.sim.kubevirt_owns_pod
        else tuple((n.identity, n.id) for n in desired if n.type != "Main"),
    )


def assert_terminal_absorbs(d: Driver) -> None:
    ended: set[str] = set()
    for _, decision in d.log:
        for event in decision.events:
            if event.type == TRANSITIONED:
                assert event.stream not in ended, f"{event.stream} left a terminal state"
                if event.payload["to"] in TERMINAL:
                    ended.add(event.stream)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=setups, script=actions, cut=st.integers(0, 40))
def test_random_worlds_keep_invariants_and_converge(
    setup: dict[str, object], script: list[tuple[str, int]], cut: int
) -> None:
    d = build(setup)
    worlds: list[World] = []
    adopted: Driver | None = None
    for index, action in enumerate(script):
        if index == min(cut, len(script) - 1):
            adopted = copy.deepcopy(d)
            adopted.state = VMState(KEY, {})  # the journal is lost here
            adopted.timers.clear()
            adopted.log.clear()
        step(d, action, worlds)
    quiesce(d)
    assert_terminal_absorbs(d)
    assert end_world(d) == expected_world(d)
    assert all(op.terminal for op in d.state.ops.values()), d.states()
    if adopted is not None:
        adopted.sim.networks = d.sim.networks
        quiesce(adopted)
        assert_terminal_absorbs(adopted)
        assert end_world(adopted) == end_world(d)
        assert all(op.terminal for op in adopted.state.ops.values()), adopted.states()
