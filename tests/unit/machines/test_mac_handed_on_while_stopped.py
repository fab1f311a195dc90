"""A removed network's MAC handed on to a network added while the VM is stopped.

Deckhouse's MAC pool (`mac_pool.go`) hands the freed MAC of a removed network to one
added in the same edit, so both share one interface name. On a stopped VM the unplug
is done once the KVVM is written for the next boot: until then the KVVM still carries
the name for the removed network, and a start (the user's, while nicplug restarts the
VM) boots it with that network (seed 46685: the unplug counted itself done, the user's
VMI booted the network again, and nicplug stopped it a second time for one change).
"""

from __future__ import annotations

from nicplug.engine.model import Cause, Observed
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.policy import MachineConfig
from nicplug.machines.world import NetworkSpec
from tests.unit.machines.sim import MAIN, Driver, Sim

MAC = "02:00:00:00:00:01"


def _net(name: str, id_: int) -> NetworkSpec:
    return NetworkSpec("Network", name, id_, mac=MAC, named_by_mac=True)


SECOND, USER = _net("second-net", 3), _net("user-net", 2)


def test_the_unplug_waits_for_the_kvvm_written_for_the_next_boot() -> None:
    assert SECOND.if_name == USER.if_name
    name = USER.if_name
    d = Driver(HotplugDecider(MachineConfig()), Sim(networks=(MAIN, USER)))
    d.run(8)
    d.sim.stop()
    d.sim.running = False
    d.run(2)
    d.sim.networks = (MAIN, SECOND)  # user-net replaced: the pool hands its MAC on
    decision = d.feed(Observed(Cause("observation", "edit")))  # decided before the write
    assert [e.type for e in decision.effects] == ["PatchVirtualMachine"]
    assert d.op("Network/user-net", "unplug").state != "Detached"
    d.run(4)  # the KVVM written for the next boot
    assert [(r.identity, r.if_name) for r in d.sim.template] == [("Network/second-net", name)]
    assert d.op("Network/user-net", "unplug").state == "Detached"
    assert d.failures() == []
