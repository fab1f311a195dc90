"""One failover of `nicplug run` on a PostgreSQL journal, measured: two replicas, the
simulated cluster, a real database; the leader is SIGKILLed (or SIGSTOPped) while VMs
hot-plug. Shared by the slow test (a few dozen VMs) and `python -m bench failover`
(200 VMs, 20 runs).

What is measured, from the instant the leader is stopped:
* `first_write`: until the standby's first write to the API server (Lease aside);
* `converged`: until every VM has its interface and every operation is terminal;
* `twice`: pod and KVVM patches sent beyond the effects the journal holds (an effect
  sent by the old leader and again by the new one counts once more);
* `lost`: operations whose journaled path is not clean or not complete (`check_journal`
  raises on any; counted as 0 when it passes).
"""

from __future__ import annotations

import asyncio
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import aiohttp

from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Delays, Knobs
from nicplug.simulator.kubeconfig import write_kubeconfig
from tests.integration import postgres_view as pg
from tests.integration.partition import PartitionProxy
from tests.integration.processes_support import (
    FAST_LEASE,
    ControllerProcess,
    Launcher,
    eventually,
    free_port,
    is_lease,
    kvvm_patches,
    lease_holder,
    pod_patches,
    requests_by,
    set_networks,
    vm_key,
    world_has,
)

START = 60.0  # seconds to start, win the Lease and list (2 shared cores)
WRITES = {"patch", "create", "update", "delete"}


@dataclass(frozen=True)
class Failover:
    vms: int
    first_write: float
    converged: float
    twice: int
    lost: int
    done_before: int  # operations the old leader had finished when it was stopped
    led_before: bool = False  # the standby had led already (the leader lost its Lease
    # on its own under load): the takeover measured is its second


async def cluster_of(directory: Path, vms: int) -> SimulatedCluster:
    fixtures = Fixtures(vms=vms, networks=("net-a", "net-b"), cluster_networks=("storage",),
                        vm_networks=(("Network", "net-a"),))
    cluster = SimulatedCluster(
        Knobs(delays=Delays(sdn_configure=0.3, attach=0.2)), fixtures=fixtures,
        kubeconfig_path=directory / "kubeconfig")
    await cluster.start()
    return cluster


async def _leader_ready(cluster: SimulatedCluster, candidates: list[ControllerProcess]
                        ) -> ControllerProcess:
    async def ready_holder() -> ControllerProcess | None:
        for controller in candidates:
            if controller.identity == lease_holder(cluster) and await controller.ready():
                return controller
        return None

    leader: ControllerProcess = await eventually(
        ready_holder, within=START, what="a leader ready", watch=candidates, every=0.05)
    return leader


async def _operations_of(port: int) -> str:
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as session, session.get(
        f"http://127.0.0.1:{port}/operations"
    ) as response:
        text = await response.text()
        assert response.status == 200, text
        return text


async def fail_over(
    cluster: SimulatedCluster, launcher: Launcher, dsn: str, *,
    stop: signal.Signals | Literal["partition"], kill_after: float = 0.3,
) -> Failover:
    """Hot-plug `Network/net-b` on every VM; stop the leader once `kill_after` of the
    operations are terminal (a signal, or `partition`: cut off from the API server but
    not from the database, healed once the standby converged); measure the takeover."""
    journal = ("--journal", dsn)
    proxy: PartitionProxy | None = None
    kubeconfig = None
    if stop == "partition":
        host, _, port = cluster.url.removeprefix("http://").rpartition(":")
        proxy = PartitionProxy(host, int(port))
        await proxy.start()
        kubeconfig = write_kubeconfig(launcher.directory / "via-proxy", proxy.url)
    try:
        return await _fail_over(cluster, launcher, journal, dsn, stop, kill_after, proxy,
                                kubeconfig)
    finally:
        if proxy is not None:
            await proxy.close()


async def _fail_over(
    cluster: SimulatedCluster, launcher: Launcher, journal: tuple[str, str], dsn: str,
    stop: signal.Signals | Literal["partition"], kill_after: float,
    proxy: PartitionProxy | None, kubeconfig: Path | None,
) -> Failover:
    a = await launcher.start(cluster, "ctl-a", *journal, kubeconfig=kubeconfig)
    leader = await _leader_ready(cluster, [a])
    query_port = free_port()
    b = await launcher.start(cluster, "ctl-b", *journal, "--query-addr",
                             f"127.0.0.1:{query_port}")
    await eventually(lambda: any(is_lease(r) for r in requests_by(cluster, b)),
                     within=START, what="ctl-b standing", watch=[b], every=0.05)
    vms = [vm_key(cluster, i) for i in range(len(cluster.vms))]
    wanted = ["Network/net-a", "Network/net-b"]
    for vm in vms:
        set_networks(cluster, vm, wanted)

    async def some_done() -> int:
        done = sum(op.terminal for op in await pg.operations(dsn))
        return done if done >= max(1, int(len(vms) * kill_after)) else 0

    done_before = await eventually(some_done, within=START, what="operations under way",
                                   watch=[leader, b], every=0.02)
    served = await _operations_of(query_port)  # a standby answers queries meanwhile
    assert "Network/net-b" in served, served[:300]

    def writes_by_b() -> int:
        return sum(r.verb in WRITES and not is_lease(r) for r in requests_by(cluster, b))

    before = writes_by_b()  # not 0 when the leader lost its Lease on its own before
    if proxy is not None:
        proxy.partition()
    else:
        assert stop != "partition"
        leader.process.send_signal(stop)
    stopped = time.monotonic()

    def standby_wrote() -> bool:
        return writes_by_b() > before

    await eventually(standby_wrote, within=START, what="the standby's first write",
                     watch=[b], every=0.01)
    first_write = time.monotonic() - stopped

    async def converged() -> bool:
        ops = await pg.operations(dsn)
        return (all(world_has(cluster, vm, wanted) for vm in vms)
                and len(ops) == len(vms) and all(op.terminal for op in ops))

    await eventually(converged, within=START, what="every VM hot-plugged", watch=[b],
                     every=0.05)
    took = time.monotonic() - stopped
    if stop == signal.SIGSTOP:
        leader.process.send_signal(signal.SIGCONT)  # it wakes deposed: writes nothing
    if proxy is not None:
        proxy.heal()  # what it sent before the cut arrives late, as TCP would deliver it
    await pg.check_journal(dsn)  # raises on a lost or doubled transition
    ops = await pg.operations(dsn)
    lost = sum(op.state != "Attached" for op in ops) + (len(vms) - len(ops))
    sent = [r for c in (a, b) for r in requests_by(cluster, c)]
    writes = pod_patches(sent) + kvvm_patches(sent)
    effects = await pg.effects_by_type(dsn, ["PatchPodNetworks", "PatchVirtualMachine"])
    twice = sum(max(0, writes[vm.partition("/")[2]] - effects.get(vm, 0)) for vm in vms)
    return Failover(len(vms), first_write, took, twice, lost, done_before,
                    led_before=before > 0)


async def settle(controllers: list[ControllerProcess]) -> None:
    """Give a SIGCONTed leader a moment to try its writes (all refused), then stop all."""
    await asyncio.sleep(0)
    for controller in controllers:
        if controller.running:
            await controller.kill()


__all__ = ["FAST_LEASE", "Failover", "cluster_of", "fail_over", "settle"]
