"""A plug that timed out waiting for the SDN, which keeps reporting the same error, is
not opened again while the SDN says the same; it is once the SDN says something else
(seeds 54437, 55498 and 57786 of the simulation, `tests/dst/`: a Deckhouse SDN entry
turned `Configured=False (ConfigurationError)` while the plug waited for it, and the
plug was opened again at every backoff, 8 to 44 times, each attempt waiting for the
same SDN: Deckhouse reads a condition other than True as "not yet" and waits)."""

from __future__ import annotations

from dataclasses import replace

from nicplug.machines.decider import HotplugDecider
from nicplug.machines.policy import MachineConfig, Timeouts
from nicplug.machines.world import NetworkSpec, SDNStatus
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


def test_a_network_the_mac_pool_names_anew_is_tried_again_under_its_new_name() -> None:
    """Seed 28975: the plug of a network not yet in the VM's `status.networks` timed out
    on the SDN's error for its entry; the pool then handed the network another VMMAC
    (Deckhouse's `mac_pool.go`). The SDN still says the same of the entry under the old
    name, but a new attempt asks for the new one, which the SDN has not answered: it
    opens after its backoff and rewrites the pod's entry (it rested Failed for ever)."""
    first = NetworkSpec("ClusterNetwork", "storage", 2, mac="02:00:00:00:00:01",
                        named_by_mac=True)
    renamed = replace(first, mac="02:00:00:00:00:02")
    d = Driver(HotplugDecider(MachineConfig(timeouts=FAST)), Sim(networks=(MAIN, first)))
    d.sim.sdn_silent = frozenset({first.identity})
    d.sim.reported = [SDNStatus(first.identity, first.if_name, False, message=ERROR)]
    d.run(60)
    assert d.op(first.identity, "plug").attempt == 1
    d.sim.networks = (MAIN, renamed)
    d.run(30)
    op = d.op(first.identity, "plug")
    assert (op.attempt, op.if_name) == (2, renamed.if_name)
    assert [(r.identity, r.if_name) for r in d.sim.requested] == [
        (first.identity, renamed.if_name)]
