"""After a restart, an effect the journal holds without an outcome is re-sent only once
the world it will meet has been listed: never before the informers' first sync."""

from __future__ import annotations

from nicplug.engine.journal import Commit
from nicplug.engine.model import Cause, Key, StreamId
from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.machines.effects import PatchPodNetworks
from nicplug.machines.world import SDNRequest, if_name_of
from nicplug.simulator.resources import PODS
from tests.integration.cluster_view import active_pods
from tests.integration.conftest import eventually

VM = "default/vm-00000"


async def test_a_pending_effect_waits_for_the_first_sync_after_a_restart(
    start_cluster, start_controller, tmp_path
):
    cluster = await start_cluster()
    (pod,) = active_pods(cluster.store, VM)
    name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    # the journal of a controller killed with this patch on the wire (a patch built
    # from the informers' cache: it can only be sent once they hold the pod)
    path = tmp_path / "journal.db"
    journal = await SQLiteJournal.open(path)
    entry = SDNRequest("Network/user-net", if_name_of("Network", "user-net"), id=2)
    unanswered = PatchPodNetworks("default", name, uid, (entry,)).request(
        StreamId("vm/op/plug/1"))
    await journal.append(Commit(Key(VM), Cause("observation", "earlier"), 0.0, 0.0,
                                effects=(unanswered,)))
    await journal.close()
    cluster.faults.fail_requests(503, times=3, verb="list", resource="pods")

    await start_controller(cluster, journal=path)
    await eventually(lambda: any(r.verb == "patch" and r.resource == "pods" and r.name == name
                                 for r in cluster.requests),
                     within=15, what="the pending effect's patch of the pod")

    order = [(r.verb, r.name) for r in cluster.requests if r.resource == PODS.plural]
    lists = [i for i, (verb, _) in enumerate(order) if verb == "list"]
    assert len(lists) >= 4  # three refused (503), then the first that listed the pods
    assert order.index(("patch", name)) > lists[3], order
