"""A network the MAC pool names anew while the guest has it, on the simulated Deckhouse
with nicplug driving (a release without native hotplug).

Deckhouse's pool (`mac_pool.go`) holds only `status.networks`, which a revert to Main
alone empties at once (`UpdateNetworkStatus`: `hasOnlyDefaultNetwork`). Three networks
plugged in one edit hold the VM's VMMACs in name order; after a revert and two of them
asked for again, the second takes the VMMAC the dropped one held: a new MAC, so a new
interface name, while its first interface is still in the guest. Deckhouse's KVVM
rebuild marks that one absent and adds the new one (`setNetwork`); nicplug unplugs the
old interface (guest first, then the SDN) and plugs the network under its new name.
Here nicplug is away while the user edits, so the whole rename is met at once.
"""

from __future__ import annotations

from nicplug.simulator import networking as nw
from nicplug.simulator import objects as ob
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.resources import VMIS, VMMACS, VMS
from tests.integration.cluster_view import assert_healthy, attached, split
from tests.integration.conftest import QUICK, eventually

VM = "default/vm-00000"
STORAGE = "ClusterNetwork/storage"


def _status_names(cluster) -> list[str]:
    vm = cluster.store.get(VMS, *split(VM))
    return [str(n.get("name") or n.get("type")) for n in ob.dig(vm, "status", "networks") or []]


async def test_a_network_renamed_by_the_pool_while_attached_is_replaced_in_the_guest(
    start_cluster, start_controller, user_of
):
    cluster = await start_cluster(Knobs(dialect="deckhouse", delays=QUICK),
                                  Fixtures(vms=1, networks=("user-net", "second-net")))
    ctl = await start_controller(cluster)
    user = user_of(cluster)
    await user.add_networks(VM, ("Network", "user-net"), ("Network", "second-net"),
                            ("ClusterNetwork", "storage"))
    first = await ctl.journal.wait_for(VM, STORAGE, "plug", {"Attached", "Failed"})
    assert first.state == "Attached"
    vmmacs = sorted(cluster.store.list(VMMACS, "default")[0],
                    key=lambda m: str(m["metadata"]["name"]))  # the order the pool reads
    macs = [str(ob.dig(m, "status", "address")) for m in vmmacs]
    old, new = nw.mac_if_name("ClusterNetwork", macs[2]), nw.mac_if_name(
        "ClusterNetwork", macs[1])
    vmi = cluster.store.get(VMIS, *split(VM))
    assert attached(vmi, old)
    journal = ctl.settings.journal
    await ctl.stop()

    await user.set_networks(VM, [{"type": "Main", "id": 1}])
    await eventually(lambda: _status_names(cluster) == ["Main"], what="the status emptied")
    await user.set_networks(VM, [{"type": "Main", "id": 1},
                                 {"type": "Network", "name": "user-net", "id": 2},
                                 {"type": "ClusterNetwork", "name": "storage", "id": 4}])
    ctl = await start_controller(cluster, journal=journal)

    unplug = await ctl.journal.wait_for(VM, STORAGE, "unplug", {"Detached", "Failed"})
    assert (unplug.state, unplug.reason) == ("Detached", None)
    assert f"{old} is replaced" in unplug.message
    plug = await ctl.journal.wait_for(VM, STORAGE, "plug", {"Attached", "Failed"}, attempt=2)
    assert (plug.state, plug.reason) == ("Attached", None)
    vmi = cluster.store.get(VMIS, *split(VM))
    assert attached(vmi, new) and not attached(vmi, old)
    names = {i.get("name") for i in ob.interfaces_of(vmi.get("spec"))}
    assert old not in names and new in names
    second = await ctl.journal.wait_for(VM, "Network/second-net", "unplug",
                                        {"Detached", "Failed"})
    assert second.state == "Detached"
    assert_healthy(cluster)
