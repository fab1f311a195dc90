"""End to end: the controller process against the simulated cluster process.

`python -m bench e2e [--quick]`. Two runs, each with a fresh simulated cluster (every
simulated delay zero; `bench._timed_cluster`) and a fresh `nicplug run` on loopback,
each its own process, so the controller's CPU and memory are measured alone (psutil on
its pid):

* **plug** — N running VMs (1,000; `--quick`: 300) each ask for two networks at once
  (`Network/user-net` and `ClusterNetwork/storage` added in one merge patch of the VM's
  `spec.networks`; the patches are sent 16 at a time). It ends when the journal shows
  all 2N operations `Attached`.
* **idle** — 10,000 VMs (`--quick`: 3,000) listed and tracked, nothing to do.

Figures:

* `ops_per_s` — operations `Attached` / (last `Attached` decision − first VM patch
  committed in the cluster).
* `cpu_ms_per_op` — controller CPU (user + system) from the first patch until the
  controller is quiet again (its outstanding Events and outcomes included) / operations.
* `step_latency_ms_p50/p99` — the latency the controller adds per step. A step is one
  `Opened` or `Transitioned` event of an operation. Its end is the event's journaled
  `wall_time`, stamped when the decision is taken, right before it is appended (the
  append itself, queueing plus group commit, is the controller's own histogram
  `nicplug_transition_latency_seconds`, reported beside it). Its start is the commit, in
  the cluster, of the write that enabled it. Which write that was is bracketed with the
  cluster's record of every write of the VM's objects (resourceVersion and commit time)
  and the resourceVersion each decision names as its cause: the enabling write is newer
  than every write the VM's earlier decisions acted on, and no newer than the decision's
  cause. The figure takes the *earliest* such write, so it never understates the
  latency (`…_low` takes the latest: it never overstates). Nothing here asserts a time.
* `rss_mb_1k` / `rss_mb_10k_idle` — the controller's peak RSS (`VmHWM`) in each run.

The table adds operations per controller CPU second (the throughput the controller
could reach with a core to itself) and the machine's load average: on a shared
machine the wall-clock figures (`ops_per_s`, the latencies) measure the contention as
much as the controller, CPU and memory much less so.

Targets: ≥ 200 operations/s on 2 cores, p99 step latency ≤ 250 ms, RSS ≤ 150 MB
with 10k VMs tracked.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import aiohttp
import orjson
import psutil

ROOT = Path(__file__).resolve().parent.parent
NETWORKS = [
    {"type": "Main", "id": 1},
    {"type": "Network", "name": "user-net", "id": 2},
    {"type": "ClusterNetwork", "name": "storage", "id": 3},
]
VM_PATH = "/apis/virtualization.deckhouse.io/v1alpha2/namespaces/default/virtualmachines/"
PATCHING = 16  # VM patches in flight at once
STEPS = ("Opened", "Transitioned")
TERMINAL = ("Attached", "Failed", "Cancelled", "Detached")
TARGETS = {"ops_per_s": 200.0, "step_latency_ms_p99": 250.0, "rss_mb_10k_idle": 150.0}


# -- processes -----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _spawn(argv: Sequence[str], out: IO[bytes] | int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, *argv], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
        stdout=out, stderr=subprocess.STDOUT if out != subprocess.PIPE else None,
    )


@dataclass
class World:
    """One simulated cluster and one controller, both running."""

    directory: Path
    cluster: subprocess.Popen[bytes]
    controller: subprocess.Popen[bytes]
    url: str
    metrics: str
    journal: Path
    writes: Path

    @property
    def pid(self) -> int:
        return self.controller.pid


def start_world(vms: int, directory: Path, *, deadline: float = 300.0) -> World:
    kubeconfig, writes = directory / "kubeconfig", directory / "writes.jsonl"
    cluster = _spawn(["-m", "bench._timed_cluster", "--vms", str(vms), "--kubeconfig",
                      str(kubeconfig), "--writes", str(writes)], subprocess.PIPE)
    assert cluster.stdout is not None
    line = cluster.stdout.readline().decode()
    if not line.startswith("serving "):
        cluster.kill()
        raise RuntimeError(f"the simulated cluster did not start: {line!r}")
    url = line.split()[1]
    port, journal = _free_port(), directory / "journal.db"
    with (directory / "controller.log").open("wb") as log:
        controller = _spawn(
            ["-m", "nicplug.adapters.cli", "run", "--kubeconfig", str(kubeconfig), "--journal",
             str(journal), "--metrics-addr", f"127.0.0.1:{port}", "--identity", "bench"], log,
        )
    world = World(directory, cluster, controller, url, f"http://127.0.0.1:{port}", journal,
                  writes)
    until = time.monotonic() + deadline
    while not _ready(world.metrics):
        if controller.poll() is not None:
            stop_world(world)
            raise RuntimeError(f"the controller exited ({controller.returncode}); "
                               f"see {directory / 'controller.log'}")
        if time.monotonic() > until:
            stop_world(world)
            raise RuntimeError("the controller was not ready in time")
        time.sleep(0.1)
    return world


def _ready(metrics: str) -> bool:
    try:
        with urllib.request.urlopen(metrics + "/readyz", timeout=1) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def stop_world(world: World) -> None:
    """Controller first, then the cluster (which writes its record of writes)."""
    for process in (world.controller, world.cluster):
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def peak_rss_mb(pid: int) -> float:
    """VmHWM (the kernel's high-water mark of RSS), or the current RSS elsewhere."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float(psutil.Process(pid).memory_info().rss) / (1 << 20)


def settle(pid: int, *, window: float = 1.0, quiet: float = 0.03, limit: float = 60.0) -> None:
    """Wait until the process used less than `quiet` CPU seconds in a `window`."""
    until = time.monotonic() + limit
    before = cpu_seconds(pid)
    while time.monotonic() < until:
        time.sleep(window)
        now = cpu_seconds(pid)
        if now - before < quiet:
            return
        before = now


# -- the plug run --------------------------------------------------------------------------


async def _patch_all(url: str, names: Sequence[str]) -> None:
    body = orjson.dumps({"spec": {"networks": NETWORKS}})
    headers = {"Content-Type": "application/merge-patch+json"}
    gate = asyncio.Semaphore(PATCHING)

    async def one(session: aiohttp.ClientSession, name: str) -> None:
        async with gate, session.patch(url + VM_PATH + name, data=body,
                                       headers=headers) as response:
            if response.status != 200:
                raise RuntimeError(f"patching {name}: HTTP {response.status}")
            await response.read()

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(one(session, n) for n in names))


def _states(journal: Path) -> dict[str, int]:
    conn = sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=5)
    try:
        rows = conn.execute(
            "SELECT state, count(*) FROM streams WHERE state IS NOT NULL GROUP BY state"
        ).fetchall()
    except sqlite3.OperationalError:
        return {}
    finally:
        conn.close()
    return {str(state): int(n) for state, n in rows}


@dataclass
class Event:
    key: str
    stream: str
    type: str
    to: str
    cause: str
    wall: float


def _events(journal: Path) -> list[Event]:
    conn = sqlite3.connect(f"file:{journal}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT key, stream, type, payload, cause_ref, wall_time FROM events"
            " ORDER BY position"
        ).fetchall()
    finally:
        conn.close()
    return [
        Event(k, s, t, str(orjson.loads(p).get("to") or ("Requested" if t == "Opened" else "")),
              c, w)
        for k, s, t, p, c, w in rows
    ]


def _scrape(metrics: str) -> str:
    with urllib.request.urlopen(metrics + "/metrics", timeout=5) as response:
        return str(response.read().decode())


def _metric_mean(text: str, name: str) -> tuple[float, int]:
    """The mean and the count of a Prometheus histogram."""
    found = dict(re.findall(rf"^{name}_(sum|count) (\S+)$", text, re.M))
    count = int(float(found.get("count", 0)))
    return (float(found.get("sum", 0)) / count if count else float("nan")), count


def _metric_quantiles(text: str, name: str, qs: Iterable[float]) -> list[float | None]:
    """Quantiles of a Prometheus histogram, as the upper bound of their bucket."""
    buckets = [
        (float(m.group(1)), float(m.group(2)))
        for m in re.finditer(rf'^{name}_bucket{{le="([^"]+)"}} (\S+)$', text, re.M)
    ]
    total = buckets[-1][1] if buckets else 0.0
    found: list[float | None] = []
    for q in qs:
        bound = next((le for le, n in buckets if total and n >= q * total), None)
        found.append(bound)
    return found


@dataclass
class PlugRun:
    vms: int
    ops: int
    completed: int
    states: dict[str, int]
    seconds: float
    cpu: float
    rss_mb: float
    rss_ready_mb: float
    cluster_cpu: float
    append_p50: float | None
    append_p99: float | None
    group_mean: float
    groups: int
    events: list[Event] = field(repr=False)
    writes: list[tuple[int, float, str, str]] = field(repr=False)
    patch_started: float = 0.0
    load: tuple[float, float] = (0.0, 0.0)  # the machine's 1-minute load, before / after


def plug_run(vms: int, directory: Path, *, deadline: float = 600.0) -> PlugRun:
    world = start_world(vms, directory)
    try:
        settle(world.pid)
        rss_ready = peak_rss_mb(world.pid)
        cluster = psutil.Process(world.cluster.pid)
        cpu0, cluster_cpu0 = cpu_seconds(world.pid), cpu_seconds(cluster.pid)
        names = [f"vm-{i:05d}" for i in range(vms)]
        load_before = os.getloadavg()[0]
        started = time.time()
        asyncio.run(_patch_all(world.url, names))
        ops, states = 2 * vms, {}
        until = time.monotonic() + deadline
        while time.monotonic() < until:
            time.sleep(0.25)
            states = _states(world.journal)
            if sum(states.get(s, 0) for s in TERMINAL) >= ops:
                break
        load_after = os.getloadavg()[0]
        settle(world.pid)
        cpu = cpu_seconds(world.pid) - cpu0
        cluster_cpu = cpu_seconds(cluster.pid) - cluster_cpu0
        rss = peak_rss_mb(world.pid)
        text = _scrape(world.metrics)
        p50, p99 = _metric_quantiles(text, "nicplug_transition_latency_seconds", (0.5, 0.99))
        group_mean, groups = _metric_mean(text, "nicplug_journal_commit_latency_seconds")
    finally:
        stop_world(world)
    events = _events(world.journal)
    writes = [tuple(orjson.loads(line)) for line in world.writes.read_bytes().splitlines()]
    attached = [e.wall for e in events if e.to == "Attached"]
    user = [t for _, t, kind, _ in writes if kind == "VirtualMachine" and t >= started]
    seconds = max(attached) - min(user) if attached and user else float("nan")
    return PlugRun(
        vms=vms, ops=ops, completed=len(attached), states=states, seconds=seconds, cpu=cpu,
        rss_mb=rss, rss_ready_mb=rss_ready, cluster_cpu=cluster_cpu, append_p50=p50,
        append_p99=p99, group_mean=group_mean, groups=groups, events=events, writes=writes,
        patch_started=started, load=(load_before, load_after),
    )


# -- step latency --------------------------------------------------------------------------


@dataclass
class Latencies:
    high: list[float] = field(default_factory=list)  # from the earliest candidate write
    low: list[float] = field(default_factory=list)  # from the latest candidate write
    unattributed: int = 0
    end_to_end: list[float] = field(default_factory=list)


_CAUSE_RV = re.compile(r"@(\d+)$")


def step_latencies(run: PlugRun) -> Latencies:
    """Bracket each step's enabling write (see the module's docstring)."""
    writes: dict[str, list[tuple[int, float, str]]] = defaultdict(list)
    for rv, t, kind, vm in run.writes:
        writes[vm].append((rv, t, kind))
    seen: dict[str, int] = {}
    asked: dict[str, float] = {}
    for vm, ws in writes.items():
        ws.sort()
        before = [rv for rv, t, _ in ws if t < run.patch_started]
        seen[vm] = max(before, default=0)
        asked[vm] = next((t for _, t, k in ws if k == "VirtualMachine"
                          and t >= run.patch_started), float("nan"))
    result = Latencies()
    for decision in _decisions(run.events):
        first = decision[0]
        vm, wall = first.key, first.wall
        ws = writes.get(vm, [])
        rvs = [rv for rv, _, _ in ws]
        match = _CAUSE_RV.search(first.cause)
        cause_rv = int(match.group(1)) if match else None
        lo = bisect_right(rvs, seen.get(vm, 0))
        hi = bisect_right(rvs, cause_rv) if cause_rv is not None else len(ws)
        pending = [w for w in ws[lo:hi] if w[1] <= wall]
        steps = [e for e in decision if e.type in STEPS]
        if steps:
            if pending:
                result.high.extend([wall - pending[0][1]] * len(steps))
                result.low.extend([wall - pending[-1][1]] * len(steps))
            else:
                result.unattributed += len(steps)
        for e in steps:
            if e.to == "Attached":
                result.end_to_end.append(wall - asked.get(vm, float("nan")))
        if cause_rv is not None:
            seen[vm] = max(seen.get(vm, 0), cause_rv)
        elif steps and pending:
            seen[vm] = max(seen.get(vm, 0), pending[0][0])
    return result


def _decisions(events: Sequence[Event]) -> Iterable[list[Event]]:
    """The journal's events grouped into the commits they came from (same key, cause and
    decision time, consecutive per key)."""
    by_key: dict[str, list[list[Event]]] = defaultdict(list)
    for e in events:
        groups = by_key[e.key]
        if groups and (groups[-1][0].wall, groups[-1][0].cause) == (e.wall, e.cause):
            groups[-1].append(e)
        else:
            groups.append([e])
    for groups in by_key.values():
        yield from groups


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (`q` in 0..1); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.999999) - 1))]


# -- the idle run --------------------------------------------------------------------------


@dataclass
class IdleRun:
    vms: int
    rss_mb: float
    rss_now_mb: float
    ready_s: float


def idle_run(vms: int, directory: Path) -> IdleRun:
    started = time.monotonic()
    world = start_world(vms, directory)
    try:
        ready = time.monotonic() - started
        settle(world.pid)
        rss = peak_rss_mb(world.pid)
        now = float(psutil.Process(world.pid).memory_info().rss) / (1 << 20)
    finally:
        stop_world(world)
    return IdleRun(vms=vms, rss_mb=rss, rss_now_mb=now, ready_s=ready)


# -- report --------------------------------------------------------------------------------


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    plug_vms, idle_vms = (300, 3_000) if quick else (1_000, 10_000)
    with tempfile.TemporaryDirectory(prefix="nicplug-bench-e2e-") as tmp:
        (Path(tmp) / "plug").mkdir()
        (Path(tmp) / "idle").mkdir()
        plug = plug_run(plug_vms, Path(tmp) / "plug")
        idle = idle_run(idle_vms, Path(tmp) / "idle")
    lat = step_latencies(plug)
    figures: dict[str, Any] = {
        "ops_per_s": round(plug.completed / plug.seconds, 1),
        "cpu_ms_per_op": round(plug.cpu * 1000 / max(plug.completed, 1), 2),
        "step_latency_ms_p50": _ms(percentile(lat.high, 0.5)),
        "step_latency_ms_p99": _ms(percentile(lat.high, 0.99)),
        "rss_mb_1k": round(plug.rss_mb, 1),
        "rss_mb_10k_idle": round(idle.rss_mb, 1),
    }
    rows: list[tuple[str, object, str]] = [
        ("mode", "quick (fewer VMs)" if quick else "full", ""),
        ("VMs plugging 2 networks each", plug.vms, ""),
        ("operations Attached / asked", f"{plug.completed} / {plug.ops}", ""),
        ("final states", plug.states, ""),
        ("first patch → last Attached (s)", round(plug.seconds, 2), ""),
        ("operations per second", figures["ops_per_s"], "≥ 200"),
        ("controller CPU (s)", round(plug.cpu, 2), ""),
        ("controller CPU per operation (ms)", figures["cpu_ms_per_op"], ""),
        ("operations per controller CPU second", round(plug.completed / plug.cpu, 1), ""),
        ("machine load, 1-min average, before / after",
         f"{plug.load[0]:.1f} / {plug.load[1]:.1f} ({os.cpu_count()} CPUs)", ""),
        ("simulated cluster CPU (s)", round(plug.cluster_cpu, 2), ""),
        ("steps timed / unattributed", f"{len(lat.high)} / {lat.unattributed}", ""),
        ("step latency p50 (ms)", figures["step_latency_ms_p50"], ""),
        ("step latency p99 (ms)", figures["step_latency_ms_p99"], "≤ 250"),
        ("step latency p50 / p99, latest write (ms)",
         f"{_ms(percentile(lat.low, 0.5))} / {_ms(percentile(lat.low, 0.99))}", ""),
        ("append → commit acked p50 / p99 (ms, bucket bound)",
         f"{_ms(plug.append_p50)} / {_ms(plug.append_p99)}", ""),
        ("journal group commits / mean duration (ms)",
         f"{plug.groups} / {_ms(plug.group_mean)}", ""),
        ("VM patch → Attached p50 / p99 (ms)",
         f"{_ms(percentile(lat.end_to_end, 0.5))} / {_ms(percentile(lat.end_to_end, 0.99))}",
         ""),
        ("controller RSS when ready (MB)", round(plug.rss_ready_mb, 1), ""),
        (f"controller peak RSS, {plug.vms} VMs plugging (MB)", figures["rss_mb_1k"], ""),
        ("VMs tracked idle", idle.vms, ""),
        ("controller ready after (s)", round(idle.ready_s, 1), ""),
        (f"controller peak RSS, {idle.vms} VMs idle (MB)", figures["rss_mb_10k_idle"],
         "≤ 150"),
        ("controller RSS when idle (MB)", round(idle.rss_now_mb, 1), ""),
    ]
    width = max(len(r[0]) for r in rows)
    for name, value, target in rows:
        print(f"{name:<{width}}  {value!s:<24} {target}")
    print(json.dumps(figures))
    return 0 if plug.completed == plug.ops else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
