"""A link KubeVirt left on a pod (upstream KubeVirt, no dynamic-networks controller)
ends its unplug once, `Failed(LinkStranded)`, saying what releases it; it is not
retried while the world stays so, and a migration that takes the link away lets the
next attempt end `Detached` (seed 1591 of the simulation, `tests/dst/`)."""

from __future__ import annotations

from nicplug.machines.decider import HotplugDecider
from nicplug.machines.policy import MachineConfig, Timeouts
from nicplug.machines.world import SDNStatus
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
