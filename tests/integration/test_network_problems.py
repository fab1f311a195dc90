"""A network the cluster lacks, or that is not Ready, answers at once with its own
reason (`NetworkNotFound`, `NetworkNotReady`): nothing is written for it, the VM's
condition says which, and the simulated SDN agent would not have configured it either.
(The kubevirt flavour's networks are NetworkAttachmentDefinitions: `test_missing_nads`.)"""

from __future__ import annotations

from nicplug.simulator import networking as nw
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.resources import NETWORKS, PODS
from tests.integration.cluster_view import active_pods, vm_condition
from tests.integration.conftest import eventually

VM = "default/vm-00000"


async def test_a_mistyped_network_fails_at_once_as_not_found(start_cluster, start_controller,
                                                             user_of) -> None:
    cluster = await start_cluster()
    ctl = await start_controller(cluster, backoff_base=300.0)
    await user_of(cluster).add_network(VM, "Network", "no-such-net")
    op = await ctl.journal.wait_for(VM, "Network/no-such-net", "plug", {"Failed", "Attached"})

    assert (op.state, op.reason) == ("Failed", "NetworkNotFound")
    assert await ctl.journal.path_of(op.stream) == ["Requested", "Failed"]
    await eventually(lambda: vm_condition(cluster.store, VM, "NetworkHotplugFailed") is not None,
                     what="the failure condition")
    condition = vm_condition(cluster.store, VM, "NetworkHotplugFailed")
    assert condition["reason"] == "NetworkNotFound"
    assert "Network no-such-net does not exist in namespace default" in condition["message"]
    for pod in active_pods(cluster.store, VM):  # nothing asked of the SDN
        assert "no-such-net" not in nw.annotations_of(pod).get(nw.DECKHOUSE_REQUEST, "")


async def test_a_network_not_ready_fails_at_once_as_not_ready(start_cluster, start_controller,
                                                              user_of) -> None:
    cluster = await start_cluster(fixtures=Fixtures(vms=1, networks=("user-net", "lab")))
    cluster.store.patch(NETWORKS, "default", "lab", {"status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "Pending"}]}},
        content_type="application/merge-patch+json", subresource="status")
    ctl = await start_controller(cluster, backoff_base=300.0)
    await user_of(cluster).add_network(VM, "Network", "lab")
    op = await ctl.journal.wait_for(VM, "Network/lab", "plug", {"Failed", "Attached"})

    assert (op.state, op.reason) == ("Failed", "NetworkNotReady")
    assert await ctl.journal.path_of(op.stream) == ["Requested", "Failed"]


async def test_the_simulated_sdn_configures_no_network_that_does_not_exist(start_cluster,
                                                                          user_of) -> None:
    cluster = await start_cluster()
    (pod,) = active_pods(cluster.store, VM)
    request = nw.dump_list([{"id": 2, "type": "Network", "name": "no-such-net",
                             "ifName": "veth_n00000000", "uid": 64535, "gid": 64535}])
    cluster.store.patch(PODS, "default", pod["metadata"]["name"], {
        "metadata": {"annotations": {nw.DECKHOUSE_REQUEST: request}}},
        content_type="application/merge-patch+json")

    def reported() -> list[dict[str, object]]:
        got = cluster.store.get(PODS, "default", pod["metadata"]["name"])
        return nw.parse_list(nw.annotations_of(got).get(nw.DECKHOUSE_STATUS)) or []

    await eventually(lambda: bool(reported()), what="the SDN's report")
    (entry,) = reported()
    assert not nw.deckhouse_ready(entry)
    assert "Network no-such-net not found" in str(entry["conditions"])
