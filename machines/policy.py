"""How nicplug is told to behave: mode, gating, migrations, dialect, timeouts (DESIGN §3–4).

`MachineConfig` is the one frozen value the decider is built with; the command line
fills it from flags. The gating table lives here as a function so the machines and the
documentation read the same rule. Never reads the environment or the clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from nicplug.engine.backoff import Backoff
from nicplug.machines.world import RolloutStrategy

Gating = Literal["rollout-strategy", "always-live"]
"""`rollout-strategy` (default): consistent with CPU/memory; `always-live`: legacy KubeVirt."""

MigrationPolicy = Literal["auto", "opt-in", "never", "manual"]
"""When nicplug may create the migration KubeVirt asks for: `auto` for any VM, `opt-in`
only for VMs labelled `MIGRATION_OPT_IN_LABEL=true`, `never` (`manual` is the older
spelling of it). Whatever the policy, a VM that cannot move is left alone and told."""

MIGRATION_OPT_IN_LABEL = "nicplug.io/migrations"
"""The label on the (KubeVirt or Deckhouse) VirtualMachine that opts it in."""
DialectKind = Literal["deckhouse", "multus"]
RestartMethod = Literal["run-strategy", "operations"]
"""How nicplug restarts a VM: `run-strategy` (halt the KVVM, write, start it, as
`virtctl stop`/`start` do: upstream KubeVirt) or `operations` (a `Stop`, then a `Start`
`VirtualMachineOperation`, the Deckhouse platform's own way)."""
FlavourName = Literal["deckhouse", "kubevirt"]
"""Whose cluster nicplug serves; each has its SDN dialect (`kubevirt`: `multus`)."""
FLAVOUR_OF: dict[DialectKind, FlavourName] = {"deckhouse": "deckhouse", "multus": "kubevirt"}
Mode = Literal["observe", "drive"]
"""Who writes the hotplug: `observe` — the platform's own controller does (Deckhouse
since its native NIC hotplug; KubeVirt always), nicplug takes each transition from what
the platform writes and adds deadlines, Events, metrics and the journal; `drive` —
nicplug writes the launcher pods' SDN request and the KVVM itself (a Deckhouse release
without native hotplug). The setting `auto` is resolved to one of these before the
machines are built (`adapters/core/platform_mode.py`)."""


def hotplug_in_place(gating: Gating, strategy: RolloutStrategy) -> bool:
    """The gating table: may a Network/ClusterNetwork change be applied to a running VM?

    | policy           | LiveUpdate       | Stage            |
    |------------------|------------------|------------------|
    | rollout-strategy | hotplug in place | RestartRequired  |
    | always-live      | hotplug in place | hotplug in place |
    """
    return gating == "always-live" or strategy == "LiveUpdate"


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Durable deadlines and delays, in seconds of the injected clock.

    * `sdn_ready_timeout` (120): a plug waits this long in `Requested` and again in
      `AnnotationPatched` for the SDN to report the entry ready → `Failed(SDNTimeout)`.
    * `attach_timeout` (120): in `SDNReady` / `VMIPatched` of a running VM, for the guest
      to show the interface → `Failed(AttachTimeout)`.
    * `detach_timeout` (120): each step of an unplug on a running VM → `Failed(DetachTimeout)`.
    * `migration_timeout` (600): in `Migrating` → `Failed(MigrationTimeout)`.
    * `dynamic_networks_grace` (15): no longer changes a decision (the multus flavour
      patches the KVVM first and lets KubeVirt plumb); kept so existing settings load.
    * `effect_reissue_after` (30): an effect issued while the world did not move is
      issued again; one the world keeps not showing, after the time its operation had
      waited in its state if longer, at most `backoff_max` (`timers.reissue_after`).
    * `backoff_base` (5) / `backoff_max` (300): a failed operation is retried after
      `min(base · 2^(attempt-1), max)` while the desired state still asks for it.
    """

    sdn_ready_timeout: float = 120.0
    attach_timeout: float = 120.0
    detach_timeout: float = 120.0
    migration_timeout: float = 600.0
    dynamic_networks_grace: float = 15.0
    effect_reissue_after: float = 30.0
    backoff_base: float = 5.0
    backoff_max: float = 300.0

    def backoff(self, attempt: int) -> float:
        """The engine's `Backoff` with these figures, doubling, without jitter: a
        decision must be the same on every replay, so nothing random enters it."""
        return Backoff(base=self.backoff_base, cap=self.backoff_max).delay(attempt)


@dataclass(frozen=True, slots=True)
class MachineConfig:
    """Everything that changes decisions besides the world.

    `cluster_network_nad_namespace`: in the multus dialect, the namespace of the
    NetworkAttachmentDefinition behind a ClusterNetwork (a Network's NAD lives in the
    VM's namespace).
    """

    mode: Mode = "drive"
    gating: Gating = "rollout-strategy"
    migrations: MigrationPolicy = "auto"
    migration_attempts: int = 3
    """At most this many migrations of one operation fail (nicplug's or KubeVirt's, over
    its attempts, `Timeouts.backoff` apart); then it ends `Failed(MigrationFailed)` with
    KubeVirt's last words and is not retried (`--migration-attempts`)."""
    dialect_kind: DialectKind = "deckhouse"
    timeouts: Timeouts = field(default_factory=Timeouts)
    cluster_network_nad_namespace: str = "default"
    restarts: RestartMethod = "run-strategy"

    @property
    def flavour(self) -> FlavourName:
        """The flavour of the dialect: what the journal records on each operation."""
        return FLAVOUR_OF[self.dialect_kind]

    @property
    def observes(self) -> bool:
        """nicplug writes none of the platform's objects — no pod, KVVM, KVVMI, migration,
        VirtualMachineOperation or VM condition — only Events: the deckhouse flavour in
        observe mode. (The kubevirt flavour always observes the VM — its desired state is
        the template, `DesiredVM.in_template` — and still creates the migrations KubeVirt
        asks for and no one else will.)"""
        return self.mode == "observe" and self.flavour == "deckhouse"
