"""A NAD swap (the user points an existing interface at another NAD, `LiveUpdateNADRef`)
is its own change on upstream KubeVirt: an `update` of the new network, its target
naming the old one, tracked to where KubeVirt takes it: a migration for a migratable
VMI (KubeVirt copies the name into the VMI and asks for one at once), `RestartRequired`
for one that cannot migrate (8737323d0e). Before, nicplug saw an unplug of the old
network on an interface that never leaves, which timed out attempt after attempt."""

from __future__ import annotations

from nicplug.machines.decider import HotplugDecider
from nicplug.machines.policy import MachineConfig, Timeouts
from tests.unit.machines.sim import Driver, Sim

NEW = ("Network/other-net", "update")


def plugged(**sim: object) -> Driver:
    s = Sim(in_template=True, kubevirt_owns_pod=True, **sim)  # type: ignore[arg-type]
    d = Driver(HotplugDecider(MachineConfig(
        dialect_kind="multus", timeouts=Timeouts(attach_timeout=5, migration_timeout=5))),
        s, multus=True)
    d.run(1)
    s.user_plugs("fancy-net", "fancy-net")
    d.run(8)
    assert d.op("Network/fancy-net", "plug").state == "Attached"
    return d


def test_a_swap_on_a_migratable_vmi_is_tracked_through_kubevirts_migration() -> None:
    d = plugged()
    d.sim.user_swaps("fancy-net", "other-net")
    d.run(10)
    swap = d.op(*NEW)
    assert list(swap.history) == ["Requested", "VMIPatched", "MigrationRequired", "Migrating",
                                  "Attached"]  # fmt: skip
    assert swap.target == "swap:Network/fancy-net" and swap.if_name == "fancy-net"
    assert [e.type for e in d.effects].count("CreateMigration") == 1
    assert ("Network/fancy-net", "unplug") not in d.state.ops  # the interface stays
    assert {r.identity for r in d.sim.requested} == {"Network/other-net"}


def test_a_swap_on_a_vmi_that_cannot_migrate_waits_for_a_restart() -> None:
    d = plugged(live_migratable=False)
    d.sim.user_swaps("fancy-net", "other-net")
    d.run(4)
    swap = d.op(*NEW)
    assert swap.state == "RestartRequired"
    assert "Network/fancy-net → Network/other-net" in swap.message
    assert not d.sim.migrations
    d.sim.restart()
    d.run(6)
    assert list(d.op(*NEW).history) == ["Requested", "RestartRequired", "VMIPatched",
                                        "Attached"]  # fmt: skip
