"""A removed network's MAC handed on to a network added while the VM runs.

Deckhouse empties the VM's `status.networks` at once when its spec asks Main alone
(`UpdateNetworkStatus`, `pkg/controller/vm/internal/network.go`: the unplug's entry is
kept only while another network remains), so its MAC pool (`mac_pool.go`) reserves
nothing and a network added next takes the same MAC, hence the same interface name,
while the removed network's interface is still in the KVVM, the guest and the pod.
nicplug unplugs the removed network under that name first (the KVVM's SDN requests
say whose interface it is), then asks the pod for the new network under it: one entry
per interface name on a pod (seed 24855: both entries under one name, the unplug
never written, 47 attempts of each).
"""

from __future__ import annotations

from nicplug.machines.decider import HotplugDecider
from nicplug.machines.policy import MachineConfig
from nicplug.machines.world import NetworkSpec
from tests.unit.machines.sim import MAIN, Driver, Sim

MAC = "02:00:00:00:00:01"


def _net(name: str, id_: int) -> NetworkSpec:
    return NetworkSpec("Network", name, id_, mac=MAC, named_by_mac=True)


SECOND, USER = _net("second-net", 3), _net("user-net", 2)


def test_the_name_handed_on_is_unplugged_for_the_old_network_then_plugged_for_the_new() -> None:
    assert SECOND.if_name == USER.if_name
    name = SECOND.if_name
    d = Driver(HotplugDecider(MachineConfig()), Sim(networks=(MAIN, SECOND)))
    d.run(8)
    assert d.sim.attached == {"default", name}
    d.sim.networks = (MAIN, USER)  # Main alone, then user-net: the pool hands the MAC on
    d.run(16)
    unplug, plug = d.op("Network/second-net", "unplug"), d.op("Network/user-net", "plug")
    assert (unplug.if_name, unplug.state, unplug.attempt) == (name, "Detached", 1)
    assert (plug.if_name, plug.state, plug.attempt) == (name, "Attached", 1)
    assert d.sim.attached == {"default", name}
    assert [(r.identity, r.if_name) for r in d.sim.template] == [("Network/user-net", name)]
    assert d.failures() == []
