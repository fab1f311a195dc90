"""Chunked lists and watch-lists, as real clients ask for them.

`limit`/`continue` pages a list (kubectl asks for 500 at a time), and a continue token
whose resourceVersion has left the history is a 410, after which a client lists anew.
`sendInitialEvents=true` streams the current state and ends it with a BOOKMARK
annotated `k8s.io/initial-events-end` (client-go's and kopf's watch-list); without
`resourceVersionMatch=NotOlderThan` and bookmarks the server refuses it, as the real
one does.
"""

from __future__ import annotations

import asyncio
import json
import shutil

import aiohttp
import pytest
from kubernetes_asyncio import client, config

from nicplug.simulator.clock import VirtualSimClock
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.resources import VMS
from nicplug.simulator.watching import History

NS = "default"


async def test_a_list_in_pages_is_the_whole_list_and_an_old_token_is_gone() -> None:
    async with SimulatedCluster(Knobs(dialect="deckhouse"), clock=VirtualSimClock(),
                                fixtures=Fixtures(vms=5)) as cluster:
        assert cluster.kubeconfig_path is not None
        cluster.store.fanout.history = History(50)  # a short history: compaction comes soon
        api = await config.new_client_from_config(str(cluster.kubeconfig_path))
        async with api:
            core = client.CoreV1Api(api)
            whole = await core.list_namespaced_pod(NS)
            names, token, pages = [], None, 0
            while True:
                page = await core.list_namespaced_pod(NS, limit=2, _continue=token)
                names += [p.metadata.name for p in page.items]
                pages += 1
                token = page.metadata._continue
                if not token:
                    break
                assert page.metadata.remaining_item_count == len(whole.items) - len(names)
            assert names == [p.metadata.name for p in whole.items] and pages == 3

            first = await core.list_namespaced_pod(NS, limit=2)
            for i in range(51):  # the list's version leaves the history
                cluster.store.patch(VMS, NS, "vm-00000", {"metadata": {"labels": {"n": str(i)}}},
                                    content_type="application/merge-patch+json")
            with pytest.raises(client.ApiException) as gone:
                await core.list_namespaced_pod(NS, limit=2, _continue=first.metadata._continue)
            assert gone.value.status == 410


async def test_a_watch_list_ends_its_initial_events_with_the_bookmark() -> None:
    async with SimulatedCluster(Knobs(dialect="deckhouse"), clock=VirtualSimClock(),
                                fixtures=Fixtures(vms=3)) as cluster, aiohttp.ClientSession() as s:
        url = f"{cluster.url}/api/v1/namespaces/{NS}/pods?watch=1&timeoutSeconds=1"
        async with s.get(url + "&sendInitialEvents=true") as refused:
            assert refused.status == 400
        async with s.get(url + "&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
                               "&allowWatchBookmarks=true") as response:
            lines = [json.loads(line) async for line in response.content]
        types = [e["type"] for e in lines]
        assert types[:4] == ["ADDED", "ADDED", "ADDED", "BOOKMARK"]
        end = lines[3]["object"]["metadata"]
        assert end["annotations"] == {"k8s.io/initial-events-end": "true"}
        assert end["resourceVersion"] == str(cluster.store.resource_version)

        async with s.get(f"{cluster.url}/apis/virtualization.deckhouse.io/v1alpha2/namespaces/"
                         f"nowhere/virtualmachines?watch=1&timeoutSeconds=1&sendInitialEvents="
                         f"true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true") as r:
            (only,) = [json.loads(line) async for line in r.content][:1]
        assert only["type"] == "BOOKMARK"  # nothing to list: the end at once


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
async def test_kubectl_lists_in_chunks() -> None:
    async with SimulatedCluster(Knobs(dialect="deckhouse"), clock=VirtualSimClock(),
                                fixtures=Fixtures(vms=5)) as cluster:
        kubectl = await asyncio.create_subprocess_exec(
            "kubectl", "--kubeconfig", str(cluster.kubeconfig_path), "get", "intvirtvmi",
            "--chunk-size=2", "-o", "json",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(kubectl.communicate(), 30)
        assert kubectl.returncode == 0, err
        assert len(json.loads(out)["items"]) == 5
        requests = [r for r in cluster.requests if r.verb == "list"]
        assert len(requests) == 3
