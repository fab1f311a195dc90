"""The simulated cluster of `bench e2e`, in a process of its own, timing every write.

It runs the same `SimulatedCluster` as `nicplug sim serve`, on the real clock with
every simulated delay at zero, and taps the store: each committed write of a VM's
objects (VM, KVVM, VMI, launcher pod, migration) is recorded as (resourceVersion,
epoch seconds at the commit, kind, `namespace/vm`). It prints the server's URL once it
serves, and on SIGTERM / SIGINT writes the record as JSON lines to `--writes` and exits.
It measures nothing itself and never acts on the cluster.

`python -m bench._timed_cluster --vms N --kubeconfig PATH --writes PATH`
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from pathlib import Path

import orjson

from nicplug.simulator.actors.reactor import vm_key
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Delays, Knobs
from nicplug.simulator.resources import KVVMS, PODS, VMIMS, VMIS, VMS
from nicplug.simulator.watching import Change

TIMED = frozenset({VMS, KVVMS, VMIS, PODS, VMIMS})
ZERO_DELAYS = Delays(sdn_configure=0, kubevirt_sync=0, attach=0, migration=0, restart=0)

Write = tuple[int, float, str, str]


class WriteLog:
    """(rv, commit time, kind, vm) of every write of a VM's objects, in commit order."""

    def __init__(self) -> None:
        self.writes: list[Write] = []

    def __call__(self, change: Change) -> None:
        if change.resource not in TIMED:
            return
        owner = vm_key(change.resource, change.obj)
        if owner is not None:
            kind = "KVVM" if change.resource == KVVMS else change.resource.kind
            self.writes.append((change.rv, time.time(), kind, f"{owner[0]}/{owner[1]}"))

    def dump(self, path: Path) -> None:
        path.write_bytes(b"".join(orjson.dumps(w) + b"\n" for w in self.writes))


async def serve(vms: int, kubeconfig: Path, writes: Path) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    cluster = SimulatedCluster(
        Knobs(delays=ZERO_DELAYS), fixtures=Fixtures(vms=vms), kubeconfig_path=kubeconfig
    )
    log = WriteLog()
    cluster.store.tap(log)
    async with cluster:
        print(f"serving {cluster.url}", flush=True)
        await stop.wait()
    log.dump(writes)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench._timed_cluster")
    parser.add_argument("--vms", type=int, required=True)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--writes", type=Path, required=True)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.vms, args.kubeconfig, args.writes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
