"""`ReadMemo`: the same worlds with and without it; a new body is read again."""

from __future__ import annotations

import copy
from dataclasses import replace

from nicplug.adapters.kube.resources import VM_UID_LABEL
from nicplug.adapters.kube.translate.assemble import ReadMemo, assemble_world
from nicplug.adapters.sdn import dialect_for
from tests.unit.translate import bodies as b
from tests.unit.translate.test_assemble import DECKHOUSE, plugging_storage


def test_a_memo_changes_no_world() -> None:
    objects = plugging_storage()
    memo = ReadMemo()
    plain = assemble_world(objects, dialect=DECKHOUSE)
    assert assemble_world(objects, dialect=DECKHOUSE, memo=memo) == plain
    assert assemble_world(objects, dialect=DECKHOUSE, memo=memo) == plain  # from the memo


def test_a_new_body_of_the_same_object_is_read_again() -> None:
    """The same object (uid) at another resourceVersion is another state of it."""
    memo = ReadMemo()
    objects = plugging_storage()
    before = assemble_world(objects, dialect=DECKHOUSE, memo=memo).world
    vm = b.deckhouse_vm([{"type": "Main", "id": 1}])
    vm["metadata"]["resourceVersion"] += "1"  # as the API server says of every change
    changed = replace(objects, vm=vm)
    after = assemble_world(changed, dialect=DECKHOUSE, memo=memo).world
    assert after == assemble_world(changed, dialect=DECKHOUSE).world
    assert after.vm != before.vm


def test_a_malformed_body_is_reported_every_time() -> None:
    memo = ReadMemo()
    objects = replace(plugging_storage(), vmi={"metadata": {"name": b.VM, "namespace": b.NS}})
    for _ in range(2):
        world = assemble_world(objects, dialect=dialect_for("deckhouse"), memo=memo).world
        assert world.observation_errors


def _vmmac(name: str, address: str) -> dict[str, object]:
    return {
        "apiVersion": "virtualization.deckhouse.io/v1alpha2",
        "kind": "VirtualMachineMACAddress",
        "metadata": {"name": name, "namespace": b.NS, "uid": f"uid-{name}",
                     "labels": {VM_UID_LABEL: b.VM_UID}},
        "status": {"address": address},
    }


def test_a_vm_named_by_mac_is_kept_while_what_names_it_is_equal() -> None:
    """The Deckhouse VM's desired networks are named from the VM, its VMMACs, the KVVM's
    MACs and the pods' requests: a pod's new body requesting the same keeps the VM
    record (the same object), a VMMAC allocated since makes a new one, as a world
    assembled without the memo has it."""
    memo = ReadMemo()
    objects = replace(plugging_storage(), vm_mac_addresses=[])  # storage's MAC: not yet
    first = assemble_world(objects, dialect=DECKHOUSE, memo=memo).world
    pod = copy.deepcopy(objects.pods[0])
    pod["metadata"]["resourceVersion"] = "9999"
    churned = replace(objects, pods=[pod, *objects.pods[1:]])
    again = assemble_world(churned, dialect=DECKHOUSE, memo=memo).world
    assert again.vm is first.vm
    assert again == assemble_world(churned, dialect=DECKHOUSE).world
    more = replace(churned, vm_mac_addresses=[_vmmac("web-a", "aa:00:00:00:00:01")])
    allocated = assemble_world(more, dialect=DECKHOUSE, memo=memo).world
    assert allocated.vm is not first.vm
    assert allocated == assemble_world(more, dialect=DECKHOUSE).world
    assert allocated.vm != first.vm  # storage has its MAC now
