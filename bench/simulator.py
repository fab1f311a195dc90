"""The simulated API server at scale: 10k VMs (VM, KVVM, VMI, launcher pod each: ~40k
objects), several HTTP watchers, a full pod list over HTTP, and the memory it takes.

`python -m bench simulator [--quick]` (quick: 1k VMs). Prints a table, then one JSON
line. Figures are medians of several runs; nothing here asserts a time. In-process
lists copy every object (an orjson round trip); the HTTP list serialises the stored
objects without copying.
"""

from __future__ import annotations

import asyncio
import copy
import gc
import json
import statistics
import sys
import time
from typing import Any

import aiohttp
import orjson
import psutil

from bench._args import quick
from nicplug.simulator.faults import Faults
from nicplug.simulator.resources import KVVMS, NAMESPACES, PODS, VMIS, VMS
from nicplug.simulator.server import make_app, serve
from nicplug.simulator.store import Store

WATCHERS = 4
RUNS = 5


def _rss_mib() -> float:
    return float(psutil.Process().memory_info().rss) / (1 << 20)


def _objects(i: int) -> list[tuple[Any, dict[str, Any]]]:
    """One running VM as the virtualization controller and KubeVirt would have made it."""
    ns, name, node = f"ns{i % 50}", f"vm-{i:05d}", f"node-{i % 100}"
    ip = f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"
    labels = {"vm.kubevirt.io/name": name, "kubevirt.io": "virt-launcher"}
    meta = {"name": name, "namespace": ns}
    networks = [{"name": "default", "pod": {}}]
    devices = {"interfaces": [{"name": "default", "bridge": {}, "macAddress": "02:00:00:00:00:01"}]}
    vm = {
        "metadata": meta,
        "spec": {"runPolicy": "AlwaysOn", "networks": [{"type": "Main"}]},
        "status": {"phase": "Running"},
    }
    kvvm = {
        "metadata": meta,
        "spec": {"runStrategy": "Always", "template": {"spec": {
            "networks": networks, "domain": {"devices": devices}}}},
    }
    vmi = {
        "metadata": {**meta, "labels": labels},
        "spec": {"networks": networks, "domain": {"devices": devices}},
        "status": {"phase": "Running", "nodeName": node, "interfaces": [
            {"name": "default", "infoSource": "domain, guest-agent", "ipAddress": ip}]},
    }
    network_status = [{"name": "cilium", "interface": "eth0", "default": True, "ips": [ip]}]
    pod = {
        "metadata": {
            "name": f"virt-launcher-{name}-abcde", "namespace": ns, "labels": labels,
            "annotations": {"kubevirt.io/domain": name,
                            "k8s.v1.cni.cncf.io/network-status": json.dumps(network_status)},
        },
        "spec": {
            "nodeName": node,
            "containers": [{
                "name": "compute", "image": "virt-launcher:v1.3",
                "resources": {"limits": {"cpu": "2", "memory": "4Gi"}},
                "volumeMounts": [{"name": "private", "mountPath": "/var/run/kubevirt"}],
            }],
            "volumes": [{"name": "private", "emptyDir": {}}],
        },
        "status": {"phase": "Running", "podIP": ip,
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }
    return [(VMS, vm), (KVVMS, kvvm), (VMIS, vmi), (PODS, pod)]


async def _watch(session: aiohttp.ClientSession, rv: str, expected: int) -> float:
    """Read a pod watch until `expected` events have arrived; returns when it finished."""
    seen = 0
    url = f"/api/v1/pods?watch=1&resourceVersion={rv}"
    async with session.get(url) as response:
        async for _line in response.content:
            seen += 1
            if seen == expected:
                return time.perf_counter()
    raise RuntimeError(f"the watch ended after {seen} of {expected} events")


async def _run(vms: int) -> dict[str, Any]:
    gc.collect()
    rss_empty = _rss_mib()
    store = Store(history=10_000)
    for n in range(50):
        store.create(NAMESPACES, {"metadata": {"name": f"ns{n}"}})
    started = time.perf_counter()
    for i in range(vms):
        for res, obj in _objects(i):
            store.create(res, obj)
    fill = time.perf_counter() - started
    gc.collect()
    rss_full = _rss_mib()

    in_process = []
    for _ in range(RUNS):
        t = time.perf_counter()
        store.list(PODS)
        in_process.append(time.perf_counter() - t)

    sample = store.get(PODS, "ns0", "virt-launcher-vm-00000-abcde")
    t = time.perf_counter()
    for _ in range(2000):
        copy.deepcopy(sample)
    deepcopy_us = (time.perf_counter() - t) / 2000 * 1e6
    t = time.perf_counter()
    for _ in range(2000):
        orjson.loads(orjson.dumps(sample))
    orjson_us = (time.perf_counter() - t) / 2000 * 1e6

    runner, url = await serve(make_app(store, Faults()))
    try:
        async with aiohttp.ClientSession(url) as session:
            over_http, size = [], 0
            for _ in range(RUNS):
                t = time.perf_counter()
                async with session.get("/api/v1/pods") as response:
                    body = await response.read()
                over_http.append(time.perf_counter() - t)
                size = len(body)
            assert len(orjson.loads(body)["items"]) == vms

            updates = min(vms, 2000)
            rv = str(store.resource_version)
            watchers = [asyncio.ensure_future(_watch(session, rv, updates))
                        for _ in range(WATCHERS)]
            await asyncio.sleep(0.2)  # let every watch open
            t = time.perf_counter()
            for i in range(updates):
                store.patch(PODS, f"ns{i % 50}", f"virt-launcher-vm-{i:05d}-abcde",
                            {"metadata": {"annotations": {"bench": "1"}}},
                            content_type="application/merge-patch+json")
            write_done = time.perf_counter() - t
            finished = await asyncio.wait_for(asyncio.gather(*watchers), 120)
            fan_out = max(finished) - t
    finally:
        await runner.cleanup()
    return {
        "vms": vms,
        "objects": len(store),
        "fill_s": round(fill, 3),
        "creates_per_s": round(len(store) / fill),
        "rss_empty_mib": round(rss_empty, 1),
        "rss_full_mib": round(rss_full, 1),
        "kib_per_object": round((rss_full - rss_empty) * 1024 / len(store), 2),
        "pod_list_in_process_s": round(statistics.median(in_process), 4),
        "pod_list_http_s": round(statistics.median(over_http), 4),
        "pod_list_mib": round(size / (1 << 20), 1),
        "copy_deepcopy_us": round(deepcopy_us, 1),
        "copy_orjson_us": round(orjson_us, 1),
        "deepcopy_over_orjson": round(deepcopy_us / orjson_us, 2),
        "watchers": WATCHERS,
        "watched_updates": updates,
        "updates_written_s": round(write_done, 3),
        "fan_out_s": round(fan_out, 3),
    }


def main(argv: list[str]) -> int:
    vms = 1_000 if quick(argv, name="simulator", doc=__doc__, smaller="1k VMs") else 10_000
    result = asyncio.run(_run(vms))
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
