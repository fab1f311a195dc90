"""The demo's scenarios, in-process, over real HTTP to the simulated cluster, in both
SDN dialects where they apply: the final state and reason, the exact path journaled,
and what the simulated world looks like afterwards.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from nicplug.simulator import networking as nw
from nicplug.simulator import objects as ob
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Failures, Knobs
from nicplug.simulator.resources import KVVMS, PODS, VMIMS, VMIS, VMMACS, VMOPS, VMS
from tests.integration.cluster_view import (
    Trail,
    active_pods,
    assert_healthy,
    assert_interface,
    assert_requests,
    attached,
    attachment_spans,
    iface,
    link_order_violations,
    restart_pending,
    split,
    vm_condition,
    writes,
)
from tests.integration.conftest import QUICK, eventually
from tests.integration.journal_view import PLUG_PATHS, UNPLUG_PATHS

VM = "default/vm-00000"
AT_RESTART = ["Requested", "RestartRequired", "VMIPatched", "Attached"]  # deckhouse
POD_PATCH = ("patch", "", "pods")
KVVM_PATCH = ("patch", "kubevirt.io", "virtualmachines")
USER_NET = ("Network", "user-net")
STORAGE = ("ClusterNetwork", "storage")

DIALECTS = {
    "deckhouse": Knobs(dialect="deckhouse", delays=QUICK),
    "multus": Knobs(dialect="multus", dynamic_networks_controller=True, delays=QUICK),
}


@pytest.fixture(params=sorted(DIALECTS))
def knobs(request: pytest.FixtureRequest) -> Knobs:
    return DIALECTS[request.param]


@pytest.mark.parametrize("ref", [USER_NET, STORAGE], ids=["Network", "ClusterNetwork"])
async def test_hotplug(knobs, ref, start_cluster, start_controller, follow, user_of):
    cluster = await start_cluster(knobs)
    trail = follow(cluster, VMIS, PODS)
    ctl = await start_controller(cluster)

    await user_of(cluster).add_network(VM, *ref)
    op = await ctl.journal.wait_for(VM, "/".join(ref), "plug", {"Attached", "Failed"})

    assert (op.state, op.reason) == ("Attached", None)
    path = list(PLUG_PATHS[knobs.dialect])
    assert await ctl.journal.path_of(op.stream) == path == list(op.history)
    assert_requests(cluster, VM, [ref])
    assert_interface(cluster, VM, ref, present=True)
    assert attachment_spans(trail, VM, ref) == [False, True]
    assert link_order_violations(trail, knobs, VM, ref) == []
    # each once; where KubeVirt owns the pod's annotation nicplug never writes it
    pod_patches = 1 if knobs.dialect == "deckhouse" else 0
    assert (writes(cluster, POD_PATCH), writes(cluster, KVVM_PATCH)) == (pod_patches, 1)
    assert_healthy(cluster)
    ctl.alive()


async def test_hot_unplug(knobs, start_cluster, start_controller, follow, user_of):
    cluster = await start_cluster(knobs)
    trail = follow(cluster, VMIS, PODS)
    ctl = await start_controller(cluster)
    user = user_of(cluster)

    await user.add_network(VM, *USER_NET)
    await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached"})
    await user.remove_network(VM, "Network/user-net")
    op = await ctl.journal.wait_for(VM, "Network/user-net", "unplug", {"Detached", "Failed"})

    assert (op.state, op.reason) == ("Detached", None)
    path = list(UNPLUG_PATHS[knobs.dialect])
    assert await ctl.journal.path_of(op.stream) == path == list(op.history)
    assert_requests(cluster, VM, [])
    assert_interface(cluster, VM, USER_NET, present=False)
    # attached, then detached — and never without its SDN entry on the pod meanwhile:
    # the guest let go of the link before the entry left the pod annotation
    assert attachment_spans(trail, VM, USER_NET) == [False, True, False]
    if knobs.dialect == "deckhouse":  # under multus the order is KubeVirt's, not nicplug's
        assert link_order_violations(trail, knobs, VM, USER_NET) == []
    # plug: entry, then interface; unplug: interface absent, then entry gone — each once.
    # KubeVirt drops the detached interface from the KVVM itself; in multus it does so
    # once the link is gone, when nicplug's own clean-up of the KVVM may race it
    assert writes(cluster, POD_PATCH) == (2 if knobs.dialect == "deckhouse" else 0)
    assert writes(cluster, KVVM_PATCH) == 2 if knobs.dialect == "deckhouse" else \
        2 <= writes(cluster, KVVM_PATCH) <= 3
    assert_healthy(cluster)


async def test_two_networks_at_once(knobs, start_cluster, start_controller, follow, user_of):
    cluster = await start_cluster(knobs)
    trail = follow(cluster, VMIS, PODS)
    ctl = await start_controller(cluster)
    user = user_of(cluster)

    await user.add_networks(VM, USER_NET, STORAGE)
    ops = [await ctl.journal.wait_for(VM, "/".join(ref), "plug", {"Attached", "Failed"})
           for ref in (USER_NET, STORAGE)]

    for op in ops:
        assert await ctl.journal.path_of(op.stream) == list(PLUG_PATHS[knobs.dialect]), op.label()
    assert_requests(cluster, VM, [USER_NET, STORAGE])
    for ref in (USER_NET, STORAGE):
        assert_interface(cluster, VM, ref, present=True)
        assert link_order_violations(trail, knobs, VM, ref) == []
    # the KVVM keeps the order the user asked for: Main, user-net, storage
    kvvm = cluster.store.get(KVVMS, *split(VM))
    names = [i["name"] for i in ob.interfaces_of(kvvm["spec"]["template"]["spec"])]
    assert names == ["default", iface(cluster, VM, USER_NET), iface(cluster, VM, STORAGE)]
    assert_healthy(cluster)


async def test_sdn_failure_waits_then_times_out_with_the_sdns_words(
    start_cluster, start_controller, user_of
):
    """Deckhouse only: its SDN's `False` means "not yet" (as Deckhouse's controller reads
    it), so the plug waits until the SDN deadline and fails with what the SDN last said.
    The multus dynamic-networks controller reports no errors (a network it cannot set up
    is simply never listed)."""
    knobs = Knobs(delays=QUICK, failures=Failures(sdn_networks=frozenset({"Network/broken-net"})))
    cluster = await start_cluster(knobs, Fixtures(vms=1, networks=("user-net", "broken-net")))
    ctl = await start_controller(cluster, backoff_base=300.0,  # no second attempt meanwhile
                                 sdn_ready_timeout=3.0)
    broken = ("Network", "broken-net")

    await user_of(cluster).add_network(VM, *broken)
    # "not yet" is shown at once: in explain, on the VM's condition, in an Event
    waiting = await ctl.journal.wait_for(VM, "Network/broken-net", "plug", {"AnnotationPatched"})
    await eventually(lambda: vm_condition(cluster.store, VM, "NetworkHotplugWaiting") is not None,
                     what="the NetworkHotplugWaiting condition")
    said = vm_condition(cluster.store, VM, "NetworkHotplugWaiting")
    assert (said["status"], said["reason"]) == ("True", "SDNNotReady")
    assert "Network/broken-net plug" in said["message"]
    assert "ConfigurationError" in said["message"], said["message"]
    explained = await ctl.journal.explain(waiting.stream)
    assert "not yet, the SDN says:" in explained and "ConfigurationError" in explained
    await eventually(lambda: cluster.events(reason="PlugWaitingForSDN") != [],
                     what="the PlugWaitingForSDN Event")
    (event,) = cluster.events(reason="PlugWaitingForSDN")
    assert event["type"] == "Warning" and "ConfigurationError" in event["message"]
    assert (await ctl.journal.wait_for(
        VM, "Network/broken-net", "plug", {"AnnotationPatched", "Failed"})).state == (
        "AnnotationPatched"), "still waiting, not failed, before the SDN deadline"

    op = await ctl.journal.wait_for(VM, "Network/broken-net", "plug", {"Attached", "Failed"})

    assert (op.state, op.reason) == ("Failed", "SDNTimeout")
    assert await ctl.journal.path_of(op.stream) == ["Requested", "AnnotationPatched", "Failed"]
    assert "the SDN says:" in op.message and "ConfigurationError" in op.message, op.message
    await eventually(lambda: vm_condition(cluster.store, VM, "NetworkHotplugFailed") is not None,
                     what="the NetworkHotplugFailed condition")
    condition = vm_condition(cluster.store, VM, "NetworkHotplugFailed")
    assert (condition["status"], condition["reason"]) == ("True", "SDNTimeout")
    assert "Network/broken-net" in condition["message"]
    await eventually(
        lambda: (vm_condition(cluster.store, VM, "NetworkHotplugWaiting") or {}).get("status")
        == "False", what="the NetworkHotplugWaiting condition cleared")
    # the pod still asks for it (a later attempt may succeed); the KVVM never got it
    assert_requests(cluster, VM, [broken], template=[])
    assert_interface(cluster, VM, broken, present=False)  # never handed to the guest
    assert_healthy(cluster)


async def test_a_plug_waits_for_its_mac_address_writing_nothing(
    start_cluster, start_controller, user_of
):
    """Deckhouse only: the interface is named after the MAC Deckhouse allocates for the
    network (its VirtualMachineMACAddress). Until the address is there, nothing is
    written for the network and explain says what the plug waits for; then it goes on."""
    knobs = Knobs(delays=replace(QUICK, mac_allocate=2.0))
    cluster = await start_cluster(knobs, Fixtures(vms=1))
    ctl = await start_controller(cluster)

    await user_of(cluster).add_network(VM, *USER_NET)
    op = await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Requested"})
    vmmacs, _ = cluster.store.list(VMMACS, "default")
    assert len(vmmacs) == 1 and not ob.dig(vmmacs[0], "status", "address")
    assert "MAC address is not allocated yet" in await ctl.journal.explain(op.stream)
    assert_requests(cluster, VM, [])
    assert_interface(cluster, VM, USER_NET, present=False)

    op = await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})
    assert op.state == "Attached"
    assert await ctl.journal.path_of(op.stream) == list(PLUG_PATHS["deckhouse"])
    (vmmac,) = cluster.store.list(VMMACS, "default")[0]
    mac = vmmac["status"]["address"]
    kvvm = cluster.store.get(KVVMS, *split(VM))
    (added,) = [i for i in ob.interfaces_of(kvvm["spec"]["template"]["spec"])
                if i["name"] != nw.MAIN_IF_NAME]
    assert (added["name"], added["macAddress"]) == (nw.mac_if_name("Network", mac), mac)
    assert_requests(cluster, VM, [USER_NET])
    assert_interface(cluster, VM, USER_NET, present=True)
    assert_healthy(cluster)


async def test_revert_mid_flight_cancels(knobs, start_cluster, start_controller, follow, user_of):
    # a slow SDN keeps the plug waiting in AnnotationPatched while the user changes
    # their mind
    cluster = await start_cluster(replace(knobs, delays=replace(QUICK, sdn_configure=1.0)))
    trail = follow(cluster, VMIS, PODS)
    ctl = await start_controller(cluster)
    user = user_of(cluster)

    await user.add_network(VM, *USER_NET)
    await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"AnnotationPatched"})
    await user.remove_network(VM, "Network/user-net")
    unplug = await ctl.journal.wait_for(VM, "Network/user-net", "unplug", {"Detached", "Failed"})
    (plug,) = [op for op in await ctl.journal.of(VM, "Network/user-net")
               if op.direction == "plug"]

    assert (plug.state, plug.reason) == ("Cancelled", "Reverted")
    waited = PLUG_PATHS[knobs.dialect]
    assert await ctl.journal.path_of(plug.stream) == [
        *waited[: waited.index("AnnotationPatched") + 1], "Cancelled"
    ]
    # the unplug starts from where the world is: only the pod's entry had to go
    assert (unplug.state, unplug.reason) == ("Detached", None)
    assert await ctl.journal.path_of(unplug.stream) == list(UNPLUG_PATHS[knobs.dialect])
    assert_requests(cluster, VM, [])
    assert_interface(cluster, VM, USER_NET, present=False)
    assert attachment_spans(trail, VM, USER_NET) == [False]  # the guest never saw it
    assert_healthy(cluster)


async def test_removing_main_requires_a_restart(knobs, start_cluster, start_controller, user_of):
    cluster = await start_cluster(knobs)
    ctl = await start_controller(cluster)
    user = user_of(cluster)

    # [Main] minus Main is [], which means [Main]: give the VM a second network first
    await user.add_network(VM, *USER_NET)
    await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached"})
    await user.remove_network(VM, "Main")
    op = await ctl.journal.wait_for(VM, "Main", "unplug", {"RestartRequired", "Failed"})

    assert await ctl.journal.path_of(op.stream) == ["Requested", "RestartRequired"]
    if knobs.dialect == "deckhouse":
        await eventually(lambda: restart_pending(cluster, VM), what="the restart condition")
        condition = vm_condition(cluster.store, VM, "NetworkHotplugRestartRequired")
        assert "Main" in condition["message"]
    else:  # KubeVirt removes a condition it did not set from a VM that has a VMI
        await eventually(lambda: any(e.get("reason") == "UnplugRestartRequired"
                                     for e in cluster.events()), what="the restart Event")
        assert _condition_writes(cluster) == 0
    # the Event's note reads as an operator would say it, not as the machine's states
    await eventually(lambda: cluster.events(reason="UnplugRestartRequired") != [],
                     what="the UnplugRestartRequired Event")
    (told,) = cluster.events(reason="UnplugRestartRequired")
    assert told["message"].startswith(
        "Removing the Main network takes effect at the VM's next restart"), told["message"]
    assert "→" not in told["message"] and "RestartRequired" not in told["message"]
    assert told["reportingInstance"] == f"itest-{0}"  # the pod's name (NICPLUG_IDENTITY)
    assert_requests(cluster, VM, [USER_NET])
    assert_interface(cluster, VM, USER_NET, present=True)
    if knobs.dialect == "deckhouse":
        assert_interface(cluster, VM, ("Main", ""), present=True)  # until the restart
    else:  # the user marked it absent in the KubeVirt VM; the guest keeps it till a restart
        assert attached(cluster.store.get(VMIS, *split(VM)), "default")
    assert_healthy(cluster)


STAGE = Fixtures(vms=1, rollout_strategy="Stage")


def _vmi_uid(cluster: SimulatedCluster) -> str:
    return str(cluster.store.get(VMIS, *split(VM))["metadata"]["uid"])


def _restart_flagged(trail: Trail) -> bool:
    """Some version of the VM said NetworkHotplugRestartRequired=True."""
    for change in trail.changes:
        condition = ob.condition(change.obj, "NetworkHotplugRestartRequired")
        if condition and (condition["status"], condition["reason"]) == (
            "True", "ChangesPendingRestart"
        ):
            return True
    return False


# deckhouse only: the kubevirt flavour gates nothing: KubeVirt applies a NIC change
# to the running VM under Stage too (see test_always_live_gating_hotplugs_in_place_under_stage)
@pytest.mark.parametrize("knobs", [DIALECTS["deckhouse"]], ids=["deckhouse"])
async def test_stage_with_automatic_approval_applies_at_restart(
    knobs, start_cluster, start_controller, follow, user_of
):
    cluster = await start_cluster(knobs, STAGE)
    trail = follow(cluster, VMS)
    ctl = await start_controller(cluster)
    user = user_of(cluster)
    before = _vmi_uid(cluster)

    await user.set_approval(VM, "Automatic")
    await user.add_network(VM, *USER_NET)
    op = await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})

    assert (op.state, op.reason) == ("Attached", None)
    assert await ctl.journal.path_of(op.stream) == AT_RESTART
    assert _vmi_uid(cluster) != before  # nicplug restarted the VM itself
    # halt, write, start: never a VMI deleted (under runStrategy Manual it stops for good)
    deleted = [r for r in cluster.requests
               if r.verb == "delete" and r.resource.endswith("virtualmachineinstances")]
    assert deleted == []
    # through the platform: a Stop, then a Start
    made, _ = cluster.store.list(VMOPS, split(VM)[0])
    assert [o["spec"]["type"] for o in sorted(
        made, key=lambda o: int(o["metadata"]["resourceVersion"]))] == ["Stop", "Start"]
    assert all(o["status"]["phase"] == "Completed" for o in made)
    assert cluster.store.get(KVVMS, *split(VM))["spec"]["runStrategy"] == "Manual"
    # the change is written to the stopped VM's KVVM once: the MAC the KVVM's interface
    # carries is not written again (a second patch raced the Start and was refused)
    assert writes(cluster, KVVM_PATCH) == 1
    assert _restart_flagged(trail)
    await eventually(lambda: not restart_pending(cluster, VM),
                     what="the restart condition to clear")
    assert_requests(cluster, VM, [USER_NET])  # the new pod was born with it
    assert_interface(cluster, VM, USER_NET, present=True)
    assert_healthy(cluster)


# deckhouse only: the kubevirt flavour gates nothing: KubeVirt applies a NIC change
# to the running VM under Stage too (see test_always_live_gating_hotplugs_in_place_under_stage)
@pytest.mark.parametrize("knobs", [DIALECTS["deckhouse"]], ids=["deckhouse"])
async def test_stage_with_manual_approval_waits_for_the_users_restart(
    knobs, start_cluster, start_controller, user_of
):
    cluster = await start_cluster(knobs, STAGE)
    ctl = await start_controller(cluster)
    user = user_of(cluster)
    before = _vmi_uid(cluster)

    await user.add_network(VM, *USER_NET)
    op = await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"RestartRequired", "Failed"})

    assert await ctl.journal.path_of(op.stream) == ["Requested", "RestartRequired"]
    await eventually(lambda: restart_pending(cluster, VM), what="the restart condition")
    condition = vm_condition(cluster.store, VM, "NetworkHotplugRestartRequired")
    assert "Network/user-net" in condition["message"]
    assert _vmi_uid(cluster) == before  # Manual: nicplug does not restart on its own
    assert_requests(cluster, VM, [])  # nothing applied to the running VM
    assert_interface(cluster, VM, USER_NET, present=False)

    await user.restart(VM)
    op = await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})

    assert await ctl.journal.path_of(op.stream) == AT_RESTART
    await eventually(lambda: not restart_pending(cluster, VM),
                     what="the restart condition to clear")
    assert_requests(cluster, VM, [USER_NET])
    assert_interface(cluster, VM, USER_NET, present=True)
    assert_healthy(cluster)


async def test_always_live_gating_hotplugs_in_place_under_stage(
    knobs, start_cluster, start_controller, user_of
):
    cluster = await start_cluster(knobs, STAGE)
    ctl = await start_controller(cluster, gating="always-live")
    before = _vmi_uid(cluster)

    await user_of(cluster).add_network(VM, *USER_NET)
    op = await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})

    assert await ctl.journal.path_of(op.stream) == list(PLUG_PATHS[knobs.dialect])
    assert _vmi_uid(cluster) == before
    assert vm_condition(cluster.store, VM, "NetworkHotplugRestartRequired") is None
    assert_requests(cluster, VM, [USER_NET])
    assert_interface(cluster, VM, USER_NET, present=True)
    # what the strategy hid is reported: on the VM, as an Event, in the metrics
    assert await ctl.metric("nicplug_rollout_bypassed_total") == 1
    await eventually(lambda: any(e.get("reason") == "RolloutBypassed"
                                 for e in cluster.events()), what="the RolloutBypassed Event")
    if knobs.dialect == "deckhouse":
        await eventually(lambda: vm_condition(cluster.store, VM, "NetworkChangeBypassedRollout")
                         is not None, what="the rollout-bypass condition")
        condition = vm_condition(cluster.store, VM, "NetworkChangeBypassedRollout")
        assert condition["status"] == "True" and "restart the VM" in condition["message"]
    else:  # KubeVirt removes a condition it did not set from a VM that has a VMI
        assert "restart the VM" in await ctl.journal.explain(op.stream)
        assert _condition_writes(cluster) == 0
    assert_healthy(cluster)


# multus without a dynamic-networks controller: KubeVirt asks for a migration

NO_DNC = Knobs(dialect="multus", dynamic_networks_controller=False, delays=QUICK,
               migration_required_grace=0.2)
# the VMI has the interface, virt-controller put it on the pod, multus never reports it
MIGRATION_PATH = ["Requested", "VMIPatched", "AnnotationPatched", "MigrationRequired"]


def _condition_writes(cluster: SimulatedCluster) -> int:
    """nicplug's writes of the KubeVirt VM's status (its conditions)."""
    return sum(1 for r in cluster.requests if r.user_agent.startswith("nicplug")
               and r.resource == KVVMS.plural and r.subresource == "status")


def _migrations_created(cluster: SimulatedCluster) -> int:
    return sum(1 for r in cluster.requests
               if r.verb == "create" and r.resource == VMIMS.plural)


async def test_multus_without_dynamic_networks_migrates(
    start_cluster, start_controller, follow, user_of
):
    cluster = await start_cluster(NO_DNC)
    trail = follow(cluster, VMIS, PODS)
    ctl = await start_controller(cluster, dynamic_networks_grace=0.3)
    pods_before = {p["metadata"]["uid"] for p in active_pods(cluster.store, VM)}

    await user_of(cluster).add_network(VM, *USER_NET)
    op = await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})

    assert (op.state, op.reason) == ("Attached", None)
    assert await ctl.journal.path_of(op.stream) == [*MIGRATION_PATH, "Migrating", "Attached"]
    assert _migrations_created(cluster) == 1
    (migration,) = cluster.store.list(VMIMS, "default")[0]
    assert migration["status"]["phase"] == "Succeeded"
    pods_after = {p["metadata"]["uid"] for p in active_pods(cluster.store, VM)}
    assert pods_after and pods_after.isdisjoint(pods_before)  # the VM runs in the target pod
    assert_requests(cluster, VM, [USER_NET])
    assert_interface(cluster, VM, USER_NET, present=True)
    assert link_order_violations(trail, NO_DNC, VM, USER_NET) == []
    assert_healthy(cluster)


async def test_opt_in_by_namespace_label_and_out_by_the_vms_own(
    start_cluster, start_controller, user_of
):
    """`--migrations opt-in`: a namespace labelled nicplug.io/migrations=true opts its
    VMs in, seen when the label comes after the plug waits; a VM labelled false stays
    out whatever its namespace says, and its condition says why."""
    cluster = await start_cluster(NO_DNC, Fixtures(vms=2))
    ctl = await start_controller(cluster, migrations="opt-in")
    user = user_of(cluster)
    other = "default/vm-00001"
    await user.patch_kvvm(other, {"metadata": {"labels": {"nicplug.io/migrations": "false"}}})

    for vm in (VM, other):
        await user.add_network(vm, *USER_NET)
    for vm in (VM, other):
        await ctl.journal.wait_for(vm, "Network/user-net", "plug", {"MigrationRequired"})
    assert _migrations_created(cluster) == 0
    await user._send("PATCH", "/api/v1/namespaces/default",
                     {"metadata": {"labels": {"nicplug.io/migrations": "true"}}})

    op = await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})
    assert (op.state, await ctl.journal.path_of(op.stream)) == (
        "Attached", [*MIGRATION_PATH, "Migrating", "Attached"])
    (waiting,) = await ctl.journal.of(other, "Network/user-net")
    assert waiting.state == "MigrationRequired"
    await eventually(
        lambda: any("has not opted in" in str(e.get("message")) and e.get("type") == "Warning"
                    and (e.get("involvedObject") or {}).get("name") == split(other)[1]
                    for e in cluster.events()), what="the opted-out VM's Warning Event")
    assert "has not opted in" in await ctl.journal.explain(waiting.stream)
    assert _migrations_created(cluster) == 1
    assert_healthy(cluster)


async def test_manual_migrations_wait_and_say_so(start_cluster, start_controller, user_of):
    cluster = await start_cluster(NO_DNC)
    ctl = await start_controller(cluster, dynamic_networks_grace=0.3, migrations="manual")

    await user_of(cluster).add_network(VM, *USER_NET)
    op = await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"MigrationRequired",
                                                                     "Failed", "Attached"})

    assert await ctl.journal.path_of(op.stream) == MIGRATION_PATH
    await eventually(
        lambda: any(e.get("reason") == "PlugMigrationRequired" and e.get("type") == "Warning"
                    and "manual" in str(e.get("message")) for e in cluster.events()),
        what="the Warning Event saying why",
    )
    said = await ctl.journal.explain(op.stream)
    assert "--migrations=manual" in said
    # it stays there: no migration of nicplug's, the operation still waits, and nothing
    # is written to the VM (KubeVirt would remove a condition at once)
    assert _migrations_created(cluster) == 0
    (still,) = await ctl.journal.of(VM, "Network/user-net")
    assert still.state == "MigrationRequired"
    assert _condition_writes(cluster) == 0
    assert_healthy(cluster)


async def test_multus_without_dynamic_networks_unplugs_by_migration(
    start_cluster, start_controller, follow, user_of
):
    """KubeVirt detaches the guest at once, but only a new pod drops the link: it raises
    MigrationRequired (an absent interface reported by `multus-status` alone)."""
    cluster = await start_cluster(NO_DNC, Fixtures(vms=1, vm_networks=(USER_NET,)))
    trail = follow(cluster, VMIS, PODS)
    ctl = await start_controller(cluster, dynamic_networks_grace=0.3)

    await user_of(cluster).remove_network(VM, "Network/user-net")
    op = await ctl.journal.wait_for(VM, "Network/user-net", "unplug", {"Detached", "Failed"})

    assert (op.state, op.reason) == ("Detached", None)
    assert await ctl.journal.path_of(op.stream) == [
        "Requested", "VMIPatched", "AnnotationPatched", "GuestDetached", "MigrationRequired",
        "Migrating", "SDNReleased", "Detached",
    ]
    assert _migrations_created(cluster) == 1
    assert_requests(cluster, VM, [])
    assert_interface(cluster, VM, USER_NET, present=False)
    assert attachment_spans(trail, VM, USER_NET)[-1] is False
    assert_healthy(cluster)


async def test_a_vm_kubevirt_cannot_migrate_waits_and_says_why(
    start_cluster, start_controller, user_of
):
    """Upstream KubeVirt will not live-migrate a VM bridged to the pod network: nicplug
    creates no migration and the VM says why and what to do."""
    cluster = await start_cluster(NO_DNC, Fixtures(vms=1, pod_network_binding="bridge"))
    ctl = await start_controller(cluster)

    await user_of(cluster).add_network(VM, *USER_NET)
    op = await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"MigrationRequired",
                                                                     "Failed", "Attached"})

    assert op.state == "MigrationRequired"
    message = await ctl.journal.explain(op.stream)
    assert "InterfaceNotLiveMigratable" in message
    await eventually(lambda: any("InterfaceNotLiveMigratable" in str(e.get("message"))
                                 and e.get("type") == "Warning" for e in cluster.events()),
                     what="a Warning Event saying why")
    assert _migrations_created(cluster) == 0
    assert_healthy(cluster)


async def test_the_vms_mac_reaches_the_pod_through_kubevirt(
    start_cluster, start_controller, user_of
):
    """Upstream KubeVirt: the user's template is the desired state. A MAC the user
    wrote as the interface's macAddress reaches the pod through KubeVirt's generator,
    the plug is journaled step by step, and nicplug writes nothing of the KubeVirt VM,
    not even its status (KubeVirt would remove a condition of nicplug's at once)."""
    knobs = DIALECTS["multus"]
    cluster = await start_cluster(knobs)
    ctl = await start_controller(cluster)

    await user_of(cluster).add_network(VM, *USER_NET, mac="02:aa:bb:cc:dd:ee",
                                       interface="dyniface1")
    op = await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})

    assert op.state == "Attached"
    assert await ctl.journal.path_of(op.stream) == list(PLUG_PATHS["multus"])
    (pod,) = active_pods(cluster.store, VM)
    assert nw.annotations_of(pod)[nw.MULTUS_REQUEST] == (
        '[{"name":"user-net","namespace":"default","mac":"02:aa:bb:cc:dd:ee",'
        f'"interface":"{nw.multus_pod_interface("dyniface1")}"}}]'
    )
    kubevirt_vm = [r for r in cluster.requests if r.user_agent.startswith("nicplug")
                   and r.verb in ("patch", "update") and r.resource.endswith("virtualmachines")]
    assert kubevirt_vm == []
    assert not any(r.user_agent.startswith("nicplug") and r.verb == "patch"
                   and r.resource == "pods" for r in cluster.requests)

    await user_of(cluster).remove_network(VM, "Network/user-net")
    op = await ctl.journal.wait_for(VM, "Network/user-net", "unplug", {"Detached", "Failed"})
    assert op.state == "Detached"
    kvvm = cluster.store.get(KVVMS, *split(VM))
    assert [i["name"] for i in ob.interfaces_of(kvvm["spec"]["template"]["spec"])] == ["default"]
    assert_healthy(cluster)


async def test_nicplugs_migrations_respect_the_cluster_wide_cap(
    start_cluster, start_controller, follow, user_of
):
    """With room for one migration at a time, the second VM's waits for the first, and
    says so: the cap's hold is journaled on its operation (`MigrationHeld`), `explain`
    tells how many are in flight and the cap, and a Warning Event names it."""
    knobs = replace(NO_DNC, delays=replace(QUICK, migration=2.0))
    cluster = await start_cluster(knobs, Fixtures(vms=2))
    trail = follow(cluster, VMIMS)
    ctl = await start_controller(cluster, max_migrations=1, effect_reissue_after=0.5)
    user = user_of(cluster)
    vms = ["default/vm-00000", "default/vm-00001"]

    for vm in vms:
        await user.add_network(vm, *USER_NET)
    held: list[str] = []

    async def one_is_held() -> bool:
        for vm in vms:
            for op in await ctl.journal.of(vm, "Network/user-net"):
                if op.state == "MigrationRequired" and "waits for a migration slot" in (
                        await ctl.journal.explain(op.stream)):
                    held.append(op.stream)
                    return True
        return False

    await eventually(one_is_held, what="an operation held back by the cap", within=15.0)
    explained = await ctl.journal.explain(held[0])
    assert "1 of nicplug's migrations are in flight cluster-wide" in explained
    assert "at most 1 run at once (--max-migrations)" in explained
    await eventually(lambda: any(e.get("reason") == "PlugWaitingForMigrationSlot"
                                 and e.get("type") == "Warning" for e in cluster.events()),
                     what="the Warning Event of the held migration")
    for vm in vms:
        op = await ctl.journal.wait_for(vm, "Network/user-net", "plug", {"Attached", "Failed"},
                                        within=30.0)
        assert op.state == "Attached", op.label()
    steps = await ctl.journal.path_of(held[0])
    assert steps[-3:] == ["MigrationRequired", "Migrating", "Attached"]

    running: set[str] = set()
    most = 0
    for change in trail.changes:
        name = change.obj["metadata"]["name"]
        finished = (change.obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        if change.type == "DELETED" or finished:
            running.discard(name)
        else:
            running.add(name)
        most = max(most, len(running))
    assert most == 1
    assert _migrations_created(cluster) == 2
    assert_healthy(cluster)


LIVE_MIGRATE = Fixtures(vms=3, workload_update_methods=("LiveMigrate",))


@pytest.mark.parametrize("policy", ["auto", "never"])
async def test_with_live_migrate_kubevirt_migrates_and_nicplug_creates_none(
    start_cluster, start_controller, user_of, policy: str
):
    """KubeVirt's workload updater migrates every VMI whose MigrationRequired is True
    (`workloadUpdateMethods: [LiveMigrate]`): nicplug creates no migration, adopts
    KubeVirt's and follows each operation to Attached; under `--migrations never` a
    Warning Event and `explain` say that KubeVirt migrates anyway, and what decides it."""
    knobs = replace(NO_DNC, delays=replace(QUICK, workload_update=1.0))
    cluster = await start_cluster(knobs, LIVE_MIGRATE)
    ctl = await start_controller(cluster, migrations=policy)
    user = user_of(cluster)
    vms = [f"default/vm-{i:05d}" for i in range(3)]
    for vm in vms:
        await user.add_network(vm, *USER_NET)
    waiting = await ctl.journal.wait_for(vms[0], "Network/user-net", "plug",
                                         {"MigrationRequired"})
    explained = await ctl.journal.explain(waiting.stream)
    if policy == "never":
        assert "KubeVirt will migrate it anyway" in explained
        assert "workloadUpdateMethods holds LiveMigrate" in explained
        assert "not --migrations" in explained
    else:
        assert "nicplug creates no migration and follows KubeVirt's" in explained
    for vm in vms:
        op = await ctl.journal.wait_for(vm, "Network/user-net", "plug", {"Attached", "Failed"},
                                        within=30.0)
        assert op.state == "Attached", op.label()
        assert await ctl.journal.path_of(op.stream) == [
            *MIGRATION_PATH, "Migrating", "Attached"]
        assert_interface(cluster, vm, USER_NET, present=True)
    assert _migrations_created(cluster) == 0  # nicplug created none (KubeVirt's are in-process)
    names = [m["metadata"]["name"] for m in cluster.store.list(VMIMS, "default")[0]]
    assert len(names) == 3 and all(n.startswith("kubevirt-workload-update-") for n in names)
    warned = any("KubeVirt will migrate it anyway" in str(e.get("message"))
                 and e.get("type") == "Warning" for e in cluster.events())
    assert warned == (policy == "never")
    assert_healthy(cluster)


SWAPPED = Fixtures(vms=1, networks=("user-net", "other-net"))
"""A world with the NAD a swap points the interface at (a missing one fails its render)."""


async def test_a_nad_swap_is_its_own_change_through_kubevirts_migration(
    start_cluster, start_controller, user_of
):
    """The user points the plugged interface at another NAD (`networkName`,
    `LiveUpdateNADRef`): KubeVirt copies it into the migratable VMI and asks for a
    migration at once; nicplug tracks it as one `update` of the new network (the old one
    in its target and messages), migrates, and follows it to the new pod."""
    knobs = DIALECTS["multus"]
    cluster = await start_cluster(knobs, SWAPPED)
    ctl = await start_controller(cluster)
    user = user_of(cluster)
    await user.add_network(VM, *USER_NET)
    await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached"})
    kvvm = cluster.store.get(KVVMS, *split(VM))
    networks = kvvm["spec"]["template"]["spec"]["networks"]
    for network in networks:
        if "multus" in network:
            network["multus"]["networkName"] = "default/other-net"
    await user.patch_kvvm(VM, {"spec": {"template": {"spec": {"networks": networks}}}})
    op = await ctl.journal.wait_for(VM, "Network/other-net", "update", {"Attached", "Failed"},
                                    within=20.0)
    assert op.state == "Attached", op.label()
    assert await ctl.journal.path_of(op.stream) == [
        "Requested", "VMIPatched", "MigrationRequired", "Migrating", "Attached"]
    assert (await ctl.journal.opened_with(op.stream))["target"] == "swap:Network/user-net"
    said = await ctl.journal.messages_of(op.stream)
    assert all(m.startswith("NAD swap of ") and "Network/user-net → Network/other-net" in m
               for m in said)
    assert _migrations_created(cluster) == 1
    assert not [o for o in await ctl.journal.of(VM, "Network/user-net")
                if o.direction == "unplug"]  # the interface stayed
    assert_healthy(cluster)


async def test_a_vm_whose_migrations_always_fail_gets_the_cap_then_failed(
    start_cluster, start_controller, user_of
):
    """KubeVirt fails every migration: nicplug creates at most `--migration-attempts`
    of them, a backoff apart, then the plug is Failed (MigrationFailed) with KubeVirt's
    words, a Warning Event says it, the metric counts it, and no migration follows."""
    knobs = replace(NO_DNC, failures=Failures(migrations=True))
    cluster = await start_cluster(knobs)
    ctl = await start_controller(cluster, migration_attempts=2, backoff_base=0.2,
                                 effect_reissue_after=0.5)
    await user_of(cluster).add_network(VM, *USER_NET)
    await eventually(lambda: _given_up(ctl), what="the plug given up", within=20.0)
    (op, *_) = [o for o in await ctl.journal.of(VM, "Network/user-net") if o.state == "Failed"
                and o.attempt == 2]
    assert op.reason == "MigrationFailed"
    said = (await ctl.journal.messages_of(op.stream))[-1]
    assert "the migration failed (simulated)" in said and "nicplug gives up" in said
    assert await ctl.metric("nicplug_migrations_given_up_total") == 1
    assert await ctl.metric("nicplug_migrations_failed_total") == 2
    await eventually(lambda: any("nicplug gives up" in str(e.get("message"))
                                 and e.get("type") == "Warning" for e in cluster.events()),
                     what="the Warning Event")
    assert _migrations_created(cluster) == 2
    assert "no retry" in await ctl.journal.explain(op.stream)  # nothing more will come
    assert_healthy(cluster)


async def _given_up(ctl) -> bool:
    return any(o.state == "Failed" and o.attempt == 2
               for o in await ctl.journal.of(VM, "Network/user-net"))


async def test_kubevirts_grace_is_waited_out_and_explained(
    start_cluster, start_controller, user_of
):
    """With a dynamic-networks controller KubeVirt raises MigrationRequired=False while
    the pod lacks the link: nicplug waits, `explain` says until when KubeVirt gives the
    controller, no Warning Event is written for it, and no migration is created."""
    knobs = replace(DIALECTS["multus"], delays=replace(QUICK, sdn_configure=2.0))
    cluster = await start_cluster(knobs)
    ctl = await start_controller(cluster)
    await user_of(cluster).add_network(VM, *USER_NET)
    said: list[str] = []

    async def graced() -> bool:
        for op in await ctl.journal.of(VM, "Network/user-net"):
            text = await ctl.journal.explain(op.stream)
            if "KubeVirt gives the dynamic-networks controller until" in text:
                said.append(text)
                return True
        return False

    await eventually(graced, what="the grace in explain")
    assert "MigrationRequired is False, AutoMigrationPending" in said[0]
    op = await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})
    assert op.state == "Attached"
    assert _migrations_created(cluster) == 0
    assert not any("Waiting" in str(e.get("reason")) for e in cluster.events())
    assert_healthy(cluster)


async def test_a_nad_swap_on_a_vm_that_cannot_migrate_waits_for_its_restart(
    start_cluster, start_controller, user_of
):
    """A VMI that is not live-migratable keeps the old NAD (KubeVirt copies the new one
    only into a migratable VMI): the swap waits in RestartRequired, saying so, and the
    user's restart brings the new NAD."""
    knobs = DIALECTS["multus"]
    cluster = await start_cluster(knobs, replace(SWAPPED, pod_network_binding="bridge"))
    ctl = await start_controller(cluster)
    user = user_of(cluster)
    await user.add_network(VM, *USER_NET)
    await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached"})
    kvvm = cluster.store.get(KVVMS, *split(VM))
    networks = kvvm["spec"]["template"]["spec"]["networks"]
    for network in networks:
        if "multus" in network:
            network["multus"]["networkName"] = "default/other-net"
    await user.patch_kvvm(VM, {"spec": {"template": {"spec": {"networks": networks}}}})
    op = await ctl.journal.wait_for(VM, "Network/other-net", "update", {"RestartRequired"})
    assert "the VMI cannot migrate" in await ctl.journal.explain(op.stream)
    await user.restart(VM)
    op = await ctl.journal.wait_for(VM, "Network/other-net", "update", {"Attached", "Failed"},
                                    within=20.0)
    assert await ctl.journal.path_of(op.stream) == [
        "Requested", "RestartRequired", "VMIPatched", "Attached"]
    assert _migrations_created(cluster) == 0
    assert_healthy(cluster)
