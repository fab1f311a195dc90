"""The demo's scenarios, in-process, over real HTTP to the simulated cluster, in both
SDN dialects where they apply: the final state and reason, the exact path journaled,
and what the simulated world looks like afterwards.
"""

from __future__ import annotations

import pytest

from nicplug.simulator.knobs import Knobs
from nicplug.simulator.resources import PODS, VMIS
from tests.integration.cluster_view import (
    assert_healthy,
    assert_interface,
    assert_requests,
    attachment_spans,
    link_order_violations,
)
from tests.integration.conftest import QUICK

VM = "default/vm-00000"
USER_NET = ("Network", "user-net")
STORAGE = ("ClusterNetwork", "storage")
PLUG_PATH = ["Requested", "AnnotationPatched", "SDNReady", "VMIPatched", "Attached"]
UNPLUG_PATH = ["Requested", "VMIPatched", "GuestDetached", "AnnotationPatched", "SDNReleased",
               "Detached"]

DIALECTS = {
    "deckhouse": Knobs(dialect="deckhouse", delays=QUICK),
    "multus": Knobs(dialect="multus", dynamic_networks_controller=True, delays=QUICK),
}


@pytest.fixture(params=sorted(DIALECTS))
def knobs(request: pytest.FixtureRequest) -> Knobs:
    return DIALECTS[request.param]


@pytest.mark.parametrize("ref", [USER_NET, STORAGE], ids=["Network", "ClusterNetwork"])
async def test_hotplug(knobs, ref, start_cluster, start_controller, follow, user_of):
    cluster = await start_cluster(knobs)
    trail = follow(cluster, VMIS, PODS)
    ctl = await start_controller(cluster)

    await user_of(cluster).add_network(VM, *ref)
    op = await ctl.journal.wait_for(VM, "/".join(ref), "plug", {"Attached", "Failed"})

    assert (op.state, op.reason) == ("Attached", None)
    assert await ctl.journal.path_of(op.stream) == PLUG_PATH == list(op.history)
    assert_requests(cluster, VM, [ref])
    assert_interface(cluster, VM, ref, present=True)
    assert attachment_spans(trail, VM, ref) == [False, True]
    assert link_order_violations(trail, knobs, VM, ref) == []
    assert_healthy(cluster)
    ctl.alive()
