"""A scope: nicplug manages the VMs it is given and never touches the others.

So that VMs can be handed over a few at a time beside the platform's own controller,
`--vm-selector` and `--namespaces` restrict what nicplug observes: a VM outside them
gets no operation, no patch of its pod or KVVM, no condition, no Event.
"""

from __future__ import annotations

import pytest

from nicplug.adapters.core.scope import VMScope
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.resources import VMS
from tests.integration.conftest import QUICK

MANAGED, OTHER = "default/vm-00000", "default/vm-00001"


async def test_only_the_vms_in_scope_are_managed(start_cluster, start_controller, user_of):
    cluster = await start_cluster(Knobs(delays=QUICK), Fixtures(vms=2))
    cluster.store.patch(VMS, "default", "vm-00000",
                        {"metadata": {"labels": {"nicplug.io/managed": "true"}}},
                        content_type="application/merge-patch+json")
    ctl = await start_controller(cluster, vm_selector="nicplug.io/managed=true")
    user = user_of(cluster)
    await user.add_network(OTHER, "Network", "user-net")
    await user.add_network(MANAGED, "Network", "user-net")
    op = await ctl.journal.wait_for(MANAGED, "Network/user-net", "plug", {"Attached", "Failed"})
    assert op.state == "Attached"
    await cluster.settle()
    assert await ctl.journal.of(OTHER) == []
    writes = [r for r in cluster.requests  # the user's own edits go through aiohttp
              if r.verb in ("patch", "create", "update", "delete") and r.name
              and "vm-00001" in r.name and "aiohttp" not in r.user_agent]
    assert writes == []
    # labelled later, the VM is taken over: its pending change is made
    cluster.store.patch(VMS, "default", "vm-00001",
                        {"metadata": {"labels": {"nicplug.io/managed": "true"}}},
                        content_type="application/merge-patch+json")
    other = await ctl.journal.wait_for(OTHER, "Network/user-net", "plug", {"Attached", "Failed"})
    assert other.state == "Attached"


def test_the_selector_reads_kubernetes_syntax() -> None:
    scope = VMScope(selector="tier in (a, b),!legacy,team!=x", namespaces=frozenset({"ns1"}))
    assert scope.covers("ns1", {"tier": "a"})
    assert not scope.covers("ns2", {"tier": "a"})
    assert not scope.covers("ns1", {"tier": "c"})
    assert not scope.covers("ns1", {"tier": "a", "legacy": ""})
    assert not scope.covers("ns1", {"tier": "b", "team": "x"})
    assert VMScope().everything and VMScope().covers("any", {})
    with pytest.raises(ValueError, match="cannot read"):
        VMScope(selector="a in b")


