"""`python -m bench operation_objects [--quick]`: API requests per hotplug with the
operation objects on and off.

A simulated Deckhouse cluster of 50 VMs (`--quick`: 10) and one controller, in one
process over loopback HTTP; every VM hot-plugs `Network/user-net` at once and the run
waits until the journal shows every plug `Attached` (and, when on, every object too),
then a moment more for the objects' last batch. The simulated API server's request log
counts what the controller sent after its initial lists (watches and the Lease left
out), by verb and resource. Three runs with the SDN taking 1 s per entry: objects off,
on (the projection batches steps within `operation_objects.BATCH`, 1 s), and on without
batching (one write per step: the upper bound); the last line is one JSON object.
"""

from __future__ import annotations

import asyncio
import collections
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

from bench._args import quick as quick_run
from nicplug.adapters.core.controller import Controller
from nicplug.adapters.core.operation_objects import BATCH, OperationObjects
from nicplug.adapters.core.settings import Settings
from nicplug.adapters.queries import open_for_queries, operations
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Delays, Knobs
from nicplug.simulator.resources import OPERATIONS, VMS

SDN_DELAY = 1.0
VM_PATH = "/apis/virtualization.deckhouse.io/v1alpha2/namespaces/{}/virtualmachines/{}"


async def _all_attached(journal: Path, vms: int) -> bool:
    reader = await open_for_queries(journal)
    try:
        ops = await operations(reader)
    finally:
        await reader.close()
    return len(ops) == vms and all(o.state == "Attached" for o in ops)


async def _run(vms: int, *, objects: bool, batch: float) -> dict[str, Any]:
    directory = Path(tempfile.mkdtemp(prefix="nicplug-bench-"))
    cluster = SimulatedCluster(Knobs(delays=Delays(sdn_configure=SDN_DELAY, kubevirt_sync=0.0,
                                                   attach=0.05)),
                               fixtures=Fixtures(vms=vms), kubeconfig_path=directory / "kc")
    await cluster.start()
    defaults = OperationObjects.__init__.__kwdefaults__
    assert defaults is not None
    defaults["batch"] = batch
    settings = Settings(kubeconfig=directory / "kc", journal=directory / "journal.db",
                        metrics_addr="127.0.0.1:0", identity="bench", synchronous="NORMAL",
                        operation_objects=objects)
    controller = Controller(settings)
    task = asyncio.create_task(controller.run())
    try:
        for _ in range(600):  # ready: listed, recovered, leading
            if controller.listed and controller.leading:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(batch + 0.5)  # the term's reconcile, then nothing
        cluster.take_requests()
        listed, _ = cluster.store.list(VMS)
        async with aiohttp.ClientSession() as session:
            for vm in listed:
                meta = vm["metadata"]
                nets = (vm.get("spec") or {}).get("networks") or [{"type": "Main", "id": 1}]
                nets = [*nets, {"type": "Network", "name": "user-net", "id": 2}]
                async with session.patch(
                    cluster.url + VM_PATH.format(meta["namespace"], meta["name"]),
                    json={"spec": {"networks": nets}},
                    headers={"Content-Type": "application/merge-patch+json"},
                ) as response:
                    assert response.status == 200, await response.text()
        for _ in range(1200):
            await asyncio.sleep(0.1)
            shown = cluster.store.list(OPERATIONS)[0]
            if (not objects or [o["status"]["state"] for o in shown] == ["Attached"] * vms) \
                    and await _all_attached(settings.journal, vms):
                break
        await asyncio.sleep(batch + 1.0)
        sent = [r for r in cluster.take_requests()
                if r.user_agent.startswith("nicplug") and r.verb != "watch"
                and r.resource != "leases"]
    finally:
        defaults["batch"] = BATCH
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await cluster.stop()
    counted = collections.Counter(f"{r.verb} {r.resource}" for r in sent)
    own = sum(n for what, n in counted.items() if what.endswith(OPERATIONS.plural))
    return {"objects": objects, "batch": batch, "hotplugs": vms,
            "requests_per_hotplug": round(len(sent) / vms, 2),
            "object_requests_per_hotplug": round(own / vms, 2), "by_request": dict(counted)}


def main(argv: list[str]) -> int:
    quick = quick_run(argv, name="operation_objects", doc=__doc__, smaller="10 VMs, not 50")
    vms = 10 if quick else 50
    runs = [asyncio.run(_run(vms, objects=False, batch=BATCH)),
            asyncio.run(_run(vms, objects=True, batch=BATCH)),
            asyncio.run(_run(vms, objects=True, batch=0.0))]
    print(f"{'objects':8} {'batch':>6} {'requests/hotplug':>17} {'of them objects':>16}")
    for r in runs:
        print(f"{'on' if r['objects'] else 'off':8} {r['batch']:>5.1f}s "
              f"{r['requests_per_hotplug']:>17.2f} {r['object_requests_per_hotplug']:>16.2f}")
    print(json.dumps({"vms": vms, "sdn_delay": SDN_DELAY, "runs": runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
