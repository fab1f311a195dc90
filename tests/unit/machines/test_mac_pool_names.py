"""A network the MAC pool names anew while it is plugged, as Deckhouse follows it.

Deckhouse's pool (`pkg/common/network/mac_pool.go`) holds only the MACs the VM's
`status.networks` lists. Two networks added together whose VMMACs are allocated out of
name order, or a network put before one still being plugged, change which MAC (and so
which interface name) an unlisted network gets. Deckhouse then writes the whole
`networks-spec` again from the pool, and updates the KVVM only once the pod asks for the
names it derived and the SDN reports them (`patchPodNetworkAnnotation`,
`isNetworkReadyOnPod`, `sync_kvvm.go`). nicplug in drive mode does the same: the pod's
entry is rewritten under the new name, the plug follows it, and the KVVM waits.
"""

from __future__ import annotations

from nicplug.engine.model import StreamId
from nicplug.machines.walking import _written_anywhere
from nicplug.machines.facts import facts_of
from nicplug.machines.operation import Operation
from nicplug.machines.targets import kvvm_patch, pod_patches
from nicplug.machines.world import (
    KVVM,
    VMI,
    DesiredVM,
    KVVMInterface,
    KVVMNetwork,
    LauncherPod,
    NetworkSpec,
    SDNRequest,
    SDNStatus,
    VMIInterfaceStatus,
    World,
    if_name_of_mac,
)

FIRST, SECOND = "02:00:00:00:00:01", "02:00:00:00:00:02"
OLD_B = if_name_of_mac("Network", FIRST)  # b's name when it was requested
NEW_B = if_name_of_mac("Network", SECOND)  # b's name now that a takes FIRST


def _world(reported_as: str) -> World:
    networks = (NetworkSpec("Main"),
                NetworkSpec("Network", "a", 2, mac=FIRST, named_by_mac=True),
                NetworkSpec("Network", "b", 3, mac=SECOND, named_by_mac=True))
    vm = DesiredVM("uid-1", "ns", "vm", "1", networks)
    default = (KVVMInterface("default"),)
    kvvm = KVVM("1", True, default, (KVVMNetwork("default"),))
    vmi = VMI("vmi-1", "1", "Running", default, (KVVMNetwork("default"),),
              (VMIInterfaceStatus("default", info_source=frozenset({"domain"})),),
              (), {"pod-1": "node-1"})
    pod = LauncherPod("ns", "virt-launcher-vm-1", "pod-1", "1", "Running", "node-1",
                      (SDNRequest("Network/b", OLD_B, 3),),
                      (SDNStatus("Network/b", reported_as, True),))
    return World(vm, kvvm, vmi, (pod,))


def _ops(b_name: str) -> dict[tuple[str, str], Operation]:
    b = Operation(StreamId("op-b"), "ns/vm", "uid-1", "Network/b", b_name, "plug", 1,
                  state="SDNReady")
    a = Operation(StreamId("op-a"), "ns/vm", "uid-1", "Network/a", "", "plug", 1)
    return {("Network/b", "plug"): b, ("Network/a", "plug"): a}


def test_the_pods_entry_is_rewritten_under_the_name_the_pool_gives_now() -> None:
    world = _world(reported_as=OLD_B)
    facts = facts_of(world)
    assert facts.comparison is not None and world.vm is not None
    ((owner, patch),) = pod_patches(facts, _ops(OLD_B), world.vm, facts.comparison)
    assert owner.network == "Network/b"
    assert [(r.identity, r.if_name) for r in patch.entries] == [
        ("Network/a", OLD_B), ("Network/b", NEW_B)]


def test_the_kvvm_waits_until_the_pod_asks_for_the_new_name() -> None:
    """The SDN reports b ready under its old name: the KVVM must not get the new one
    (KubeVirt would find no link for it) until the pod asks for it and it is ready."""
    world = _world(reported_as=OLD_B)
    facts = facts_of(world)
    assert facts.comparison is not None and world.vm is not None
    assert kvvm_patch(facts, _ops(NEW_B), world.vm, facts.comparison) == []


def test_a_plug_follows_the_new_name_while_no_kvvm_or_vmi_holds_the_first() -> None:
    facts = facts_of(_world(reported_as=OLD_B))
    assert not _written_anywhere(OLD_B, facts)  # the pod's request does not pin it
