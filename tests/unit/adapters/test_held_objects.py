"""What the index holds of one kind: a new resourceVersion alone is told from a change
without decoding the held object, and reads always show the version now."""

from __future__ import annotations

from typing import Any

import orjson

from nicplug.adapters.core.held_objects import Change, HeldObjects


def _pod(version: Any, *, phase: str = "Running", **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns", "resourceVersion": version, **meta},
            "status": {"phase": phase}}


def test_a_new_object_is_a_change_and_the_same_again_is_none() -> None:
    held = HeldObjects()
    assert held.put("ns/p", _pod("1")) == (Change.READ, None)
    change, before = held.put("ns/p", _pod("1"))
    assert change is Change.NONE and before is not None
    assert orjson.loads(before) == _pod("1")


def test_a_new_version_alone_is_kept_and_read_back() -> None:
    held = HeldObjects()
    held.put("ns/p", _pod("1"))
    assert held.put("ns/p", _pod("2"))[0] is Change.VERSION
    assert held.put("ns/p", _pod("2"))[0] is Change.NONE
    assert held.put("ns/p", _pod("3"))[0] is Change.VERSION
    assert held.body("ns/p") == _pod("3")
    assert held.bodies(["ns/q", "ns/p"]) == [_pod("3")]
    assert orjson.loads(held.encoded()["ns/p"]) == _pod("3")
    # back to the base's version: still only the version moved
    assert held.put("ns/p", _pod("1"))[0] is Change.VERSION
    assert held.body("ns/p") == _pod("1")


def test_a_change_besides_the_version_is_read_and_becomes_the_base() -> None:
    held = HeldObjects()
    held.put("ns/p", _pod("1"))
    held.put("ns/p", _pod("2"))
    change, before = held.put("ns/p", _pod("3", phase="Failed"))
    assert change is Change.READ
    # the held object but for its resourceVersion
    assert before is not None and orjson.loads(before) == _pod("1")
    assert held.body("ns/p") == _pod("3", phase="Failed")
    assert held.put("ns/p", _pod("4", phase="Failed"))[0] is Change.VERSION


def test_key_order_alone_is_a_change() -> None:
    held = HeldObjects()
    held.put("ns/p", _pod("1", uid="u", labels={"a": "1"}))
    reordered = {"metadata": {"labels": {"a": "1"}, "uid": "u", "name": "p",
                              "namespace": "ns", "resourceVersion": "2"},
                 "status": {"phase": "Running"}}
    assert held.put("ns/p", reordered)[0] is Change.READ


def test_the_object_put_is_not_changed() -> None:
    held = HeldObjects()
    held.put("ns/p", _pod("1"))
    pod = _pod("2")
    held.put("ns/p", pod)
    assert pod == _pod("2")


def test_a_version_that_is_no_string_is_compared_whole() -> None:
    held = HeldObjects()
    held.put("ns/p", _pod(1))
    assert held.put("ns/p", _pod(1))[0] is Change.NONE
    assert held.put("ns/p", _pod(2))[0] is Change.VERSION
    assert held.put("ns/p", _pod(2, phase="Failed"))[0] is Change.READ
    no_version = {"metadata": {"name": "p", "namespace": "ns"}, "status": {}}
    assert held.put("ns/p", no_version)[0] is Change.READ
    assert held.put("ns/p", _pod("5"))[0] is Change.READ


def test_pop_gives_the_object_as_last_seen() -> None:
    held = HeldObjects()
    held.put("ns/p", _pod("1"))
    held.put("ns/p", _pod("2"))
    popped = held.pop("ns/p")
    assert popped is not None and orjson.loads(popped) == _pod("2")
    assert held.pop("ns/p") is None and "ns/p" not in held and len(held) == 0
