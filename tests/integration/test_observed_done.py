"""A hotplug upstream KubeVirt (with a dynamic-networks controller) finishes before
nicplug's next observation is recorded all the same: nicplug's watches are stalled
(the simulated API server's knob) while the user edits the template and KubeVirt,
multus and virt-handler plug the interface; once they resume, nicplug sees the edit
and the attached interface together, and the journal holds an operation straight to
`Attached` that says it was observed done. The unplug likewise."""

from __future__ import annotations

from typing import Any

from nicplug.machines.world import if_name_of
from nicplug.simulator import objects as ob
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.resources import KVVMS, VMIS
from tests.integration.cluster_view import split
from tests.integration.conftest import QUICK, eventually

VM = "default/vm-00000"
IFACE = if_name_of("Network", "user-net")
DONE = "observed done: the platform"


def in_guest(cluster: SimulatedCluster) -> bool:
    vmi = cluster.store.peek(VMIS, *split(VM))
    statuses: list[dict[str, Any]] = ob.dig(vmi, "status", "interfaces") or []
    return any(i.get("name") == IFACE and "domain" in str(i.get("infoSource"))
               for i in statuses)


def in_template(cluster: SimulatedCluster) -> bool:
    kvvm = cluster.store.peek(KVVMS, *split(VM))
    return any(i.get("name") == IFACE
               for i in ob.interfaces_of(ob.dig(kvvm, "spec", "template", "spec")))


async def test_a_hotplug_done_before_nicplug_looks_is_recorded(
    start_cluster, start_controller, user_of
):
    knobs = Knobs(dialect="multus", dynamic_networks_controller=True, delays=QUICK)
    cluster = await start_cluster(knobs, Fixtures(vms=1))
    ctl = await start_controller(cluster)
    user = user_of(cluster)

    cluster.faults.stall_watches()  # nicplug sees nothing more for now
    await user.add_network(VM, "Network", "user-net")
    await eventually(lambda: in_guest(cluster), what="KubeVirt's hotplug")
    cluster.faults.resume_watches()
    op = await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"},
                                    within=5.0)
    assert (op.state, op.reason, op.history) == ("Attached", None, ("Requested", "Attached"))
    assert op.message.startswith(f"{DONE} plugged it before nicplug saw it in flight")

    cluster.faults.stall_watches()
    await user.remove_network(VM, "Network/user-net")
    await eventually(lambda: not in_guest(cluster) and not in_template(cluster),
                     what="KubeVirt's unplug")
    cluster.faults.resume_watches()
    op = await ctl.journal.wait_for(VM, "Network/user-net", "unplug", {"Detached", "Failed"},
                                    within=5.0)
    assert (op.state, op.history) == ("Detached", ("Requested", "Detached"))
    assert op.message.startswith(f"{DONE} unplugged it")
    assert [o.attempt for o in await ctl.journal.of(VM)] == [1, 1]  # each recorded once
