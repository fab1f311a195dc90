"""Deckhouse's MAC pool and interface names, against the cases of its own Go tests.

`tests/fixtures/deckhouse/mac-pool.json` holds the inputs and expectations of
`pkg/common/network/spec_test.go` (deckhouse/virtualization): which MAC each network of
a VM gets from its status and its `VirtualMachineMACAddress`es, and the md5 prefixes of
those MACs. nicplug must hand out the same addresses and derive the same names, or it
and Deckhouse's controller would write different interfaces for one network. The
simulator re-derives both independently; it is held to the same cases.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nicplug.adapters.kube.translate import macs
from nicplug.adapters.kube.translate.objects import VirtualMachineObject, VMMACObject
from nicplug.machines.world import NetworkSpec, if_name_of_mac
from nicplug.simulator import networking as nw
from nicplug.simulator.actors.deckhouse_macs import mac_pool

FIXTURE = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "deckhouse" / "mac-pool.json").read_text())
CASES = FIXTURE["mac_pool"]
PREFIXES: dict[str, str] = FIXTURE["interface_names"]["md5_prefix"]


def _case(entry: dict[str, Any]) -> str:
    return str(entry["case"])


@pytest.mark.parametrize("case", CASES, ids=_case)
def test_nicplug_hands_out_the_macs_deckhouse_does(case: dict[str, Any]) -> None:
    status = {name: mac for type_, name, mac in case["status_networks"]
              if type_ != "Main" and mac}
    pool = [macs.MACAddress(name, address) for name, address in case["vmmacs"]]
    spec = [(type_, name) for type_, name in case["spec_networks"]]
    assigned = macs.assign(spec, status, pool)
    assert assigned == {f"{t}/{n}": mac for t, n, mac in case["expected"]}


@pytest.mark.parametrize("case", CASES, ids=_case)
def test_the_names_follow_from_the_macs_as_deckhouse_derives_them(case: dict[str, Any]) -> None:
    for type_, name, mac in case["expected"]:
        prefix = "veth_n" if type_ == "Network" else "veth_cn"
        assert case.get("prefix", {}).get(f"{type_}/{name}", prefix) == prefix
        expected = prefix + PREFIXES[mac]
        assert if_name_of_mac(type_, mac) == expected
        assert NetworkSpec(type_, name, mac=mac, named_by_mac=True).if_name == expected
        assert nw.mac_if_name(type_, mac) == expected  # the simulator agrees


def test_every_mac_of_the_fixture_has_its_name() -> None:
    for mac, digits in PREFIXES.items():
        assert if_name_of_mac("Network", mac) == "veth_n" + digits
        assert if_name_of_mac("ClusterNetwork", mac) == "veth_cn" + digits


@pytest.mark.parametrize("case", [c for c in CASES if all(t for t, _, _ in c["status_networks"])],
                         ids=_case)
def test_the_simulated_deckhouse_hands_out_the_same(case: dict[str, Any]) -> None:
    """The simulator's pool reads VMMACs as a list reads them (by name), so the case's
    VMMACs are given once each, by name."""
    vm = {"spec": {"networks": [{"type": t, "name": n} for t, n in case["spec_networks"]]},
          "status": {"networks": [{"type": t, "name": n, "macAddress": m}
                                  for t, n, m in case["status_networks"]]}}
    unique = dict(case["vmmacs"])
    vmmacs = [{"metadata": {"name": name}, "status": {"address": address}}
              for name, address in unique.items()]
    assert mac_pool(vm, vmmacs) == {(t, n): mac for t, n, mac in case["expected"]}


def test_a_network_without_an_allocated_address_gets_no_name() -> None:
    vm = VirtualMachineObject.model_validate({
        "metadata": {"name": "vm", "namespace": "ns", "uid": "u1"},
        "spec": {"networks": [{"type": "Main"}, {"type": "Network", "name": "a"},
                              {"type": "ClusterNetwork", "name": "b"}]},
    })
    allocated = VMMACObject.model_validate({
        "metadata": {"name": "vm-zzzzz", "namespace": "ns", "uid": "m1"},
        "status": {"address": "02:00:00:00:00:01", "phase": "Bound"}})
    pending = VMMACObject.model_validate({
        "metadata": {"name": "vm-aaaaa", "namespace": "ns", "uid": "m2"}, "status": {}})
    assigned = macs.macs_of(macs.vm_networks(vm), [macs.mac_address(allocated),
                                                    macs.mac_address(pending)])
    assert assigned == {"Network/a": "02:00:00:00:00:01"}
    assert NetworkSpec("ClusterNetwork", "b", named_by_mac=True).awaits_mac
    assert NetworkSpec("ClusterNetwork", "b", named_by_mac=True).if_name == ""


def _pool_world(*, kvvm_holds: bool, pod_holds: bool) -> dict[str, str]:
    """identity → MAC nicplug reads for `web` while Network/b, plugged first with the MAC
    `...:01`, is requested by the pod (`pod_holds`) or on the KVVM (`kvvm_holds`), and
    Network/a has been put before it since; the VM's status names neither yet."""
    from nicplug.adapters.kube.resources import VM_UID_LABEL
    from nicplug.adapters.kube.translate import VMObjects, assemble_world
    from nicplug.adapters.sdn import dialect_for
    from tests.unit.translate import bodies as b

    first, second = "02:00:00:00:00:01", "02:00:00:00:00:02"
    held_name = if_name_of_mac("Network", first)
    entry = {"type": "Network", "name": "b", "id": 3, "ifName": held_name,
             "uid": 64535, "gid": 64535}
    request = json.dumps([entry])
    vm = b.deckhouse_vm([{"type": "Main", "id": 1}, {"type": "Network", "name": "a", "id": 2},
                         {"type": "Network", "name": "b", "id": 3}])
    vm["status"]["networks"] = [{"type": "Main", "id": 1}]
    vmmacs = [{"metadata": {"name": name, "namespace": b.NS, "uid": f"uid-{name}",
                            "labels": {VM_UID_LABEL: b.VM_UID}},
               "status": {"address": address, "phase": "Bound"}}
              for name, address in (("web-aaaaa", first), ("web-bbbbb", second))]
    deckhouse = dialect_for("deckhouse")
    kvvm = b.kvvm(networks=b.pod_networks(held_name),
                  interfaces=[{"name": held_name, "bridge": {}, "macAddress": first}],
                  annotations={deckhouse.request_annotation: request}) if kvvm_holds else b.kvvm(
                      networks=[], interfaces=[])
    pod = b.launcher_pod(annotations={deckhouse.request_annotation: request})
    pods = [pod] if pod_holds else []
    objects = VMObjects(namespace=b.NS, name=b.VM, vm=vm, kvvm=kvvm, vmi=b.vmi(), pods=pods,
                        vm_mac_addresses=vmmacs)
    world = assemble_world(objects, dialect=deckhouse).world
    assert world.vm is not None
    return {n.identity: n.mac for n in world.vm.networks or () if n.mac}


@pytest.mark.parametrize(("kvvm_holds", "pod_holds"), [(True, False), (False, True), (True, True)])
def test_the_pool_holds_the_vm_status_alone_as_deckhouse_does(
    kvvm_holds: bool, pod_holds: bool
) -> None:
    """`NewMacAddressPool` (`mac_pool.go`) reserves the MACs of `status.networks` and
    nothing else; its one caller, `CreateNetworkSpec`, is handed the VM and its VMMACs only.
    A MAC a KVVM interface or a launcher pod's request is named after, which the status
    does not list yet, is free: the networks take the VMMACs in spec order, as
    Deckhouse's controller writes them, so nicplug names them as the platform does."""
    assert _pool_world(kvvm_holds=kvvm_holds, pod_holds=pod_holds) == {
        "Network/a": "02:00:00:00:00:01", "Network/b": "02:00:00:00:00:02"}
