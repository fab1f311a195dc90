"""The controller's settings: one validated record built from flags or environment.

Every option of `nicplug run` is also read from an environment variable
`NICPLUG_<OPTION>` (the CLI does that); this module only validates the values and
turns them into the records the engine and the machines take. A bad value is a
`ValueError` with a message a person can act on, raised before anything starts.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from nicplug.adapters.core.observability import parse_addr
from nicplug.adapters.core.scope import VMScope
from nicplug.adapters.kube.flavour import (
    Flavour,
    FlavourName,
    default_for_dialect,
    flavour_for,
    with_dialect,
)
from nicplug.adapters.kube.lease import LeaseTiming
from nicplug.engine.locations import is_dsn, shown
from nicplug.machines.policy import MachineConfig, Mode, Timeouts

Dialect = Literal["deckhouse", "multus"]
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
Gating = Literal["rollout-strategy", "always-live"]
Migrations = Literal["auto", "opt-in", "never", "manual"]
ModeSetting = Literal["auto", "observe", "drive"]
"""`--mode`: `observe` (the platform hot-plugs, nicplug follows and tells), `drive`
(nicplug writes the pods and KVVMs: a Deckhouse release without native hotplug), or
`auto` (the default): `nicplug run` asks the cluster (`adapters/core/platform_mode.py`)."""


class Settings(BaseModel):
    # every duration a finite number of seconds: `inf` would be a wait without a deadline
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    kubeconfig: Path | None = None
    journal: Path = Path("nicplug-journal.db")
    journal_dsn: str | None = None
    """A PostgreSQL journal (`postgresql://...`) instead of the SQLite file `journal`:
    replicas that do not lead follow it as hot standbys."""
    dialect: Dialect = "deckhouse"
    mode: ModeSetting = "auto"
    kubevirt_api: FlavourName | None = None  # None: the dialect's (see `flavour`)
    gating: Gating = "rollout-strategy"
    migrations: Migrations = "auto"
    max_migrations: int = Field(default=5, ge=1, le=1000)
    migration_attempts: int = Field(default=3, ge=1, le=100)
    namespace: str | None = None
    namespaces: tuple[str, ...] = ()  # the scope: manage VMs only in these (empty: all)
    vm_selector: str = ""  # the scope: manage only VMs whose labels match
    metrics_addr: str = "127.0.0.1:8080"
    query_addr: str = "127.0.0.1:8081"
    """Where `/operations` is served, apart from the metrics; "" serves it nowhere."""
    sdn_ready_timeout: float = Field(default=120.0, gt=0)
    attach_timeout: float = Field(default=120.0, gt=0)
    detach_timeout: float = Field(default=120.0, gt=0)
    migration_timeout: float = Field(default=600.0, gt=0)
    dynamic_networks_grace: float = Field(default=15.0, ge=0)
    effect_reissue_after: float = Field(default=30.0, gt=0)
    backoff_base: float = Field(default=5.0, gt=0)
    backoff_max: float = Field(default=300.0, gt=0)
    cluster_network_namespace: str = "default"
    lease_name: str = "nicplug"
    lease_namespace: str = "default"
    identity: str | None = None
    lease_duration: int = Field(default=15, ge=1)
    renew_deadline: float = Field(default=10.0, gt=0)
    retry_period: float = Field(default=2.0, gt=0)
    request_timeout: float = Field(default=30.0, gt=0)
    synchronous: Literal["FULL", "NORMAL"] = "FULL"
    concurrency: int = Field(default=64, ge=1, le=4096)
    record_tape: Path | None = None
    retention: float = Field(default=30 * 86400.0, gt=0)
    """Seconds after which a finished operation's events are archived."""
    archive_dir: Path | None = None
    """Where archives go; None: beside the journal."""
    created_objects_retention: float = Field(default=86400.0, gt=0)
    """Seconds after which a finished migration or VM operation nicplug created, that
    no live operation reads, is deleted (`adapters/core/created_objects.py`)."""
    operation_objects: bool = True
    """Project each operation to a `NetworkInterfaceOperation` object (`operation_objects`)."""

    @field_validator("journal")
    @classmethod
    def _journal(cls, value: Path) -> Path:
        if value.is_dir():
            raise ValueError(f"{value} is a directory; name the journal file in it")
        if not value.absolute().parent.is_dir():
            raise ValueError(f"no directory {value.absolute().parent} for the journal")
        return value

    @field_validator("namespaces")
    @classmethod
    def _namespaces(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not _NAMESPACE.fullmatch(name):
                raise ValueError(f"{name!r} is not a namespace name (lower-case letters, "
                                 "digits and '-', at most 63)")
        return value

    @field_validator("vm_selector")
    @classmethod
    def _selector(cls, value: str) -> str:
        VMScope(selector=value)
        return value

    def scope(self) -> VMScope:
        return VMScope(selector=self.vm_selector, namespaces=frozenset(self.namespaces))

    @field_validator("journal_dsn")
    @classmethod
    def _dsn(cls, value: str | None) -> str | None:
        if value is not None and not is_dsn(value):
            raise ValueError("the journal's DSN must start with postgresql:// or postgres://")
        return value

    def journal_name(self) -> str:
        """The journal as logs and messages name it (a DSN without its password)."""
        return shown(self.journal_dsn) if self.journal_dsn else str(self.journal)

    @field_validator("metrics_addr")
    @classmethod
    def _addr(cls, value: str) -> str:
        parse_addr(value)
        return value

    @field_validator("query_addr")
    @classmethod
    def _query_addr(cls, value: str) -> str:
        if value:
            parse_addr(value)
        return value

    @field_validator("record_tape")
    @classmethod
    def _tape(cls, value: Path | None) -> Path | None:
        if value is not None and not value.parent.is_dir():
            raise ValueError(f"no directory {value.parent} to write the tape in")
        if value is not None and value.is_dir():
            raise ValueError(f"{value} is a directory")
        return value

    @field_validator("archive_dir")
    @classmethod
    def _archive_dir(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_dir():
            raise ValueError(f"no directory {value} to write archives in")
        return value

    def archives(self) -> Path:
        """The directory retention writes its archives to (absolute)."""
        return (self.archive_dir or self.journal.absolute().parent).absolute()

    @model_validator(mode="after")
    def _mode_of_flavour(self) -> Settings:
        if self.mode == "drive" and self.dialect == "multus":
            raise ValueError(
                "--mode drive: the kubevirt flavour only observes (KubeVirt writes the VMI "
                "and the launcher pod; nicplug adds migrations where KubeVirt asks for one)")
        return self

    @model_validator(mode="after")
    def _lease_timing(self) -> Settings:
        try:
            self.lease_timing()
        except ValueError as exc:
            raise ValueError(
                f"--lease-duration {self.lease_duration}, --renew-deadline "
                f"{self.renew_deadline}, --retry-period {self.retry_period}: {exc}"
            ) from None
        return self

    def flavour(self) -> Flavour:
        """The KubeVirt API the cluster serves: as set, else the dialect's."""
        return with_dialect(
            flavour_for(self.kubevirt_api or default_for_dialect(self.dialect)), self.dialect)

    def lease_timing(self) -> LeaseTiming:
        return LeaseTiming(
            lease_duration=self.lease_duration,
            renew_deadline=self.renew_deadline,
            retry_period=self.retry_period,
        )

    def fixed_mode(self) -> Mode | None:
        """The mode the settings alone decide: the kubevirt flavour always observes,
        `--mode observe|drive` is obeyed; None for `auto` on Deckhouse (ask the cluster)."""
        if self.dialect == "multus":
            return "observe"
        return None if self.mode == "auto" else self.mode

    def machine_config(self, mode: Mode | None = None) -> MachineConfig:
        """The machines' configuration; `mode` is the resolved one where `--mode auto`
        left it to the cluster (default: `fixed_mode`, else drive)."""
        timeouts = Timeouts(
            sdn_ready_timeout=self.sdn_ready_timeout,
            attach_timeout=self.attach_timeout,
            detach_timeout=self.detach_timeout,
            migration_timeout=self.migration_timeout,
            dynamic_networks_grace=self.dynamic_networks_grace,
            effect_reissue_after=self.effect_reissue_after,
            backoff_base=self.backoff_base,
            backoff_max=self.backoff_max,
        )
        return MachineConfig(
            mode=mode or self.fixed_mode() or "drive",
            gating=self.gating,
            migrations=self.migrations,
            migration_attempts=self.migration_attempts,
            dialect_kind=self.dialect,
            timeouts=timeouts,
            cluster_network_nad_namespace=self.cluster_network_namespace,
            restarts=self.flavour().restarts,
        )
