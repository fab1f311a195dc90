"""Memory of `nicplug run` at scale, alone: RSS ready and peak, and where it goes.

`python -m bench memory [--quick] [--vms N] [--networks N] [--trace FILE]`

One simulated cluster (`bench._timed_cluster`, the one `bench e2e` uses: upstream
KubeVirt API names, every delay zero) serves N running VMs (default 11,000, the
1,000 + 10,000 of `bench e2e`; `--quick` 2,000) and N/11 unused Networks; `nicplug
run` starts against it as `bench e2e` starts it, and once `/readyz` answers and it is
quiet its RSS (VmRSS) and peak (VmHWM) are read from /proc, the figures `bench e2e`
reports as RSS ready and peak (its `rss_mb_10k`). No VM is patched: this is the cheap
measure to iterate with, not the comparison with the peer. Also printed: the RSS of a
fresh interpreter that has only imported what `nicplug run` imports (the libraries'
share, the same with no VM at all).

`--trace FILE` runs nicplug under `tracemalloc` (`bench._traced`) and, once ready,
writes its live allocations by file and by line to FILE (JSON) and prints the top
ones. Tracing inflates the RSS (its own bookkeeping): the RSS of a traced run is
printed but is not the figure to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.e2e import _spawn, _status_mb, _stop, nicplug, settle, start_cluster

IMPORTS = ("import nicplug.adapters.cli, nicplug.adapters.cli.run, "
           "nicplug.adapters.core.controller, nicplug.adapters.kube.client")
TOP = 12


def imports_mb() -> float:
    """RSS of an interpreter that imported what `nicplug run` imports, and nothing more."""
    code = (f"{IMPORTS}\nfor l in open('/proc/self/status'):\n"
            "    if l.startswith('VmRSS:'): print(int(l.split()[1]) / 1024)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    return round(float(done.stdout), 1)


def measure(vms: int, networks: int, directory: Path, trace: Path | None) -> dict[str, object]:
    cluster = start_cluster(vms, directory, networks=networks)
    try:
        controller = nicplug(cluster, directory)
        argv = controller.argv
        if trace is not None:
            argv = ["-m", "bench._traced", str(trace), *argv[2:]]
        started = time.monotonic()
        with (directory / "nicplug.log").open("wb") as out:
            process = _spawn(argv, out, cwd=controller.cwd, env=controller.env)
        try:
            until = started + 600 + vms / 10
            while not controller.ready():
                if process.poll() is not None or time.monotonic() > until:
                    log = (directory / "nicplug.log").read_text()[-2000:]
                    raise RuntimeError(f"nicplug did not become ready:\n{log}")
                time.sleep(0.2)
            ready_s = time.monotonic() - started
            settle(process.pid)
            figures: dict[str, object] = {
                "vms": vms, "networks": networks, "ready_s": round(ready_s, 1),
                "rss_ready_mb": round(_status_mb(process.pid, "VmRSS"), 1),
                "rss_peak_mb": round(_status_mb(process.pid, "VmHWM"), 1),
            }
            if trace is not None:
                trace.unlink(missing_ok=True)
                process.send_signal(signal.SIGUSR1)
                for _ in range(1200):  # a snapshot of millions of blocks takes minutes
                    if trace.exists():
                        break
                    time.sleep(0.5)
                figures["traced"] = json.loads(trace.read_text())
        finally:
            _stop(process)
    finally:
        _stop(cluster.process)
    return figures


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench memory", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2,000 VMs instead of 11,000")
    parser.add_argument("--vms", type=int, help="running VMs (default 11,000)")
    parser.add_argument("--networks", type=int, help="unused Networks (default VMs / 11)")
    parser.add_argument("--trace", type=Path, metavar="FILE",
                        help="run under tracemalloc and write where the memory goes to FILE")
    args = parser.parse_args(argv)
    vms = args.vms if args.vms is not None else (2_000 if args.quick else 11_000)
    networks = args.networks if args.networks is not None else vms // 11
    trace = args.trace.resolve() if args.trace is not None else None
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="nicplug-bench-memory-") as tmp:
        figures = measure(vms, networks, Path(tmp), trace)
    figures["imports_mb"] = imports_mb()
    traced = figures.pop("traced", None)
    print(f"nicplug run, {vms} VMs and {networks} unused Networks (load {load:.1f}):")
    print(f"  ready after {figures['ready_s']} s; RSS ready {figures['rss_ready_mb']} MB, "
          f"peak {figures['rss_peak_mb']} MB; imports alone {figures['imports_mb']} MB"
          + (" (traced: RSS inflated by tracemalloc)" if traced else ""))
    if isinstance(traced, dict):
        print(f"  live Python allocations: {traced['traced_mb']} MB; by file (MB, blocks):")
        for where, mb, count in traced["by_file"][:TOP]:
            print(f"    {mb:8.2f} {count:9d}  {where}")
        print("  by line:")
        for where, mb, count in traced["by_line"][:TOP]:
            print(f"    {mb:8.2f} {count:9d}  {where}")
        figures["traced_mb"] = traced["traced_mb"]
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
