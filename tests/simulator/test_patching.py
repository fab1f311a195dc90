"""The three patch formats, on plain documents."""

from __future__ import annotations

import pytest

from nicplug.simulator import errors
from nicplug.simulator.patching import json_patch, merge_patch, strategic_merge_patch


def test_merge_patch_follows_rfc_7386() -> None:
    target = {"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]}
    patch = {"a": "z", "c": {"f": None}, "l": [3], "n": {"x": None, "y": 1}}
    assert merge_patch(target, patch) == {"a": "z", "c": {"d": "e"}, "l": [3], "n": {"y": 1}}
    assert target["c"] == {"d": "e", "f": "g"}  # inputs are never mutated


def test_json_patch_operations() -> None:
    doc = {"spec": {"interfaces": [{"name": "a"}, {"name": "b"}]}, "x": 1}
    ops = [
        {"op": "add", "path": "/spec/interfaces/-", "value": {"name": "c"}},
        {"op": "remove", "path": "/spec/interfaces/0"},
        {"op": "replace", "path": "/x", "value": 2},
        {"op": "copy", "from": "/x", "path": "/y"},
        {"op": "move", "from": "/y", "path": "/z"},
        {"op": "add", "path": "/a~1b", "value": True},
        {"op": "test", "path": "/spec/interfaces/1/name", "value": "c"},
    ]
    assert json_patch(doc, ops) == {
        "spec": {"interfaces": [{"name": "b"}, {"name": "c"}]}, "x": 2, "z": 2, "a/b": True
    }
    assert doc["x"] == 1


@pytest.mark.parametrize(
    ("ops", "error"),
    [
        ([{"op": "test", "path": "/x", "value": 2}], errors.Invalid),
        ([{"op": "remove", "path": "/missing"}], errors.Invalid),
        ([{"op": "replace", "path": "/missing", "value": 1}], errors.Invalid),
        ([{"op": "add", "path": "/l/5", "value": 1}], errors.Invalid),
        ([{"op": "add", "path": "/no/parent", "value": 1}], errors.Invalid),
        ([{"op": "frobnicate", "path": "/x"}], errors.BadRequest),
        ([{"op": "add", "path": "/x"}], errors.BadRequest),
        ([{"path": "/x"}], errors.BadRequest),
        ({"op": "add"}, errors.BadRequest),
    ],
)
def test_json_patch_failures(ops: object, error: type[errors.ApiError]) -> None:
    with pytest.raises(error):
        json_patch({"x": 1, "l": []}, ops)


def test_strategic_merge_patch_merges_named_lists() -> None:
    pod = {
        "metadata": {"labels": {"a": "1"}, "finalizers": ["f1"]},
        "spec": {
            "containers": [{"name": "c1", "image": "i1"}, {"name": "c2", "image": "i2"}],
            "tolerations": [{"key": "t1"}],
        },
    }
    patch = {
        "metadata": {"labels": {"b": "2"}, "finalizers": ["f2"]},
        "spec": {
            "containers": [{"name": "c1", "image": "new"}, {"name": "c2", "$patch": "delete"},
                           {"name": "c3", "image": "i3"}],
            "tolerations": [{"key": "t2"}],
            "$setElementOrder/containers": [{"name": "c1"}, {"name": "c3"}],
        },
    }
    assert strategic_merge_patch(pod, patch) == {
        "metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["f1", "f2"]},
        "spec": {
            "containers": [{"name": "c1", "image": "new"}, {"name": "c3", "image": "i3"}],
            "tolerations": [{"key": "t2"}],  # no merge key: replaced
        },
    }
    assert len(pod["spec"]["containers"]) == 2


def test_strategic_merge_patch_directives() -> None:
    doc = {
        "spec": {"nodeSelector": {"a": "1", "b": "2"}, "x": 1},
        "metadata": {"finalizers": ["f1", "f2"]},
    }
    replace = {"spec": {"nodeSelector": {"c": "3", "$patch": "replace"}}}
    replaced = strategic_merge_patch(doc, replace)
    assert replaced["spec"]["nodeSelector"] == {"c": "3"}
    drop = {"metadata": {"$deleteFromPrimitiveList/finalizers": ["f1"]}}
    dropped = strategic_merge_patch(doc, drop)
    assert dropped["metadata"]["finalizers"] == ["f2"]
    retained = strategic_merge_patch(doc, {"spec": {"$retainKeys": ["x"], "x": 2}})
    assert retained["spec"] == {"x": 2}
    conditions = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    patched = strategic_merge_patch(conditions, {"status": {"conditions": [
        {"type": "Ready", "status": "True"}, {"type": "Synced", "status": "True"}]}})
    assert patched["status"]["conditions"] == [
        {"type": "Ready", "status": "True"}, {"type": "Synced", "status": "True"}
    ]
    with pytest.raises(errors.BadRequest):
        strategic_merge_patch(doc, {"$patch": "explode"})
