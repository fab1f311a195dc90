"""A projection keeps what the model reads, as it came, and drops the rest."""

from __future__ import annotations

import pytest

from nicplug.adapters.kube.translate.objects import (
    MalformedObject,
    VirtualMachineObject,
    VMIObject,
    read,
)
from nicplug.adapters.kube.translate.projection import projector


def test_unread_fields_go_and_read_ones_stay_by_their_wire_names() -> None:
    vmi = {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                     "managedFields": [{"manager": "virt-handler"}] * 20},
        "spec": {"domain": {"cpu": {"cores": 2}, "devices": {
            "interfaces": [{"name": "default", "masquerade": {}}], "disks": [{"name": "d"}]}}},
        "status": {"interfaces": [{"name": "default", "infoSource": "domain", "ipAddress": "x"}],
                   "activePods": {"p": "node"}, "guestOSInfo": {"id": "linux"}},
    }
    kept = projector(VMIObject, keep={"apiVersion": None, "kind": None})(vmi)
    assert kept == {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm", "namespace": "ns", "uid": "u", "resourceVersion": "7"},
        "spec": {"domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}]}}},
        "status": {"interfaces": [{"name": "default", "infoSource": "domain"}],
                   "activePods": {"p": "node"}},
    }
    assert read(VMIObject, kept, kind="VMI") == read(VMIObject, vmi, kind="VMI")


@pytest.mark.parametrize("networks", ["not a list", [7, {"type": "Network"}], [{"type": 3}]])
def test_a_malformed_field_is_kept_as_it_came_and_still_fails(networks: object) -> None:
    vm = {"metadata": {"name": "vm", "namespace": "ns", "uid": "u"},
          "spec": {"networks": networks, "virtualMachineClassName": "generic"}}
    kept = projector(VirtualMachineObject)(vm)
    assert kept["spec"] == {"networks": networks}
    with pytest.raises(MalformedObject) as whole:
        read(VirtualMachineObject, vm, kind="VirtualMachine")
    with pytest.raises(MalformedObject) as cut:
        read(VirtualMachineObject, kept, kind="VirtualMachine")
    assert str(whole.value) == str(cut.value)
