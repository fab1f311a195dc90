"""A failed plug whose failure is dated later than now (the wall clock ran ahead when it
failed, and was set back since) is retried when the user asks for it again, not once
the clock has caught up with its retry time (seed 41431 of the simulation, `tests/dst/`:
the retry timer had fired under the clock that ran ahead while the user did not ask
for the network; asked again, the plug waited for a retry time 20 minutes off, with no
timer, and stayed Failed while the guest had the interface)."""

from __future__ import annotations

from nicplug.machines.decider import HotplugDecider
from nicplug.machines.policy import MachineConfig, Timeouts
from tests.unit.machines.sim import MAIN, Driver, Sim, net

X = net("x", 2)
FAST = Timeouts(sdn_ready_timeout=5, backoff_base=10, backoff_max=20)


def test_a_plug_failed_while_the_clock_ran_ahead_is_retried_when_asked_again() -> None:
    s = Sim(networks=(MAIN, X), sdn_silent=frozenset({X.identity}))
    d = Driver(HotplugDecider(MachineConfig(timeouts=FAST)), s)
    d.now = 1200.0  # the wall clock runs 20 minutes ahead
    d.run(10)
    first = d.op(X.identity, "plug")
    assert (first.attempt, first.state, first.reason) == (1, "Failed", "SDNTimeout")
    d.sim.networks = (MAIN,)  # the user takes X back: its retry timer fires unused
    d.run(30)
    assert d.op(X.identity, "plug").attempt == 1
    d.now = 100.0  # the clock is set right
    d.sim.sdn_silent = frozenset()
    d.sim.networks = (MAIN, X)  # and the user asks for X again
    d.run(10)
    again = d.op(X.identity, "plug")
    assert (again.attempt, again.state) == (2, "Attached")
