"""What `bench e2e` reads from the cluster's records, the same way for either controller.

The simulated cluster (`bench._timed_cluster`) records every write of a VM's objects
with its commit time, and every request with its client's User-Agent. From those alone:

* a hotplug is one (VM, interface) that the VMI's status shows attached to the guest
  after the VM's spec was patched; its latency runs from the commit of that spec patch
  to the commit of the first VMI write showing it attached;
* throughput is the hotplugs over (last attach − first spec patch);
* requests per hotplug are the requests of the controller's clients between the first
  spec patch and the end of the phase, over the hotplugs.

Nothing here asks either controller anything; `step_latencies` alone reads nicplug's
journal, for the latency nicplug adds per step.
"""

from __future__ import annotations

import re
import sqlite3
from bisect import bisect_right
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

Write = tuple[int, float, str, str, list[str] | None]  # rv, commit time, kind, vm, attached
Request = tuple[float, str, str, str]  # time (± a quarter second), User-Agent, verb, resource
STEPS = ("Opened", "Transitioned")


def read_lines(path: Path) -> list[list[Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line]


def writes_of(path: Path) -> list[Write]:
    return [(int(r[0]), float(r[1]), str(r[2]), str(r[3]), r[4]) for r in read_lines(path)]


def requests_of(path: Path) -> list[Request]:
    return [(float(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in read_lines(path)]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (`q` in 0..1); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.999999) - 1))]


@dataclass
class Hotplugs:
    """The hotplugs of some VMs as the cluster saw them."""

    asked: int
    latencies: list[float] = field(default_factory=list)  # spec patch → attached, seconds
    first_patch: float = float("nan")
    last_attached: float = float("nan")

    @property
    def done(self) -> int:
        return len(self.latencies)

    @property
    def per_second(self) -> float:
        span = self.last_attached - self.first_patch
        return self.done / span if self.done and span > 0 else float("nan")


def hotplugs(writes: Iterable[Write], vms: set[str], since: float, per_vm: int) -> Hotplugs:
    """`per_vm` interfaces asked of each VM in `vms` by a spec patch committed at or
    after `since`; each counts once, when first seen attached after its VM's patch."""
    patched: dict[str, float] = {}
    before: dict[str, set[str]] = {}
    seen: dict[str, set[str]] = defaultdict(set)
    found = Hotplugs(asked=per_vm * len(vms))
    for _rv, t, kind, vm, guest in writes:
        if vm not in vms:
            continue
        if kind == "VirtualMachineInstance" and guest is not None and vm not in patched:
            before[vm] = set(guest)  # what the guest had before the patch
        if t < since:
            continue
        if kind == "VirtualMachine" and vm not in patched:
            patched[vm] = t
        elif kind == "VirtualMachineInstance" and guest is not None and vm in patched:
            for name in set(guest) - before.get(vm, set()) - seen[vm]:
                seen[vm].add(name)
                found.latencies.append(t - patched[vm])
                found.last_attached = t if found.done == 1 else max(found.last_attached, t)
    if patched:
        found.first_patch = min(patched.values())
    return found


def requests_between(requests: Iterable[Request], start: float, end: float,
                     client: Callable[[str], bool]) -> Counter[str]:
    """Requests of one controller's clients by verb, answered in [start, end]."""
    return Counter(verb for t, agent, verb, _ in requests
                   if start <= t <= end and client(agent))


# -- the latency nicplug adds per step (its journal against the cluster's writes) -------


@dataclass
class Event:
    key: str
    type: str
    cause: str
    wall: float


def journal_events(journal: Path) -> list[Event]:
    conn = sqlite3.connect(f"file:{journal}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT key, type, cause_ref, wall_time FROM events ORDER BY position"
        ).fetchall()
    finally:
        conn.close()
    return [Event(str(k), str(t), str(c), float(w)) for k, t, c, w in rows]


_CAUSE_RV = re.compile(r"@(\d+)$")


def step_latencies(events: Sequence[Event], writes: Sequence[Write], vms: set[str],
                   since: float) -> tuple[list[float], int]:
    """Per step (an `Opened` or `Transitioned` event) of the VMs in `vms` decided after
    `since`: its journaled decision time minus the commit time of the earliest cluster
    write that could have enabled it (newer than every write the VM's earlier decisions
    named as their cause, no newer than this decision's cause). Taking the earliest
    never understates what nicplug adds (watch delivery included). Returns the
    latencies and how many steps had no candidate write."""
    by_vm: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for rv, t, _kind, vm, _ in writes:
        if vm in vms:
            by_vm[vm].append((rv, t))
    seen: dict[str, int] = {}
    for vm, ws in by_vm.items():
        ws.sort()
        seen[vm] = max((rv for rv, t in ws if t < since), default=0)
    latencies: list[float] = []
    unattributed = 0
    for decision in _decisions(e for e in events if e.key in vms):
        first = decision[0]
        ws = by_vm.get(first.key, [])
        rvs = [rv for rv, _ in ws]
        match = _CAUSE_RV.search(first.cause)
        cause_rv = int(match.group(1)) if match else None
        lo = bisect_right(rvs, seen.get(first.key, 0))
        hi = bisect_right(rvs, cause_rv) if cause_rv is not None else len(ws)
        pending = [w for w in ws[lo:hi] if w[1] <= first.wall]
        steps = sum(1 for e in decision if e.type in STEPS)
        if steps and first.wall >= since:
            if pending:
                latencies.extend([first.wall - pending[0][1]] * steps)
            else:
                unattributed += steps
        if cause_rv is not None:
            seen[first.key] = max(seen.get(first.key, 0), cause_rv)
        elif steps and pending:
            seen[first.key] = max(seen.get(first.key, 0), pending[0][0])
    return latencies, unattributed


def _decisions(events: Iterable[Event]) -> Iterable[list[Event]]:
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
