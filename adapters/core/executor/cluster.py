"""What every effect's handler writes through: the API calls, the informers' cache, the
cluster's KubeVirt names and the SDN dialect, and the one way an annotation is patched.

A handler reads the objects a write is built from as the informers hold them (`read`:
no GET precedes a write; from the server only when no cache was given), builds one
request that pins what its decision read, and sends it through `KubeCalls`. Nothing
here retries (the outbox does), translates an HTTP failure (the executor does, once,
for every handler; but a 404 on an object just read is `Temporary`: `just_read`, and
so is a 409 on a patch pinned by its own `test` ops: `tested`) or decides anything.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Final

from nicplug.adapters.kube import errors as kube_errors
from nicplug.adapters.kube.calls import KubeCalls, pointer
from nicplug.adapters.kube.flavour import Flavour
from nicplug.adapters.kube.resources import KindRef
from nicplug.adapters.sdn import Dialect, WritingDialect
from nicplug.engine.errors import PermanentError

JSON_PATCH: Final = "application/json-patch+json"
Result = Mapping[str, Any]
Cached = Callable[[KindRef, str, str], Mapping[str, Any] | None]
"""The informers' copy of an object (kind, namespace, name), or None if they hold none.
It must keep whole every part a write is built from: see `worldview.WRITTEN_FROM`."""
Reader = Callable[[KindRef, str, str], Awaitable[Mapping[str, Any]]]
"""How a VM is read for a condition write: from the cache, or from the server."""


class Cluster:
    """The calls, the cache, the names and the dialect the handlers share."""

    def __init__(self, calls: KubeCalls, dialect: Dialect, *, flavour: Flavour,
                 cached: Cached | None) -> None:
        self.calls = calls
        self.cached = cached
        self.dialect = dialect
        # where nicplug writes pods and KVVMs (deckhouse); None where KubeVirt does
        self.writer = dialect if isinstance(dialect, WritingDialect) else None
        self.kinds = flavour
        # whose status carries nicplug's conditions and whom its Events are about: the
        # VM the user edits (Deckhouse's; in the kubevirt flavour KubeVirt's own, which
        # gets Events only: KubeVirt removes conditions it did not set, `targets.py`)
        self.vm_kind = flavour.kvvms if dialect.kubevirt_owns_requests else (
            flavour.virtual_machines)

    async def read(self, kind: KindRef, namespace: str, name: str) -> Mapping[str, Any]:
        """The object as the informers hold it (one they do not hold is gone, or not
        seen yet: `NotFound`, decided again from the next world); from the server only
        when no cache was given."""
        if self.cached is None:
            return await self.calls.get(kind, namespace, name)
        held = self.cached(kind, namespace, name)
        if held is None:
            raise kube_errors.NotFound(f"{kind.kind} {namespace}/{name} is not in the cache")
        return held

    def writing(self) -> WritingDialect:
        if self.writer is None:
            raise PermanentError(
                f"the {self.dialect.name} dialect's pods and KubeVirt VMs are KubeVirt's "
                f"and the user's to write, never nicplug's")
        return self.writer


@contextlib.contextmanager
def just_read(what: str) -> Iterator[None]:
    """A request to an object the handler has just found (read from the informers' cache
    or the server, or told by the server that it exists): its 404 (the object deleted
    since, or the server answering amiss) is `Temporary`, the same effect retried with
    the outbox's backoff. Decided again instead, the next world still holds the object
    and asks for the very same write at once, again as often as the VM's objects change
    (seeds 21075 and 56874: one write 4 to 6 times in some 30 s while the server
    answered 404).
    Once the informers drop an object that is gone, the retry's read does not find it
    (`NotFound`: decided again from that world). `what` names the object in the error."""
    try:
        yield
    except kube_errors.NotFound as exc:
        raise kube_errors.Temporary(
            f"{exc.message} ({what} was just found: the effect is retried)",
            status=exc.status, reason=exc.reason) from exc


@contextlib.contextmanager
def tested(what: str) -> Iterator[None]:
    """A JSON patch whose preconditions are its own `test` ops (the KVVM's
    resourceVersion, the pod's uid and request annotation): the API server applies it
    to the object as it holds it at the write (`applyPatch`, called by GuaranteedUpdate
    with the persisted object, k8s.io/apiserver endpoints/handlers/patch.go), so a
    compare-and-swap it loses is a `test` that fails, 422 (`TestFailed`, decided again).
    A 409 is none of its preconditions failing (an admission webhook's, a server
    answering amiss): `Temporary`, the same effect retried with the outbox's backoff,
    whose every try reads the object again and checks what its decision read. Decided
    again instead, the next world still reads as the decision did and asks for the
    very same patch at once, as often as the VM's objects change (seed 703: one KVVM
    patch 4 times in 0.2 s while the server answered 409). `what` names the object."""
    try:
        yield
    except kube_errors.TestFailed:
        raise
    except kube_errors.Conflict as exc:
        raise kube_errors.Temporary(
            f"{exc.message} ({what}: not its `test` failing, the patch is retried)",
            status=exc.status, reason=exc.reason) from exc


def annotation_ops(
    template: Mapping[str, Any], meta_path: str, key: str, value: str | None
) -> list[dict[str, Any]]:
    """The JSON-patch ops that set annotation `key` of the object (or template) whose
    metadata is at `meta_path` to `value` (None: remove it); none when it holds it."""
    metadata = template.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    current = annotations.get(key) if isinstance(annotations, dict) else None
    if current == value:
        return []
    ops: list[dict[str, Any]] = []
    if not isinstance(metadata, dict):
        ops.append({"op": "add", "path": meta_path, "value": {}})
    if not isinstance(annotations, dict):
        if value is None:
            return ops
        ops.append({"op": "add", "path": f"{meta_path}/annotations", "value": {}})
    path = meta_path + pointer("annotations", key)
    if value is None:
        ops.append({"op": "remove", "path": path})
    else:
        ops.append({"op": "add", "path": path, "value": value})
    return ops
