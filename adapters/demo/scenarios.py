"""The demo's scenarios: what a user changes on which VM, and what must come of it.

A scenario is a few `Driver` calls (merge patches of the VM's `spec.networks` — on
upstream KubeVirt of the KubeVirt VM's template —, the KubeVirt CR, the approval mode:
what a user or an admin would do with kubectl) and the final state each operation must
reach. Nothing here reads the journal directly: the
driver's `wait_for` does, through the board's snapshot.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from nicplug.adapters.demo.worlds import WorldSpec


@dataclass(frozen=True, slots=True)
class Outcome:
    vm: str  # namespace/name
    network: str
    direction: str
    state: str
    reason: str | None = None

    def label(self) -> str:
        tail = f" ({self.reason})" if self.reason else ""
        return f"{self.direction} {self.network} → {self.state}{tail}"


class Driver(Protocol):
    async def add_network(self, vm: str, type_: str, name: str) -> None: ...
    async def remove_network(self, vm: str, identity: str) -> None: ...
    async def set_approval(self, vm: str, mode: str) -> None: ...
    async def set_label(self, vm: str, key: str, value: str) -> None: ...
    async def wait_for(self, outcome: Outcome, *, states: frozenset[str]) -> None: ...


Steps = Callable[[Driver], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Scenario:
    world: str
    title: str
    steps: Steps
    outcomes: tuple[Outcome, ...]


def _vm(index: int) -> str:
    return f"default/vm-{index:05d}"


async def _hotplug_network(d: Driver) -> None:
    await d.add_network(_vm(0), "Network", "user-net")


async def _hotplug_cluster_network(d: Driver) -> None:
    await d.add_network(_vm(1), "ClusterNetwork", "storage")


async def _plug_then_unplug(d: Driver) -> None:
    await d.add_network(_vm(2), "Network", "user-net")
    await d.wait_for(Outcome(_vm(2), "Network/user-net", "plug", "Attached"),
                     states=frozenset({"Attached"}))
    await d.remove_network(_vm(2), "Network/user-net")


async def _remove_main(d: Driver) -> None:
    # `[Main]` alone minus Main is `[]`, which means `[Main]`: give the VM a second
    # network first, so that removing Main really leaves it without one.
    await d.add_network(_vm(3), "Network", "user-net")
    await d.wait_for(Outcome(_vm(3), "Network/user-net", "plug", "Attached"),
                     states=frozenset({"Attached"}))
    await d.remove_network(_vm(3), "Main")


async def _sdn_failure(d: Driver) -> None:
    await d.add_network(_vm(4), "Network", "broken-net")


async def _revert(d: Driver) -> None:
    await d.add_network(_vm(5), "Network", "user-net")
    await d.wait_for(Outcome(_vm(5), "Network/user-net", "plug", "AnnotationPatched"),
                     states=frozenset({"AnnotationPatched", "SDNReady"}))
    await d.remove_network(_vm(5), "Network/user-net")


async def _staged_automatic(d: Driver) -> None:
    await d.set_approval(_vm(0), "Automatic")
    await d.add_network(_vm(0), "Network", "user-net")


async def _staged_manual(d: Driver) -> None:
    await d.add_network(_vm(1), "Network", "user-net")


async def _migration_opted_in(d: Driver) -> None:
    await d.set_label(_vm(0), "nicplug.io/migrations", "true")
    await d.add_network(_vm(0), "Network", "user-net")


async def _migration_opted_out(d: Driver) -> None:
    await d.add_network(_vm(1), "Network", "user-net")


async def _hotplug_under_stage(d: Driver) -> None:
    await d.add_network(_vm(0), "Network", "user-net")


WORLDS: tuple[WorldSpec, ...] = (
    WorldSpec(
        "live", "deckhouse SDN, vmRolloutStrategy LiveUpdate",
        # today's Deckhouse hot-plugs by itself and nicplug observes (`nicplug demo
        # --mode drive`: a release without it, nicplug drives); the outcomes are the same
        sim_args=("--sdn-delay", "1.0", "--network", "user-net", "--network", "broken-net",
                  "--fail-network", "Network/broken-net"),
        # Deckhouse's SDN never fails an entry for good: a network it cannot configure
        # waits, saying why, until the SDN deadline
        controller_args=("--backoff-base", "300", "--sdn-ready-timeout", "8"),
    ),
    WorldSpec(
        # nicplug's gating and restarts: drive mode only (Deckhouse's own hotplug
        # applies a network change at once, whatever KubeVirt's rollout strategy)
        "stage", "deckhouse SDN, vmRolloutStrategy Stage, a release without native hotplug",
        rollout_strategy="Stage", vms=2, mode="drive",
        sim_args=("--sdn-delay", "0.3", "--restart-duration", "1.0"),
    ),
    WorldSpec(
        "kubevirt", "upstream KubeVirt + multus, no dynamic-networks controller, "
        "--migrations opt-in", dialect="multus", vms=2,
        sim_args=("--no-dynamic-networks", "--migration-grace", "2", "--migration-duration",
                  "2"),
        controller_args=("--migrations", "opt-in"),
    ),
    WorldSpec(
        "kubevirt-stage", "upstream KubeVirt + multus with the dynamic-networks controller, "
        "vmRolloutStrategy Stage", dialect="multus",
        rollout_strategy="Stage", vms=1, sim_args=("--dynamic-networks", "--sdn-delay", "0.5"),
    ),
)

SCENARIOS: tuple[Scenario, ...] = (
    Scenario("live", "hotplug a Network", _hotplug_network,
             (Outcome(_vm(0), "Network/user-net", "plug", "Attached"),)),
    Scenario("live", "hotplug a ClusterNetwork", _hotplug_cluster_network,
             (Outcome(_vm(1), "ClusterNetwork/storage", "plug", "Attached"),)),
    Scenario("live", "hot-unplug", _plug_then_unplug,
             (Outcome(_vm(2), "Network/user-net", "plug", "Attached"),
              Outcome(_vm(2), "Network/user-net", "unplug", "Detached"))),
    Scenario("live", "remove Main: restart required", _remove_main,
             (Outcome(_vm(3), "Network/user-net", "plug", "Attached"),
              Outcome(_vm(3), "Main", "unplug", "RestartRequired"))),
    Scenario("live", "SDN fails the network", _sdn_failure,
             (Outcome(_vm(4), "Network/broken-net", "plug", "Failed", "SDNTimeout"),)),
    Scenario("live", "revert mid-flight", _revert,
             (Outcome(_vm(5), "Network/user-net", "plug", "Cancelled"),)),
    Scenario("stage", "Stage + Automatic approval: applied at restart", _staged_automatic,
             (Outcome(_vm(0), "Network/user-net", "plug", "Attached"),)),
    Scenario("stage", "Stage + Manual approval: waits for a restart", _staged_manual,
             (Outcome(_vm(1), "Network/user-net", "plug", "RestartRequired"),)),
    Scenario("kubevirt", "no dynamic networks: an opted-in VM is migrated", _migration_opted_in,
             (Outcome(_vm(0), "Network/user-net", "plug", "Attached"),)),
    Scenario("kubevirt", "no dynamic networks: an opted-out VM waits and says why",
             _migration_opted_out,
             (Outcome(_vm(1), "Network/user-net", "plug", "MigrationRequired"),)),
    Scenario("kubevirt-stage", "hotplug under Stage: applied live, the bypass reported",
             _hotplug_under_stage,
             (Outcome(_vm(0), "Network/user-net", "plug", "Attached"),)),
)


def worlds_in(mode: str) -> tuple[WorldSpec, ...]:
    """The worlds of `nicplug demo --mode observe|drive`: the live world's Deckhouse
    hot-plugs by itself and nicplug observes, or it does not and nicplug drives."""
    return tuple(replace(w, mode=mode) if w.name == "live" else w for w in WORLDS)


def matches(outcome: Outcome, row: Mapping[str, Any]) -> bool:
    """Does a board row (one operation) show `outcome`?"""
    return (
        row["vm"] == outcome.vm
        and row["network"] == outcome.network
        and row["direction"] == outcome.direction
        and row["state"] == outcome.state
        and (outcome.reason is None or row["reason"] == outcome.reason)
    )
