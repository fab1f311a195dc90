"""A plug that timed out waiting for the SDN, which keeps reporting the same error, is
not opened again while the SDN says the same; it is once the SDN says something else
(seeds 54437, 55498 and 57786 of the simulation, `tests/dst/`: a Deckhouse SDN entry
turned `Configured=False (ConfigurationError)` while the plug waited for it, and the
plug was opened again at every backoff, 8 to 44 times, each attempt waiting for the
same SDN: Deckhouse reads a condition other than True as "not yet" and waits)."""

from __future__ import annotations

from nicplug.machines.decider import HotplugDecider
from nicplug.machines.policy import MachineConfig, Timeouts
from nicplug.machines.world import SDNStatus
from tests.unit.machines.sim import MAIN, Driver, Sim, net

X = net("x", 2)
FAST = Timeouts(sdn_ready_timeout=5, backoff_base=10, backoff_max=20)
ERROR = "Configured=False (ConfigurationError: the bridge went away)"


def erring() -> Driver:
    """X asked for; the SDN reports its entry in error, and keeps saying so."""
    d = Driver(HotplugDecider(MachineConfig(timeouts=FAST)), Sim(networks=(MAIN, X)))
    d.sim.sdn_silent = frozenset({X.identity})  # what it says now stays
    d.sim.reported = [SDNStatus(X.identity, X.if_name, False, message=ERROR)]
    return d


def test_a_plug_timed_out_on_an_sdn_error_the_sdn_keeps_is_not_opened_again() -> None:
    d = erring()
    d.run(200)  # ten backoffs and more
    op = d.op(X.identity, "plug")
    assert (op.attempt, op.state, op.reason) == (1, "Failed", "SDNTimeout")
    assert op.message.endswith(f"the SDN says: virt-launcher-vm-1: {ERROR}")


def test_the_next_attempt_opens_once_the_sdn_says_something_else() -> None:
    d = erring()
    d.run(60)
    d.sim.reported = [SDNStatus(X.identity, X.if_name, False,
                                message="Configured=False (ConfigurationError: no VLAN)")]
    d.run(30)
    assert d.op(X.identity, "plug").attempt == 2  # another error: tried again, once
    d.sim.sdn_silent = frozenset()
    d.sim.reported = []  # the error ends: the SDN configures the entry
    d.run(30)
    op = d.op(X.identity, "plug")
    assert (op.attempt, op.state) == (3, "Attached")
