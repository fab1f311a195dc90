"""A link KubeVirt left on a pod (upstream KubeVirt, no dynamic-networks controller)
ends its unplug once, `Failed(LinkStranded)`, saying what releases it; it is not
retried while the world stays so, and a migration that takes the link away lets the
next attempt end `Detached` (seed 1591 of the simulation, `tests/dst/`)."""

from __future__ import annotations

from nicplug.machines.decider import HotplugDecider
from nicplug.machines.policy import MachineConfig, Timeouts
from nicplug.machines.world import SDNRequest, SDNStatus
from tests.unit.machines.sim import MAIN, Driver, Sim, net

X = net("x", 2)
FAST = Timeouts(detach_timeout=5, backoff_base=10, backoff_max=20)


def _stranded(**sim: object) -> Driver:
    s = Sim(networks=(MAIN,), dynamic_networks=False, kubevirt_owns_pod=True,
            in_template=True, reported=[SDNStatus(X.identity, X.if_name, True)],
            **sim)  # type: ignore[arg-type]
    config = MachineConfig(timeouts=FAST, dialect_kind="multus")  # type: ignore[arg-type]
    return Driver(HotplugDecider(config), s, multus=True)


def test_the_unplug_ends_once_saying_what_releases_the_link() -> None:
    d = _stranded()
    d.run(200)  # ten times the backoff: a retried unplug would have opened again
    assert d.failures() == [(f"{d.op(X.identity, 'unplug').stream}", "LinkStranded")]
    op = d.op(X.identity, "unplug")
    assert (op.attempt, op.state, op.retry_at) == (1, "Failed", None)
    assert "migrate or restart the VM to release the link" in op.message
    assert X.if_name in op.message


def test_a_migration_kubevirt_asks_for_is_followed_not_stranded() -> None:
    d = _stranded()
    d.sim.migration_required = True  # KubeVirt asks: nicplug follows that migration
    d.run(12)
    op = d.op(X.identity, "unplug")
    assert (op.attempt, op.state) == (1, "Detached")
    assert "Migrating" in op.history
    assert d.failures() == []


def test_once_the_link_is_gone_the_next_attempt_ends_detached() -> None:
    d = _stranded()
    d.run(20)
    d.sim.reported = []  # a migration or a restart replaced the pod
    d.run(3)
    op = d.op(X.identity, "unplug")
    assert (op.attempt, op.state) == (2, "Detached")


def _request_left(**sim: object) -> Driver:
    """A pod whose networks annotation still asks for X, which KubeVirt forgot, while no
    interface of the VMI is being plugged or unplugged: virt-controller rewrites the
    annotation only then, so the entry stays (written back over KubeVirt's by someone
    else, or left when the VMI dropped X before the annotation was rewritten: seeds
    21336 and 25430 of the simulation)."""
    s = Sim(networks=(MAIN,), dynamic_networks=False, kubevirt_owns_pod=True,
            in_template=True, requested=[SDNRequest(X.identity, X.if_name)],
            kubevirt_stuck="annotation", **sim)  # type: ignore[arg-type]
    config = MachineConfig(timeouts=FAST, dialect_kind="multus")  # type: ignore[arg-type]
    return Driver(HotplugDecider(config), s, multus=True)


def test_a_request_kubevirt_will_not_drop_ends_the_unplug_once() -> None:
    d = _request_left()
    d.run(200)
    op = d.op(X.identity, "unplug")
    assert d.failures() == [(op.stream, "LinkStranded")]
    assert (op.attempt, op.state, op.retry_at) == (1, "Failed", None)
    assert "k8s.v1.cni.cncf.io/networks annotation" in op.message
    assert "migrate or restart the VM to drop it" in op.message


def test_once_kubevirt_rewrites_the_annotation_the_next_attempt_ends_detached() -> None:
    d = _request_left()
    d.run(20)
    d.sim.kubevirt_stuck = ""  # an interface plugged since: the annotation is rewritten
    d.run(3)
    op = d.op(X.identity, "unplug")
    assert (op.attempt, op.state) == (2, "Detached")


def test_a_plug_timed_by_a_clock_that_ran_ahead_does_not_reopen_the_unplug() -> None:
    """The plug of X was opened while the wall clock ran an hour ahead; set right, the
    stranded unplug opened after it fails at an earlier time than the plug's. It is
    still the plug the unplug followed (`after`), not a change of mind since: the unplug
    is not opened again at every deadline (seed 25430: 25 attempts)."""
    s = Sim(networks=(MAIN, X), kubevirt_owns_pod=True, in_template=True)
    config = MachineConfig(timeouts=FAST, dialect_kind="multus")  # type: ignore[arg-type]
    d = Driver(HotplugDecider(config), s, multus=True)
    d.now = 3600.0
    d.run(8)
    assert d.op(X.identity, "plug").state == "Attached"
    d.now = 0.0
    # the user took X back; KubeVirt forgot it, the pod still asks for it and links it
    d.sim.networks = (MAIN,)
    d.sim.kubevirt_stuck = "annotation"
    d.sim.kvvm_ifaces = [i for i in d.sim.kvvm_ifaces if i.name != X.if_name]
    d.sim.kvvm_nets = [n for n in d.sim.kvvm_nets if n.name != X.if_name]
    d.sim.attached = {"default"}
    d.run(200)
    op = d.op(X.identity, "unplug")
    assert d.failures() == [(op.stream, "LinkStranded")]
    assert (op.attempt, op.state) == (1, "Failed")
    assert "and reports its link" in op.message
