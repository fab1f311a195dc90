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

from collections import Counter
from collections.abc import AsyncIterator
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
    set_networks,
    unanswered,
    vm_key,
    world_has,
)

pytestmark = pytest.mark.slow

START = 30.0  # seconds for a controller to start, win the Lease and list (2 cores, shared)
SETTLE = 30.0  # seconds for the in-flight operations to finish


async def _cluster(tmp_path: Path, knobs: Knobs, vms: int) -> SimulatedCluster:
    fixtures = Fixtures(vms=vms, networks=("net-a", "net-b"), cluster_networks=("storage",),
                        vm_networks=(("Network", "net-a"),))
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
async def launcher(slow_sdn: SimulatedCluster, tmp_path: Path) -> AsyncIterator[Launcher]:
    launcher = Launcher(slow_sdn, tmp_path)
    try:
        yield launcher
    finally:
        await launcher.close()


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
    candidates = [await launcher.start(f"ctl-{i}", journal=journal) for i in range(1, 5)]
    unanswered_at_kills: list[tuple[str, str]] = []

    async def next_leader() -> ControllerProcess:
        return await _leader(cluster, [c for c in candidates if c.running])

    async def kill(leader: ControllerProcess) -> None:
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
    cluster.faults.add_latency(0.6, verb="patch", resource="virtualmachines.kubevirt.io")
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
    # Each operation needs at most one KVVM patch and one pod patch of its own (an
    # unplug's KVVM cleanup is KubeVirt's here). Besides, a new leader may re-issue
    # an effect the dead one left unanswered: one more per VM, effect and kill.
    ops = Counter(vm for vm, _, _ in expected)
    again = Counter(unanswered_at_kills)
    writes = [r for c in candidates for r in requests_by(cluster, c)]
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
    leader = await launcher.start("ctl-a")
    await _ready(leader)
    standby = await launcher.start("ctl-b")
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
