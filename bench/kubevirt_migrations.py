"""Who migrates, on upstream KubeVirt: 1,000 hotplugs in three simulated clusters.

`python -m bench kubevirt_migrations [--quick]` (`--quick`: 50 VMs). One process: a
simulated cluster (the multus flavour, small delays, served over loopback HTTP) with N
running VMs and `nicplug run --flavour kubevirt` as a task of the same event loop. Each
VM's KubeVirt VM gains one interface (`Network/user-net`, bridge) as the user guide
says, 32 edits in flight; the run ends when every VM's operation is `Attached` (or after
a time limit) and reports, per world:

* `dnc`: a dynamic-networks controller plugs in place: KubeVirt raises
  `MigrationRequired=False` while it works and clears it; no migration at all.
* `no-dnc`: none, and every VM opted in (`--migrations opt-in`, the VM's label): each
  VMI gets exactly one migration, nicplug's.
* `live-migrate`: none, and the KubeVirt CR says `workloadUpdateMethods: [LiveMigrate]`
  (`parallelMigrationsPerCluster: 50`, the updater syncing every 0.5 s): KubeVirt
  migrates, nicplug creates none and follows KubeVirt's to `Attached`.

Figures: operations Attached (of them `observed_done`: the ones the platform had finished
before nicplug decided on them, recorded straight to their end), migrations created by
nicplug and by KubeVirt's workload updater, the VMIs KubeVirt gave the grace
(`MigrationRequired=False` seen), the most migrations of one VMI, the largest number of
unfinished migrations of one VMI at any instant (never above one), and the wall time.
The machine is shared: the time carries its load.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench._args import quick
from nicplug.adapters.core.controller import Controller
from nicplug.adapters.core.settings import Settings
from nicplug.simulator import networking as nw
from nicplug.simulator import objects as ob
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Delays, Knobs
from nicplug.simulator.resources import KVVMS, VMIMS, VMIS
from nicplug.simulator.watching import Change

DELAYS = Delays(sdn_configure=0.2, kubevirt_sync=0.0, attach=0.05, migration=0.5, restart=0.2,
                workload_update=0.5)
WORLDS = ("dnc", "no-dnc", "live-migrate")
LIMIT = 240.0  # seconds of wall time per world


def _cluster(world: str, vms: int, directory: Path) -> SimulatedCluster:
    knobs = Knobs(dialect="multus", dynamic_networks_controller=world == "dnc",
                  delays=DELAYS, migration_required_grace=2.0)
    fixtures = Fixtures(
        vms=vms, vm_networks=(),
        workload_update_methods=("LiveMigrate",) if world == "live-migrate" else (),
        parallel_migrations=50 if world == "live-migrate" else None)
    return SimulatedCluster(knobs, fixtures=fixtures, kubeconfig_path=directory / "kubeconfig")


def _plug(cluster: SimulatedCluster, ns: str, vm: str, opt_in: bool) -> None:
    """The user guide's hotplug: an interface and its multus network in the template."""
    kvvm = cluster.store.get(KVVMS, ns, vm)
    spec = kvvm["spec"]["template"]["spec"]
    spec["networks"].append(nw.kubevirt_network("multus", "Network", "user-net", ns, ""))
    spec["domain"]["devices"]["interfaces"].append(
        nw.kubevirt_interface("Network", "user-net"))
    if opt_in:
        kvvm["metadata"].setdefault("labels", {})["nicplug.io/migrations"] = "true"
    cluster.store.update(KVVMS, kvvm)


def _attached(journal: Path) -> tuple[int, Counter[str]]:
    """(operations, their states) from the journal's read model."""
    with contextlib.closing(sqlite3.connect(f"file:{journal}?mode=ro", uri=True)) as db:
        rows = db.execute("SELECT state FROM streams").fetchall()
    states = Counter(str(r[0]) for r in rows)
    return sum(states.values()), states


def _observed_done(journal: Path) -> int:
    """Operations recorded for a change the platform finished before nicplug decided on
    it (straight to their end, `observed done: ...`)."""
    if not journal.exists():
        return 0
    with contextlib.closing(sqlite3.connect(f"file:{journal}?mode=ro", uri=True)) as db:
        rows = db.execute("SELECT snapshot FROM streams").fetchall()
    return sum(str(json.loads(r[0]).get("message", "")).startswith("observed done")
               for r in rows)


async def _world(world: str, vms: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="nicplug-bench-") as tmp:
        directory = Path(tmp)
        cluster = _cluster(world, vms, directory)
        await cluster.start()
        unfinished: dict[str, set[str]] = {}
        most_in_flight = 0
        graced: set[str] = set()  # VMIs seen with MigrationRequired=False

        def tapped(change: Change) -> None:
            nonlocal most_in_flight
            if change.resource is VMIS:
                cond = ob.condition(change.obj, "MigrationRequired")
                if cond is not None and cond.get("status") == "False":
                    graced.add(change.obj["metadata"]["name"])
                return
            if change.resource is not VMIMS:
                return
            vmi = f"{change.obj['metadata']['namespace']}/{ob.dig(change.obj, 'spec', 'vmiName')}"
            name = change.obj["metadata"]["name"]
            running = unfinished.setdefault(vmi, set())
            if change.type == "DELETED" or ob.dig(change.obj, "status", "phase") in (
                    "Succeeded", "Failed"):
                running.discard(name)
            else:
                running.add(name)
            most_in_flight = max(most_in_flight, len(running))

        cluster.store.tap(tapped)
        journal = directory / "journal.db"
        settings = Settings(
            kubeconfig=cluster.kubeconfig_path, journal=journal, dialect="multus",
            metrics_addr="127.0.0.1:0", synchronous="NORMAL", request_timeout=10.0,
            migrations="opt-in", max_migrations=50, identity="bench")
        controller = Controller(settings)
        task = asyncio.create_task(controller.run())
        try:
            while True:  # until it serves its metrics and has listed every VM
                if controller.metrics_port is not None and controller.listed:
                    break
                await asyncio.sleep(0.05)
            # settled: each VM's first world assembled, so a hotplug the platform finishes
            # before nicplug decides on it is told from it (one done before nicplug first
            # saw the VM is not recorded: docs/decisions/observed-done.md)
            await asyncio.sleep(1.0)
            began = time.perf_counter()
            for ns, vm in cluster.vms:
                _plug(cluster, ns, vm, opt_in=world == "no-dnc")
                await asyncio.sleep(0)
            done = 0
            states: Counter[str] = Counter()
            while time.perf_counter() - began < LIMIT:
                await asyncio.sleep(0.5)
                if journal.exists():
                    _, states = _attached(journal)
                    done = states.get("Attached", 0)
                    if done >= vms:
                        break
            elapsed = time.perf_counter() - began
            observed_done = _observed_done(journal)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            migrations = cluster.store.list(VMIMS)[0]
            errors = list(cluster.actor_errors)
            left = [
                (vm, ob.dig(cluster.store.peek(VMIS, ns, vm), "status", "conditions"))
                for ns, vm in cluster.vms
                if not any("domain" in str(i.get("infoSource")) and i.get("name") != "default"
                           for i in ob.dig(cluster.store.peek(VMIS, ns, vm), "status",
                                           "interfaces") or [])]
            await cluster.stop()
    by_kubevirt = [m for m in migrations
                   if "kubevirt.io/workloadUpdateMigration" in (
                       m["metadata"].get("annotations") or {})]
    by_nicplug = [m for m in migrations
                  if (m["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by")
                  == "nicplug"]
    per_vmi = Counter(f"{m['metadata']['namespace']}/{m['spec']['vmiName']}" for m in migrations)
    return {
        "world": world, "vms": vms, "attached": done, "states": dict(states),
        "observed_done": observed_done,
        "migrations_by_nicplug": len(by_nicplug), "migrations_by_kubevirt": len(by_kubevirt),
        "most_migrations_of_one_vmi": max(per_vmi.values(), default=0),
        "vmis_migrated": len(per_vmi), "most_in_flight_per_vmi": most_in_flight,
        "vmis_given_grace": len(graced),
        "seconds": round(elapsed, 1), "actor_errors": errors[:5],
        "not_attached": [str(x) for x in left[:3]],
    }


def main(argv: list[str]) -> int:
    small = quick(argv, name="kubevirt_migrations", doc=__doc__, smaller="50 VMs")
    vms = 50 if small else 1000
    results = [asyncio.run(_world(world, vms)) for world in WORLDS]
    print(f"{'world':<14}{'VMs':>6}{'Attached':>10}{'by nicplug':>12}{'by KubeVirt':>13}"
          f"{'max/VMI':>9}{'in flight/VMI':>15}{'s':>8}")
    for r in results:
        print(f"{r['world']:<14}{r['vms']:>6}{r['attached']:>10}{r['migrations_by_nicplug']:>12}"
              f"{r['migrations_by_kubevirt']:>13}{r['most_migrations_of_one_vmi']:>9}"
              f"{r['most_in_flight_per_vmi']:>15}{r['seconds']:>8}")
    print(json.dumps({"kubevirt_migrations": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
