"""The demo's scenarios in today's Deckhouse world, where the platform's own controller
hot-plugs (`native_hotplug`), with nicplug observing: every operation reaches the state
the platform reached, and nicplug's identity sends no write to pods, KVVMs, KVVMIs,
migrations, VirtualMachineOperations or the VM's status (counted per scenario in the
simulated API server's request log); where the platform alone would wait for the SDN
forever, nicplug ends the plug `Failed`/`SDNTimeout` with the SDN's words."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.identity import service_account
from nicplug.simulator.knobs import Failures, Knobs
from tests.integration.cluster_view import assert_healthy, assert_interface, assert_requests
from tests.integration.conftest import QUICK, RunningController, eventually

VM = "default/vm-00000"
NICPLUG = service_account("nicplug-system", "nicplug")
USER_NET = ("Network", "user-net")
STORAGE = ("ClusterNetwork", "storage")
PLUG = ["Requested", "AnnotationPatched", "SDNReady", "VMIPatched", "Attached"]
UNPLUG = ["Requested", "AnnotationPatched", "VMIPatched", "GuestDetached", "SDNReleased",
          "Detached"]
NOT_NICPLUGS = {
    "pods", "internalvirtualizationvirtualmachines",
    "internalvirtualizationvirtualmachineinstances",
    "internalvirtualizationvirtualmachineinstancemigrations", "virtualmachineoperations",
}
WRITES = {"create", "update", "patch", "delete", "deletecollection"}


def platform(**knobs: Any) -> Knobs:
    return Knobs(**{"dialect": "deckhouse", "native_hotplug": True, "delays": QUICK, **knobs})


def forbidden_writes(cluster: SimulatedCluster) -> list[str]:
    """nicplug's writes to what the platform owns (Events are its own)."""
    return [
        f"{r.verb} {r.resource}{'/' + r.subresource if r.subresource else ''} {r.name}"
        for r in cluster.requests
        if r.username == NICPLUG and r.verb in WRITES
        and (r.resource in NOT_NICPLUGS
             or (r.resource == "virtualmachines" and r.subresource == "status"))
    ]


async def observe(cluster: SimulatedCluster, start_controller: Callable[..., Awaitable[Any]],
                  tmp_path: Path, **settings: Any) -> RunningController:
    config = cluster.write_kubeconfig(tmp_path / "nicplug.kubeconfig", user=NICPLUG)
    ctl: RunningController = await start_controller(cluster, kubeconfig=config, mode="auto",
                                                    **settings)
    assert ctl.controller.mode is not None and ctl.controller.mode.mode == "observe"
    return ctl


async def test_hotplug_of_a_network_and_a_cluster_network(
    start_cluster, start_controller, user_of, tmp_path
):
    cluster = await start_cluster(platform(), Fixtures(vms=1))
    ctl = await observe(cluster, start_controller, tmp_path)
    user = user_of(cluster)

    for ref in (USER_NET, STORAGE):
        await user.add_network(VM, *ref)
        op = await ctl.journal.wait_for(VM, "/".join(ref), "plug", {"Attached", "Failed"})
        assert (op.state, op.reason) == ("Attached", None)
        assert await ctl.journal.path_of(op.stream) == PLUG
        assert (await ctl.journal.opened(op.stream))["mode"] == "observe"
    assert_interface(cluster, VM, USER_NET, present=True)
    assert_interface(cluster, VM, STORAGE, present=True)
    assert forbidden_writes(cluster) == []
    assert_healthy(cluster)


async def test_hot_unplug_in_the_platforms_order(
    start_cluster, start_controller, user_of, tmp_path
):
    cluster = await start_cluster(platform(), Fixtures(vms=1))
    ctl = await observe(cluster, start_controller, tmp_path)
    user = user_of(cluster)
    await user.add_network(VM, *USER_NET)
    await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})

    await user.remove_network(VM, "Network/user-net")
    op = await ctl.journal.wait_for(VM, "Network/user-net", "unplug", {"Detached", "Failed"})

    assert (op.state, op.reason) == ("Detached", None)
    assert await ctl.journal.path_of(op.stream) == UNPLUG
    assert_interface(cluster, VM, USER_NET, present=False)
    assert forbidden_writes(cluster) == []
    assert_healthy(cluster)


async def test_removing_main_waits_for_the_platforms_restart(
    start_cluster, start_controller, user_of, tmp_path
):
    cluster = await start_cluster(platform(), Fixtures(vms=1))
    ctl = await observe(cluster, start_controller, tmp_path)
    user = user_of(cluster)
    await user.add_network(VM, *USER_NET)
    await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})

    await user.remove_network(VM, "Main")
    op = await ctl.journal.wait_for(VM, "Main", "unplug", {"RestartRequired", "Failed"})
    assert await ctl.journal.path_of(op.stream) == ["Requested", "RestartRequired"]
    await eventually(lambda: cluster.events(reason="UnplugRestartRequired") != [],
                     what="nicplug's RestartRequired Event")

    await user.restart(VM)
    op = await ctl.journal.wait_for(VM, "Main", "unplug", {"Detached", "Failed"})
    assert op.state == "Detached"
    assert forbidden_writes(cluster) == []
    assert_healthy(cluster)


async def test_an_sdn_that_never_gets_ready_fails_where_the_platform_waits_forever(
    start_cluster, start_controller, user_of, tmp_path
):
    knobs = platform(failures=Failures(sdn_networks=frozenset({"Network/broken-net"})))
    cluster = await start_cluster(knobs, Fixtures(vms=1, networks=("user-net", "broken-net")))
    ctl = await observe(cluster, start_controller, tmp_path, backoff_base=300.0,
                        sdn_ready_timeout=3.0)

    await user_of(cluster).add_network(VM, "Network", "broken-net")
    op = await ctl.journal.wait_for(VM, "Network/broken-net", "plug", {"Attached", "Failed"})

    assert (op.state, op.reason) == ("Failed", "SDNTimeout")
    assert await ctl.journal.path_of(op.stream) == ["Requested", "AnnotationPatched", "Failed"]
    assert "the SDN says:" in op.message and "ConfigurationError" in op.message, op.message
    await eventually(lambda: any(e["type"] == "Warning" and "SDNTimeout" in e["message"]
                                 for e in cluster.events(reason="PlugFailed")),
                     what="the Warning Event")
    # the platform still waits: the pod asks for it, the KVVM never got it
    assert_requests(cluster, VM, [("Network", "broken-net")], template=[])
    assert forbidden_writes(cluster) == []
    assert_healthy(cluster)


async def test_a_revert_mid_flight(start_cluster, start_controller, user_of, tmp_path):
    knobs = platform(failures=Failures(sdn_networks=frozenset({"Network/broken-net"})))
    cluster = await start_cluster(knobs, Fixtures(vms=1, networks=("user-net", "broken-net")))
    ctl = await observe(cluster, start_controller, tmp_path)
    user = user_of(cluster)

    await user.add_network(VM, "Network", "broken-net")
    await ctl.journal.wait_for(VM, "Network/broken-net", "plug", {"AnnotationPatched"})
    await user.remove_network(VM, "Network/broken-net")
    op = await ctl.journal.wait_for(VM, "Network/broken-net", "plug", {"Cancelled", "Failed"})

    assert (op.state, op.reason) == ("Cancelled", "Reverted")
    assert forbidden_writes(cluster) == []
    assert_healthy(cluster)


async def test_under_stage_the_platform_still_hot_plugs(
    start_cluster, start_controller, user_of, tmp_path
):
    cluster = await start_cluster(platform(), Fixtures(vms=1, rollout_strategy="Stage"))
    ctl = await observe(cluster, start_controller, tmp_path)

    await user_of(cluster).add_network(VM, *USER_NET)
    op = await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})

    assert await ctl.journal.path_of(op.stream) == PLUG
    assert forbidden_writes(cluster) == []
    assert_healthy(cluster)


async def test_two_networks_at_once(start_cluster, start_controller, user_of, tmp_path):
    cluster = await start_cluster(platform(), Fixtures(vms=1))
    ctl = await observe(cluster, start_controller, tmp_path)

    await user_of(cluster).add_networks(VM, USER_NET, STORAGE)
    for ref in (USER_NET, STORAGE):
        op = await ctl.journal.wait_for(VM, "/".join(ref), "plug", {"Attached", "Failed"})
        assert await ctl.journal.path_of(op.stream) == PLUG
    assert forbidden_writes(cluster) == []
    assert_healthy(cluster)


async def test_a_plug_waits_for_the_platforms_mac_address(
    start_cluster, start_controller, user_of, tmp_path
):
    cluster = await start_cluster(platform(delays=replace(QUICK, mac_allocate=1.0)),
                                  Fixtures(vms=1))
    ctl = await observe(cluster, start_controller, tmp_path)

    await user_of(cluster).add_network(VM, *USER_NET)
    op = await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Requested"})
    assert "MAC address is not allocated yet" in await ctl.journal.explain(op.stream)
    op = await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})
    assert await ctl.journal.path_of(op.stream) == PLUG
    assert forbidden_writes(cluster) == []
    assert_healthy(cluster)


async def test_an_id_change_the_platform_applies_without_a_restart(
    start_cluster, start_controller, user_of, tmp_path
):
    cluster = await start_cluster(platform(), Fixtures(vms=1))
    ctl = await observe(cluster, start_controller, tmp_path)
    user = user_of(cluster)
    await user.add_network(VM, *USER_NET)
    await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})

    networks = await user.networks(VM)
    await user.set_networks(VM, [{**n, "id": 7} if n.get("name") == "user-net" else n
                                 for n in networks])
    op = await ctl.journal.wait_for(VM, "Network/user-net", "update", {"Attached", "Failed"})

    assert "RestartRequired" not in await ctl.journal.path_of(op.stream)
    assert forbidden_writes(cluster) == []
    assert_healthy(cluster)


async def test_an_ipam_network_as_the_platform_writes_it(
    start_cluster, start_controller, user_of, tmp_path
):
    # Deckhouse's networks-spec carries ipAssignmentMode/ipAddressNames for a network
    # with an IPAM pool and leaves it out until its address is allocated
    cluster = await start_cluster(platform(), Fixtures(vms=1, ipam_networks=("user-net",)))
    ctl = await observe(cluster, start_controller, tmp_path)

    await user_of(cluster).add_network(VM, *USER_NET)
    op = await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})

    assert (op.state, op.reason) == ("Attached", None)
    assert await ctl.journal.path_of(op.stream) == PLUG
    assert await ctl.metric("nicplug_observation_errors_total", kind="annotation") == 0
    assert forbidden_writes(cluster) == []
    assert_healthy(cluster)
