"""Deckhouse's IPAM judgement, and nicplug's pod patch written as Deckhouse writes it."""

from __future__ import annotations

from dataclasses import replace

from nicplug.machines.decider import HotplugDecider
from nicplug.machines.ipam import with_ipam
from nicplug.machines.policy import MachineConfig
from tests.unit.machines.sim import MAIN, Driver, Sim, net

X = net("x", 2)


def test_a_pooled_network_is_requested_with_its_allocated_address() -> None:
    spec = with_ipam(X, pooled=True, address="vm-x-auto")
    assert (spec.ip_assignment_mode, spec.ip_address_names, spec.awaits_address) == (
        "DHCP", ("vm-x-auto",), False)


def test_a_pooled_network_without_its_address_waits_for_it() -> None:
    assert with_ipam(X, pooled=True, address=None).awaits_address


def test_a_network_without_a_pool_is_plain_unless_it_names_an_address() -> None:
    assert with_ipam(X, pooled=False, address=None) == X
    assert with_ipam(replace(X, ip_address_name="my-ip"), pooled=False,
                     address=None).awaits_address
    assert with_ipam(MAIN, pooled=True, address=None) == MAIN


def test_the_pod_patch_carries_ipam_fields_and_leaves_out_a_waiting_network() -> None:
    y = with_ipam(net("y", 3), pooled=True, address=None)
    x = with_ipam(X, pooled=True, address="vm-x-auto")
    d = Driver(HotplugDecider(MachineConfig()), Sim(networks=(MAIN, x, y)))
    d.observe()
    (patch,) = [e for e in d.effects if e.type == "PatchPodNetworks"]
    (entry,) = patch.payload["entries"]
    assert (entry["identity"], entry["ip_assignment_mode"], entry["ip_address_names"]) == (
        "Network/x", "DHCP", ["vm-x-auto"])
