"""The settings of one simulated cluster: which world it imitates and how it misbehaves.

One frozen value, given to every actor at construction, so a test states in one place
which dialect runs, whether a dynamic-networks controller is deployed, how slow the
SDN and KubeVirt are and what fails. Invalid values are refused when the value is built,
never later inside an actor.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Dialect = Literal["deckhouse", "multus"]
RolloutStrategy = Literal["LiveUpdate", "Stage"]

DIALECTS: tuple[Dialect, ...] = ("deckhouse", "multus")
ROLLOUT_STRATEGIES: tuple[RolloutStrategy, ...] = ("LiveUpdate", "Stage")


@dataclass(frozen=True, slots=True)
class Delays:
    """Simulated durations in seconds; 0 means "at once"."""

    sdn_configure: float = 0.5  # SDN agent / dynamic-networks controller writing its status
    kubevirt_sync: float = 0.0  # KVVM template change → VMI spec
    attach: float = 0.1  # VMI spec change → virt-handler attaches / detaches
    migration: float = 2.0  # target pod configured → VMI switched over
    restart: float = 1.0  # VMI gone or failed → the new VMI and pod appear
    mac_allocate: float = 0.2  # deckhouse: a VirtualMachineMACAddress created → its address
    ip_allocate: float = 0.2  # deckhouse: an IPAddress of an IPAM pool created → allocated
    workload_update: float = 5.0  # KubeVirt's workload updater syncs at most this often

    def __post_init__(self) -> None:
        for name in ("sdn_configure", "kubevirt_sync", "attach", "migration", "restart",
                     "mac_allocate", "ip_allocate", "workload_update"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"delay {name} must be a finite number >= 0, not {value!r}")


@dataclass(frozen=True, slots=True)
class Failures:
    """What goes wrong on purpose.

    `sdn_networks`: identities (`Network/<name>`, `ClusterNetwork/<name>`) the SDN agent
    always fails to configure. `sdn_rate`: the probability that configuring any other
    entry fails, drawn per (pod, entry) from the cluster's seed, so a run is repeatable.
    `migrations`: every migration ends `Failed`. `ip_pools_exhausted`: identities of
    networks whose IPAM pool has no free address (their IPAddresses stay `Pending`).
    """

    sdn_networks: frozenset[str] = frozenset()
    sdn_rate: float = 0.0
    migrations: bool = False
    ip_pools_exhausted: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not 0.0 <= self.sdn_rate <= 1.0:
            raise ValueError(f"sdn failure rate must be within [0, 1], not {self.sdn_rate!r}")
        for identity in self.sdn_networks | self.ip_pools_exhausted:
            kind, _, name = identity.partition("/")
            if kind not in ("Network", "ClusterNetwork") or not name:
                raise ValueError(
                    f"a failing network is 'Network/<name>' or 'ClusterNetwork/<name>', "
                    f"not {identity!r}"
                )


@dataclass(frozen=True, slots=True)
class Knobs:
    dialect: Dialect = "deckhouse"
    dynamic_networks_controller: bool = False  # multus only: is one deployed?
    delays: Delays = field(default_factory=Delays)
    failures: Failures = field(default_factory=Failures)
    migration_required_grace: float = 15.0  # KubeVirt's wait before AutoMigrationDueToLiveUpdate
    cluster_network_nad_namespace: str = "default"  # multus: where ClusterNetworks' NADs live
    nads_served: bool = True  # is multus installed (its NetworkAttachmentDefinition kind)?
    # multus: KubeVirt's registered network binding plugins and their NAD ("" for none),
    # as in the KubeVirt CR's `spec.configuration.network.binding`
    network_bindings: Mapping[str, str] = field(default_factory=dict)
    seed: int = 0
    kubevirt_api: str | None = None  # upstream | deckhouse; None: the dialect's
    # deckhouse: does the virtualization controller hot-plug networks itself (a release
    # with #2187)? None: yes in a deckhouse world; False: an older release, where a
    # controller beside it must drive the hotplug
    native_hotplug: bool | None = None
    # deckhouse: does virt-launcher detach an interface marked absent from the running
    # domain? Deckhouse's KubeVirt does not for its bpfbridge binding (virt-launcher's
    # `interfacesToHotUnplug` matches only KubeVirt's hashed tap names): the guest keeps
    # the NIC, and the VMI the interface absent, until a migration or a restart
    detaches_live: bool = True

    @property
    def hotplugs(self) -> bool:
        """Does the platform's own controller hot-plug networks in this world?"""
        if self.native_hotplug is not None:
            return self.native_hotplug
        return self.dialect == "deckhouse"

    @property
    def api(self) -> str:
        """The KubeVirt API the server speaks: Deckhouse's renamed one under its SDN."""
        if self.kubevirt_api is not None:
            return self.kubevirt_api
        return "deckhouse" if self.dialect == "deckhouse" else "upstream"

    def __post_init__(self) -> None:
        if self.dialect not in DIALECTS:
            raise ValueError(f"dialect must be one of {', '.join(DIALECTS)}, not {self.dialect!r}")
        if self.dynamic_networks_controller and self.dialect != "multus":
            raise ValueError("a dynamic-networks controller exists only in the multus dialect")
        if self.native_hotplug and self.dialect != "deckhouse":
            raise ValueError("native_hotplug is a setting of the deckhouse dialect")
        if not self.detaches_live and self.dialect != "deckhouse":
            raise ValueError("detaches_live is a setting of the deckhouse dialect")
        if self.kubevirt_api not in (None, "upstream", "deckhouse"):
            raise ValueError(
                f"kubevirt_api must be upstream or deckhouse, not {self.kubevirt_api!r}")
        grace = self.migration_required_grace
        if not math.isfinite(grace) or grace < 0:
            raise ValueError(f"migration_required_grace must be >= 0, not {grace!r}")
        if not self.cluster_network_nad_namespace:
            raise ValueError("cluster_network_nad_namespace must not be empty")
