"""A VM's launcher pods are those its VMI created, found as KubeVirt links them.

`status.activePods` (pod uid → node) and the created-by label (the VMI's uid) are the
links KubeVirt keeps; the `vm.kubevirt.io/name` label holds the sanitized hostname
(`spec.hostname`, else the name cut at the first `.`), so it may name another VM or
none. Both the pure assembly and the informers' index follow the links, in each API
flavour's own label names.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nicplug.adapters.core.worldview import WorldIndex
from nicplug.adapters.kube.flavour import DECKHOUSE, UPSTREAM, Flavour
from nicplug.adapters.kube.translate import VMObjects, assemble_world
from nicplug.adapters.sdn import dialect_for
from tests.unit.translate import bodies as b

DIALECT = dialect_for("deckhouse")


def _objects(*pods: dict[str, Any], vmi: dict[str, Any] | None = None) -> VMObjects:
    return VMObjects(namespace=b.NS, name=b.VM, vm=b.deckhouse_vm(), kvvm=b.kvvm(),
                     vmi=vmi if vmi is not None else b.vmi(active_pods={}), pods=pods)


def _names(objects: VMObjects) -> list[str]:
    return [p.name for p in assemble_world(objects, dialect=DIALECT).world.pods]


def _relabel(pod: dict[str, Any], **labels: str | None) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    current = pod["metadata"]["labels"]
    for key, value in labels.items():
        if value is None:
            current.pop(key, None)
        else:
            current[key] = value
    return pod


def test_a_pod_whose_name_label_holds_a_hostname_is_found_by_its_creator() -> None:
    pod = _relabel(b.launcher_pod(), **{"vm.kubevirt.io/name": "web-host"})
    assert _names(_objects(pod)) == ["virt-launcher-web-x7k2p"]


def test_a_pod_the_vmi_lists_as_active_is_found_without_the_label() -> None:
    pod = _relabel(b.launcher_pod(), **{"kubevirt.io/created-by": None})
    assert _names(_objects(pod)) == []
    assert _names(_objects(pod, vmi=b.vmi(active_pods={b.POD_UID: "node-1"}))) == [
        "virt-launcher-web-x7k2p"]


def test_a_pod_named_after_the_vm_but_created_by_another_vmi_is_not_its_pod() -> None:
    stale = b.launcher_pod("virt-launcher-web-stale", uid="stale", created_by="old-vmi-uid")
    assert _names(_objects(stale)) == []


def test_without_a_vmi_there_are_no_launcher_pods() -> None:
    objects = VMObjects(namespace=b.NS, name=b.VM, vm=b.deckhouse_vm(), kvvm=b.kvvm(),
                        pods=[b.launcher_pod()])
    assert assemble_world(objects, dialect=DIALECT).world.pods == ()


def _renamed(body: dict[str, Any], flavour: Flavour) -> dict[str, Any]:
    """`body` with KubeVirt's label domain as `flavour` names it."""
    body = copy.deepcopy(body)
    labels = body["metadata"].get("labels") or {}
    body["metadata"]["labels"] = {
        k.replace("kubevirt.io/created-by", flavour.created_by_label): v
        for k, v in labels.items()
    }
    return body


@pytest.mark.parametrize("flavour", [UPSTREAM, DECKHOUSE], ids=lambda f: f.name)
@pytest.mark.parametrize("pod_first", [True, False], ids=["pod-first", "vmi-first"])
def test_the_index_links_pods_to_their_vm_whichever_is_seen_first(
    flavour: Flavour, pod_first: bool
) -> None:
    index = WorldIndex(flavour)
    pod = _renamed(_relabel(b.launcher_pod(), **{"vm.kubevirt.io/name": "web-host"}), flavour)
    other = _renamed(b.launcher_pod("virt-launcher-db-1", uid="db-pod", vm="db"), flavour)
    vmi = b.vmi(active_pods={})
    events = [(flavour.launcher_pods, pod), (flavour.launcher_pods, other), (flavour.vmis, vmi)]
    touched: set[str] = set()
    for kind, body in events if pod_first else events[::-1]:
        touched |= index.apply(kind, "ADDED", body)
    assert f"{b.NS}/{b.VM}" in touched
    objects = index.objects_of(f"{b.NS}/{b.VM}")
    assert [p["metadata"]["name"] for p in objects.pods] == ["virt-launcher-web-x7k2p"]
    assert _names(objects) == ["virt-launcher-web-x7k2p"]
    # a pod change now concerns the VM (its coming back unchanged does not); its
    # deletion takes it away
    assert index.apply(flavour.launcher_pods, "MODIFIED", pod) == set()
    changed = copy.deepcopy(pod)
    changed["metadata"]["resourceVersion"] = "changed"
    changed["status"] = {"phase": "Succeeded"}
    assert index.apply(flavour.launcher_pods, "MODIFIED", changed) == {f"{b.NS}/{b.VM}"}
    index.apply(flavour.launcher_pods, "DELETED", pod)
    assert list(index.objects_of(f"{b.NS}/{b.VM}").pods) == []


def test_the_index_does_not_read_the_other_flavours_label() -> None:
    index = WorldIndex(DECKHOUSE)
    index.apply(DECKHOUSE.vmis, "ADDED", b.vmi(active_pods={}))
    index.apply(DECKHOUSE.launcher_pods, "ADDED", b.launcher_pod())  # upstream label only
    assert list(index.objects_of(f"{b.NS}/{b.VM}").pods) == []
