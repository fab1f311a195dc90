"""Upstream KubeVirt (the kubevirt flavour): a network is a multus
NetworkAttachmentDefinition. A plug of one the cluster lacks fails at once as
`NetworkNotFound`, saying which NAD in which namespace; where multus is not installed
(its kind answers 404) nicplug stays ready, says so once, and waits as before."""

from __future__ import annotations

import logging

import pytest

from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Knobs
from tests.integration.conftest import QUICK, eventually

VM = "default/vm-00000"
MULTUS = Knobs(dialect="multus", dynamic_networks_controller=True, delays=QUICK)


async def test_a_mistyped_nad_fails_at_once_as_not_found(start_cluster, start_controller,
                                                         user_of) -> None:
    cluster = await start_cluster(MULTUS, Fixtures(vms=1))
    ctl = await start_controller(cluster, backoff_base=300.0)
    await user_of(cluster).add_network(VM, "Network", "user-nte")
    op = await ctl.journal.wait_for(VM, "Network/user-nte", "plug", {"Failed", "Attached"})

    assert (op.state, op.reason) == ("Failed", "NetworkNotFound")
    assert await ctl.journal.path_of(op.stream) == ["Requested", "Failed"]
    said = "NetworkAttachmentDefinition user-nte does not exist in namespace default"
    assert said in op.message
    assert said in await ctl.journal.explain(op.stream)
    await eventually(lambda: any(
        e.get("type") == "Warning" and said in str(e.get("note") or e.get("message"))
        for e in cluster.events()), what="the Warning Event naming the NAD")


async def test_a_nad_that_exists_is_plugged(start_cluster, start_controller, user_of) -> None:
    cluster = await start_cluster(MULTUS, Fixtures(vms=1, networks=("user-net", "lab")))
    ctl = await start_controller(cluster, backoff_base=300.0)
    await user_of(cluster).add_network(VM, "Network", "lab")
    op = await ctl.journal.wait_for(VM, "Network/lab", "plug", {"Failed", "Attached"})
    assert op.state == "Attached"


async def test_without_multus_nads_are_unknown_and_nicplug_stays_ready(
    start_cluster, start_controller, user_of, caplog: pytest.LogCaptureFixture
) -> None:
    knobs = Knobs(dialect="multus", delays=QUICK, nads_served=False)
    cluster = await start_cluster(knobs, Fixtures(vms=1))
    with caplog.at_level(logging.WARNING, logger="nicplug.adapters.kube.informer"):
        ctl = await start_controller(cluster, backoff_base=300.0)  # ready, or this fails
        await user_of(cluster).add_network(VM, "Network", "user-nte")
        # past Requested: the plug goes on as it did before NADs were watched (here the
        # simulated KubeVirt even attaches it; a real multus would fail, then SDNTimeout)
        op = await ctl.journal.wait_for(VM, "Network/user-nte", "plug", {
            "AnnotationPatched", "SDNReady", "VMIPatched", "MigrationRequired", "Attached",
            "Failed"})
    assert op.state != "Failed", (op.reason, op.message)
    absent = [r for r in caplog.records if "not served by this cluster" in r.getMessage()]
    assert len(absent) == 1, [r.getMessage() for r in caplog.records]
    assert "network-attachment-definitions.k8s.cni.cncf.io" in absent[0].getMessage()
