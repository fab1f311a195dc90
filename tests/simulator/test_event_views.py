"""One Event behind `core/v1` and `events.k8s.io/v1`, as a real API server keeps it.

nicplug records Events through `events.k8s.io/v1`; `kubectl get events` and
`kubectl describe` read `core/v1`. Raw HTTP checks the two faces of one object; the
real kubectl, when installed, checks what an operator sees.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from typing import Any

import aiohttp
import pytest

from nicplug.simulator.event_views import as_core, as_v1, fields_as_core
from nicplug.simulator.resources import EVENTS, VMS
from tests.simulator.conftest import Sim

V1 = "/apis/events.k8s.io/v1/namespaces/ns1/events"
CORE = "/api/v1/namespaces/ns1/events"
KUBECTL = shutil.which("kubectl")


def _vm(sim: Sim) -> dict[str, Any]:
    return sim.store.create(VMS, {"apiVersion": VMS.api_version, "kind": VMS.kind,
                                  "metadata": {"name": "vm1", "namespace": "ns1"}})


def _event(vm: dict[str, Any]) -> dict[str, Any]:
    meta = vm["metadata"]
    return {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "vm1.0001", "namespace": "ns1"},
        "regarding": {"apiVersion": vm["apiVersion"], "kind": vm["kind"], "name": meta["name"],
                      "namespace": "ns1", "uid": meta["uid"]},
        "reason": "PlugAttached", "note": "Network/user-net is attached", "type": "Normal",
        "action": "NetworkHotplug", "eventTime": "2026-01-02T03:04:05.000000Z",
        "reportingController": "nicplug", "reportingInstance": "nicplug-0",
    }


async def _json(session: aiohttp.ClientSession, method: str, url: str,
                **kwargs: Any) -> tuple[int, Any]:
    async with session.request(method, url, **kwargs) as response:
        return response.status, await response.json(content_type=None)


async def test_an_event_created_through_one_group_is_read_through_both(sim: Sim) -> None:
    vm = _vm(sim)
    async with aiohttp.ClientSession(sim.url) as s:
        code, created = await _json(s, "POST", V1, json=_event(vm))
        assert code == 201 and created["note"] == "Network/user-net is attached"
        code, core = await _json(s, "GET", f"{CORE}?fieldSelector=involvedObject.name=vm1")
        (event,) = core["items"]
        assert (core["kind"], event["apiVersion"]) == ("EventList", "v1")
        assert event["message"] == "Network/user-net is attached"
        assert event["involvedObject"]["uid"] == vm["metadata"]["uid"]
        assert event["reportingComponent"] == "nicplug"
        assert "note" not in event and "regarding" not in event
        code, _ = await _json(
            s, "PATCH", f"{V1}/vm1.0001", data=b'{"series": {"count": 2, "lastObservedTime":'
            b' "2026-01-02T03:05:05.000000Z"}, "note": "again"}',
            headers={"Content-Type": "application/merge-patch+json"})
        assert code == 200
        code, got = await _json(s, "GET", f"{CORE}/vm1.0001")
        assert (got["series"]["count"], got["message"]) == (2, "again")
        code, newer = await _json(s, "GET", f"{V1}?fieldSelector=regarding.name=vm1")
        assert [e["note"] for e in newer["items"]] == ["again"]
        assert newer["items"][0]["apiVersion"] == "events.k8s.io/v1"
        code, none = await _json(s, "GET", f"{V1}?fieldSelector=regarding.name=vm2")
        assert none["items"] == []
    (stored,) = sim.store.list(EVENTS, "ns1")[0]
    assert stored["message"] == "again"  # stored once, in core/v1's names


def test_the_view_renames_only_the_fields_that_differ() -> None:
    core = {"apiVersion": "v1", "kind": "Event", "message": "m", "involvedObject": {"name": "x"},
            "count": 3, "reason": "R", "series": {"count": 3}}
    v1 = as_v1(core)
    assert v1 == {"apiVersion": "events.k8s.io/v1", "kind": "Event", "note": "m",
                  "regarding": {"name": "x"}, "deprecatedCount": 3, "reason": "R",
                  "series": {"count": 3}}
    assert as_core(v1) == core
    assert as_core([{"op": "replace", "path": "/note", "value": "n"}]) == [
        {"op": "replace", "path": "/message", "value": "n"}]
    assert fields_as_core("regarding.name=vm1,type!=Normal") == (
        "involvedObject.name=vm1,type!=Normal")


async def _kubectl(sim: Sim, *args: str) -> str:
    assert KUBECTL is not None
    process = await asyncio.create_subprocess_exec(
        KUBECTL, "--kubeconfig", str(sim.kubeconfig), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "KUBECACHEDIR": str(sim.kubeconfig.parent / "cache")})
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, err.decode()
    return out.decode()


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is missing: not installed on PATH")
async def test_kubectl_lists_and_describes_nicplugs_events(sim: Sim) -> None:
    vm = _vm(sim)
    async with aiohttp.ClientSession(sim.url) as s:
        code, _ = await _json(s, "POST", V1, json=_event(vm))
        assert code == 201
    listed = await _kubectl(sim, "get", "events", "-n", "ns1",
                            "--field-selector", "involvedObject.name=vm1")
    assert "PlugAttached" in listed and "Network/user-net is attached" in listed
    described = await _kubectl(sim, "describe", "virtualmachines.virtualization.deckhouse.io",
                               "vm1", "-n", "ns1")
    events = described.split("Events:", 1)[1]
    assert "PlugAttached" in events and "Network/user-net is attached" in events
    assert "nicplug" in events
