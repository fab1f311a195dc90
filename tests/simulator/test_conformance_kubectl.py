"""kubectl (get, watch, patch, apply, delete) against the simulated API server.

kubectl runs as a child process while the server runs in this test's event loop, so
every call is an asyncio subprocess.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from nicplug.simulator.resources import KVVMS, PODS
from tests.simulator.conftest import Sim

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]


async def kubectl(sim: Sim, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", str(sim.kubeconfig), *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "KUBECACHEDIR": str(sim.kubeconfig.parent / "cache")},
    )
    out, err = await asyncio.wait_for(
        process.communicate(stdin.encode() if stdin is not None else None), 20
    )
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def ok(sim: Sim, *args: str, stdin: str | None = None) -> str:
    code, out, err = await kubectl(sim, *args, stdin=stdin)
    assert code == 0, err
    return out


def pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "a"}},
        "spec": {"containers": [{"name": "compute", "image": "virt-launcher"}]},
    }


async def test_get_and_patch(sim: Sim) -> None:
    sim.store.create(PODS, pod("p1"))
    listed = json.loads(await ok(sim, "get", "pods", "-o", "json"))
    assert [p["metadata"]["name"] for p in listed["items"]] == ["p1"]
    assert "p1" in await ok(sim, "get", "pods", "-l", "app=a")
    await ok(sim, "patch", "pod", "p1", "--type", "merge", "-p",
             '{"metadata": {"labels": {"patched": "merge"}}}')
    await ok(sim, "patch", "pod", "p1", "--type", "json", "-p",
             '[{"op": "add", "path": "/metadata/annotations", "value": {"k": "v"}}]')
    await ok(sim, "patch", "pod", "p1", "-p",  # strategic, kubectl's default for built-ins
             '{"spec": {"containers": [{"name": "sidecar", "image": "s"}]}}')
    stored = sim.store.get(PODS, "default", "p1")
    assert stored["metadata"]["labels"]["patched"] == "merge"
    assert stored["metadata"]["annotations"] == {"k": "v"}
    assert [c["name"] for c in stored["spec"]["containers"]] == ["compute", "sidecar"]
    code, _, err = await kubectl(sim, "patch", "pod", "p1", "--type", "json", "-p",
                                 '[{"op": "test", "path": "/metadata/name", "value": "x"}]')
    # the API server keeps the json-patch error to itself (NewGenericServerResponse)
    assert code != 0 and "the server rejected our request due to an error in our request" in err
    code, _, err = await kubectl(sim, "get", "pod", "missing")
    assert code != 0 and "NotFound" in err


async def test_apply_then_reapply_then_delete(sim: Sim, tmp_path: Path) -> None:
    manifest = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p2", "labels": {"v": "1"}},
        "spec": {"containers": [{"name": "compute", "image": "a"}]},
    }
    vm = {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "vm1"},
        "spec": {"running": True, "template": {"spec": {"networks": [{"name": "default"}]}}},
    }
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    for round_ in ("1", "2"):
        manifest["metadata"]["labels"] = {"v": round_}  # type: ignore[index]
        vm["spec"]["running"] = round_ == "1"  # type: ignore[index]
        # one file per object: kubectl validates a `kind: List` with openapi v2 only
        (manifests / "pod.json").write_text(json.dumps(manifest))
        (manifests / "vm.json").write_text(json.dumps(vm))
        await ok(sim, "apply", "-f", str(manifests))
    stored = sim.store.get(PODS, "default", "p2")
    assert stored["metadata"]["labels"] == {"v": "2"}
    assert "kubectl.kubernetes.io/last-applied-configuration" in stored["metadata"]["annotations"]
    kvvm = sim.store.get(KVVMS, "default", "vm1")
    assert kvvm["spec"]["running"] is False and kvvm["metadata"]["generation"] == 2
    await ok(sim, "delete", "-f", str(manifests))
    assert sim.store.list(PODS)[0] == [] and sim.store.list(KVVMS)[0] == []


async def test_watch_with_event_types(sim: Sim) -> None:
    sim.store.create(PODS, pod("p1"))
    process = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", str(sim.kubeconfig), "get", "pods", "-w",
        "--output-watch-events", "-o", "json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "KUBECACHEDIR": str(sim.kubeconfig.parent / "cache")},
    )
    assert process.stdout is not None
    decoder, buffer, events = json.JSONDecoder(), "", []
    try:
        async with asyncio.timeout(15):
            while len(events) < 3:
                chunk = await process.stdout.read(4096)
                assert chunk, "kubectl ended early"
                buffer += chunk.decode()
                while buffer.strip():
                    try:
                        event, end = decoder.raw_decode(buffer.lstrip())
                    except json.JSONDecodeError:
                        break
                    buffer = buffer.lstrip()[end:]
                    events.append(event)
                    if len(events) == 1:  # the initial state is in: change it
                        sim.store.patch(PODS, "default", "p1", {"metadata": {"labels": {
                            "b": "c"}}}, content_type="application/merge-patch+json")
                        sim.store.delete(PODS, "default", "p1")
    finally:
        process.kill()
        await process.wait()
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "p1"), ("MODIFIED", "p1"), ("DELETED", "p1")
    ]
