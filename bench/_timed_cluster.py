"""The simulated cluster of `bench e2e`, in a process of its own, timing every write.

It runs the same `SimulatedCluster` as `nicplug sim serve`, on the real clock with
every simulated delay at zero, and taps the store: each committed write of a VM's
objects (VM, KVVM, VMI, launcher pod, migration) is recorded as (resourceVersion,
epoch seconds at the commit, kind, `namespace/vm`, and for a VMI the interfaces its
status shows attached to the guest). Every resource request the API server answers is
recorded as (epoch seconds, User-Agent, verb, resource), so two controllers run one
after the other are told apart by their clients. Both records are appended as JSON
lines to `--writes` and `--requests` while it runs (every quarter second), so the
benchmark can follow them. It prints the server's URL once it serves and exits on
SIGTERM / SIGINT. It measures nothing itself and never acts on the cluster.

`python -m bench._timed_cluster --vms N --kubeconfig PATH --writes PATH --requests PATH
[--networks N] [--native-hotplug]`
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import signal
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from nicplug.simulator.actors.reactor import vm_key
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Delays, Knobs
from nicplug.simulator.resources import KVVMS, PODS, VMIMS, VMIS, VMS
from nicplug.simulator.watching import Change

TIMED = frozenset({VMS, KVVMS, VMIS, PODS, VMIMS})
ZERO_DELAYS = Delays(sdn_configure=0, kubevirt_sync=0, attach=0, migration=0, restart=0,
                     mac_allocate=0, ip_allocate=0)
"""Every delay of the platform that a hotplug waits on, at zero: the bench measures the
controllers, not the simulated platform's pace. (The MAC and IP allocations came later
than the others and had kept their 0.2 s: nicplug names a Deckhouse interface after its
MAC, as Deckhouse does, and waited for it; the peer does not read it.) The workload
updater's period is KubeVirt's, and no drive-mode hotplug waits on it."""

FLUSH_EVERY = 0.25  # seconds between appends to the record files

Write = tuple[int, float, str, str, list[str] | None]


def attached(vmi: dict[str, Any]) -> list[str]:
    """The interfaces a VMI's status shows attached to the guest (`domain` in infoSource)."""
    status = vmi.get("status") or {}
    return sorted(
        str(i.get("name")) for i in status.get("interfaces") or ()
        if "domain" in [s.strip() for s in str(i.get("infoSource") or "").split(",")]
    )


class WriteLog:
    """(rv, commit time, kind, vm, attached) of every write of a VM's objects, in commit
    order; `attached` only for a VMI."""

    def __init__(self) -> None:
        self.writes: list[Write] = []

    def __call__(self, change: Change) -> None:
        if change.resource not in TIMED:
            return
        owner = vm_key(change.resource, change.obj)
        if owner is not None:
            kind = "KVVM" if change.resource == KVVMS else change.resource.kind
            guest = attached(change.obj) if change.resource == VMIS else None
            self.writes.append((change.rv, time.time(), kind, f"{owner[0]}/{owner[1]}", guest))

    def take(self) -> list[Write]:
        taken, self.writes = self.writes, []
        return taken


def _append(path: Path, rows: list[Any]) -> None:
    if rows:
        with path.open("ab") as out:
            out.write(b"".join(orjson.dumps(row) + b"\n" for row in rows))


async def _record(cluster: SimulatedCluster, log: WriteLog, writes: Path,
                  requests: Path) -> None:
    """Append what happened since the last round; the request time is the round's."""
    while True:
        await asyncio.sleep(FLUSH_EVERY)
        _flush(cluster, log, writes, requests)


def _flush(cluster: SimulatedCluster, log: WriteLog, writes: Path, requests: Path) -> None:
    now = time.time()
    _append(writes, log.take())
    _append(requests, [(now, r.user_agent, r.verb, r.resource) for r in cluster.take_requests()])


def network_names(extra: int) -> tuple[str, ...]:
    """`user-net` (which the VMs ask for) and `extra` Networks nobody asks for."""
    return ("user-net", *(f"unused-{i:04d}" for i in range(extra)))


async def serve(vms: int, kubeconfig: Path, writes: Path, requests: Path,
                networks: int = 0, native_hotplug: bool = False) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    cluster = SimulatedCluster(
        # the names the peer speaks; the peer (or nicplug in drive mode) drives the
        # hotplug, unless the platform's own controller does (observe mode)
        Knobs(delays=ZERO_DELAYS, kubevirt_api="upstream", native_hotplug=native_hotplug),
        fixtures=Fixtures(vms=vms, networks=network_names(networks)),
        kubeconfig_path=kubeconfig,
    )
    log = WriteLog()
    cluster.store.tap(log)
    async with cluster:
        # The fixtures live as long as the process: out of the collector's way, or its
        # full collections walk all of them (0.4 s at 11,000 VMs, several times a run)
        # and the watches they hold up count as latency the controller added.
        gc.collect()
        gc.freeze()
        recording = asyncio.create_task(_record(cluster, log, writes, requests))
        print(f"serving {cluster.url}", flush=True)
        await stop.wait()
        recording.cancel()
        _flush(cluster, log, writes, requests)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench._timed_cluster")
    parser.add_argument("--vms", type=int, required=True)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--writes", type=Path, required=True)
    parser.add_argument("--requests", type=Path, required=True)
    parser.add_argument("--networks", type=int, default=0,
                        help="Networks nobody asks for, beside user-net")
    parser.add_argument("--native-hotplug", action="store_true",
                        help="Deckhouse's controller hot-plugs itself (a controller observes)")
    args = parser.parse_args(argv)
    args.writes.write_bytes(b"")
    args.requests.write_bytes(b"")
    asyncio.run(serve(args.vms, args.kubeconfig, args.writes, args.requests, args.networks,
                      args.native_hotplug))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
