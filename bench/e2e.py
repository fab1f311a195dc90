"""End to end: nicplug and the kopf peer, one after the other, on one simulated cluster.

`python -m bench e2e [--quick] [--size 1k|10k] [--no-peer] [--peer DIR] [--profile FILE]
[--stalls FILE] [--sample FILE] [--observe] [--operation-objects]` (`--help` says each).
For each size (plugging + idle VMs: 100 + 1,000 and 1,000 + 10,000; `--quick`: 20 + 200 with 100
unused Networks), one simulated cluster process (`bench._timed_cluster`: every
simulated delay zero, upstream KubeVirt API names, which the peer speaks) serves
plugging + idle running VMs. Then, each in its own process and measured from outside the same way:

1. `nicplug run` starts, lists everything and settles; the first `plugging` VMs each
   ask for two networks (`Network/user-net` and `ClusterNetwork/storage` in one merge
   patch of `spec.networks`, 16 patches in flight); it runs until the cluster shows
   every asked interface attached and the controller is quiet. Then, to see the latency
   nicplug adds when it is not queueing, more VMs ask at a steady pace, half the
   throughput just measured. It stops. In the large size the cluster also holds 1,000
   Networks nobody asks for; right after nicplug is ready each gets a status change
   (16 in flight), and the ticks of its loop-lag ticker late by over 50 ms are counted.
2. The kopf peer (`../shared/peers/kopf_peer/operator.py` as it is, `kopf run
   --standalone --all-namespaces`, `KOPF_PEER_CACHE=events`: its default index gate is
   quadratic, over an hour at 11,000 VMs by its own README) starts, lists everything
   and settles; the next `plugging` VMs ask for the same two networks. It stops.

Both see the same cluster: the same number of VMs, the ones the other one plugged
already done. Figures per side (`bench._e2e_measure`): hotplugs/s to attached as the
cluster saw it; controller CPU (user + system from /proc) from the first patch until
it is quiet again, per hotplug; p50/p99 from the spec patch's commit to the VMI write
showing the interface attached; RSS when ready (VmRSS) and peak (VmHWM); API requests
per hotplug, counted by the server per User-Agent. For nicplug also the largest event
loop stall (its own 10 ms ticker, `nicplug_event_loop_lag_max_seconds`, initial sync
included) and, at the steady pace, the p99 latency it adds per step (journaled decision
time − commit of the cluster write that enabled it, watch delivery included).

The machine is shared: wall-clock figures carry its load; CPU and memory much less.
`--profile FILE` runs `nicplug run` under cProfile counting CPU time
(`bench._profiled`; its figures then carry the profiler's cost) and writes the
profile of its whole life to FILE (`.<size>` appended when there are two sizes):
`python -m pstats FILE` reads it. `--stalls FILE` runs it under a sampler that names
what stalls its event loop (`bench._stalls`: one JSON line per stall over 30 ms, with
its most sampled stacks). `--no-peer` runs nicplug alone (no ratios): a cheaper way to
follow nicplug's own figures, with `--size` to run one size only. `--sample FILE` has
py-spy sample nicplug over the window its CPU is counted in (`python -m bench._stages
FILE` splits it into the per-hotplug budget's stages). By default the cluster's
Deckhouse does not hot-plug (`native_hotplug` off) and nicplug runs `--mode drive`,
writing what the peer writes; `--observe` turns the platform's hotplug on and runs
`--mode observe` (no peer): nicplug's CPU per hotplug it only tracks. nicplug runs
with `--operation-objects off` (the issue's figures count the controller without its
optional `NetworkInterfaceOperation` objects, which the peer has no counterpart of);
`--operation-objects` turns them on, to report what they cost.

The steady pace follows the burst's throughput, which swings with the machine's load
(100-400 hotplugs/s at 10,000 VMs on one quiet machine), and the latency added per step
swings with it. `--steady-rate R` fixes the pace at R hotplugs/s, so that two runs (two
commits, say) are compared at the same pace; `--steady-only` (with `--steady-rate`,
implies `--no-peer`) leaves out the burst and the Network burst: nicplug lists and
settles, then only the steady VMs ask, and the figures (CPU, hotplugs/s, requests) are
those of the steady phase. `bench e2e --size 10k --steady-only --steady-rate 100` is
the shortest run of the step latency at 10,000 VMs (about a minute).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import aiohttp
import orjson
import psutil

from bench._e2e_measure import (
    Hotplugs,
    hotplugs,
    journal_events,
    percentile,
    requests_between,
    requests_of,
    step_latencies,
    writes_of,
)

ROOT = Path(__file__).resolve().parent.parent
PEER = ROOT.parent / "shared" / "peers" / "kopf_peer"
NETWORKS = [
    {"type": "Main", "id": 1},
    {"type": "Network", "name": "user-net", "id": 2},
    {"type": "ClusterNetwork", "name": "storage", "id": 3},
]
PER_VM = 2  # hotplugs each patch asks for
VM_PATH = "/apis/virtualization.deckhouse.io/v1alpha2/namespaces/default/virtualmachines/"
PATCHING = 16  # VM patches in flight at once
AGENT = "nicplug-bench"  # the benchmark's own requests, counted for neither side
TARGETS = {"cpu_ratio_vs_kopf": "≤ 0.5", "throughput_ratio_vs_kopf": "≥ 2",
           "requests_ratio_vs_kopf": "≤ 1.5", "rss_mb_10k": "≤ 150 (and ≤ 0.4× the peer)",
           "loop_lag_ms_max": "≤ 50", "step_added_ms_p99": "≤ 50"}


# -- processes -----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _spawn(argv: Sequence[str], out: IO[bytes] | int, *, cwd: Path = ROOT,
           env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.Popen(
        [sys.executable, *argv], cwd=cwd, env=environment, stdin=subprocess.DEVNULL,
        stdout=out, stderr=subprocess.STDOUT if out != subprocess.PIPE else None,
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bytes(response.read()) if response.status == 200 else None
    except (urllib.error.URLError, OSError):
        return None


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def _status_mb(pid: int, field_name: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def settle(pid: int, *, window: float = 1.0, quiet: float = 0.03, limit: float = 120.0) -> None:
    """Wait until the process used less than `quiet` CPU seconds in a `window`."""
    until = time.monotonic() + limit
    before = cpu_seconds(pid)
    while time.monotonic() < until:
        time.sleep(window)
        now = cpu_seconds(pid)
        if now - before < quiet:
            return
        before = now


@dataclass
class Cluster:
    process: subprocess.Popen[bytes]
    url: str
    kubeconfig: Path
    writes: Path
    requests: Path


def start_cluster(vms: int, directory: Path, *, networks: int = 0,
                  native_hotplug: bool = False) -> Cluster:
    kubeconfig, writes, requests = (directory / n for n in
                                    ("kubeconfig", "writes.jsonl", "requests.jsonl"))
    process = _spawn(["-m", "bench._timed_cluster", "--vms", str(vms), "--kubeconfig",
                      str(kubeconfig), "--writes", str(writes), "--requests", str(requests),
                      "--networks", str(networks),
                      *(["--native-hotplug"] if native_hotplug else [])],
                     subprocess.PIPE)
    assert process.stdout is not None
    line = process.stdout.readline().decode()
    if not line.startswith("serving "):
        process.kill()
        raise RuntimeError(f"the simulated cluster did not start: {line!r}")
    return Cluster(process, line.split()[1], kubeconfig, writes, requests)


@dataclass
class Controller:
    """How to start one controller and tell when it has listed every VM."""

    name: str
    argv: list[str]
    cwd: Path
    env: dict[str, str]
    ready: Callable[[], bool]
    client: Callable[[str], bool]  # whether a User-Agent is one of its clients


def nicplug(cluster: Cluster, directory: Path, profile: Path | None = None,
            stalls: Path | None = None, mode: str = "drive",
            operation_objects: bool = False) -> Controller:
    port = _free_port()
    metrics = f"http://127.0.0.1:{port}"
    cli = (["-m", "bench._profiled", str(profile)] if profile
           else ["-m", "bench._stalls", str(stalls)] if stalls
           else ["-m", "nicplug.adapters.cli"])
    return Controller(
        "nicplug",
        [*cli, "run", "--kubeconfig", str(cluster.kubeconfig),
         "--journal", str(directory / "journal.db"), "--metrics-addr", f"127.0.0.1:{port}",
         "--query-addr", "",
         "--identity", "bench", "--kubevirt-api", "upstream", "--mode", mode,
         "--operation-objects", "on" if operation_objects else "off"],
        ROOT, {}, lambda: _get(metrics + "/readyz") is not None,
        lambda agent: agent.startswith("nicplug/"),
    )


def kopf_peer(cluster: Cluster, peer: Path, vms: int) -> Controller:
    port = _free_port()

    def ready() -> bool:
        body = _get(f"http://127.0.0.1:{port}/healthz")
        return body is not None and int(orjson.loads(body).get("vms_indexed") or 0) >= vms

    return Controller(
        "kopf peer",
        ["-m", "kopf", "run", "--standalone", "--all-namespaces", "--quiet",
         f"--liveness=http://127.0.0.1:{port}/healthz", "operator.py"],
        peer, {"KUBECONFIG": str(cluster.kubeconfig), "KOPF_PEER_CACHE": "events"},
        ready, lambda agent: agent.startswith("kopf"),
    )


# -- one controller's phase ----------------------------------------------------------------


async def _patch(url: str, names: Sequence[str], *, pace: float = 0.0) -> None:
    """Ask each VM for the two networks: `PATCHING` at a time, or one every `pace` s."""
    body = orjson.dumps({"spec": {"networks": NETWORKS}})
    headers = {"Content-Type": "application/merge-patch+json", "User-Agent": AGENT}
    gate = asyncio.Semaphore(PATCHING)

    async def one(session: aiohttp.ClientSession, name: str, delay: float) -> None:
        await asyncio.sleep(delay)
        async with gate, session.patch(url + VM_PATH + name, data=body,
                                       headers=headers) as response:
            if response.status != 200:
                raise RuntimeError(f"patching {name}: HTTP {response.status}")
            await response.read()

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(one(session, n, i * pace) for i, n in enumerate(names)))


async def _network_burst(url: str, count: int) -> None:
    """A status change of each unused Network (a new condition message), 16 at a time."""
    headers = {"Content-Type": "application/merge-patch+json", "User-Agent": AGENT}
    gate = asyncio.Semaphore(PATCHING)
    path = "/apis/network.deckhouse.io/v1alpha1/namespaces/default/networks/"

    async def one(session: aiohttp.ClientSession, name: str) -> None:
        body = orjson.dumps({"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "Ready", "message": "resynced"}]}})
        async with gate, session.patch(f"{url}{path}{name}/status", data=body,
                                       headers=headers) as response:
            if response.status != 200:
                raise RuntimeError(f"patching Network {name}: HTTP {response.status}")
            await response.read()

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(one(session, f"unused-{i:04d}") for i in range(count)))


def _wait_attached(cluster: Cluster, vms: set[str], since: float, deadline: float) -> None:
    until = time.monotonic() + deadline
    while time.monotonic() < until:
        time.sleep(0.5)
        if hotplugs(writes_of(cluster.writes), vms, since, PER_VM).done >= PER_VM * len(vms):
            return
    raise RuntimeError(f"not every interface attached within {deadline:.0f}s")


@dataclass
class Side:
    """One controller's figures."""

    name: str
    plugs: Hotplugs
    cpu_s: float
    rss_ready_mb: float
    rss_peak_mb: float
    ready_s: float
    requests: dict[str, int]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def cpu_ms_per_hotplug(self) -> float:
        return self.cpu_s * 1000 / max(self.plugs.done, 1)

    @property
    def requests_per_hotplug(self) -> float:
        return sum(self.requests.values()) / max(self.plugs.done, 1)


def _sampler(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling `pid` (every thread, 500 Hz, without pausing it) into `out`, as
    collapsed stacks (`bench._stages` groups them); it writes `out` on SIGINT."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return subprocess.Popen(
        [spy, "record", "--pid", str(pid), "--rate", "500", "--nonblocking", "--threads",
         "--format", "raw", "--output", str(out)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_side(cluster: Cluster, controller: Controller, names: list[str], log: Path, *,
             deadline: float, steady: list[str] | None = None, networks: int = 0,
             metrics: Callable[[], dict[str, float]] | None = None,
             steady_rate: float | None = None, paced: bool = False,
             sample: Path | None = None) -> Side:
    """One controller's phase: `names` ask all at once (`PATCHING` in flight), then the
    `steady` ones at `steady_rate` hotplugs/s (None: half the burst's throughput). With
    `paced`, `names` are the steady ones: they ask at `steady_rate` from the start.
    With `sample`, py-spy samples the controller over the window its CPU is counted."""
    started = time.monotonic()
    with log.open("wb") as out:
        process = _spawn(controller.argv, out, cwd=controller.cwd, env=controller.env)
    try:
        until = started + deadline
        while not controller.ready():
            if process.poll() is not None:
                raise RuntimeError(f"{controller.name} exited ({process.returncode}); see {log}")
            if time.monotonic() > until:
                raise RuntimeError(f"{controller.name} was not ready in {deadline:.0f}s")
            time.sleep(0.2)
        ready_s = time.monotonic() - started
        settle(process.pid)
        rss_ready = _status_mb(process.pid, "VmRSS")
        extra: dict[str, Any] = dict(metrics()) if metrics else {}
        if networks and metrics:
            asyncio.run(_network_burst(cluster.url, networks))
            settle(process.pid)
            after = metrics()
            extra["burst_ticks"] = after["lag_ticks"] - extra["lag_ticks"]
            extra["burst_stalls_over_50ms"] = (after["lag_ticks_over_50ms"]
                                               - extra["lag_ticks_over_50ms"])
        vms = {f"default/{n}" for n in names}
        pace = PER_VM / steady_rate if paced and steady_rate else 0.0
        sampler = _sampler(process.pid, sample) if sample else None
        cpu0, since = cpu_seconds(process.pid), time.time()
        asyncio.run(_patch(cluster.url, names, pace=pace))
        if pace:
            extra.update({"steady_since": since, "steady_vms": vms,
                          "steady_rate": steady_rate})
        _wait_attached(cluster, vms, since, deadline)
        settle(process.pid)
        cpu, end = cpu_seconds(process.pid) - cpu0, time.time()
        if sampler is not None:
            sampler.send_signal(signal.SIGINT)
            sampler.wait(60)
        rss_peak = _status_mb(process.pid, "VmHWM")
        plugs = hotplugs(writes_of(cluster.writes), vms, since, PER_VM)
        if steady:
            # requests are logged with the time of the cluster's next round (every
            # 0.25 s) and counted up to `end` + 0.5 s: the steady ones start after that
            time.sleep(2 * 0.25)
            # VMs per second: half the throughput, unless told
            rate = (steady_rate / PER_VM if steady_rate
                    else plugs.per_second / PER_VM / 2)
            steady_since = time.time()
            asyncio.run(_patch(cluster.url, steady, pace=1 / rate))
            steady_vms = {f"default/{n}" for n in steady}
            _wait_attached(cluster, steady_vms, steady_since, deadline)
            extra.update({"steady_since": steady_since, "steady_vms": steady_vms,
                          "steady_rate": rate * PER_VM})
        if metrics:
            extra.update({f"after_{k}": v for k, v in metrics().items()})
    finally:
        _stop(process)
    time.sleep(2 * 0.25)  # the cluster's last round of records
    answered = requests_of(cluster.requests)
    counted = requests_between(answered, since, end + 0.5, controller.client)
    extra["by_resource"] = dict(requests_between(
        [(t, agent, f"{verb} {resource}", "") for t, agent, verb, resource in answered],
        since, end + 0.5, controller.client))
    return Side(controller.name, plugs, cpu, rss_ready, rss_peak, ready_s, dict(counted),
                extra)


NOT_RUN = Side("kopf peer (not run)", Hotplugs(asked=0), float("nan"), float("nan"),
               float("nan"), float("nan"), {}, {"by_resource": {}})


def _scrape(metrics: str) -> dict[str, float]:
    """nicplug's largest loop stall so far, and how many ticks were late over 50 ms."""
    body = _get(metrics + "/metrics") or b""

    def sample(pattern: bytes) -> float:
        found = re.search(pattern, body, re.M)
        return float(found.group(1)) if found else float("nan")

    ticks = sample(rb"^nicplug_event_loop_lag_seconds_count (\S+)$")
    on_time = sample(rb'^nicplug_event_loop_lag_seconds_bucket\{le="0\.05"\} (\S+)$')
    return {"loop_lag_max_s": sample(rb"^nicplug_event_loop_lag_max_seconds (\S+)$"),
            "lag_ticks": ticks, "lag_ticks_over_50ms": ticks - on_time}


@dataclass
class SizeRun:
    plugging: int
    idle: int
    nicplug: Side
    peer: Side  # `NOT_RUN` when run without the peer
    step_added: list[float]
    unattributed: int
    networks: int = 0  # unused Networks whose status changed in a burst
    steady_only: bool = False  # no burst: the figures are the steady phase's


def run_size(plugging: int, idle: int, directory: Path, peer: Path | None, *,
             networks: int = 0, profile: Path | None = None,
             stalls: Path | None = None, steady_rate: float | None = None,
             steady_only: bool = False, observe: bool = False,
             sample: Path | None = None, operation_objects: bool = False) -> SizeRun:
    steady_n = max(plugging // 2, 10)
    total = plugging + idle
    if idle < plugging + steady_n:
        raise ValueError("the idle VMs must outnumber the plugging and the steady ones")
    names = [f"vm-{i:05d}" for i in range(total)]
    ours, theirs = names[:plugging], names[plugging:2 * plugging]
    steady = names[2 * plugging:2 * plugging + steady_n]
    deadline = 600.0 + total / 10
    cluster = start_cluster(total, directory, networks=networks, native_hotplug=observe)
    try:
        ctl = nicplug(cluster, directory, profile, stalls,
                      mode="observe" if observe else "drive",
                      operation_objects=operation_objects)
        port = ctl.argv[ctl.argv.index("--metrics-addr") + 1]
        side = run_side(cluster, ctl, steady if steady_only else ours,
                        directory / "nicplug.log", deadline=deadline,
                        steady=None if steady_only else steady,
                        networks=0 if steady_only else networks,
                        metrics=lambda: _scrape(f"http://{port}"),
                        steady_rate=steady_rate, paced=steady_only, sample=sample)
        other = NOT_RUN if peer is None or steady_only else run_side(
            cluster, kopf_peer(cluster, peer, total), theirs, directory / "peer.log",
            deadline=deadline)
    finally:
        _stop(cluster.process)
    steady_vms: set[str] = side.extra.pop("steady_vms")
    added, unattributed = step_latencies(journal_events(directory / "journal.db"),
                                         writes_of(cluster.writes), steady_vms,
                                         side.extra.pop("steady_since"))
    return SizeRun(plugging, idle, side, other, added, unattributed, networks, steady_only)


# -- report --------------------------------------------------------------------------------


def _ratio(a: float, b: float) -> float:
    return round(a / b, 2) if b and b == b else float("nan")


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def report(run: SizeRun) -> list[tuple[str, object, object, object]]:
    a, b = run.nicplug, run.peer
    rows: list[tuple[str, object, object, object]] = []

    def row(name: str, x: float, y: float, digits: int = 1) -> None:
        rows.append((name, round(x, digits), round(y, digits), _ratio(x, y)))

    rows.append(("hotplugs attached / asked", f"{a.plugs.done}/{a.plugs.asked}",
                 f"{b.plugs.done}/{b.plugs.asked}", ""))
    row("hotplugs/s (cluster's view)", a.plugs.per_second, b.plugs.per_second)
    row("CPU ms per hotplug", a.cpu_ms_per_hotplug, b.cpu_ms_per_hotplug, 2)
    row("spec → attached p50 (ms)", percentile(a.plugs.latencies, 0.5) * 1000,
        percentile(b.plugs.latencies, 0.5) * 1000)
    row("spec → attached p99 (ms)", percentile(a.plugs.latencies, 0.99) * 1000,
        percentile(b.plugs.latencies, 0.99) * 1000)
    row("RSS ready (MB)", a.rss_ready_mb, b.rss_ready_mb)
    row("RSS peak (MB)", a.rss_peak_mb, b.rss_peak_mb)
    row("ready after (s)", a.ready_s, b.ready_s)
    row("API requests per hotplug", a.requests_per_hotplug, b.requests_per_hotplug, 2)
    rows.append(("  by verb", json.dumps(a.requests, sort_keys=True),
                 json.dumps(b.requests, sort_keys=True), ""))
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench e2e",
        description="nicplug and the kopf peer on one simulated cluster: hotplugs/s, CPU "
                    "and requests per hotplug, latency, RSS, event loop stalls.")
    parser.add_argument("--quick", action="store_true",
                        help="one small size: 20 plugging + 200 idle VMs, 100 unused Networks")
    parser.add_argument("--size", choices=("1k", "10k"), default=None,
                        help="run only 100 + 1,000 (1k) or 1,000 + 10,000 (10k) VMs")
    parser.add_argument("--peer", type=Path, default=PEER, metavar="DIR",
                        help="the kopf peer's folder (operator.py)")
    parser.add_argument("--no-peer", action="store_true",
                        help="run nicplug alone: its own figures, no ratios")
    parser.add_argument("--steady-rate", type=float, default=None, metavar="R",
                        help="the steady phase's pace in hotplugs/s (default: half the "
                             "burst's throughput, which swings with the machine's load)")
    parser.add_argument("--steady-only", action="store_true",
                        help="no burst, no Network burst, no peer: only the steady VMs "
                             "ask, at --steady-rate (the step latency alone, quickly)")
    parser.add_argument("--observe", action="store_true",
                        help="the platform hot-plugs (the simulated Deckhouse's "
                             "native_hotplug) and nicplug runs --mode observe: its CPU per "
                             "observed hotplug; no peer (compare with a drive run's)")
    parser.add_argument("--operation-objects", action="store_true",
                        help="nicplug writes its NetworkInterfaceOperation objects (`run "
                             "--operation-objects on`, its default); without it they are "
                             "off, as the issue's figures count them")
    parser.add_argument("--sample", type=Path, default=None, metavar="FILE",
                        help="py-spy samples nicplug over the burst's window into FILE "
                             "(collapsed stacks; `python -m bench._stages FILE` splits them)")
    tools = parser.add_mutually_exclusive_group()
    tools.add_argument("--profile", type=Path, default=None, metavar="FILE",
                       help="run nicplug under cProfile (CPU time) and write its profile here")
    tools.add_argument("--stalls", type=Path, default=None, metavar="FILE",
                       help="name what stalls nicplug's event loop: one JSON line per stall")
    args = parser.parse_args(argv)
    if args.steady_rate is not None and args.steady_rate <= 0:
        parser.error("--steady-rate must be positive")
    if args.steady_only and args.steady_rate is None:
        parser.error("--steady-only needs --steady-rate")
    peer: Path | None = (None if args.no_peer or args.steady_only or args.observe
                         else args.peer)
    if peer is not None and not (peer / "operator.py").is_file():
        print(f"bench e2e: no kopf peer at {peer} (give --peer DIR)", file=sys.stderr)
        return 2
    every = {"1k": (100, 1_000, 0), "10k": (1_000, 10_000, 1_000)}
    sizes = ([(20, 200, 100)] if args.quick else [every[args.size]] if args.size
             else list(every.values()))

    def output(path: Path | None, plugging: int, idle: int) -> Path | None:
        if path is None:
            return None
        path = path.resolve()
        return path if len(sizes) == 1 else path.with_name(f"{path.name}.{plugging}-{idle}")

    load_before = os.getloadavg()[0]
    runs: list[SizeRun] = []
    with tempfile.TemporaryDirectory(prefix="nicplug-bench-e2e-") as tmp:
        for plugging, idle, networks in sizes:
            directory = Path(tmp) / f"{plugging}-{idle}"
            directory.mkdir()
            runs.append(run_size(plugging, idle, directory, peer, networks=networks,
                                 profile=output(args.profile, plugging, idle),
                                 stalls=output(args.stalls, plugging, idle),
                                 steady_rate=args.steady_rate,
                                 steady_only=args.steady_only, observe=args.observe,
                                 sample=output(args.sample, plugging, idle),
                                 operation_objects=args.operation_objects))
    load_after = os.getloadavg()[0]
    for run in runs:
        print(f"\n{run.plugging} plugging + {run.idle} idle VMs "
              f"(each asks for {PER_VM} networks)"
              + ("; steady phase only: the figures are its own" if run.steady_only else "")
              + ("; observe mode: the platform hot-plugs" if args.observe else "")
              + ("; nicplug writes its operation objects" if args.operation_objects else ""))
        rows = [("", "nicplug", "kopf peer", "ratio"), *report(run)]
        width = max(len(r[0]) for r in rows)
        for name, x, y, r in rows:
            print(f"  {name:<{width}}  {x!s:>14}  {y!s:>14}  {r!s:>6}")
        lag = run.nicplug.extra
        for side in (run.nicplug, run.peer):
            print(f"  {side.name} requests by verb and resource: "
                  f"{json.dumps(side.extra['by_resource'], sort_keys=True)}")
        print(f"  nicplug event loop's largest stall: ready {_ms(lag['loop_lag_max_s'])} ms, "
              f"whole run {_ms(lag['after_loop_lag_max_s'])} ms")
        if "burst_ticks" in lag:
            print(f"  nicplug during a status change of {run.networks} unused Networks: "
                  f"{lag['burst_stalls_over_50ms']:.0f} of {lag['burst_ticks']:.0f} ticks "
                  f"late by over 50 ms")
        print(f"  nicplug at a steady {lag['steady_rate']:.1f} hotplugs/s: added per step "
              f"p50 {_ms(percentile(run.step_added, 0.5))} / p99 "
              f"{_ms(percentile(run.step_added, 0.99))} ms ({len(run.step_added)} steps, "
              f"{run.unattributed} unattributed)")
    print(f"\nmachine load (1-min) before / after: {load_before:.1f} / {load_after:.1f} on "
          f"{os.cpu_count()} CPUs; wall-clock figures carry it")
    big = runs[-1]
    figures = {
        "sizes": [f"{r.plugging}+{r.idle}" for r in runs],
        "cpu_ratio_vs_kopf": _ratio(big.nicplug.cpu_ms_per_hotplug, big.peer.cpu_ms_per_hotplug),
        "throughput_ratio_vs_kopf": _ratio(big.nicplug.plugs.per_second,
                                           big.peer.plugs.per_second),
        "requests_ratio_vs_kopf": _ratio(big.nicplug.requests_per_hotplug,
                                         big.peer.requests_per_hotplug),
        "rss_mb_10k": round(big.nicplug.rss_ready_mb, 1),
        "loop_lag_ms_max": max(_ms(r.nicplug.extra["after_loop_lag_max_s"]) for r in runs),
        "step_added_ms_p99": max(_ms(percentile(r.step_added, 0.99)) for r in runs),
    }
    print("targets: " + ", ".join(f"{k} {v}" for k, v in TARGETS.items()))
    print(json.dumps(figures))
    complete = all(r.nicplug.plugs.done == r.nicplug.plugs.asked
                   and r.peer.plugs.done == r.peer.plugs.asked for r in runs)
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
