"""Drive mode on an IPAM network: nicplug requests it only once its IPAddress is
allocated, and then writes the `networks-spec` Deckhouse's `EnrichWithIPAM` would,
byte for byte (`ipAssignmentMode`, `ipAddressNames`). It learns that the address is
allocated from the IPAddresses it watches (`network.deckhouse.io`)."""

from __future__ import annotations

from dataclasses import replace

from nicplug.simulator import networking as nw
from nicplug.simulator import objects as ob
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.resources import IP_ADDRESSES, PODS, VMMACS
from tests.integration.cluster_view import assert_healthy, split
from tests.integration.conftest import QUICK

VM = "default/vm-00000"


def _requests(cluster) -> list[str]:
    namespace, name = split(VM)
    pods, _ = cluster.store.list(PODS, namespace)
    return [str(nw.annotations_of(p).get(nw.DECKHOUSE_REQUEST))
            for p in pods if (ob.dig(p, "metadata", "labels") or {}).get(
                "vm.kubevirt.io/name") == name and ob.dig(p, "status", "phase") == "Running"]


async def test_an_ipam_network_is_requested_once_its_address_is_allocated(
    start_cluster, start_controller, user_of
):
    knobs = Knobs(dialect="deckhouse", delays=replace(QUICK, ip_allocate=2.0))
    cluster = await start_cluster(knobs, Fixtures(vms=1, ipam_networks=("user-net",)))
    assert cluster.knobs.native_hotplug is False  # drive mode: nicplug writes the pod
    ctl = await start_controller(cluster)
    before = _requests(cluster)

    cluster.store.create(IP_ADDRESSES, {
        "apiVersion": IP_ADDRESSES.api_version, "kind": IP_ADDRESSES.kind,
        "metadata": {"name": "my-ip", "namespace": "default"},
        "spec": {"networkRef": {"kind": "Network", "name": "user-net"}, "type": "Static"}})
    networks = await user_of(cluster).networks(VM)
    await user_of(cluster).set_networks(VM, [*networks, {
        "type": "Network", "name": "user-net", "id": 2, "ipAddressName": "my-ip"}])
    op = await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Requested"})
    (address,) = cluster.store.list(IP_ADDRESSES, "default")[0]
    if ob.dig(address, "status", "phase") != "Allocated":  # not yet: nothing written
        assert _requests(cluster) == before

    op = await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})
    assert (op.state, op.reason) == ("Attached", None)
    (vmmac,) = cluster.store.list(VMMACS, "default")[0]
    if_name = nw.mac_if_name("Network", vmmac["status"]["address"])
    assert _requests(cluster) == [
        f'[{{"id":2,"type":"Network","name":"user-net","ifName":"{if_name}",'
        f'"uid":64535,"gid":64535,"ipAssignmentMode":"DHCP","ipAddressNames":["my-ip"]}}]']
    assert_healthy(cluster)
