"""Longer stories than one demo scenario: a network plugged again after its unplug, a
failed plug the user withdraws, an unplug applied at a restart, and many VMs at once —
each still ends with exactly the desired entries, every write made once."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from nicplug.simulator import objects as ob
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Failures, Knobs
from nicplug.simulator.resources import VMIS
from tests.integration.cluster_view import (
    assert_healthy,
    assert_interface,
    assert_requests,
    restart_pending,
    split,
    vm_condition,
    writes,
)
from tests.integration.conftest import QUICK, eventually
from tests.integration.journal_view import PLUG_PATHS, UNPLUG_PATHS

VM = "default/vm-00000"
USER_NET = ("Network", "user-net")
STORAGE = ("ClusterNetwork", "storage")
POD_PATCH = ("patch", "", "pods")
KVVM_PATCH = ("patch", "kubevirt.io", "virtualmachines")
DIALECTS = {
    "deckhouse": Knobs(dialect="deckhouse", delays=QUICK),
    "multus": Knobs(dialect="multus", dynamic_networks_controller=True, delays=QUICK),
}


@pytest.fixture(params=sorted(DIALECTS))
def knobs(request: pytest.FixtureRequest) -> Knobs:
    return DIALECTS[request.param]


async def test_plug_again_after_unplug_is_a_second_attempt(
    knobs, start_cluster, start_controller, user_of
):
    cluster = await start_cluster(knobs)
    ctl = await start_controller(cluster)
    user = user_of(cluster)

    await user.add_network(VM, *USER_NET)
    await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached"})
    await user.remove_network(VM, "Network/user-net")
    await ctl.journal.wait_for(VM, "Network/user-net", "unplug", {"Detached"})
    await user.add_network(VM, *USER_NET)
    await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"}, attempt=2)

    shown = [(o.direction, o.attempt, o.state, o.history) for o in await ctl.journal.of(VM)]
    plug_path, unplug_path = PLUG_PATHS[knobs.dialect], UNPLUG_PATHS[knobs.dialect]
    assert shown == [("plug", 1, "Attached", plug_path), ("plug", 2, "Attached", plug_path),
                     ("unplug", 1, "Detached", unplug_path)]
    assert_requests(cluster, VM, [USER_NET])
    assert_interface(cluster, VM, USER_NET, present=True)
    assert writes(cluster, POD_PATCH) == (3 if knobs.dialect == "deckhouse" else 0)
    # multus: nicplug's clean-up of the unplugged interface may race KubeVirt's
    assert writes(cluster, KVVM_PATCH) == 3 if knobs.dialect == "deckhouse" else \
        3 <= writes(cluster, KVVM_PATCH) <= 4
    assert_healthy(cluster)


async def test_withdrawing_a_failed_plug_clears_the_failure(
    start_cluster, start_controller, user_of
):
    knobs = Knobs(delays=QUICK, failures=Failures(sdn_networks=frozenset({"Network/broken-net"})))
    cluster = await start_cluster(knobs, Fixtures(vms=1, networks=("user-net", "broken-net")))
    # the SDN never configures it: the plug fails at the SDN deadline
    ctl = await start_controller(cluster, backoff_base=300.0, sdn_ready_timeout=3.0)
    user = user_of(cluster)

    await user.add_network(VM, "Network", "broken-net")
    await ctl.journal.wait_for(VM, "Network/broken-net", "plug", {"Failed"})
    await eventually(lambda: vm_condition(cluster.store, VM, "NetworkHotplugFailed") is not None,
                     what="the failure condition")
    await user.remove_network(VM, "Network/broken-net")
    op = await ctl.journal.wait_for(VM, "Network/broken-net", "unplug", {"Detached", "Failed"})

    assert op.history == UNPLUG_PATHS["deckhouse"]  # the pod's entry is taken back
    await eventually(
        lambda: vm_condition(cluster.store, VM, "NetworkHotplugFailed")["status"] == "False",
        what="the failure condition to clear",
    )
    assert vm_condition(cluster.store, VM, "NetworkHotplugFailed")["reason"] == "Recovered"
    assert_requests(cluster, VM, [])
    assert_healthy(cluster)


# deckhouse only: KubeVirt has no restart approval, and applies the unplug live under
# Stage: the kubevirt flavour gates nothing
@pytest.mark.parametrize("knobs", [DIALECTS["deckhouse"]], ids=["deckhouse"])
async def test_stage_unplug_with_automatic_approval_applies_at_restart(
    knobs, start_cluster, start_controller, user_of
):
    fixtures = Fixtures(vms=1, rollout_strategy="Stage", vm_networks=(USER_NET,))
    cluster = await start_cluster(knobs, fixtures)
    ctl = await start_controller(cluster)
    user = user_of(cluster)
    before = cluster.store.get(VMIS, *split(VM))["metadata"]["uid"]

    await user.set_approval(VM, "Automatic")
    await user.remove_network(VM, "Network/user-net")
    op = await ctl.journal.wait_for(VM, "Network/user-net", "unplug", {"Detached", "Failed"})

    # the restart removed it at once: every later step finds the world already there
    steps = [s for s in UNPLUG_PATHS[knobs.dialect] if s not in ("Requested", "VMIPatched")]
    assert op.history == ("Requested", "RestartRequired", "VMIPatched", *steps)

    def restarted() -> bool:
        vmi = cluster.store.list(VMIS, "default")[0]
        return bool(vmi) and vmi[0]["metadata"]["uid"] != before and \
            ob.dig(vmi[0], "status", "phase") == "Running"

    await eventually(restarted, what="the VM to run again")
    await eventually(lambda: not restart_pending(cluster, VM), what="the condition to clear")
    assert_requests(cluster, VM, [])
    assert_interface(cluster, VM, USER_NET, present=False)
    assert_healthy(cluster)


async def test_many_vms_at_once(knobs, start_cluster, start_controller, user_of):
    cluster = await start_cluster(knobs, Fixtures(vms=8, namespaces=("default", "team-b")))
    ctl = await start_controller(cluster)
    user = user_of(cluster)
    vms = [f"{ns}/{name}" for ns, name in cluster.vms]
    await asyncio.gather(*(user.add_networks(vm, USER_NET, STORAGE) for vm in vms))
    for vm in vms:
        for ref in (USER_NET, STORAGE):
            op = await ctl.journal.wait_for(vm, "/".join(ref), "plug", {"Attached", "Failed"})
            assert op.history == PLUG_PATHS[knobs.dialect], op.label()

    for vm in vms:
        assert_requests(cluster, vm, [USER_NET, STORAGE])
        for ref in (USER_NET, STORAGE):
            assert_interface(cluster, vm, ref, present=True)
    # one pod patch and one KVVM patch per VM may carry both networks; never more
    # than one per network (multus: KubeVirt writes the pods, nicplug none)
    pod_writes = writes(cluster, POD_PATCH)
    assert len(vms) <= pod_writes <= 2 * len(vms) if knobs.dialect == "deckhouse" else \
        pod_writes == 0
    if knobs.dialect == "deckhouse":
        assert len(vms) <= writes(cluster, KVVM_PATCH) <= 2 * len(vms)
    else:  # the user's own edit of each KubeVirt VM, and none of nicplug's
        assert writes(cluster, KVVM_PATCH) == len(vms)
    assert_healthy(cluster)


async def test_a_new_controller_on_the_same_journal_finishes_the_work(
    knobs, start_cluster, start_controller, user_of, tmp_path
):
    """Stopped while the plug waits for the SDN, a successor on the same journal picks
    the operation up where the journal left it and makes no write twice."""
    cluster = await start_cluster(replace(knobs, delays=replace(QUICK, sdn_configure=0.5)))
    journal = tmp_path / "shared.db"
    first = await start_controller(cluster, journal=journal)

    await user_of(cluster).add_network(VM, *USER_NET)
    await first.journal.wait_for(VM, "Network/user-net", "plug", {"AnnotationPatched"})
    await first.stop()
    second = await start_controller(cluster, journal=journal)
    op = await second.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})

    assert op.history == PLUG_PATHS[knobs.dialect] and op.attempt == 1
    pod_writes = 1 if knobs.dialect == "deckhouse" else 0
    assert (writes(cluster, POD_PATCH), writes(cluster, KVVM_PATCH)) == (pod_writes, 1)
    assert_requests(cluster, VM, [USER_NET])
    assert_interface(cluster, VM, USER_NET, present=True)
    assert_healthy(cluster)
