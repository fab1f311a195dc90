"""Migrations: a `VirtualMachineInstanceMigration` of nicplug's naming, within a cap.

A migration moves a VMI to new launcher pods, which is how an interface reaches a
running guest where the platform asks for it. The name is the machine's, so creating
it twice finds it; KubeVirt's webhook refusing it because the VMI migrates already is
"decide again". At most `max_migrations` of nicplug's migrations, and of the workload
updater's that nicplug follows in their stead, run at once in the cluster: one
check-and-create at a time, so the cap holds within this leader; a migration held back
is not an error, the decider journals it and asks again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, Final

from nicplug.adapters.core.executor.cluster import Cluster, Result
from nicplug.adapters.kube import errors as kube_errors
from nicplug.adapters.kube.resources import (
    MANAGED_BY_LABEL,
    OPERATION_ANNOTATION,
    WORKLOAD_UPDATE_ANNOTATION,
)
from nicplug.engine.errors import RetryAfterObservation
from nicplug.engine.journal import PendingEffect
from nicplug.machines.effects import CreateMigration

log = logging.getLogger("nicplug.adapters.executor")  # the name log pipelines filter on

IN_FLIGHT_MIGRATION: Final = "in-flight migration detected"
"""How KubeVirt's migration-create webhook refuses a migration of a VMI that migrates."""


class Migrations:
    """Creates a `CreateMigration`'s migration, or holds it back at the cap."""

    def __init__(self, cluster: Cluster, *, max_migrations: int) -> None:
        self._calls = cluster.calls
        self._kinds = cluster.kinds
        self._max_migrations = max_migrations
        self._migrating = asyncio.Lock()

    async def __call__(self, e: CreateMigration, effect: PendingEffect) -> Result:
        stream = str(effect.stream)
        # one check-and-create at a time, so that the cap holds within this leader
        async with self._migrating:
            # nicplug's own, and KubeVirt's workload-update migrations, which it follows
            # in their stead where KubeVirt migrates by itself
            listed = await self._calls.list_migrations(self._kinds.vmims, label_selector="")
            running = [
                m for m in listed
                if ((m.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))
                and (m.get("metadata") or {}).get("name") != e.migration
                and _counted(m)
            ]
            if len(running) >= self._max_migrations:
                # not an error: the decider journals it on the operation (`MigrationHeld`),
                # says it on the VM and asks again with the operation's other effects
                log.info("migration %s/%s held back: %d of nicplug's migrations in flight, "
                         "the cap is %d", e.namespace, e.migration, len(running),
                         self._max_migrations)
                return {"created": False, "held": True, "in_flight": len(running),
                        "cap": self._max_migrations}
            try:
                # A 404 on the create is decided again, not retried: no object of this
                # write was just read, and the API server answers it when the namespace
                # is gone (KubeVirt's webhook refuses a missing VMI with 400, "does not
                # exist"), so the VM and its objects leave the informers too: the world
                # decided from then asks for no migration.
                await self._calls.create_migration(
                    self._kinds.vmims, e.namespace, e.migration, e.vmi,
                    labels={MANAGED_BY_LABEL: "nicplug"},
                    annotations={OPERATION_ANNOTATION: stream},
                )
            except kube_errors.AlreadyExists:
                return {"created": False}
            except kube_errors.PatchRejected as exc:
                if exc.status == 400 and IN_FLIGHT_MIGRATION in str(exc):
                    # KubeVirt's webhook: the VMI migrates already (someone else's, or
                    # this very one still running: admission answers before storage),
                    # so the decision's "no migration running" no longer holds
                    raise RetryAfterObservation(f"VMI {e.namespace}/{e.vmi}: {exc}") from exc
                raise
            return {"created": True}


def _counted(migration: Mapping[str, Any]) -> bool:
    """Does `--max-migrations` count this migration: nicplug's, or one KubeVirt's
    workload updater created (`kubevirt.io/workloadUpdateMigration`)?"""
    meta = migration.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    return bool(labels.get(MANAGED_BY_LABEL) == "nicplug"
                or WORKLOAD_UPDATE_ANNOTATION in annotations)
