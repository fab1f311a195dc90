"""Faults of the process and of its surroundings, with `nicplug run` as a real process:
a partition that drops traffic, a frozen API server, a lease lost and regained, a
commit refused on an outcome, a full disk.

What an SRE would check is checked: at most one replica says it leads at any moment,
a replica that lost its term says so at once (`/readyz`, `nicplug_leader`, one log
line), SIGTERM ends the process within a few seconds whatever state it is in, with
its journal closed (SQLite removes the `-wal` file on a clean close), and no change
asked for is lost or done twice. The Lease is the fast one of `processes_support`
(2 s, renew deadline 1.5 s, retry 0.25 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Delays, Knobs
from nicplug.simulator.kubeconfig import write_kubeconfig
from tests.integration.partition import PartitionProxy
from tests.integration.processes_support import (
    REPO,
    ControllerProcess,
    Launcher,
    check_exactly_once,
    check_journal,
    check_world,
    eventually,
    lease_holder,
    operations,
    pod_patches,
    requests_by,
    set_networks,
    vm_key,
    world_has,
)

pytestmark = pytest.mark.slow

START = 30.0  # seconds for a controller to start, win the Lease and list (2 cores, shared)
SETTLE = 30.0
RENEW_DEADLINE = 1.5
SLACK = 1.0  # a busy machine may be this late to notice anything
STOPPED_WITHIN = 6.0  # SIGTERM to exit: drain ≤ 2 s, handing the Lease over ≤ 2 s
LOST = "lost the lease"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[SimulatedCluster]:
    """Four VMs with Network/net-a, a quick SDN (0.2 s) and virt-handler (0.1 s)."""
    fixtures = Fixtures(vms=4, networks=("net-a", "net-b"), cluster_networks=("storage",),
                        vm_networks=(("Network", "net-a"),))
    cluster = SimulatedCluster(Knobs(delays=Delays(sdn_configure=0.2, attach=0.1),
                                     native_hotplug=False),  # nicplug drives
                               fixtures=fixtures, kubeconfig_path=tmp_path / "kubeconfig")
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.stop()


async def ready(controller: ControllerProcess) -> None:
    await eventually(controller.ready, within=START, what=f"{controller.identity} ready",
                     watch=[controller])


async def leading(controller: ControllerProcess) -> bool:
    return await controller.metric("nicplug_leader") == 1.0


async def not_ready(controller: ControllerProcess) -> bool:
    return not await controller.ready()


async def deposed(controller: ControllerProcess) -> bool:
    """Not ready and not leading, both at once."""
    return await controller.metric("nicplug_leader") == 0.0 and not await controller.ready()


def wal(controller: ControllerProcess) -> Path:
    return Path(f"{controller.journal}-wal")


def lines(controller: ControllerProcess, text: str) -> list[str]:
    return [line for line in controller.log.read_text(errors="replace").splitlines()
            if text in line]


async def stops(controller: ControllerProcess) -> float:
    """SIGTERM; the seconds it took to exit 0."""
    started = time.monotonic()
    code = await controller.terminate(within=STOPPED_WITHIN)
    assert code == 0, controller.log_tail()
    return time.monotonic() - started


def no_traceback(controller: ControllerProcess) -> None:
    text = controller.log.read_text(errors="replace")
    assert "Traceback" not in text, text


async def test_a_partitioned_leader_stops_before_a_standby_takes_over(
    cluster: SimulatedCluster, launcher: Launcher, tmp_path: Path
) -> None:
    """A reaches the API server through a proxy that starts dropping everything; B
    reaches it directly. A must stop leading (not ready, `nicplug_leader 0`, one log
    line) within its renew deadline, before B can take the Lease; SIGTERM ends A within
    seconds while its requests still hang, its journal closed."""
    host, _, port = cluster.url.removeprefix("http://").rpartition(":")
    proxy = PartitionProxy(host, int(port))
    await proxy.start()
    try:
        a = await launcher.start(cluster, "ctl-a",
                                 kubeconfig=write_kubeconfig(tmp_path / "via-proxy", proxy.url))
        await ready(a)
        b = await launcher.start(cluster, "ctl-b")
        await eventually(lambda: lease_holder(cluster) == "ctl-a" and b.log.exists()
                         and "standing for the lease" in b.log.read_text(),
                         within=START, what="ctl-b standing", watch=[a, b])

        proxy.partition()
        cut = time.monotonic()
        await eventually(lambda: deposed(a), within=RENEW_DEADLINE + 0.25 + SLACK,
                         what="ctl-a deposed", watch=[a], every=0.01)
        a_stopped = time.monotonic()
        assert lease_holder(cluster) == "ctl-a", "ctl-b took the Lease before ctl-a stopped"
        await eventually(lambda: lease_holder(cluster) == "ctl-b", within=START,
                         what="ctl-b taking the Lease", watch=[b])
        b_took = time.monotonic()
        await ready(b)
        assert a_stopped < b_took
        # B waits out the Lease (2 s) from the last renewal it saw, a moment before the cut.
        assert b_took - cut >= 1.0, "the Lease was taken before it expired"
        assert not await leading(a)
        assert await a.readiness() == "not ready: not leading (standing for the lease)"
        assert len(lines(a, LOST)) == 1, a.log_tail()

        # SIGTERM while every request of ctl-a hangs: it still ends within seconds.
        assert await stops(a) <= STOPPED_WITHIN
        assert not wal(a).exists(), "ctl-a's journal was not closed"
        no_traceback(a)
        proxy.heal()
        assert await stops(b) <= STOPPED_WITHIN
        assert not wal(b).exists()
    finally:
        await proxy.close()


async def serve_cluster(tmp_path: Path) -> tuple[asyncio.subprocess.Process, Path]:
    """`nicplug sim serve` as a process of its own, so that it can be frozen."""
    kubeconfig = tmp_path / "sim-kubeconfig"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with (tmp_path / "sim.log").open("wb") as out:
        server = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "nicplug.adapters.cli", "sim", "serve", "--vms", "2",
            "--no-native-hotplug",  # nicplug drives
            "--kubeconfig", str(kubeconfig), cwd=REPO, env=env,
            stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT)
    await eventually(lambda: kubeconfig.exists() and kubeconfig.stat().st_size > 0,
                     within=START, what="the simulated cluster serving")
    return server, kubeconfig


async def test_a_frozen_api_server_ends_the_term_and_sigterm_ends_the_process(
    launcher: Launcher, tmp_path: Path
) -> None:
    """The API server stops answering (SIGSTOP): the leader stops at its renew deadline
    and says so once. The server thaws: the leader takes its Lease again. SIGTERM after
    that lost-then-regained term, and again with the server frozen under a leader
    whose term still holds: each time the process ends within seconds, journal closed."""
    server, kubeconfig = await serve_cluster(tmp_path)
    try:
        ctl = await launcher.start(None, "ctl", kubeconfig=kubeconfig)
        await ready(ctl)
        assert await leading(ctl)

        server.send_signal(signal.SIGSTOP)
        await eventually(lambda: deposed(ctl), within=RENEW_DEADLINE + 0.25 + SLACK,
                         what="the leader deposed", watch=[ctl], every=0.01)
        await asyncio.sleep(1.0)  # frozen for longer: still one line, not one per try
        assert len(lines(ctl, LOST)) == 1, ctl.log_tail()
        server.send_signal(signal.SIGCONT)
        await ready(ctl)
        assert await leading(ctl)
        assert lines(ctl, "term 2"), ctl.log_tail()

        assert await stops(ctl) <= STOPPED_WITHIN
        assert not wal(ctl).exists(), "the journal of the lost term was not closed"
        no_traceback(ctl)

        again = await launcher.start(None, "ctl-again", kubeconfig=kubeconfig,
                                     journal=ctl.journal)
        await ready(again)
        server.send_signal(signal.SIGSTOP)
        assert await stops(again) <= STOPPED_WITHIN
        assert not wal(again).exists()
        no_traceback(again)
    finally:
        server.send_signal(signal.SIGCONT)
        server.terminate()
        await asyncio.wait_for(server.wait(), 10)


REFUSE_OUTCOMES = """CREATE TRIGGER refuse BEFORE UPDATE OF status ON effects
    WHEN NEW.status = 'succeeded' BEGIN SELECT RAISE(ABORT, 'outcome refused'); END"""


def on_journal(journal: Path, sql: str) -> None:
    """Change the schema of a running controller's journal, as a fault injection."""
    conn = sqlite3.connect(journal, timeout=10)
    try:
        conn.execute(sql)
        conn.commit()
    finally:
        conn.close()


def outbox(journal: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=5)
    try:
        return list(conn.execute("SELECT type, status FROM effects ORDER BY id"))
    finally:
        conn.close()


async def test_a_refused_outcome_is_retried_not_wedged(
    cluster: SimulatedCluster, launcher: Launcher
) -> None:
    """The journal refuses to record that an effect succeeded. The controller goes not
    ready and says so once; when the journal takes writes again the outcome is recorded,
    the operation goes on, and the effect was sent once."""
    ctl = await launcher.start(cluster, "ctl")
    await ready(ctl)
    on_journal(ctl.journal, REFUSE_OUTCOMES)
    vm = vm_key(cluster, 0)
    set_networks(cluster, vm, ["Network/net-a", "Network/net-b"])
    await eventually(lambda: not_ready(ctl), within=SETTLE, what="not ready", watch=[ctl])
    await eventually(lambda: ("PatchPodNetworks", "issued") in outbox(ctl.journal)
                     and pod_patches(requests_by(cluster, ctl))[vm.partition("/")[2]] == 1,
                     within=SETTLE, what="the pod patched, its outcome refused", watch=[ctl])
    await asyncio.sleep(1.0)  # a few retries, all refused
    assert not await ctl.ready()
    refused = lines(ctl, "refuses writes")
    assert len(refused) == 1 and str(ctl.journal) in refused[0], ctl.log_tail()

    on_journal(ctl.journal, "DROP TRIGGER refuse")
    desired = {vm_key(cluster, i): ["Network/net-a"] for i in range(4)}
    desired[vm] = ["Network/net-a", "Network/net-b"]
    await eventually(lambda: world_has(cluster, vm, desired[vm])
                     and all(op.terminal for op in operations(ctl.journal)),
                     within=SETTLE, what="the plug done", watch=[ctl])
    await ready(ctl)
    assert len(lines(ctl, "takes writes again")) == 1
    assert ("issued" not in {status for _, status in outbox(ctl.journal)})
    assert pod_patches(requests_by(cluster, ctl))[vm.partition("/")[2]] == 1
    assert await stops(ctl) <= STOPPED_WITHIN
    check_world(cluster, desired)
    check_journal(ctl.journal)
    check_exactly_once([ctl.journal], {(vm, "Network/net-b", "plug")}, finished=[ctl.journal])
    no_traceback(ctl)


def small_disk(directory: Path, size: str) -> list[str]:
    """A command that mounts a tmpfs of `size` on `directory`, in a mount namespace of
    the controller's own, then execs the rest of its command line."""
    return ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
            'mount -t tmpfs -o size="$1" tmpfs "$0" && shift && exec "$@"',
            str(directory), size]


def can_mount_a_small_disk(directory: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run([*small_disk(directory, "1m"), "true"], capture_output=True)
    return probe.returncode == 0


def fill(path: Path) -> int:
    """Write `path` until the disk is full; the bytes written."""
    written = 0
    chunk = b"\0" * 65536
    with path.open("wb", buffering=0) as out:
        while True:
            try:
                written += out.write(chunk) or 0
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                return written


async def test_a_full_disk_makes_the_controller_not_ready_and_loses_nothing(
    cluster: SimulatedCluster, launcher: Launcher, tmp_path: Path
) -> None:
    """The journal lives on a small tmpfs of its own. The disk fills up while changes
    are asked for: the controller goes not ready and says so once, in one line naming
    the journal, without a traceback. Space returns: every refused decision is made
    again and each change is done exactly once."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if not can_mount_a_small_disk(disk):
        pytest.skip("needs unshare and user namespaces to mount a small tmpfs for the journal")
    ctl = await launcher.start(cluster, "ctl", journal=disk / "journal.db",
                               wrapper=small_disk(disk, "16m"))
    await ready(ctl)
    # The tmpfs is the controller's own: reach it through its view of the filesystem.
    # SQLite resolves that path's symbolic link back to this namespace's view, so the
    # journal is read from a copy (the database and its WAL; the index is rebuilt).
    seen = Path(f"/proc/{ctl.process.pid}/root") / disk.relative_to("/")
    assert fill(seen / "filler") > 0

    changed = [vm_key(cluster, i) for i in (0, 1)]
    for vm in changed:
        set_networks(cluster, vm, ["Network/net-a", "ClusterNetwork/storage"])
    await eventually(lambda: not_ready(ctl), within=SETTLE, what="not ready", watch=[ctl])
    await asyncio.sleep(1.5)  # decisions retried, all refused
    refused = lines(ctl, "refuses writes")
    assert len(refused) == 1, ctl.log_tail()
    assert str(disk / "journal.db") in refused[0] and "full" in refused[0]
    assert await ctl.metric("nicplug_journal_writable") == 0.0
    assert await ctl.readiness() == f"not ready: the journal {disk / 'journal.db'} refuses writes"
    assert operations(copied(seen, tmp_path / "during")) == []

    (seen / "filler").unlink()
    desired = {vm_key(cluster, i): ["Network/net-a"] for i in range(4)}
    for vm in changed:
        desired[vm] = ["Network/net-a", "ClusterNetwork/storage"]

    def done() -> bool:
        ops = operations(copied(seen, tmp_path / "after"))
        return (all(world_has(cluster, vm, n) for vm, n in desired.items())
                and len(ops) == 2 and all(op.terminal for op in ops))

    await eventually(done, within=SETTLE, what="both changes done", watch=[ctl])
    await ready(ctl)
    assert await ctl.metric("nicplug_journal_writable") == 1.0
    assert len(lines(ctl, "takes writes again")) == 1
    journal = copied(seen, tmp_path / "final")
    check_world(cluster, desired)
    check_journal(journal)
    check_exactly_once([journal], {(vm, "ClusterNetwork/storage", "plug") for vm in changed})
    assert await stops(ctl) <= STOPPED_WITHIN
    no_traceback(ctl)


def copied(disk: Path, directory: Path) -> Path:
    """A copy of the journal on `disk` (database and WAL) in `directory`."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir()
    for name in ("journal.db", "journal.db-wal"):
        with contextlib.suppress(FileNotFoundError):
            shutil.copyfile(disk / name, directory / name)
    return directory / "journal.db"
