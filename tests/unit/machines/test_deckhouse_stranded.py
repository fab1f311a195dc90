"""A Deckhouse unplug the platform will not finish ends once, saying what would, and is
not retried while the world stays so, in drive mode as in observe mode.

Deckhouse's KubeVirt marks a `bpfbridge` interface absent in the KVVM and the VMI but
never detaches it from a running domain (virt-launcher's `interfacesToHotUnplug`
matches only KubeVirt's hashed tap names): the guest keeps the NIC until a migration or
a restart (`GuestKeepsInterface`). An SDN agent that keeps a link no networks-spec asks
for strands it on the pod the same way (`LinkStranded`). Both failed `DetachTimeout`
and were retried every backoff for ever."""

from __future__ import annotations

from nicplug.machines.decider import HotplugDecider
from nicplug.machines.policy import MachineConfig, Timeouts
from nicplug.machines.world import KVVMInterface, SDNRequest, SDNStatus
from tests.unit.machines.sim import MAIN, Driver, Sim, net
from tests.unit.machines.test_edges import lost

X = net("x", 2)
FAST = Timeouts(detach_timeout=5, backoff_base=10, backoff_max=20)


def _plugged(mode: str = "drive") -> Driver:
    """A running VM with X attached, its unplug asked for."""
    d = Driver(HotplugDecider(MachineConfig(timeouts=FAST, mode=mode)),  # type: ignore[arg-type]
               Sim(networks=(MAIN, X)))
    if mode == "observe":  # Deckhouse plugged it itself, long ago
        d.sim.kvvm_ifaces = [KVVMInterface("default"), KVVMInterface(X.if_name)]
        d.sim.vmi_ifaces = list(d.sim.kvvm_ifaces)
        d.sim.requested = [SDNRequest(X.identity, X.if_name, 2)]
        d.sim.template = list(d.sim.requested)
        d.sim.reported = [SDNStatus(X.identity, X.if_name, True)]
        d.sim.attached.add(X.if_name)
    d.run(10)
    assert X.if_name in d.sim.attached
    d.sim.networks = (MAIN,)
    return d


def _deckhouse_unplugs(d: Driver) -> None:
    """Observe mode: Deckhouse rewrites the networks-spec, then marks the KVVM absent."""
    d.sim.requested = []
    d.sim.template = []
    d.sim.kvvm_ifaces = [KVVMInterface("default"), KVVMInterface(X.if_name, True)]


def test_a_nic_the_guest_keeps_ends_the_driven_unplug_once() -> None:
    d = _plugged()
    d.sim.handler_stuck = True  # the domain keeps the bpfbridge NIC
    d.run(200)  # ten times the backoff: a retried unplug would have opened again
    op = d.op(X.identity, "unplug")
    assert d.failures() == [(op.stream, "GuestKeepsInterface")]
    assert (op.attempt, op.state, op.retry_at) == (1, "Failed", None)
    assert "VirtualMachineOperation Migrate" in op.message
    assert X.if_name in op.message and "guest still has it" in op.message


def test_a_restart_releases_the_nic_and_the_next_attempt_ends_detached() -> None:
    d = _plugged()
    d.sim.handler_stuck = True
    d.run(20)
    d.sim.handler_stuck = False
    d.sim.restart()  # the operator's: a new domain, made without the NIC
    d.run(6)
    op = d.op(X.identity, "unplug")
    assert (op.attempt, op.state) == (2, "Detached")


def test_a_guest_that_lets_go_at_last_lets_the_next_attempt_finish_the_unplug() -> None:
    """A platform slower than the deadline: the guest lets go in place, the pod still
    asks for the link, and the next attempt drops it (the world moved, no backoff)."""
    d = _plugged()
    d.sim.handler_stuck = True
    d.run(20)
    d.sim.handler_stuck = False
    d.run(6)
    op = d.op(X.identity, "unplug")
    assert (op.attempt, op.state) == (2, "Detached")
    assert d.sim.requested == []


def test_the_network_asked_for_again_is_plugged_not_blocked() -> None:
    d = _plugged()
    d.sim.handler_stuck = True
    d.run(20)
    d.sim.networks = (MAIN, X)
    d.run(3)
    assert d.op(X.identity, "unplug").state == "Failed"
    assert (X.identity, "plug") in d.state.ops


def test_a_link_the_sdn_keeps_ends_the_driven_unplug_once() -> None:
    d = _plugged()
    d.sim.sdn_keeps = frozenset({X.identity})
    d.run(200)
    op = d.op(X.identity, "unplug")
    assert d.failures() == [(op.stream, "LinkStranded")]
    assert (op.attempt, op.state, op.retry_at) == (1, "Failed", None)
    assert "networks-status" in op.message and "SDN agent did not release it" in op.message
    d.sim.sdn_keeps = frozenset()  # the pod replaced
    d.run(3)
    assert d.op(X.identity, "unplug").state == "Detached"


def test_a_detach_that_never_lands_is_still_retried_with_its_backoff() -> None:
    """The pod's request never loses the entry (a write lost each time): nothing shows
    that the platform will not finish it, so it fails `DetachTimeout` and is retried."""
    d = _plugged()
    d.answer = lost("PatchPodNetworks")
    d.run(30)
    assert d.failures()[0][1] == "DetachTimeout"
    assert d.op(X.identity, "unplug").attempt > 1


def test_an_observed_unplug_the_guest_never_finishes_ends_once() -> None:
    d = _plugged("observe")
    d.sim.handler_stuck = True
    _deckhouse_unplugs(d)
    d.run(200)
    op = d.op(X.identity, "unplug")
    assert d.failures() == [(op.stream, "GuestKeepsInterface")]
    assert (op.attempt, op.state, op.retry_at, op.mode) == (1, "Failed", None, "observe")
    assert [e.type for e in d.effects if e.type != "EmitEvent"] == []


def test_an_observed_unplug_whose_link_stays_ends_once() -> None:
    d = _plugged("observe")
    d.sim.sdn_keeps = frozenset({X.identity})
    _deckhouse_unplugs(d)
    d.run(200)
    op = d.op(X.identity, "unplug")
    assert d.failures() == [(op.stream, "LinkStranded")]
    assert (op.attempt, op.state, op.retry_at) == (1, "Failed", None)
