"""A projection keeps what the model reads, as it came, and drops the rest."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

import orjson
import pytest

from nicplug.adapters.core.worldview import cache_shape
from nicplug.adapters.kube.flavour import ALL_WATCHED, UPSTREAM
from nicplug.adapters.kube.translate.objects import (
    MalformedObject,
    VirtualMachineObject,
    VMIObject,
    read,
)
from nicplug.adapters.kube.translate.projection import (
    Shape,
    compiled,
    project,
    projector,
)

TAPES = Path(__file__).resolve().parents[2] / "tapes"


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


def _walked_and_compiled() -> list[tuple[Shape, dict[str, object]]]:
    """Every kind's shape with every object of the sample tapes, plus bodies malformed
    where a shape nests (a list of scalars, a scalar, a mapping that is no dict)."""
    shapes = [(k, shape) for k in ALL_WATCHED if (shape := cache_shape(k)) is not None]
    cases: list[tuple[Shape, dict[str, object]]] = []
    for tape in sorted(TAPES.glob("*.tape.jsonl")):
        for line in tape.read_bytes().splitlines():
            obj = orjson.loads(line).get("object")
            for kind, shape in shapes:
                if isinstance(obj, dict) and obj.get("kind") == kind.kind:
                    cases.append((shape, obj))
    vmi = cache_shape(UPSTREAM.vmis)
    assert vmi is not None
    cases += [
        (vmi, {"metadata": "x", "spec": {"domain": {"devices": {"interfaces": [1, None]}}}}),
        (vmi, {"spec": MappingProxyType({"networks": [MappingProxyType({"name": "n"})]}),
               "status": {"conditions": "no", "interfaces": [{"name": "a", "x": 1}]}}),
        (vmi, {"status": {"activePods": [1, 2]}, "unread": {"a": 1}}),
    ]
    return cases


def test_the_compiled_projection_keeps_what_the_walk_keeps() -> None:
    cases = _walked_and_compiled()
    assert len(cases) > 100
    for shape, body in cases:
        kept = compiled(shape)(body)
        assert kept == project(shape, body)
        assert orjson.dumps(kept, default=dict) == orjson.dumps(
            project(shape, body), default=dict)
