"""A hotplug the platform finishes before nicplug's next observation is recorded all the
same: nicplug's watches are stalled (the simulated API server's knob) while the user
edits the VM and the platform — upstream KubeVirt with a dynamic-networks controller,
or Deckhouse's own hotplug — plugs the interface; once they resume, nicplug sees the
edit and the attached interface together, and the journal holds an operation straight
to `Attached` that says it was observed done. The unplug likewise."""

from __future__ import annotations

from typing import Any

import pytest

from nicplug.simulator import networking as nw
from nicplug.simulator import objects as ob
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.identity import service_account
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.resources import KVVMS, VMIS
from tests.integration.cluster_view import active_pods, assert_healthy, iface, split
from tests.integration.conftest import QUICK, eventually

NICPLUG = service_account("nicplug-system", "nicplug")
VM = "default/vm-00000"
USER_NET = ("Network", "user-net")
DONE = "observed done: the platform"
WORLDS = {
    "kubevirt": Knobs(dialect="multus", dynamic_networks_controller=True, delays=QUICK),
    "deckhouse": Knobs(dialect="deckhouse", native_hotplug=True, delays=QUICK),
}


def name_of(cluster: SimulatedCluster) -> str | None:
    """The interface's name; on Deckhouse none before its MAC is allocated."""
    try:
        return iface(cluster, VM, USER_NET)
    except AssertionError:  # (no MAC address yet)
        return None


def in_guest(cluster: SimulatedCluster) -> bool:
    name = name_of(cluster)
    vmi = cluster.store.peek(VMIS, *split(VM))
    statuses: list[dict[str, Any]] = ob.dig(vmi, "status", "interfaces") or []
    return any(i.get("name") == name and "domain" in str(i.get("infoSource"))
               for i in statuses)


def in_template(cluster: SimulatedCluster) -> bool:
    name = name_of(cluster)
    kvvm = cluster.store.peek(KVVMS, *split(VM))
    return any(i.get("name") == name
               for i in ob.interfaces_of(ob.dig(kvvm, "spec", "template", "spec")))


def let_go(cluster: SimulatedCluster) -> bool:
    """Nothing carries the interface any more: the guest, the KVVM template, and the
    launcher pod's SDN request and status (Deckhouse's SDN releases it last)."""
    pods = active_pods(cluster.store, VM)
    return not in_guest(cluster) and not in_template(cluster) and all(
        USER_NET[1] not in str(nw.annotations_of(pod)) for pod in pods)


@pytest.fixture(params=sorted(WORLDS))
def knobs(request: pytest.FixtureRequest) -> Knobs:
    return WORLDS[request.param]


async def test_a_hotplug_done_before_nicplug_looks_is_recorded(
    knobs, start_cluster, start_controller, user_of, tmp_path
):
    cluster = await start_cluster(knobs, Fixtures(vms=1))
    if knobs.dialect == "deckhouse":  # observing, as the platform's RBAC tells it
        config = cluster.write_kubeconfig(tmp_path / "nicplug.kubeconfig", user=NICPLUG)
        ctl = await start_controller(cluster, kubeconfig=config, mode="auto")
    else:
        ctl = await start_controller(cluster)
    user = user_of(cluster)

    cluster.faults.stall_watches()  # nicplug sees nothing more for now
    await user.add_network(VM, *USER_NET)
    await eventually(lambda: in_guest(cluster), what="the platform's hotplug")
    cluster.faults.resume_watches()
    op = await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"},
                                    within=5.0)
    assert (op.state, op.reason, op.history) == ("Attached", None, ("Requested", "Attached"))
    assert op.message.startswith(f"{DONE} plugged it before nicplug saw it in flight")

    cluster.faults.stall_watches()
    await user.remove_network(VM, "Network/user-net")
    await eventually(lambda: let_go(cluster), what="the platform's unplug")
    cluster.faults.resume_watches()
    op = await ctl.journal.wait_for(VM, "Network/user-net", "unplug", {"Detached", "Failed"},
                                    within=5.0)
    assert (op.state, op.history) == ("Detached", ("Requested", "Detached"))
    assert op.message.startswith(f"{DONE} unplugged it")
    assert [o.attempt for o in await ctl.journal.of(VM)] == [1, 1]  # each recorded once
    assert_healthy(cluster)


def template_id(cluster: SimulatedCluster) -> int | None:
    """The id the KVVM template's SDN request gives user-net (what Deckhouse applied)."""
    kvvm = cluster.store.peek(KVVMS, *split(VM))
    annotations = ob.dig(kvvm, "spec", "template", "metadata", "annotations") or {}
    for entry in nw.parse_list(annotations.get(nw.DECKHOUSE_REQUEST)) or []:
        if (entry.get("type"), entry.get("name")) == USER_NET:
            return int(entry["id"]) if entry.get("id") is not None else None
    return None


@pytest.mark.parametrize("since", ["first sight", "plugged", "plugged unseen"])
async def test_an_id_change_deckhouse_applies_before_nicplug_looks_is_recorded(
    since, start_cluster, start_controller, user_of, tmp_path
):
    # user-net (id 2) runs in the VM when nicplug first sees it, or nicplug sees it
    # plugged in flight, or only once plugged
    at_start = (USER_NET,) if since == "first sight" else ()
    cluster = await start_cluster(WORLDS["deckhouse"], Fixtures(vms=1, vm_networks=at_start))
    config = cluster.write_kubeconfig(tmp_path / "nicplug.kubeconfig", user=NICPLUG)
    ctl = await start_controller(cluster, kubeconfig=config, mode="auto")
    user = user_of(cluster)
    await eventually(lambda: ctl.controller.mode is not None, what="nicplug's mode")
    if since != "first sight":
        if since == "plugged unseen":
            cluster.faults.stall_watches()
        await user.add_network(VM, *USER_NET)
        if since == "plugged unseen":
            await eventually(lambda: in_guest(cluster), what="the platform's hotplug")
            cluster.faults.resume_watches()
        plug = await ctl.journal.wait_for(VM, "Network/user-net", "plug",
                                          {"Attached", "Failed"})
        assert plug.state == "Attached"
    assert template_id(cluster) == 2

    cluster.faults.stall_watches()
    networks = await user.networks(VM)
    await user.set_networks(VM, [{**n, "id": 7} if n.get("name") == USER_NET[1] else n
                                 for n in networks])
    await eventually(lambda: template_id(cluster) == 7, what="Deckhouse applying the id")
    cluster.faults.resume_watches()
    op = await ctl.journal.wait_for(VM, "Network/user-net", "update", {"Attached", "Failed"},
                                    within=5.0)
    assert (op.state, op.reason, op.history) == ("Attached", None, ("Requested", "Attached"))
    assert op.message.startswith(f"{DONE} applied the new id of it")
    assert [(o.direction, o.attempt) for o in await ctl.journal.of(VM)
            if o.direction == "update"] == [("update", 1)]  # recorded once
    assert_healthy(cluster)
