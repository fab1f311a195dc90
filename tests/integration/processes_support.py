"""Support for the process-level tests: `nicplug run` as a real child process against a
simulated cluster served from the test's own event loop, and the checks that every
operation was done, and done once.

The cluster runs in-process on the real clock, so a test can arm faults, change VMs
(straight through the store, as `kubectl` would through the API) and read the request
log. The controller is a separate process so that it can be killed with SIGKILL at
any instant. Its journal is read through plain read-only SQLite connections while it
runs; nothing here writes to a journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sqlite3
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import aiohttp

from nicplug.simulator import networking as nw
from nicplug.simulator import objects as ob
from nicplug.simulator.apis import served_api
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.errors import NotFound
from nicplug.simulator.resources import KVVMS, LEASES, PODS, VMIS, VMS
from nicplug.simulator.server import RequestRecord
from tests.integration.cluster_view import NetworkRef, iface

REPO = Path(__file__).resolve().parents[2]
MERGE = "application/merge-patch+json"
# A lease that a dead leader holds for 2 s; renewed every 0.25 s (ordering as the
# library wants: duration > renew deadline > 1.2 x retry period).
FAST_LEASE = ("--lease-duration", "2", "--renew-deadline", "1.5", "--retry-period", "0.25")
SUCCESS = {"plug": "Attached", "unplug": "Detached"}

Slot = tuple[str, str, str]  # (vm "ns/name", network identity, direction)


# ----------------------------------------------------------------- the controller


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class ControllerProcess:
    identity: str
    journal: Path
    log: Path
    metrics_port: int
    process: asyncio.subprocess.Process

    @property
    def user_agent_mark(self) -> str:
        """What the controller's User-Agent carries: its identity, in parentheses."""
        return f"({self.identity})"

    def sent(self, record: RequestRecord) -> bool:
        return self.user_agent_mark in record.user_agent

    @property
    def running(self) -> bool:
        return self.process.returncode is None

    async def ready(self) -> bool:
        try:
            timeout = aiohttp.ClientTimeout(total=1)
            async with aiohttp.ClientSession(timeout=timeout) as session, session.get(
                f"http://127.0.0.1:{self.metrics_port}/readyz"
            ) as response:
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def readiness(self) -> str:
        """What `/readyz` says ("" when it cannot be asked)."""
        try:
            timeout = aiohttp.ClientTimeout(total=1)
            async with aiohttp.ClientSession(timeout=timeout) as session, session.get(
                f"http://127.0.0.1:{self.metrics_port}/readyz"
            ) as response:
                return (await response.text()).strip()
        except (aiohttp.ClientError, TimeoutError):
            return ""

    async def metric(self, name: str) -> float | None:
        """The value of an unlabelled metric, None when it cannot be scraped."""
        try:
            timeout = aiohttp.ClientTimeout(total=1)
            async with aiohttp.ClientSession(timeout=timeout) as session, session.get(
                f"http://127.0.0.1:{self.metrics_port}/metrics"
            ) as response:
                text = await response.text()
        except (aiohttp.ClientError, TimeoutError):
            return None
        for line in text.splitlines():
            metric, _, value = line.partition(" ")
            if metric == name:
                return float(value)
        return None

    async def kill(self) -> None:
        """SIGKILL: no cleanup of any kind, as a node failure or the OOM killer."""
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGKILL)
        await self.process.wait()

    async def terminate(self, within: float = 10.0) -> int:
        """SIGTERM, as the kubelet does; the exit code of a clean stop."""
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.process.wait(), within)
        except TimeoutError:
            await self.kill()
            raise AssertionError(f"{self.identity} ignored SIGTERM for {within}s") from None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


async def start_controller(
    cluster: SimulatedCluster | None, directory: Path, identity: str, *extra: str,
    journal: Path | None = None, kubeconfig: Path | None = None,
    wrapper: Sequence[str] = (),
) -> ControllerProcess:
    """`nicplug run` (as `python -m nicplug.adapters.cli`) against `cluster` (or
    whatever `kubeconfig` names), logging to `directory/<identity>.log`; `wrapper` is a
    command that execs it."""
    config = kubeconfig or (cluster.kubeconfig_path if cluster is not None else None)
    assert config is not None
    journal = journal or directory / f"{identity}.db"
    port = free_port()
    log = directory / f"{identity}.log"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            *wrapper, sys.executable, "-m", "nicplug.adapters.cli", "run",
            "--kubeconfig", str(config), "--journal", str(journal),
            "--identity", identity, "--metrics-addr", f"127.0.0.1:{port}", "--query-addr", "",
            "--synchronous", "NORMAL", *FAST_LEASE, *_mode(extra), *extra,
            cwd=REPO, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )
    return ControllerProcess(identity, journal, log, port, process)


def _mode(extra: Sequence[str]) -> list[str]:
    """`--mode drive` (these tests judge nicplug's own writes) unless the flags choose a
    mode or the kubevirt flavour, which only observes."""
    if "--mode" in extra or "kubevirt" in extra or "multus" in extra:
        return []
    return ["--mode", "drive"]


class Launcher:
    """Starts controllers and kills whatever is left at the end, so a failing test
    leaves no process behind."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started: list[ControllerProcess] = []

    async def start(
        self, cluster: SimulatedCluster | None, identity: str, *extra: str,
        journal: Path | None = None, kubeconfig: Path | None = None, wrapper: Sequence[str] = (),
    ) -> ControllerProcess:
        controller = await start_controller(cluster, self.directory, identity, *extra,
                                            journal=journal, kubeconfig=kubeconfig,
                                            wrapper=wrapper)
        self.started.append(controller)
        return controller

    async def close(self) -> None:
        for controller in self.started:
            if controller.running:
                await controller.kill()


async def eventually(
    probe: Callable[[], Any],
    *,
    within: float,
    what: str,
    watch: Sequence[ControllerProcess] = (),
    every: float = 0.02,
) -> Any:
    """Poll `probe` (sync or async) until it returns something truthy; fail after
    `within` seconds, or at once when a controller in `watch` has died."""
    until = time.monotonic() + within
    while True:
        value = probe()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        for controller in watch:
            if not controller.running:
                raise AssertionError(
                    f"{controller.identity} exited ({controller.process.returncode}) while "
                    f"waiting for {what}:\n{controller.log_tail()}"
                )
        if time.monotonic() > until:
            tails = "\n".join(f"--- {c.identity}\n{c.log_tail()}" for c in watch)
            raise AssertionError(f"not within {within}s: {what}\n{tails}")
        await asyncio.sleep(every)


# ----------------------------------------------------------------- the journal


@dataclass(frozen=True)
class JournalOp:
    stream: str
    vm: str
    network: str
    direction: str
    state: str
    terminal: bool
    history: tuple[str, ...]

    @property
    def slot(self) -> Slot:
        return (self.vm, self.network, self.direction)


def _read(journal: Path, sql: str) -> list[tuple[Any, ...]]:
    if not journal.exists():
        return []
    conn = sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=5)
    try:
        return list(conn.execute(sql))
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):  # created, not yet migrated
            return []
        raise
    finally:
        conn.close()


def operations(journal: Path) -> list[JournalOp]:
    rows = _read(journal, "SELECT stream, state, terminal, snapshot FROM streams "
                          "WHERE state IS NOT NULL ORDER BY stream")
    ops = []
    for stream, state, terminal, snapshot in rows:
        s = json.loads(snapshot)
        ops.append(JournalOp(stream, s["vm"], s["network"], s["direction"], state,
                             bool(terminal), tuple(s["history"])))
    return ops


def first_in(journal: Path, states: Iterable[tuple[str, str]]) -> JournalOp | None:
    """The first operation now in one of the (direction, state) pairs, if any."""
    wanted = set(states)
    return next((op for op in operations(journal) if (op.direction, op.state) in wanted), None)


def unanswered(journal: Path) -> set[tuple[str, str]]:
    """(vm, effect type) of the effects issued whose outcome is not recorded (yet)."""
    return {(key, type_) for key, type_ in
            _read(journal, "SELECT key, type FROM effects WHERE status = 'issued'")}


def check_journal(journal: Path) -> None:
    """The journal is a healthy database and every stream is a clean path: versions
    1..n without gaps, `Opened` first and only once, each `Transitioned` leaving the
    state the previous one entered, no state entered twice, the read model at the end
    of the path."""
    assert _read(journal, "PRAGMA integrity_check") == [("ok",)]
    events: dict[str, list[tuple[int, str, dict[str, Any]]]] = {}
    for stream, version, type_, payload in _read(
        journal, "SELECT stream, version, type, payload FROM events ORDER BY stream, version"
    ):
        events.setdefault(stream, []).append((version, type_, json.loads(payload)))
    views = {op.stream: op for op in operations(journal)}
    assert set(events) == set(views), "streams without events or events without a view"
    for stream, recorded in events.items():
        assert [v for v, _, _ in recorded] == list(range(1, len(recorded) + 1)), stream
        assert recorded[0][1] == "Opened", stream
        assert [t for _, t, _ in recorded].count("Opened") == 1, stream
        path = ["Requested"]
        for _, type_, payload in recorded:
            if type_ == "Transitioned":
                assert payload["from"] == path[-1], f"{stream}: {payload} after {path}"
                assert payload["to"] not in path, f"{stream}: {payload['to']} twice: {path}"
                path.append(payload["to"])
        assert tuple(path) == views[stream].history, stream
        assert path[-1] == views[stream].state, stream


def check_exactly_once(
    journals: Sequence[Path], expected: set[Slot], *, finished: Sequence[Path] = ()
) -> None:
    """Across `journals`, each expected (vm, network, direction) has exactly one
    operation that succeeded, none failed, none opened for anything else; the journals
    in `finished` hold no live operation."""
    ops = [op for journal in journals for op in operations(journal)]
    successes = Counter(op.slot for op in ops if op.state == SUCCESS.get(op.direction))
    assert {slot for slot in successes} == expected, (
        f"succeeded {sorted(successes)}, expected {sorted(expected)}")
    assert all(n == 1 for n in successes.values()), f"done twice: {successes}"
    assert not [op for op in ops if op.state in ("Failed", "Cancelled")], ops
    assert {op.slot for op in ops} == expected, "an operation nobody asked for"
    for journal in finished:
        live = [op for op in operations(journal) if not op.terminal]
        assert not live, f"{journal.name}: still live: {live}"


# ----------------------------------------------------------------- the world


def vm_key(cluster: SimulatedCluster, index: int) -> str:
    namespace, name = cluster.vms[index]
    return f"{namespace}/{name}"


NETWORK_IDS = {"Network/net-a": 2, "Network/net-b": 3, "ClusterNetwork/storage": 4}
"""Each network keeps one id on every VM, and VMs list them in id order, so an edit is
only ever a plug or an unplug (an id change or a reorder would need a restart)."""


def set_networks(cluster: SimulatedCluster, vm: str, networks: Sequence[str]) -> None:
    """The user's edit: the VM's `spec.networks` becomes Main + `networks`
    (identities of `NETWORK_IDS`)."""
    namespace, _, name = vm.partition("/")
    entries: list[dict[str, Any]] = [{"type": "Main", "id": 1}]
    for identity in sorted(networks, key=NETWORK_IDS.__getitem__):
        type_, _, net = identity.partition("/")
        entries.append({"type": type_, "name": net, "id": NETWORK_IDS[identity]})
    cluster.store.patch(VMS, namespace, name, {"spec": {"networks": entries}},
                        content_type=MERGE)


def world_has(cluster: SimulatedCluster, vm: str, networks: Sequence[str]) -> bool:
    """Whether the VM's guest has exactly Main + `networks` attached and the KVVM and
    the active pod carry exactly those entries."""
    try:
        return _world_problems(cluster, vm, networks) == []
    except (KeyError, ValueError, TypeError):
        return False


def check_world(cluster: SimulatedCluster, desired: dict[str, Sequence[str]]) -> None:
    """Every VM is exactly as desired, nothing is listed twice anywhere, the simulated
    virt-handler never crashed on a missing link and no actor hit a bug."""
    problems = [p for vm, nets in desired.items() for p in _world_problems(cluster, vm, nets)]
    assert not problems, problems
    assert cluster.link_not_found == []
    assert cluster.actor_errors == []


def _world_problems(cluster: SimulatedCluster, vm: str, networks: Sequence[str]) -> list[str]:
    namespace, _, name = vm.partition("/")
    dialect = cluster.knobs.dialect
    refs = [cast(NetworkRef, tuple(n.split("/", 1))) for n in networks]
    problems: list[str] = []
    try:
        wanted = {nw.MAIN_IF_NAME} | {iface(cluster, vm, ref) for ref in refs}
    except AssertionError as no_mac:  # deckhouse: its VMMAC has no address yet
        return [str(no_mac)]

    def exactly(what: str, names: list[str], expected: set[str]) -> None:
        duplicates = [n for n, count in Counter(names).items() if count > 1]
        if duplicates:
            problems.append(f"{vm}: {what} lists {duplicates} more than once")
        if set(names) != expected:
            problems.append(f"{vm}: {what} has {sorted(names)}, want {sorted(expected)}")

    kvvm_spec = ob.dig(cluster.store.get(KVVMS, namespace, name), "spec", "template", "spec")
    interfaces = ob.interfaces_of(kvvm_spec)
    exactly("the KVVM's interfaces", [i["name"] for i in interfaces], wanted)
    exactly("the KVVM's networks", [n["name"] for n in ob.networks_of(kvvm_spec)], wanted)
    if any(i.get("state") == "absent" for i in interfaces):
        problems.append(f"{vm}: the KVVM still has an absent interface")
    vmi = cluster.store.get(VMIS, namespace, name)
    attached = [i["name"] for i in ob.dig(vmi, "status", "interfaces") or []
                if "domain" in str(i.get("infoSource", ""))]
    exactly("the VMI's attached interfaces", attached, wanted)
    active = ob.dig(vmi, "status", "activePods") or {}
    pods, _ = cluster.store.list(PODS, namespace, label_selector=f"{nw.VM_NAME_LABEL}={name}")
    for pod in pods:
        if pod["metadata"]["uid"] not in active:
            continue
        raw = nw.annotations_of(pod).get(ob.request_annotation(dialect))
        entries = nw.parse_list(raw)
        if entries is None:
            problems.append(f"{vm}: malformed request annotation {raw!r}")
            continue
        key = "ifName" if dialect == "deckhouse" else "interface"
        exactly("the pod's request annotation", [str(e[key]) for e in entries],
                wanted - {nw.MAIN_IF_NAME})
    return problems


def sdn_reported(cluster: SimulatedCluster, vm: str, network: str) -> bool:
    """Whether the (deckhouse) SDN reports `network` ready on every launcher pod of `vm`."""
    namespace, _, name = vm.partition("/")
    try:
        wanted = iface(cluster, vm, cast(NetworkRef, tuple(network.split("/", 1))))
    except AssertionError:  # no MAC yet: nothing can report it
        return False
    pods, _ = cluster.store.list(PODS, namespace, label_selector=f"{nw.VM_NAME_LABEL}={name}")
    return bool(pods) and all(
        any(e.get("ifName") == wanted and nw.deckhouse_ready(e) for e in
            nw.parse_list(nw.annotations_of(pod).get(nw.DECKHOUSE_STATUS)) or [])
        for pod in pods
    )


def requests_by(cluster: SimulatedCluster, controller: ControllerProcess) -> list[RequestRecord]:
    return [r for r in cluster.requests if controller.sent(r)]


def kvvm_patches(records: Iterable[RequestRecord], *, api: str = "deckhouse") -> Counter[str]:
    """KVVM patches per VM name (named as the cluster's KubeVirt `api` serves them)."""
    face = served_api(api).served(KVVMS)
    kvvms = (face.group, face.plural)
    return Counter(r.name or "" for r in records
                   if r.verb == "patch" and (r.group, r.resource) == kvvms
                   and r.subresource is None)


def pod_patches(records: Iterable[RequestRecord]) -> Counter[str]:
    """Launcher-pod patches per VM name (the pod name holds it)."""
    counts: Counter[str] = Counter()
    for r in records:
        if r.verb == "patch" and r.resource == PODS.plural and r.name:
            counts[r.name.removeprefix("virt-launcher-").rsplit("-", 1)[0]] += 1
    return counts


def lease_holder(cluster: SimulatedCluster, name: str = "nicplug") -> str:
    """The identity holding the Lease; "" when nobody does (or there is no Lease yet)."""
    try:
        lease = cluster.store.get(LEASES, "default", name)
    except NotFound:
        return ""
    return str(ob.dig(lease, "spec", "holderIdentity") or "")


def is_lease(record: RequestRecord) -> bool:
    return record.resource == LEASES.plural
