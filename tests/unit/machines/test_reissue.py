"""An effect the world does not show is asked again less and less often while the
operation waits in one state: 30, 60, 120, 240 s after the state began, then every
`backoff_max`, not every `effect_reissue_after` (seed 458 of the simulation: a VM
watch stalled for four minutes and nicplug wrote its landed restart condition nine
times). A removal the informers show is still answered at once."""

from __future__ import annotations

from nicplug.engine.model import Cause, EffectOutcome, EffectRequest, Observed, TimerFired, Trigger
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


def test_a_write_refused_as_unseen_is_asked_again_at_the_spacing_not_per_observation() -> None:
    """Seed 91529: a patch refused because nicplug's own write landed and the informers do
    not show it yet (`OwnWriteUnseen`: the outcome's `unseen`) is decided again at the
    VM's next observation, from a world that still does not show it. Forgetting it as
    issued asked the same request at every observation (one pod patch 4 times in 5 s);
    it waits for the blind re-issues' spacing instead."""
    d, _ = _waiting_for_a_restart(blind=True)
    d.run(1)
    assert d.op(X.identity, "plug").state == "RestartRequired"
    asked: list[float] = []
    held: list[EffectOutcome] = []  # as the runtime holds them: until the next observation

    def decide(trigger: Trigger) -> None:
        for request in d.feed(trigger, execute=False).effects:
            if request.type == "SetVMCondition" and request.payload["type"] == CONDITION_RESTART:
                asked.append(d.now)
                held.append(EffectOutcome(1, request.stream, request.type, False, False,
                                          "a landed write unseen", {"unseen": True}))
            else:
                d.sim.execute(request)

    start = d.now
    for _ in range(60):  # observed every second, the condition's write never shown
        decide(Observed(Cause("observation", f"sim@{d.now}")))
        refusals, held[:] = held[:], []
        for outcome in refusals:
            decide(outcome)
        d.now += 1
        for (stream, name), deadline in sorted(d.timers.items(), key=lambda kv: kv[1]):
            if deadline <= d.now:
                del d.timers[(stream, name)]
                decide(TimerFired(stream, name, deadline))
    assert [t - start for t in asked] == [29, 59]


def test_a_write_issued_by_a_clock_since_set_back_is_asked_again_at_once() -> None:
    """Seed 51803: a pod patch was issued while the leader's clock ran an hour ahead; the
    clock was set right and, counted from that time, the patch stayed issued for the
    hour: nothing asked it again, and an unplug waiting on it failed 20 times. Issued
    later than now by the clock, it is asked again at once, then spaced as before."""
    d, written = _waiting_for_a_restart(blind=True)
    d.run(1)
    assert len(written) == 1
    d.now -= 3600  # the clock set right, after running an hour ahead
    d.run(1)
    assert len(written) == 2
    d.run(25)  # spaced from the clock as it reads now: the next one 30 s on
    assert len(written) == 2
