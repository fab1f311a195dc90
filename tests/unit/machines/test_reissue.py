"""An effect the world does not show is asked again less and less often while the
operation waits in one state: 30, 60, 120, 240 s after the state began, then every
`backoff_max`, not every `effect_reissue_after` (seed 458 of the simulation: a VM
watch stalled for four minutes and nicplug wrote its landed restart condition nine
times). A removal the informers show is still answered at once."""

from __future__ import annotations

from nicplug.engine.model import EffectOutcome, EffectRequest
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.effects import CONDITION_RESTART
from nicplug.machines.policy import MachineConfig, Timeouts
from nicplug.machines.timers import reissue_after
from tests.unit.machines.sim import MAIN, Driver, Sim, net

X = net("x", 2)


def _waiting_for_a_restart(blind: bool) -> tuple[Driver, list[float]]:
    """A plug under `Stage` waits in RestartRequired with its condition on the VM;
    `blind`: the condition's writes land (2xx) but the informers never show them (a
    stalled watch). Returns the driver and the times the condition is written."""
    decider = HotplugDecider(MachineConfig(timeouts=Timeouts(backoff_max=300)))
    d = Driver(decider, Sim(networks=(MAIN, X), strategy="Stage"))
    written: list[float] = []

    def answer(request: EffectRequest) -> EffectOutcome | None:
        if request.type != "SetVMCondition" or request.payload["type"] != CONDITION_RESTART:
            return None
        written.append(d.now)
        if not blind:
            d.sim.execute(request)
        return EffectOutcome(1, request.stream, request.type, True, False, None)

    d.answer = answer
    return d, written


def test_a_landed_write_the_informers_never_show_is_repeated_ever_more_rarely() -> None:
    d, written = _waiting_for_a_restart(blind=True)
    d.run(1)
    op = d.op(X.identity, "plug")
    assert op.state == "RestartRequired"
    d.run(900)
    assert [t - op.entered_at for t in written] == [0, 30, 60, 120, 240, 480, 780]


def test_a_condition_removed_in_sight_is_written_again_at_once() -> None:
    d, written = _waiting_for_a_restart(blind=False)
    d.run(600)  # written once, seen at once: nothing more
    assert len(written) == 1
    d.sim.vm_conditions.pop(CONDITION_RESTART)
    removed = d.now
    d.run(2)
    assert [t - removed for t in written[1:]] == [0]


def test_a_clock_set_back_since_the_state_began_spaces_the_reissues_the_longest() -> None:
    """Seed 37548: the leader's clock stepped back two hours between a plug's opening and
    its first pod patch, so by the clock the patch was issued before the state began.
    The negative wait kept the spacing at `effect_reissue_after`: the landed patch the
    stalled informers never showed was asked again every 30 s (6 times in 150 s, each
    refused by its `test`). How long it waited is unknown: the longest spacing."""
    d, _ = _waiting_for_a_restart(blind=True)
    d.run(1)
    op = d.op(X.identity, "plug")
    config = d.decider.config
    assert reissue_after(op, config) == 30
    stepped = op._replace(issued_at=op.entered_at - 7200)
    assert reissue_after(stepped, config) == config.timeouts.backoff_max
