"""`nicplug run` as a real process: killed mid-operation, failed over to a standby, and
driven through a misbehaving API server.

The simulated cluster runs in the test's event loop on the real clock (small delays,
so that an operation is caught mid-flight); each controller is a child process with a
fast Lease (2 s), killed with SIGKILL where a crash is meant. What is checked is what
an operator would check: the world ends as desired with nothing listed twice, each
requested change succeeded exactly once across all journals, every journal is a clean
record, and the API requests stay proportionate to the work.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Delays, Knobs
from tests.integration.processes_support import (
    ControllerProcess,
    Launcher,
    Slot,
    check_exactly_once,
    check_journal,
    check_world,
    eventually,
    first_in,
    is_lease,
    kvvm_patches,
    lease_holder,
    operations,
    pod_patches,
    requests_by,
    sdn_reported,
    set_networks,
    unanswered,
    vm_key,
    world_has,
)

pytestmark = pytest.mark.slow

KVVMS_NAME = "internalvirtualizationvirtualmachines.internal.virtualization.deckhouse.io"
"""The KVVMs of the deckhouse dialect's clusters: Deckhouse's renamed KubeVirt."""
START = 30.0  # seconds for a controller to start, win the Lease and list (2 cores, shared)
SETTLE = 30.0  # seconds for the in-flight operations to finish


async def _cluster(tmp_path: Path, knobs: Knobs, vms: int) -> SimulatedCluster:
    fixtures = Fixtures(vms=vms, networks=("net-a", "net-b"), cluster_networks=("storage",),
                        vm_networks=(("Network", "net-a"),))
    knobs = replace(knobs, native_hotplug=False)  # nicplug drives the hotplug
    cluster = SimulatedCluster(knobs, fixtures=fixtures, kubeconfig_path=tmp_path / "kubeconfig")
    await cluster.start()
    return cluster


@pytest.fixture
async def slow_sdn(tmp_path: Path) -> AsyncIterator[SimulatedCluster]:
    """Four VMs with Network/net-a; the SDN takes 1.5 s, attaching and detaching 1 s:
    each step lasts long enough to be caught from outside."""
    cluster = await _cluster(tmp_path, Knobs(delays=Delays(sdn_configure=1.5, attach=1.0)), 4)
    try:
        yield cluster
    finally:
        await cluster.stop()


@pytest.fixture
async def quick(tmp_path: Path) -> AsyncIterator[SimulatedCluster]:
    """Four VMs with Network/net-a and a quick SDN (0.2 s) and virt-handler (0.1 s)."""
    cluster = await _cluster(tmp_path, Knobs(delays=Delays(sdn_configure=0.2, attach=0.1)), 4)
    try:
        yield cluster
    finally:
        await cluster.stop()


async def _leader(
    cluster: SimulatedCluster, candidates: list[ControllerProcess]
) -> ControllerProcess:
    """The candidate that holds the Lease, once it is ready."""
    async def ready_holder() -> ControllerProcess | None:
        holder = lease_holder(cluster)
        for controller in candidates:
            if controller.identity == holder and await controller.ready():
                return controller
        return None

    leader: ControllerProcess = await eventually(
        ready_holder, within=START, what="a leader ready", watch=candidates)
    return leader


async def _standing(cluster: SimulatedCluster, controller: ControllerProcess) -> None:
    """Wait until the controller has asked for the Lease (a candidate's first request)."""
    await eventually(lambda: any(is_lease(r) for r in requests_by(cluster, controller)),
                     within=START, what=f"{controller.identity} standing", watch=[controller])


async def _ready(controller: ControllerProcess) -> None:
    await eventually(controller.ready, within=START, what=f"{controller.identity} ready",
                     watch=[controller])


async def test_killed_mid_operation_a_restarted_controller_finishes_every_change_once(
    slow_sdn: SimulatedCluster, launcher: Launcher, tmp_path: Path
) -> None:
    """Three leaders are killed with SIGKILL at three different moments; each time a
    new one (another identity, the same journal) waits out the dead one's Lease and
    goes on; the fourth finishes and stops cleanly on SIGTERM.

    All four are started at once, as replacement pods racing for the Lease would be,
    so that the test does not wait for Python to start four times in a row: a
    candidate neither opens the journal nor lists anything before it wins the Lease,
    so it recovers exactly as a process started after the kill would.
    """
    cluster = slow_sdn
    journal = tmp_path / "journal.db"
    vm0, vm1, vm2, vm3 = (vm_key(cluster, i) for i in range(4))
    candidates = [await launcher.start(cluster, f"ctl-{i}", journal=journal) for i in range(1, 5)]
    unanswered_at_kills: list[tuple[str, str]] = []
    killed: list[ControllerProcess] = []

    async def next_leader() -> ControllerProcess:
        exited = [c for c in candidates if not c.running and c not in killed]
        assert not exited, "\n".join(  # a candidate the test did not kill must stand on
            f"{c.identity} exited ({c.process.returncode}):\n{c.log_tail()}" for c in exited)
        return await _leader(cluster, [c for c in candidates if c.running])

    async def kill(leader: ControllerProcess) -> None:
        killed.append(leader)
        await leader.kill()
        unanswered_at_kills.extend(unanswered(journal))

    # 1. Killed after patching the pods, while the SDN is still configuring.
    ctl = await next_leader()
    set_networks(cluster, vm0, ["Network/net-a", "Network/net-b"])
    set_networks(cluster, vm1, ["Network/net-a", "ClusterNetwork/storage"])
    await eventually(lambda: first_in(journal, [("plug", "AnnotationPatched")]),
                     within=SETTLE, what="a plug in AnnotationPatched", watch=[ctl])
    await kill(ctl)

    # 2. Killed after the KVVM asked for the unplug, while the guest is detaching.
    ctl = await next_leader()
    set_networks(cluster, vm2, [])
    set_networks(cluster, vm3, [])
    await eventually(lambda: first_in(journal, [("unplug", "VMIPatched")]),
                     within=SETTLE, what="an unplug in VMIPatched", watch=[ctl])
    await kill(ctl)

    # 3. Killed while its KVVM patch is on the wire: the server applies it, the
    # journal never learns the outcome. The next generation re-issues it.
    ctl = await next_leader()
    cluster.faults.add_latency(0.6, verb="patch", resource=KVVMS_NAME)
    set_networks(cluster, vm2, ["Network/net-b"])
    set_networks(cluster, vm3, ["ClusterNetwork/storage"])

    def kvvm_patch_in_flight() -> bool:
        op = first_in(journal, [("plug", "SDNReady")])
        return op is not None and (op.vm, "PatchVirtualMachine") in unanswered(journal)

    await eventually(kvvm_patch_in_flight, within=SETTLE,
                     what="a plug in SDNReady with its KVVM patch unanswered", watch=[ctl])
    await kill(ctl)
    cluster.faults.clear()

    # 4. Finishes everything, then stops cleanly and hands the Lease back.
    ctl = await next_leader()
    desired = {vm0: ["Network/net-a", "Network/net-b"],
               vm1: ["Network/net-a", "ClusterNetwork/storage"],
               vm2: ["Network/net-b"], vm3: ["ClusterNetwork/storage"]}
    await eventually(lambda: all(world_has(cluster, vm, n) for vm, n in desired.items())
                     and all(op.terminal for op in operations(journal)),
                     within=SETTLE, what="every change done", watch=[ctl])
    assert await ctl.terminate() == 0
    assert lease_holder(cluster) == ""

    check_world(cluster, desired)
    check_journal(journal)
    expected: set[Slot] = {
        (vm0, "Network/net-b", "plug"), (vm1, "ClusterNetwork/storage", "plug"),
        (vm2, "Network/net-a", "unplug"), (vm3, "Network/net-a", "unplug"),
        (vm2, "Network/net-b", "plug"), (vm3, "ClusterNetwork/storage", "plug"),
    }
    check_exactly_once([journal], expected, finished=[journal])
    # Each operation lands at most one KVVM patch and one pod patch of its own (an
    # unplug's KVVM cleanup is KubeVirt's here). Besides, a new leader may re-issue
    # an effect the dead one left unanswered: one more per VM, effect and kill. A patch
    # decided from a world the user changed meanwhile is refused by its `test` op and
    # changes nothing: not counted.
    ops = Counter(vm for vm, _, _ in expected)
    again = Counter(unanswered_at_kills)
    writes = [r for c in candidates for r in requests_by(cluster, c) if r.landed]
    for vm in desired:
        name = vm.partition("/")[2]
        assert kvvm_patches(writes)[name] <= ops[vm] + again[(vm, "PatchVirtualMachine")]
        assert pod_patches(writes)[name] <= ops[vm] + again[(vm, "PatchPodNetworks")]


async def test_a_standby_with_its_own_journal_takes_over_and_adopts_from_the_world(
    slow_sdn: SimulatedCluster, launcher: Launcher
) -> None:
    """Two replicas stand for one Lease. In a Deployment each journal lives on the
    replica's own ReadWriteOnce volume, so the standby's is empty: while the leader
    lives the standby only asks for the Lease; when the leader is killed mid-operation
    the standby takes over once the Lease expires and adopts the operations in flight
    from what it observes, doing none of the steps already done again."""
    cluster = slow_sdn
    vm0, vm1, vm2, vm3 = (vm_key(cluster, i) for i in range(4))
    leader = await launcher.start(cluster, "ctl-a")
    await _ready(leader)
    standby = await launcher.start(cluster, "ctl-b")
    await _standing(cluster, standby)

    desired = {vm0: ["Network/net-a", "Network/net-b"], vm1: [],
               vm2: ["Network/net-a", "ClusterNetwork/storage"], vm3: ["Network/net-b"]}
    for vm, networks in desired.items():
        set_networks(cluster, vm, networks)

    def mid_flight() -> bool:
        states = {(op.vm, op.direction): op.state for op in operations(leader.journal)}
        return (states.get((vm0, "plug")) in ("AnnotationPatched", "SDNReady", "VMIPatched")
                and states.get((vm1, "unplug")) in ("VMIPatched", "GuestDetached"))

    await eventually(mid_flight, within=SETTLE, what="a plug and an unplug mid-flight",
                     watch=[leader, standby])
    assert all(is_lease(r) for r in requests_by(cluster, standby)), "the standby acted"
    assert not standby.journal.exists()
    assert not await standby.ready()
    await leader.kill()

    await _ready(standby)
    assert lease_holder(cluster) == standby.identity
    await eventually(lambda: all(world_has(cluster, vm, n) for vm, n in desired.items())
                     and all(op.terminal for op in operations(standby.journal)),
                     within=SETTLE, what="every change done", watch=[standby])
    assert await standby.terminate() == 0

    check_world(cluster, desired)
    for journal in (leader.journal, standby.journal):
        check_journal(journal)
    expected: set[Slot] = {
        (vm0, "Network/net-b", "plug"), (vm1, "Network/net-a", "unplug"),
        (vm2, "ClusterNetwork/storage", "plug"),
        (vm3, "Network/net-b", "plug"), (vm3, "Network/net-a", "unplug"),
    }
    check_exactly_once([leader.journal, standby.journal], expected,
                       finished=[standby.journal])
    # The leader had patched vm0's pod and asked vm1's KVVM for the unplug: the
    # standby found both done in the world and did neither again.
    took_over = requests_by(cluster, standby)
    assert pod_patches(took_over)[vm0.partition("/")[2]] == 0
    assert kvvm_patches(took_over)[vm1.partition("/")[2]] == 0


DESIRED_CHANGES = {0: ["Network/net-a", "Network/net-b"], 1: [],
                   2: ["Network/net-a", "ClusterNetwork/storage"], 3: ["Network/net-b"]}
OPERATIONS = 5  # the plugs and unplugs DESIRED_CHANGES asks for
# Request budgets, from measurement. Without faults the five operations take about
# 40 requests besides the Lease (per operation a get and a patch of the pod and of
# the KVVM, and an Event per step). Allowed: 12 per operation, and 4 per injected
# failure (the retry, a re-read, an Event); a hot loop makes hundreds a second.
PER_OPERATION = 12
PER_FAULT = 4
# The leader renews every 0.25 s with a get and an update: 8 requests a second.
LEASE_PER_SECOND = 10


async def _controller_and_changes(
    cluster: SimulatedCluster, launcher: Launcher, *extra: str
) -> tuple[ControllerProcess, dict[str, list[str]], float]:
    """A ready controller, then the changes: the desired networks and when."""
    controller = await launcher.start(cluster, "ctl", *extra)
    await _ready(controller)
    desired = {vm_key(cluster, i): nets for i, nets in DESIRED_CHANGES.items()}
    for vm, networks in desired.items():
        set_networks(cluster, vm, networks)
    return controller, desired, time.monotonic()


async def _finish(
    cluster: SimulatedCluster, controller: ControllerProcess, desired: dict[str, list[str]],
    *, faults: int, since: float,
) -> None:
    """Every change done exactly once, within the request budgets."""
    await eventually(lambda: all(world_has(cluster, vm, n) for vm, n in desired.items())
                     and all(op.terminal for op in operations(controller.journal)),
                     within=SETTLE, what="every change done", watch=[controller])
    elapsed = time.monotonic() - since
    assert await controller.terminate() == 0
    check_world(cluster, desired)
    check_journal(controller.journal)
    vm0, vm1, vm2, vm3 = desired
    check_exactly_once([controller.journal], {
        (vm0, "Network/net-b", "plug"), (vm1, "Network/net-a", "unplug"),
        (vm2, "ClusterNetwork/storage", "plug"),
        (vm3, "Network/net-b", "plug"), (vm3, "Network/net-a", "unplug"),
    }, finished=[controller.journal])
    sent = requests_by(cluster, controller)
    work = [r for r in sent if not is_lease(r)]
    assert len(work) <= OPERATIONS * PER_OPERATION + faults * PER_FAULT, \
        Counter((r.verb, r.resource) for r in work)
    lease = [r for r in sent if is_lease(r)]
    assert len(lease) <= LEASE_PER_SECOND * (elapsed + START)


async def test_errors_on_requests_are_retried_without_a_hot_loop(
    quick: SimulatedCluster, launcher: Launcher
) -> None:
    """409 on pod patches, 429 with Retry-After on KVVM patches, 500 on any patch,
    503 on reads: every change still completes exactly once, in few requests.

    An injected 409 on a pod patch is not its `test` failing (that is a 422): the same
    patch is retried with the outbox's backoff, not decided again."""
    cluster = quick
    faults = cluster.faults
    faults.fail_requests(409, times=2, verb="patch", resource="pods")
    faults.fail_requests(429, times=2, verb="patch", resource=KVVMS_NAME,
                         retry_after=1)
    faults.fail_requests(500, times=3, verb="patch")
    faults.fail_requests(503, times=2, verb="get")
    controller, desired, since = await _controller_and_changes(
        cluster, launcher, "--effect-reissue-after", "2")
    await _finish(cluster, controller, desired, faults=9, since=since)
    assert faults.describe()["failures"] == [], "an injected failure was never met"


async def test_dropped_stalled_and_expired_watches_are_recovered_without_a_hot_loop(
    quick: SimulatedCluster, launcher: Launcher
) -> None:
    """Watches dropped after an event, resumptions answered 410 Gone (so the informer
    lists again; the first list fails with 500), and the pod watch stalled while the
    SDN reports: every change still completes exactly once, in few requests."""
    cluster = quick
    faults = cluster.faults
    controller = await launcher.start(cluster, "ctl")
    await _ready(controller)
    faults.drop_watches(after_events=1, times=4)
    faults.expire_resumptions(times=3)
    faults.fail_requests(500, times=1, verb="list")
    faults.stall_watches(resource="pods")
    stalled = len(requests_by(cluster, controller))
    desired = {vm_key(cluster, i): nets for i, nets in DESIRED_CHANGES.items()}
    since = time.monotonic()
    for vm, networks in desired.items():
        set_networks(cluster, vm, networks)
    vm0 = vm_key(cluster, 0)
    await eventually(lambda: sdn_reported(cluster, vm0, "Network/net-b"), within=SETTLE,
                     what="the SDN reporting behind the stalled pod watch", watch=[controller])
    # The controller patched the pod but cannot see it: the plug waits, quietly.
    (plug,) = [op for op in operations(controller.journal) if op.vm == vm0]
    assert plug.state == "Requested"
    during = requests_by(cluster, controller)[stalled:]
    assert len([r for r in during if not is_lease(r)]) <= OPERATIONS * PER_OPERATION // 2
    faults.resume_watches()
    await _finish(cluster, controller, desired, faults=8, since=since)
    armed = faults.describe()
    assert armed["drops"] == [] and armed["expiries"] == [] and armed["failures"] == [], armed
