"""What `bench e2e` reads from the cluster's records: hotplugs, their latency and the
requests of one controller's clients."""

from __future__ import annotations

import pytest

from bench._e2e_measure import Event, hotplugs, percentile, requests_between, step_latencies

VM = "default/vm-00001"


def test_each_interface_counts_once_from_its_vms_spec_patch_to_the_first_vmi_showing_it() -> None:
    writes = [
        (10, 99.0, "VirtualMachineInstance", VM, ["default"]),  # before: only Main
        (11, 100.0, "VirtualMachine", VM, None),  # the spec patch
        (12, 100.5, "VirtualMachine", VM, None),  # a status write: not a second patch
        (13, 101.0, "VirtualMachineInstance", VM, ["default", "veth_n1"]),
        (14, 101.5, "VirtualMachineInstance", VM, ["default", "veth_n1"]),  # again: once
        (15, 103.0, "VirtualMachineInstance", VM, ["default", "veth_cn2", "veth_n1"]),
        (16, 102.0, "VirtualMachineInstance", "default/other", ["default", "veth_n1"]),
    ]
    found = hotplugs(writes, {VM}, since=99.5, per_vm=2)
    assert (found.asked, found.done) == (2, 2)
    assert found.latencies == [1.0, 3.0]
    assert found.per_second == pytest.approx(2 / 3.0)


def test_an_interface_the_guest_had_before_the_patch_is_no_hotplug() -> None:
    writes = [
        (10, 99.0, "VirtualMachineInstance", VM, ["default", "veth_n1"]),
        (11, 100.0, "VirtualMachine", VM, None),
        (12, 101.0, "VirtualMachineInstance", VM, ["default", "veth_n1"]),
    ]
    found = hotplugs(writes, {VM}, since=99.5, per_vm=2)
    assert found.done == 0
    assert found.per_second != found.per_second  # NaN: nothing to divide


def test_requests_are_counted_per_client_and_window() -> None:
    requests = [(1.0, "nicplug/0.1 (bench)", "patch", "pods"),
                (2.0, "nicplug/0.1 (bench)", "create", "events"),
                (2.0, "kopf-peer", "patch", "pods"),
                (9.0, "nicplug/0.1 (bench)", "get", "virtualmachines")]
    counted = requests_between(requests, 1.0, 5.0, lambda a: a.startswith("nicplug/"))
    assert counted == {"patch": 1, "create": 1}


def test_a_step_is_timed_from_the_earliest_write_it_could_answer() -> None:
    writes = [(5, 50.0, "VirtualMachine", VM, None),  # before `since`: already acted on
              (7, 100.0, "VirtualMachine", VM, None),
              (8, 100.2, "Pod", VM, None)]
    events = [Event(VM, "Opened", "VirtualMachine/default/vm-00001@7", 100.05),
              Event(VM, "Transitioned", "Pod/default/vm-00001-pod@8", 100.3),
              Event(VM, "EffectsIssued", "Pod/default/vm-00001-pod@8", 100.3)]
    latencies, unattributed = step_latencies(events, writes, {VM}, since=99.0)
    assert latencies == pytest.approx([0.05, 0.1])
    assert unattributed == 0


def test_nearest_rank_percentiles() -> None:
    assert percentile([3.0, 1.0, 2.0, 4.0], 0.5) == 2.0
    assert percentile([3.0, 1.0, 2.0, 4.0], 0.99) == 4.0
    assert percentile([], 0.5) != percentile([], 0.5)
