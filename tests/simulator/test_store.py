"""The store's contract, without HTTP: versions, status split, conflicts, watches."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nicplug.simulator import errors
from nicplug.simulator.resources import CLUSTER_NETWORKS, KVVMS, LEASES, PODS
from nicplug.simulator.store import Store, WatchEvent

MERGE = "application/merge-patch+json"


def pod(name: str, ns: str = "ns1", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"containers": [{"name": "compute", "image": "virt-launcher"}]},
        "status": {"phase": "Running"},
    }


async def take(events: Any, n: int) -> list[WatchEvent]:
    return [await asyncio.wait_for(anext(events), 1) for _ in range(n)]


def test_create_stamps_identity_and_refuses_duplicates() -> None:
    store = Store(clock=lambda: 0.0)
    created = store.create(PODS, pod("a"))
    meta = created["metadata"]
    assert (created["apiVersion"], created["kind"]) == ("v1", "Pod")
    assert meta["resourceVersion"] == "1" and meta["generation"] == 1
    assert meta["creationTimestamp"] == "1970-01-01T00:00:00Z" and len(meta["uid"]) == 36
    assert created["status"] == {"phase": "Running"}  # in-process callers may set it
    with pytest.raises(errors.AlreadyExists) as caught:
        store.create(PODS, pod("a"))
    assert caught.value.code == 409
    assert store.create(PODS, pod("b"), drop_status=True).get("status") is None


def test_bad_input_is_refused_with_its_reason() -> None:
    store = Store()
    with pytest.raises(errors.Invalid):
        store.create(PODS, {"metadata": {"name": "Not_A_Name", "namespace": "ns1"}})
    with pytest.raises(errors.Invalid):
        store.create(PODS, {"metadata": {"name": "a"}})  # no namespace
    with pytest.raises(errors.BadRequest):
        store.create(PODS, {"kind": "Lease", "metadata": {"name": "a", "namespace": "n"}})
    with pytest.raises(errors.Invalid):
        store.create(PODS, {"metadata": {"name": "a", "namespace": "n", "labels": {"k": 1}}})
    with pytest.raises(errors.NotFound):
        store.get(PODS, "ns1", "missing")
    assert len(store) == 0


def test_returned_objects_are_copies() -> None:
    store = Store()
    body = pod("a")
    created = store.create(PODS, body)
    body["spec"]["containers"].clear()
    created["spec"]["containers"].clear()
    assert store.get(PODS, "ns1", "a")["spec"]["containers"][0]["name"] == "compute"


def test_update_checks_resource_version_and_keeps_status() -> None:
    store = Store()
    first = store.create(KVVMS, {**pod("vm"), "spec": {"running": True}})
    changed = {**first, "spec": {"running": False}, "status": {"ready": "ignored"}}
    second = store.update(KVVMS, changed)
    assert second["metadata"]["generation"] == 2
    assert second["status"] == first["status"]  # the main endpoint ignores .status
    with pytest.raises(errors.Conflict):
        store.update(KVVMS, changed)  # still carries the first resourceVersion
    status = store.update(KVVMS, {**second, "spec": {"x": 1}, "status": {"ready": True}},
                          subresource="status")
    assert status["status"] == {"ready": True} and status["spec"] == {"running": False}
    assert status["metadata"]["generation"] == 2  # status writes never bump it
    unconditional = {**status, "metadata": {**status["metadata"], "resourceVersion": ""}}
    assert store.update(KVVMS, unconditional) == status  # a no-op writes nothing
    store.delete(KVVMS, "ns1", "vm")
    store.create(KVVMS, {**pod("vm"), "spec": {"running": True}})
    with pytest.raises(errors.Conflict):  # same name, another object
        store.update(KVVMS, unconditional)


def test_status_subresource_only_where_the_kind_has_one() -> None:
    store = Store()
    lease = store.create(LEASES, {"metadata": {"name": "l", "namespace": "n"}, "spec": {}})
    with pytest.raises(errors.NotFound):
        store.update(LEASES, lease, subresource="status")
    with pytest.raises(errors.NotFound):
        store.patch(LEASES, "n", "l", {}, content_type=MERGE, subresource="scale")


def test_patches_by_content_type() -> None:
    store = Store()
    store.create(PODS, pod("a"))
    merged = store.patch(PODS, "ns1", "a", {"metadata": {"labels": {"x": "1"}}},
                         content_type=MERGE + "; charset=utf-8")
    assert merged["metadata"]["labels"] == {"x": "1"}
    strategic = store.patch(
        PODS, "ns1", "a", {"spec": {"containers": [{"name": "sidecar", "image": "s"}]}},
        content_type="application/strategic-merge-patch+json",
    )
    assert [c["name"] for c in strategic["spec"]["containers"]] == ["compute", "sidecar"]
    with pytest.raises(errors.Invalid) as failed:
        store.patch(PODS, "ns1", "a", [{"op": "test", "path": "/spec/nodeName", "value": "n"}],
                    content_type="application/json-patch+json")
    assert failed.value.code == 422
    store.create(KVVMS, {"metadata": {"name": "vm", "namespace": "ns1"}, "spec": {}})
    with pytest.raises(errors.UnsupportedMediaType):
        store.patch(KVVMS, "ns1", "vm", {}, content_type="application/strategic-merge-patch+json")
    with pytest.raises(errors.UnsupportedMediaType):
        store.patch(KVVMS, "ns1", "vm", {}, content_type="application/apply-patch+yaml")
    stale = {"metadata": {"resourceVersion": "1"}, "spec": {"nodeName": "n"}}
    with pytest.raises(errors.Conflict):
        store.patch(PODS, "ns1", "a", stale, content_type=MERGE)


def test_finalizers_delay_deletion() -> None:
    store = Store()
    obj = store.create(CLUSTER_NETWORKS, {"metadata": {"name": "cn", "finalizers": ["x/y"]}})
    marked = store.delete(CLUSTER_NETWORKS, None, "cn")
    assert marked["metadata"]["deletionTimestamp"]
    assert store.get(CLUSTER_NETWORKS, None, "cn")["metadata"]["uid"] == obj["metadata"]["uid"]
    store.patch(CLUSTER_NETWORKS, None, "cn", {"metadata": {"finalizers": None}},
                content_type=MERGE)
    with pytest.raises(errors.NotFound):
        store.get(CLUSTER_NETWORKS, None, "cn")
    with pytest.raises(errors.NotFound):
        store.delete(CLUSTER_NETWORKS, None, "cn")


def test_list_filters_by_namespace_and_selectors() -> None:
    store = Store()
    store.create(PODS, pod("a", app="x", tier="web"))
    store.create(PODS, pod("b", app="y"))
    store.create(PODS, pod("c", "ns2", app="x"))

    def names(**kw: Any) -> list[str]:
        return [o["metadata"]["name"] for o in store.list(PODS, **kw)[0]]

    assert names() == ["a", "b", "c"]
    assert names(namespace="ns1") == ["a", "b"]
    assert names(label_selector="app=x") == ["a", "c"]
    assert names(label_selector="app!=x") == ["b"]
    assert names(label_selector="app in (x, y),tier") == ["a"]
    assert names(label_selector="app notin (x)") == ["b"]
    assert names(label_selector="!tier") == ["b", "c"]
    assert names(field_selector="metadata.name=b") == ["b"]
    assert names(field_selector="metadata.namespace!=ns1") == ["c"]
    assert store.list(PODS)[1] == str(store.resource_version)
    store.patch(PODS, "ns1", "b", {"spec": {"nodeName": "n1"}}, content_type=MERGE)
    assert names(field_selector="spec.nodeName=n1,status.phase=Running") == ["b"]
    assert names(field_selector="spec.nodeName!=n1") == ["a", "c"]
    with pytest.raises(errors.BadRequest):
        store.list(KVVMS, field_selector="spec.running=true")
    with pytest.raises(errors.BadRequest):
        names(label_selector="app in x")


async def test_watch_replays_from_a_version_then_goes_live() -> None:
    store = Store()
    store.create(PODS, pod("a"))
    _, rv = store.list(PODS)
    store.patch(PODS, "ns1", "a", {"metadata": {"labels": {"x": "1"}}}, content_type=MERGE)
    events = store.watch(PODS, "ns1", resource_version=rv)
    store.delete(PODS, "ns1", "a")
    got = await take(events, 2)
    assert [(e.type, e.object["metadata"]["resourceVersion"]) for e in got] == [
        ("MODIFIED", "2"), ("DELETED", "3")
    ]
    fresh = store.watch(PODS, resource_version="0")
    store.create(PODS, pod("b"))
    assert [e.type for e in await take(fresh, 1)] == ["ADDED"]


async def test_watch_with_selector_sees_objects_enter_and_leave() -> None:
    store = Store()
    store.create(PODS, pod("a", app="x"))
    events = store.watch(PODS, label_selector="app=x")
    store.patch(PODS, "ns1", "a", {"metadata": {"labels": {"app": "y"}}}, content_type=MERGE)
    store.patch(PODS, "ns1", "a", {"metadata": {"labels": {"app": "x"}}}, content_type=MERGE)
    got = [(e.type, e.object["metadata"]["resourceVersion"]) for e in await take(events, 3)]
    assert got == [("ADDED", "1"), ("DELETED", "2"), ("ADDED", "3")]


async def test_watch_older_than_the_history_expires() -> None:
    store = Store(history=3)
    for i in range(5):
        store.create(PODS, pod(f"p{i}"))
    with pytest.raises(errors.Expired) as caught:
        store.watch(PODS, resource_version="1")
    assert caught.value.code == 410
    replay = store.watch(PODS, resource_version="2")  # 3, 4, 5 are still remembered
    assert [e.object["metadata"]["name"] for e in await take(replay, 3)] == ["p2", "p3", "p4"]
    with pytest.raises(errors.BadRequest):
        store.watch(PODS, resource_version="abc")


async def test_subscribe_sees_every_later_write_of_its_resource() -> None:
    store = Store()
    live = store.subscribe(PODS)
    store.create(LEASES, {"metadata": {"name": "l", "namespace": "n"}})
    store.create(PODS, pod("a"))
    store.patch(PODS, "ns1", "a", {"status": {"phase": "Failed"}}, content_type=MERGE,
                subresource="status")
    got = await take(live, 2)
    assert [e.type for e in got] == ["ADDED", "MODIFIED"]
    assert got[1].object["status"]["phase"] == "Failed"
    got[1].object["status"]["phase"] = "mutated"
    assert store.get(PODS, "ns1", "a")["status"]["phase"] == "Failed"


def test_a_tap_sees_every_commit_in_order_before_the_write_returns() -> None:
    store = Store()
    seen: list[tuple[int, str, str]] = []
    store.tap(lambda change: seen.append((change.rv, change.type, change.obj["metadata"]["name"])))
    made = store.create(KVVMS, {"metadata": {"name": "vm1", "namespace": "ns1"}})
    assert seen == [(int(made["metadata"]["resourceVersion"]), "ADDED", "vm1")]
    store.patch(KVVMS, "ns1", "vm1", {"metadata": {"labels": {"a": "b"}}},
                content_type="application/merge-patch+json")
    store.delete(KVVMS, "ns1", "vm1")
    assert [t for _, t, _ in seen] == ["ADDED", "MODIFIED", "DELETED"]
    assert [rv for rv, _, _ in seen] == sorted({rv for rv, _, _ in seen})
