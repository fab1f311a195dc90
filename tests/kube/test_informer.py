"""List-then-watch against the simulated API server, over real HTTP, with its faults.

Backoff sleeps are injected (recorded, not slept); the watchdog and the server's
bookmarks run on short real intervals because they are properties of live streams.
Every fault test bounds the number of requests the server saw: no hot loops.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest

from nicplug.adapters.kube.client import ApiConnection
from nicplug.adapters.kube.errors import Expired, Temporary
from nicplug.adapters.kube.flavour import UPSTREAM
from nicplug.adapters.kube.informer import Informer, WatchProgress, WatchSettings
from nicplug.adapters.kube.resources import (
    CLUSTER_NETWORKS,
    NADS,
    VIRTUAL_MACHINES,
    KindRef,
    Scope,
)
from nicplug.simulator import resources as sim
from nicplug.simulator.store import Store
from tests.kube.conftest import ApiServer, ServerFactory, eventually

KUBEVIRTS, KVVMS = UPSTREAM.kubevirts, UPSTREAM.kvvms  # the simulated server's default API
LAUNCHER_PODS, WATCHED = UPSTREAM.launcher_pods, UPSTREAM.watched


class Sleeps:
    """An injected sleep: records the delay and only yields to the loop."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await asyncio.sleep(0)


class Changes:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []  # (kind, type, key)

    def __call__(self, kind: KindRef, event_type: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        self.seen.append((kind.kind, event_type, f"{meta.get('namespace')}/{meta['name']}"))


@asynccontextmanager
async def running(informer: Informer) -> AsyncIterator[Informer]:
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 5)
        yield informer
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def kvvm(store: Store, name: str, ns: str = "ns1") -> dict[str, Any]:
    return store.create(sim.KVVMS, {"metadata": {"name": name, "namespace": ns},
                                    "spec": {"running": True}})


def cached_names(informer: Informer) -> set[str]:
    return set(informer.keys())


def stored_names(store: Store, res: sim.Resource = sim.KVVMS) -> set[str]:
    items, _ = store.list(res)
    return {f"{i['metadata']['namespace']}/{i['metadata']['name']}" for i in items}


async def _miss_vm1s_deletion_behind_a_410(api_server: ApiServer, informer: Informer) -> None:
    """vm3 is delivered and the watch dropped; vm1's deletion happens while the
    resumption gets 410 Gone, and vm4 comes after: the informer re-lists once and
    converges on the store."""
    store = api_server.store
    api_server.faults.drop_watches(after_events=1)
    api_server.faults.expire_resumptions()
    kvvm(store, "vm3")  # delivered, then the stream is dropped
    store.delete(sim.KVVMS, "ns1", "vm1")  # missed: the resumption gets 410
    kvvm(store, "vm4")
    await eventually(converged(informer, store))
    assert informer.stats.expired == 1


def converged(informer: Informer, store: Store) -> Callable[[], bool]:
    return lambda: cached_names(informer) == stored_names(store)


async def test_initial_list_then_watch_delivers_every_change(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    store = api_server.store
    kvvm(store, "vm1")
    kvvm(store, "vm2", ns="ns2")
    changes = Changes()
    informer = Informer(connection, KVVMS, on_change=changes, sleep=Sleeps())
    async with running(informer):
        assert cached_names(informer) == {"ns1/vm1", "ns2/vm2"}
        assert informer.get("ns1/vm1")["kind"] == "VirtualMachine"  # type: ignore[index]
        kvvm(store, "vm3")
        store.patch(sim.KVVMS, "ns1", "vm1", {"spec": {"running": False}},
                    content_type="application/merge-patch+json")
        store.delete(sim.KVVMS, "ns2", "vm2")
        await eventually(lambda: len(changes.seen) == 5)
        assert changes.seen == [
            ("VirtualMachine", "ADDED", "ns1/vm1"),
            ("VirtualMachine", "ADDED", "ns2/vm2"),
            ("VirtualMachine", "ADDED", "ns1/vm3"),
            ("VirtualMachine", "MODIFIED", "ns1/vm1"),
            ("VirtualMachine", "DELETED", "ns2/vm2"),
        ]
        assert informer.get("ns1/vm1")["spec"] == {"running": False}  # type: ignore[index]
        assert informer.resource_version == str(store.resource_version)
    assert api_server.count("list") == 1
    assert api_server.count("watch") == 1


async def test_pods_by_label_in_one_namespace(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    store = api_server.store
    for name, ns, labels in [("virt-launcher-a", "ns1", {"kubevirt.io/created-by": "vmi-a"}),
                             ("virt-launcher-b", "ns2", {"kubevirt.io/created-by": "vmi-b"}),
                             ("unrelated", "ns1", {"app": "web"})]:
        store.create(sim.PODS, {"metadata": {"name": name, "namespace": ns, "labels": labels}})
    informer = Informer(connection, LAUNCHER_PODS, namespace="ns1", sleep=Sleeps())
    async with running(informer):
        assert cached_names(informer) == {"ns1/virt-launcher-a"}
        store.create(sim.PODS, {"metadata": {"name": "virt-launcher-c", "namespace": "ns1",
                                             "labels": {"kubevirt.io/created-by": "vmi-c"}}})
        store.create(sim.PODS, {"metadata": {"name": "other", "namespace": "ns1"}})
        await eventually(lambda: "ns1/virt-launcher-c" in cached_names(informer))
        assert cached_names(informer) == {"ns1/virt-launcher-a", "ns1/virt-launcher-c"}


async def test_bookmarks_advance_the_resource_version(
    start_server: ServerFactory, connection_to: Callable[..., Any]
) -> None:
    server = await start_server(bookmark_interval=0.05)
    connection = await connection_to(server)
    kvvm(server.store, "vm1")
    progress: list[WatchProgress] = []
    informer = Informer(connection, KVVMS, on_progress=lambda _k, p: progress.append(p),
                        sleep=Sleeps())
    async with running(informer):
        listed = informer.resource_version
        # Writes to another kind move the cluster's resourceVersion; only bookmarks can
        # tell this watch about it.
        for i in range(3):
            server.store.create(sim.PODS, {"metadata": {"name": f"p{i}", "namespace": "ns1"}})
        await eventually(lambda: informer.resource_version == str(server.store.resource_version))
        assert informer.resource_version != listed
        assert informer.stats.bookmarks >= 1
        assert progress and progress[-1].event_type == "BOOKMARK"
        assert all(p.gap >= 0 for p in progress)
    assert server.count("list") == 1
    assert server.count("watch") == 1


async def test_410_in_the_stream_leads_to_a_relist_that_converges(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    store = api_server.store
    kvvm(store, "vm1")
    kvvm(store, "vm2")
    changes = Changes()
    informer = Informer(connection, KVVMS, on_change=changes, sleep=Sleeps())
    async with running(informer):
        await _miss_vm1s_deletion_behind_a_410(api_server, informer)
        assert ("VirtualMachine", "DELETED", "ns1/vm1") in changes.seen
        assert ("VirtualMachine", "ADDED", "ns1/vm4") in changes.seen
        kvvm(store, "vm5")  # and the watch after the re-list is live
        await eventually(converged(informer, store))
    assert api_server.count("list") == 2
    assert api_server.count("watch") <= 4


async def test_history_too_short_to_resume_leads_to_a_relist(
    start_server: ServerFactory, connection_to: Callable[..., Any]
) -> None:
    server = await start_server(history=3)
    connection = await connection_to(server)
    store = server.store
    kvvm(store, "vm0")
    informer = Informer(connection, KVVMS, sleep=Sleeps())
    async with running(informer):
        server.faults.drop_watches(after_events=1)
        for i in range(1, 12):  # far more than the history keeps
            kvvm(store, f"vm{i}")
        await eventually(converged(informer, store))
        assert informer.stats.expired == 1
    assert server.count("list") == 2
    assert server.count("watch") <= 4


async def test_dropped_watches_resume_without_relisting(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    store = api_server.store
    informer = Informer(connection, KVVMS, sleep=Sleeps())
    async with running(informer):
        api_server.faults.drop_watches(after_events=2, times=3)
        for i in range(10):
            kvvm(store, f"vm{i}")
        await eventually(converged(informer, store))
        assert informer.stats.expired == 0
    assert api_server.count("list") == 1
    assert 4 <= api_server.count("watch") <= 5


async def test_a_stalled_stream_trips_the_watchdog(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    store = api_server.store
    sleeps = Sleeps()
    informer = Informer(connection, KVVMS, settings=WatchSettings(inactivity=0.2),
                        sleep=sleeps)
    async with running(informer):
        api_server.faults.stall_watches()
        kvvm(store, "vm1")
        await eventually(lambda: informer.stats.stalls >= 2)
        assert informer.get("ns1/vm1") is None
        api_server.faults.resume_watches()
        await eventually(converged(informer, store))
    # Stalled streams that delivered nothing back off: 0.5, 1, 2, ... (not slept here).
    assert sleeps.delays[:2] == [0.5, 1.0]
    assert api_server.count("list") == 1
    assert api_server.count("watch") <= informer.stats.stalls + 1


async def test_errors_back_off_and_honour_retry_after(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    kvvm(api_server.store, "vm1")
    api_server.faults.fail_requests(500, verb="list", times=3)
    api_server.faults.fail_requests(429, verb="watch", retry_after=7)
    sleeps = Sleeps()
    informer = Informer(connection, KVVMS, sleep=sleeps)
    async with running(informer):
        await eventually(lambda: informer.stats.watches == 1)
        kvvm(api_server.store, "vm2")
        await eventually(converged(informer, api_server.store))
    assert sleeps.delays == [0.5, 1.0, 2.0, 7.0]
    assert informer.stats.errors == 4
    assert api_server.count("list") == 4
    assert api_server.count("watch") == 2


async def test_all_kinds_sync_together_within_a_namespace(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    store = api_server.store
    store.create(sim.KUBEVIRTS, {"metadata": {"name": "kubevirt", "namespace": "kubevirt"},
                                 "spec": {"configuration": {"vmRolloutStrategy": "Stage"}}})
    store.create(sim.CLUSTER_NETWORKS, {"metadata": {"name": "storage"}})
    for ns in ("ns1", "ns2"):
        store.create(sim.VMS, {"metadata": {"name": "vm", "namespace": ns}})
    changes = Changes()
    scope = Scope("ns1")  # one informer per kind, as the controller starts them
    informers = {kind: Informer(connection, kind, namespace=scope.namespace_for(kind),
                                on_change=changes, sleep=Sleeps()) for kind in WATCHED}
    tasks = [asyncio.create_task(i.run()) for i in informers.values()]
    try:
        await asyncio.wait_for(asyncio.gather(*(i.synced.wait()
                                                for i in informers.values())), 5)
        assert set(informers[VIRTUAL_MACHINES].keys()) == {"ns1/vm"}
        assert set(informers[KUBEVIRTS].keys()) == {"kubevirt/kubevirt"}  # always cluster-wide
        assert set(informers[CLUSTER_NETWORKS].keys()) == {"storage"}
        assert sorted(k for k, _, _ in changes.seen) == [
            "ClusterNetwork", "KubeVirt", "VirtualMachine"]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert api_server.count("list") == len(WATCHED)


async def test_malformed_lines_and_objects_are_skipped(connection: ApiConnection) -> None:
    changes = Changes()
    informer = Informer(connection, KVVMS, on_change=changes, sleep=Sleeps())
    good = {"metadata": {"name": "vm1", "namespace": "ns1", "resourceVersion": "7"}}
    for line in [b"not json", b'{"type": "ADDED"}', b'{"type": "ADDED", "object": {}}',
                 b'{"type": "SURPRISE", "object": {"metadata": {"name": "x"}}}',
                 orjson.dumps({"type": "ADDED", "object": good})]:
        informer._apply(line, gap=0.0)
    assert informer.stats.malformed == 4
    assert changes.seen == [("VirtualMachine", "ADDED", "ns1/vm1")]
    assert informer.resource_version == "7"
    error = {"kind": "Status", "code": 500, "reason": "InternalError", "message": "boom"}
    with pytest.raises(Temporary):
        informer._apply(orjson.dumps({"type": "ERROR", "object": error}), gap=0.0)
    with pytest.raises(Expired):
        informer._apply(orjson.dumps({"type": "ERROR", "object": {**error, "code": 410}}),
                        gap=0.0)


async def test_a_watch_that_never_answers_trips_the_watchdog(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    sleeps = Sleeps()
    informer = Informer(connection, LAUNCHER_PODS, settings=WatchSettings(inactivity=0.2),
                        sleep=sleeps)
    api_server.faults.add_latency(30.0, verb="watch")
    async with running(informer):  # every pod in every namespace
        await eventually(lambda: informer.stats.stalls >= 1)
        api_server.faults.clear()
        api_server.store.create(sim.PODS, {"metadata": {
            "name": "virt-launcher-a", "namespace": "ns9",
            "labels": {"kubevirt.io/created-by": "vmi-a"}}})
        await eventually(lambda: informer.get("ns9/virt-launcher-a") is not None)
    assert api_server.count("watch") <= informer.stats.stalls + 1


async def test_a_transform_applies_to_listed_and_watched_objects_before_they_are_cached(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    store = api_server.store
    kvvm(store, "vm1")
    handed: list[dict[str, Any]] = []

    def only_the_spec(obj: dict[str, Any]) -> dict[str, Any]:
        return {"kind": obj["kind"], "metadata": {"name": obj["metadata"]["name"],
                "namespace": obj["metadata"]["namespace"]}, "spec": obj["spec"]}

    informer = Informer(connection, KVVMS, on_change=lambda _k, _t, o: handed.append(o),
                        sleep=Sleeps(), transform=only_the_spec)
    async with running(informer):
        kvvm(store, "vm2")
        await eventually(lambda: len(handed) == 2)
        assert informer.get("ns1/vm1") == {
            "kind": "VirtualMachine", "metadata": {"name": "vm1", "namespace": "ns1"},
            "spec": {"running": True}}
        assert handed[1] == informer.get("ns1/vm2")
        assert "resourceVersion" not in handed[1]["metadata"]


async def test_without_keeping_objects_a_relist_hands_on_whole_objects(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    """A consumer that keeps the objects itself gets them whole from a list as from a
    watch; the informer keeps only what a re-list compares, and an object deleted
    while no watch ran is handed on as that: its kind, name, namespace, version."""
    store = api_server.store
    kvvm(store, "vm1")
    kvvm(store, "vm2")
    handed: list[tuple[str, dict[str, Any]]] = []
    informer = Informer(connection, KVVMS, on_change=lambda _k, t, o: handed.append((t, o)),
                        sleep=Sleeps(), keep_objects=False)
    async with running(informer):
        await eventually(lambda: len(handed) == 2)
        assert all(obj["spec"] == {"running": True} for _, obj in handed)
        kept = informer.get("ns1/vm1")
        assert kept is not None and "spec" not in kept
        assert set(kept["metadata"]) == {"name", "namespace", "resourceVersion"}
        await _miss_vm1s_deletion_behind_a_410(api_server, informer)
    added = {obj["metadata"]["name"]: obj for t, obj in handed if t == "ADDED"}
    assert added["vm4"]["spec"] == {"running": True}
    deleted = [obj for t, obj in handed if t == "DELETED"]
    assert [(d["kind"], d["metadata"]["name"], d["metadata"]["namespace"]) for d in deleted] == [
        ("VirtualMachine", "vm1", "ns1")]


async def test_a_new_informer_tells_what_went_since_the_one_before_it(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    """A replica's next term lists with new informers while its consumer still holds
    what the last term's saw: an object deleted between the terms is handed on as
    DELETED by the first list (not kept for ever), one unchanged is not handed again,
    one changed is MODIFIED."""
    store = api_server.store
    for name in ("vm1", "vm2", "vm3"):
        kvvm(store, name)
    held: dict[str, bytes] = {}

    def keep(_kind: KindRef, event_type: str, obj: dict[str, Any]) -> None:
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        if event_type == "DELETED":
            held.pop(key, None)
        else:
            held[key] = orjson.dumps(obj)

    async with running(Informer(connection, KVVMS, on_change=keep, sleep=Sleeps(),
                                keep_objects=False)):
        await eventually(lambda: len(held) == 3)
    store.delete(sim.KVVMS, "ns1", "vm1")  # while no informer watches
    store.patch(sim.KVVMS, "ns1", "vm2", {"spec": {"running": False}},
                content_type="application/merge-patch+json")
    changes = Changes()
    informer = Informer(connection, KVVMS, on_change=changes, sleep=Sleeps(),
                        keep_objects=False, known=dict(held))
    async with running(informer):
        assert sorted(changes.seen) == [("VirtualMachine", "DELETED", "ns1/vm1"),
                                        ("VirtualMachine", "MODIFIED", "ns1/vm2")]
        assert cached_names(informer) == {"ns1/vm2", "ns1/vm3"}


async def test_an_optional_kind_not_served_is_absent_said_once_then_listed_when_served(
    api_server: ApiServer, connection: ApiConnection, caplog: pytest.LogCaptureFixture
) -> None:
    """multus not installed: its NADs answer 404. The informer is synced (nothing
    waits for it), tells `on_presence` once and logs once, and lists again at the
    longest backoff; once served, the NADs are listed and present."""
    api_server.store.create(sim.NADS, {"metadata": {"name": "user-net", "namespace": "ns1"}})
    api_server.faults.fail_requests(404, verb="list", resource=NADS.plural, times=3)
    presence: list[bool] = []
    sleeps = Sleeps()
    informer = Informer(connection, NADS, sleep=sleeps,
                        on_presence=lambda kind, present: presence.append(present))
    async with running(informer):
        assert informer.absent is not None  # synced though nothing was listed
        await eventually(lambda: informer.stats.watches == 1)
        assert cached_names(informer) == {"ns1/user-net"}
    assert presence == [False, True]
    assert sleeps.delays == [WatchSettings().backoff_max] * 3
    assert informer.stats.errors == 0
    said = [r for r in caplog.records if "not served by this cluster" in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "WARNING"


async def test_a_kind_not_optional_answering_404_is_an_error_retried(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    api_server.faults.fail_requests(404, verb="list", times=1)
    informer = Informer(connection, KVVMS, sleep=Sleeps())
    async with running(informer):
        assert informer.stats.errors == 1 and informer.absent is False
