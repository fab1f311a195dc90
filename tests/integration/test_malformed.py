"""Bad input on one VM is reported and never fatal: the other VMs go on, and the held
VM resumes once its objects are readable again (nothing asked for is lost)."""

from __future__ import annotations

import logging

import pytest

from nicplug.simulator import networking as nw
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.resources import PODS
from tests.integration.cluster_view import (
    active_pods,
    assert_healthy,
    assert_interface,
    assert_requests,
    split,
)
from tests.integration.conftest import QUICK
from tests.integration.journal_view import PLUG_PATHS

USER_NET = ("Network", "user-net")
BAD_VM, BAD_POD, GOOD = "default/vm-00000", "default/vm-00001", "default/vm-00002"
REQUEST = {"deckhouse": nw.DECKHOUSE_REQUEST, "multus": nw.MULTUS_REQUEST}


@pytest.mark.parametrize("dialect", ["deckhouse", "multus"])
async def test_malformed_objects_hold_one_vm_and_never_stop_the_others(
    dialect, start_cluster, start_controller, user_of, caplog
):
    caplog.set_level(logging.WARNING, logger="nicplug.adapters.controller")
    knobs = Knobs(dialect=dialect, dynamic_networks_controller=dialect == "multus",
                  delays=QUICK)
    cluster = await start_cluster(knobs, Fixtures(vms=3))
    user = user_of(cluster)
    # a VM whose network list no translator can read, and a launcher pod whose SDN
    # request annotation is not JSON — both there before the controller's first list
    await user.add_network(BAD_VM, *USER_NET)
    if dialect == "deckhouse":
        await user.patch_vm(BAD_VM, {"spec": {"networks": [{"type": "Main", "id": "one"}]}})
    else:  # the desired state is the KubeVirt VM: make that one unreadable (a condition
        # of a type KubeVirt's syncConditions keeps, so the simulated KubeVirt leaves it)
        await user.patch_kvvm(BAD_VM, {"status": {"conditions": [
            {"type": "RestartRequired", "status": 1}]}}, status=True)
    (pod,) = active_pods(cluster.store, BAD_POD)
    namespace, _ = split(BAD_POD)
    await user.patch_pod(namespace, pod["metadata"]["name"],
                         {"metadata": {"annotations": {REQUEST[dialect]: "[{not json"}}})
    ctl = await start_controller(cluster)

    await user.add_network(BAD_POD, *USER_NET)
    await user.add_network(GOOD, *USER_NET)
    good = await ctl.journal.wait_for(GOOD, "Network/user-net", "plug", {"Attached", "Failed"})

    assert await ctl.journal.path_of(good.stream) == list(PLUG_PATHS[dialect])
    assert_interface(cluster, GOOD, USER_NET, present=True)
    # the two others were reported and not acted on: an unreadable VM is held still;
    # the plug waits on the pod nicplug will not overwrite
    assert await ctl.journal.of(BAD_VM) == []
    (waiting,) = await ctl.journal.of(BAD_POD)
    if dialect == "deckhouse":
        assert waiting.history == ("Requested",)
        assert nw.annotations_of(cluster.store.get(PODS, namespace, pod["metadata"]["name"]))[
            REQUEST[dialect]] == "[{not json"
    else:
        # KubeVirt owns the annotation: virt-controller replaces the garbage with what the
        # VMI asks for, and the plug goes on from there (nicplug wrote nothing)
        assert waiting.state in {"Requested", "VMIPatched", "AnnotationPatched", "SDNReady",
                                 "Attached"}
    assert await ctl.metric("nicplug_observation_errors_total", kind="object") >= 1
    assert await ctl.metric("nicplug_observation_errors_total", kind="annotation") >= 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    field = "spec.networks[0].id" if dialect == "deckhouse" else "status.conditions[0].status"
    assert any(m.startswith(f"vm={BAD_VM} held still") and field in m
               for m in warnings), warnings
    assert any(m.startswith(f"vm={BAD_POD} waits on an unreadable pod annotation")
               for m in warnings), warnings
    ctl.alive()

    # once readable again, both go on from where the world is
    if dialect == "deckhouse":
        await user.set_networks(BAD_VM, [{"type": "Main", "id": 1},
                                         {"type": "Network", "name": "user-net", "id": 2}])
    else:
        await user.patch_kvvm(BAD_VM, {"status": {"conditions": []}}, status=True)
    if dialect == "deckhouse":  # multus: KubeVirt already rewrote it
        await user.patch_pod(namespace, pod["metadata"]["name"],
                             {"metadata": {"annotations": {REQUEST[dialect]: None}}})
    for vm in (BAD_VM, BAD_POD):
        if vm == BAD_VM and dialect == "multus":
            # KubeVirt hot-plugged what the user wrote into its VM while nicplug could
            # not read it; readable again, the VM's world shows nothing left to do
            await ctl.journal.wait_for(GOOD, "Network/user-net", "plug", {"Attached"})
            assert await ctl.journal.of(BAD_VM) == []
            assert_interface(cluster, vm, USER_NET, present=True)
            continue
        op = await ctl.journal.wait_for(vm, "Network/user-net", "plug", {"Attached", "Failed"})
        assert await ctl.journal.path_of(op.stream) == list(PLUG_PATHS[dialect])
        assert_requests(cluster, vm, [USER_NET])
        assert_interface(cluster, vm, USER_NET, present=True)
    assert_healthy(cluster)
