"""Upkeep of what nicplug created in the cluster: its finished migrations and VM
operations deleted once the retention has passed (`machines.cleanup` decides which).

Run by the leader beside the journal's retention, once an hour, and by tests with the
time they choose. Each run lists nicplug's own objects (label
`app.kubernetes.io/managed-by=nicplug`) fresh from the server, reads the journal's live
operations, and deletes what the rule lets go, each with its uid as precondition (an
object made again under the same name since the list is not touched). A 404 is done,
a 409 (another incarnation) is left for the next run; any other error is logged and
the run goes on with the next object: a deletion is repeatable, so a failed or
interrupted run loses nothing. Never deletes an object without nicplug's label, and
never writes anything else. Its calls carry the term's fence: a deposed leader
deletes nothing.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nicplug.adapters.kube.calls import KubeCalls
from nicplug.adapters.kube.errors import Conflict, KubeError, NotFound
from nicplug.adapters.kube.flavour import Flavour
from nicplug.adapters.kube.resources import (
    MANAGED_BY_LABEL,
    MANAGED_BY_NICPLUG,
    OPERATION_ANNOTATION,
    KindRef,
)
from nicplug.engine.journal import Journal
from nicplug.machines.cleanup import CreatedKind, CreatedObject, Verdict, judge, live_readers

log = logging.getLogger("nicplug.adapters.created_objects")  # the name log pipelines filter on

DEFAULT_RETENTION = 86400.0
"""A day: the TTL Deckhouse's virtualization controller gives finished VM operations
and migrations (`GC_VMOP_TTL`, `GC_VMI_MIGRATION_TTL` in its module's templates)."""


@dataclass(frozen=True, slots=True)
class Cleaned:
    """What one run did: the objects it deleted (or found gone), and the verdicts."""

    deleted: tuple[CreatedObject, ...]
    verdicts: tuple[Verdict, ...]


def platform_collects(flavour: Flavour) -> frozenset[CreatedKind]:
    """The kinds nicplug leaves to the platform's own garbage collection: upstream
    KubeVirt keeps five finished migrations per VMI and deletes each older one with its
    defunct launcher pod; nicplug deleting one of the five would leave that pod behind
    until the VMI goes (`docs/decisions/cleanup.md`)."""
    return frozenset({"migration"}) if flavour.name == "upstream" else frozenset()


async def clean_created(
    calls: KubeCalls, flavour: Flavour, journal: Journal, *, retention: float, now: float,
    in_scope: Callable[[str], bool] = lambda _vm: True,
) -> Cleaned:
    """One run: list, judge, delete. `now` in seconds since the epoch; `in_scope`
    whether this nicplug manages the VM `namespace/name` (`Observing.in_scope`)."""
    leave = platform_collects(flavour)
    objects: list[CreatedObject] = []
    if "migration" not in leave:
        objects += _read(await calls.list_labelled(
            flavour.vmims, label_selector=MANAGED_BY_NICPLUG), "migration")
    if flavour.vm_operations is not None:
        objects += _read(await calls.list_labelled(
            flavour.vm_operations, label_selector=MANAGED_BY_NICPLUG), "vm-operation")
    if not objects:
        return Cleaned((), ())  # nothing of nicplug's: the journal need not be read
    # every row, not only the live VMs': a VM whose operation failed and will be tried
    # again has no live stream until then
    streams, vms = live_readers(row.view for row in await journal.views())
    verdicts = judge(objects, live_streams=streams, live_vms=vms, platform_collects=leave,
                     retention=retention, now=now, in_scope=in_scope)
    deleted = []
    for verdict in verdicts:
        if not verdict.delete:
            continue
        o = verdict.obj
        kind = flavour.vmims if o.kind == "migration" else flavour.vm_operations
        assert kind is not None
        if await delete_created(calls, kind, o):
            deleted.append(o)
    return Cleaned(tuple(deleted), tuple(verdicts))


async def delete_created(calls: KubeCalls, kind: KindRef, o: CreatedObject) -> bool:
    """Delete `o` (that incarnation only); whether it is gone now."""
    try:
        await calls.delete(kind, o.namespace, o.name, uid=o.uid)
    except NotFound:
        pass  # gone already: the platform's collection, or a user, was first
    except Conflict:
        log.info("cleanup: %s %s/%s was made again since it was listed; left for the "
                 "next run", kind.kind, o.namespace, o.name)
        return False
    except KubeError as error:
        log.warning("cleanup: %s %s/%s not deleted, tried again at the next run: %s",
                    kind.kind, o.namespace, o.name, error)
        return False
    log.info("cleanup: deleted %s %s/%s (%s, finished, created %s)", kind.kind,
             o.namespace, o.name, o.phase, _rfc3339(o.created))
    return True


def _read(items: Sequence[Mapping[str, Any]], kind: CreatedKind) -> list[CreatedObject]:
    """The objects nicplug made among `items`; one it cannot read is skipped (kept)."""
    found = []
    for item in items:
        meta = item.get("metadata") or {}
        if (meta.get("labels") or {}).get(MANAGED_BY_LABEL) != "nicplug":
            continue  # a server that ignored the selector: never another's
        spec, status = item.get("spec") or {}, item.get("status") or {}
        vm = spec.get("vmiName") if kind == "migration" else spec.get("virtualMachineName")
        created = _seconds(meta.get("creationTimestamp"))
        if not (meta.get("name") and meta.get("namespace") and meta.get("uid")
                and isinstance(vm, str) and created is not None):
            log.warning("cleanup: %s %s/%s unreadable (no name, uid, VM or creation time); "
                        "kept", kind, meta.get("namespace"), meta.get("name"))
            continue
        found.append(CreatedObject(
            kind=kind, namespace=str(meta["namespace"]), name=str(meta["name"]),
            uid=str(meta["uid"]), vm=f"{meta['namespace']}/{vm}", created=created,
            phase=str(status.get("phase") or ""),
            operation=str((meta.get("annotations") or {}).get(OPERATION_ANNOTATION) or "")))
    return found


def _seconds(rfc3339: object) -> float | None:
    if not isinstance(rfc3339, str):
        return None
    try:
        moment = datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def _rfc3339(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
