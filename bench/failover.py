"""`python -m bench failover [--quick]`: the PostgreSQL journal's failover, measured
with real processes, 20 runs of 200 VMs hot-plugging (`--quick`: 3 runs of 40).

Each run: a throwaway PostgreSQL server's fresh database, the simulated cluster, two
`nicplug run` replicas with a 2 s Lease (`--lease-duration 2 --renew-deadline 1.5
--retry-period 0.25`); every VM gets a network; once a third of the operations are
done the leader is SIGKILLed. Per run (`tests/integration/failover.py`): seconds from
the kill to the standby's first write, to every VM converged; effects sent twice;
transitions lost. Prints p50/p99/max and the sums, then one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import signal
import statistics
import tempfile
from pathlib import Path

import asyncpg

from bench._args import quick as quick_run
from nicplug.simulator.postgres_server import LocalPostgres
from tests.integration.failover import Failover, cluster_of, fail_over
from tests.integration.processes_support import Launcher


async def one_run(server: LocalPostgres, n: int, vms: int) -> Failover:
    admin = await asyncpg.connect(server.dsn())
    try:
        await admin.execute(f"CREATE DATABASE failover_{n}")
    finally:
        await admin.close()
    with tempfile.TemporaryDirectory(prefix="nicplug-failover-") as directory:
        cluster = await cluster_of(Path(directory), vms)
        launcher = Launcher(Path(directory))
        try:
            return await fail_over(cluster, launcher, server.dsn(f"failover_{n}"),
                                   stop=signal.SIGKILL, kill_after=1 / 3)
        finally:
            await launcher.close()
            await cluster.stop()


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(len(ordered) * 0.99) - 1)]


def main(argv: list[str]) -> int:
    quick = quick_run(argv, name="failover", doc=__doc__, smaller="3 runs of 40 VMs")
    runs, vms = (3, 40) if quick else (20, 200)
    server = LocalPostgres().start()
    results = []
    failures = 0
    try:
        for n in range(runs):
            try:
                result = asyncio.run(one_run(server, n, vms))
            except AssertionError as failed:  # not converged in time, say: counted, shown
                print(f"run {n + 1}: FAILED: {str(failed).splitlines()[0]}", flush=True)
                failures += 1
                continue
            print(f"run {n + 1}: first write {result.first_write:.2f} s, converged "
                  f"{result.converged:.2f} s, twice {result.twice}, lost {result.lost}"
                  + (" (the standby had led already: the leader lost its Lease under load)"
                     if result.led_before else ""),
                  flush=True)
            results.append(result)
    finally:
        server.stop()
    if not results:
        print("no run finished")
        return 1
    first = [r.first_write for r in results if not r.led_before]
    converged = [r.converged for r in results]
    print(f"failover, PostgreSQL journal: {runs} runs of {vms} VMs, leader SIGKILLed, Lease 2 s")
    for name, values in (("first write by the standby", first), ("every VM converged", converged)):
        print(f"{name:<32} p50 {statistics.median(values):6.2f} s  p99 {_p99(values):6.2f} s"
              f"  max {max(values):6.2f} s")
    twice, lost = sum(r.twice for r in results), sum(r.lost for r in results)
    print(f"effects sent twice: {twice}; transitions lost: {lost}; runs where the standby"
          f" had led before the kill: {sum(r.led_before for r in results)}; runs that"
          f" failed: {failures}")
    print(json.dumps({
        "runs": runs, "vms": vms, "first_write_p50_s": round(statistics.median(first), 3),
        "first_write_p99_s": round(_p99(first), 3), "converged_p99_s": round(_p99(converged), 3),
        "sent_twice": twice, "lost": lost, "failed_runs": failures, "quick": quick,
    }))
    return 0 if twice == 0 and lost == 0 and failures == 0 else 1
