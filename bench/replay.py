"""Replaying a long tape: events per second, and memory that does not grow with it.

`python -m bench replay [--quick]` generates tapes (streamed to temporary files) of
200k and 1M events for 10k VMs (quick: 10k and 50k events, 1k VMs): the recorded
hotplug of one VM (the sample tape `live-hotplug-a-network`) cloned for every VM — the
lists, then each plug step for one VM in ten at once — followed by status churn: each
VM's VMI and launcher pod updated `BURST` times per moment, a moment per chunk of
`CHUNK` VMs, until the tape holds the wanted number of events. Each churn write carries
a new resourceVersion, as the API server gives every write one (`--same-versions`: the
churned objects keep theirs, as the tapes of this benchmark did before). Each tape is replayed
in a child process (`nicplug replay`'s code, in-memory journal) that reports its own
time, CPU time and peak RSS; a short and a 5× longer tape with the same VMs show
whether memory grows with the tape's length. Generation is not timed. Prints a table,
then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "tests" / "tapes" / "live-hotplug-a-network.tape.jsonl"
TEMPLATE_VM = b"vm-00000"
SHARED_KINDS = ("KubeVirt", "InternalVirtualizationKubeVirt", "Network", "ClusterNetwork")
VMI_KINDS = ("VirtualMachineInstance", "InternalVirtualizationVirtualMachineInstance")
START = 1_800_000_000.0
BURST = 8
CHUNK = 1000
PLUGGED = 10
"""One VM in PLUGGED gets the recorded plug; the others only see status churn."""


def _uids(obj: Any) -> Iterator[str]:
    """Every uid-like string of an object (metadata uids, activePods keys)."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key == "uid" and isinstance(value, str):
                yield value
            if key == "activePods" and isinstance(value, dict):
                yield from value
            yield from _uids(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from _uids(value)


class Template:
    """One VM's recorded plug, split into shared objects, its lists and its steps."""

    def __init__(self, path: Path) -> None:
        self.shared: list[bytes] = []
        self.initial: list[tuple[str, bytes]] = []
        self.steps: list[tuple[str, bytes]] = []
        uids: set[str] = set()
        listing = True
        last: dict[str, Any] = {}
        first: dict[str, Any] = {}
        with path.open("rb") as lines:
            for line in lines:
                entry = orjson.loads(line)
                kind = entry["object"].get("kind")
                if entry["type"] in ("EFFECT", "BOOKMARK"):
                    continue
                if entry["type"] != "ADDED":
                    listing = False
                body = orjson.dumps(entry["object"])
                if kind in SHARED_KINDS:
                    self.shared.append(body)
                    continue
                uids.update(_uids(entry["object"]))
                (self.initial if listing else self.steps).append((entry["type"], body))
                last[kind] = entry["object"]
                first.setdefault(kind, entry["object"])
        self._uids = sorted(uids)
        vmi = next(kind for kind in VMI_KINDS if kind in last)
        self.plugged = (last[vmi], last["Pod"])
        self.steady = (first[vmi], first["Pod"])

    def clone(self, body: bytes, index: int) -> bytes:
        body = body.replace(TEMPLATE_VM, f"vm-{index:05d}".encode())
        for uid in self._uids:
            body = body.replace(uid.encode(), f"{uid[:-5]}{index:05x}".encode())
        return body


def _line(type_: str, at: float, body: bytes) -> bytes:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{round(at % 1 * 1000):03d}Z"
    return b'{"type":"%s","at":"%s","object":%s}\n' % (type_.encode(), stamp.encode(), body)


FIRST_CHURN_VERSION = 1_000_000_000
"""The resourceVersions of churn writes count up from here (above the template's)."""


def generate(path: Path, *, vms: int, events: int, versioned: bool = True) -> int:
    """Write a tape of `events` events for `vms` VMs; return the events written.
    `versioned`: every churn write gets a new resourceVersion."""
    template = Template(TEMPLATE)
    written = 0
    with path.open("wb") as out:
        for body in template.shared:
            out.write(_line("ADDED", START, body))
            written += 1
        for index in range(vms):
            for type_, body in template.initial:
                out.write(_line(type_, START, template.clone(body, index)))
                written += 1
        out.write(b'{"type":"BOOKMARK","object":{"metadata":{"annotations":'
                  b'{"k8s.io/initial-events-end":"true"}}}}\n')
        moment = START + 1
        for type_, body in template.steps:
            for index in range(0, vms, PLUGGED):
                out.write(_line(type_, moment, template.clone(body, index)))
                written += 1
            moment += 1.0
        round_ = 0
        while written < events:
            for first in range(0, vms, CHUNK):
                for index in range(first, min(first + CHUNK, vms)):
                    for beat in range(BURST):
                        if written >= events:
                            return written
                        state = template.plugged if index % PLUGGED == 0 else template.steady
                        obj = state[beat % 2]
                        status = {**obj.get("status", {}), "heartbeat": f"{round_}-{beat}"}
                        churned = {**obj, "status": status}
                        if versioned:
                            churned["metadata"] = {
                                **obj["metadata"],
                                "resourceVersion": str(FIRST_CHURN_VERSION + written)}
                        body = template.clone(orjson.dumps(churned), index)
                        out.write(_line("MODIFIED", moment, body))
                        written += 1
                moment += 1.0
            round_ += 1
    return written


def _child(tape: Path) -> dict[str, Any]:
    """Replay `tape` in a fresh process; its time, counts and peak RSS."""
    code = (
        "import asyncio, json, resource, sys, time\n"
        "from nicplug.adapters.core.settings import Settings\n"
        "from nicplug.adapters.core.replaying import Replay\n"
        "started, cpu = time.perf_counter(), time.process_time()\n"
        "with open(sys.argv[1], 'rb') as tape:\n"
        "    result = asyncio.run(Replay(Settings()).run(tape))\n"
        "seconds = time.perf_counter() - started\n"
        "cpu = time.process_time() - cpu\n"
        "states = {}\n"
        "for op in result.operations:\n"
        "    states[op.state] = states.get(op.state, 0) + 1\n"
        "print(json.dumps({'seconds': seconds, 'cpu': cpu, 'events': result.stats.events,\n"
        "    'observations': result.observations, 'effects': len(result.effects),\n"
        "    'states': states, 'errors': len(result.errors),\n"
        "    'peak_rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code, str(tape)], cwd=ROOT, env=env, capture_output=True,
        text=True, check=True,
    )
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench replay", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="a smaller run: tapes of 10k and 50k events for 1k VMs")
    parser.add_argument("--same-versions", action="store_true",
                        help="churn writes keep each object's resourceVersion")
    args = parser.parse_args(argv)
    quick, versioned = bool(args.quick), not args.same_versions
    vms = 1_000 if quick else 10_000
    long_events = 50_000 if quick else 1_000_000
    runs: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="nicplug-bench-replay-") as tmp:
        for events in (long_events // 10 * 2, long_events):
            tape = Path(tmp) / f"{events}.tape.jsonl"
            generate(tape, vms=vms, events=events, versioned=versioned)
            figures = _child(tape)
            figures["tape_mb"] = tape.stat().st_size / (1 << 20)
            tape.unlink()
            runs[events] = figures
    print(f"{'events':>9} {'VMs':>6} {'tape MB':>8} {'seconds':>8} {'events/s':>9} "
          f"{'ev/CPU-s':>9} {'obs.':>8} {'effects':>8} {'peak RSS MB':>12}  final states")
    for f in runs.values():
        print(f"{f['events']:>9} {vms:>6} {f['tape_mb']:>8.0f} {f['seconds']:>8.1f} "
              f"{f['events'] / f['seconds']:>9.0f} {f['events'] / f['cpu']:>9.0f} "
              f"{f['observations']:>8} {f['effects']:>8} "
              f"{f['peak_rss_mb']:>12.0f}  {f['states']}")
    short, long_ = runs[long_events // 10 * 2], runs[long_events]
    result = {
        "vms": vms,
        "versioned_churn": versioned,
        "events": long_["events"],
        "events_per_s": round(long_["events"] / long_["seconds"]),
        "events_per_cpu_s": round(long_["events"] / long_["cpu"]),
        "peak_rss_mb": round(long_["peak_rss_mb"], 1),
        "short_tape_events": short["events"],
        "short_tape_peak_rss_mb": round(short["peak_rss_mb"], 1),
        "rss_ratio_long_to_short": round(long_["peak_rss_mb"] / short["peak_rss_mb"], 2),
        "errors": long_["errors"],
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
