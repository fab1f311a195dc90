"""The API verbs the effect executor needs, as raw JSON in and out, errors translated.

Every patch states its content type explicitly: kubernetes_asyncio would otherwise
guess one from the body (a JSON patch for a list, strategic merge for a dict — which
the API server rejects with 415 for custom resources). Every call carries the
client's request timeout. Objects come back as plain dicts (`_preload_content=False`);
writes are sent by `wire.write`, their bodies encoded once with orjson.

These are single requests: no retry, no re-read, no decision. A 409 surfaces as
`Conflict` so the caller can re-read the world and decide again. Every write passes
the fence first, the instant before it is sent: once the term of leadership that
built these calls has ended, a write raises `Deposed` and is never sent.
"""

from __future__ import annotations

import datetime
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from kubernetes_asyncio.client.api.core_v1_api import CoreV1Api
from kubernetes_asyncio.client.api.custom_objects_api import CustomObjectsApi

from nicplug.adapters.kube.client import ApiConnection
from nicplug.adapters.kube.errors import KubeError, for_json_patch
from nicplug.adapters.kube.resources import EVENTS, KindRef
from nicplug.adapters.kube.wire import JsonObject, fetch_object, path_of, write

MERGE_PATCH: Final = "application/merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"
NOTE_LIMIT: Final = 1024
"""Bytes an `events.k8s.io/v1` Event's note may hold (the API server refuses more)."""
PODS: Final = KindRef("", "v1", "pods", "Pod", True)
PatchType = Literal[
    "application/merge-patch+json",
    "application/json-patch+json",
    "application/strategic-merge-patch+json",
]


def pointer(*tokens: str | int) -> str:
    """A JSON pointer (RFC 6901) from path tokens, escaping `~` and `/` in each."""
    escaped = (str(t).replace("~", "~0").replace("/", "~1") for t in tokens)
    return "".join("/" + t for t in escaped)


def compare_and_swap(path: str, expected: Any, value: Any) -> list[dict[str, Any]]:
    """A JSON patch that replaces `path` with `value` only if it still holds `expected`.

    The API server applies it atomically; a failed `test` is rejected (422), which
    tells the caller that the world moved and it must re-read and decide again.
    """
    return [
        {"op": "test", "path": path, "value": expected},
        {"op": "replace", "path": path, "value": value},
    ]


@dataclass(frozen=True, slots=True)
class EventNote:
    """A Kubernetes Event about `involved` (an object as returned by the API)."""

    involved: Mapping[str, Any]
    reason: str
    message: str
    type: Literal["Normal", "Warning"] = "Normal"
    component: str = "nicplug"
    instance: str = field(default="")
    action: str = "NetworkHotplug"


class KubeCalls:
    """Single API requests on behalf of the effect executor."""

    def __init__(
        self,
        connection: ApiConnection,
        *,
        wall_clock: Callable[[], datetime.datetime] | None = None,
        fence: Callable[[], None] | None = None,
    ) -> None:
        self._connection = connection
        self._fence = fence
        self._core = CoreV1Api(connection.client)
        self._custom = CustomObjectsApi(connection.client)
        self._wall_clock = wall_clock or (lambda: datetime.datetime.now(datetime.UTC))

    def _options(self, **extra: Any) -> dict[str, Any]:
        return {
            "_preload_content": False,
            "_request_timeout": self._connection.request_timeout,
            **extra,
        }

    def _fenced(self) -> None:
        """The instant before a write is sent: the fencing check."""
        if self._fence is not None:
            self._fence()

    async def get(self, kind: KindRef, namespace: str | None, name: str) -> JsonObject:
        """One object, fresh from the server (not from an informer's cache)."""
        if kind.core:
            if kind.plural != "pods":
                raise ValueError(f"core kind {kind.plural} is not read by nicplug")
            return await fetch_object(self._core.read_namespaced_pod(
                name, _required(namespace, kind), **self._options()))
        if kind.namespaced:
            return await fetch_object(self._custom.get_namespaced_custom_object(
                kind.group, kind.version, _required(namespace, kind), kind.plural, name,
                **self._options()))
        return await fetch_object(self._custom.get_cluster_custom_object(
            kind.group, kind.version, kind.plural, name, **self._options()))

    async def patch_pod(
        self, namespace: str, name: str, patch: Any, *, content_type: PatchType
    ) -> JsonObject:
        """Patch a pod. A JSON patch whose `test` op fails raises `TestFailed`."""
        self._fenced()
        try:
            return await write(self._connection, "PATCH", path_of(PODS, namespace, name), patch,
                               content_type=content_type)
        except KubeError as exc:
            if content_type == JSON_PATCH and isinstance(patch, Sequence):
                raise for_json_patch(exc, patch) from exc
            raise

    async def patch_pod_annotations(
        self,
        namespace: str,
        name: str,
        annotations: Mapping[str, str | None],
        *,
        content_type: Literal[
            "application/merge-patch+json", "application/strategic-merge-patch+json"
        ] = MERGE_PATCH,
    ) -> JsonObject:
        """Set (or, with None, remove) annotations of a pod; others are left alone."""
        patch = {"metadata": {"annotations": dict(annotations)}}
        return await self.patch_pod(namespace, name, patch, content_type=content_type)

    async def patch(
        self,
        kind: KindRef,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        content_type: Literal["application/merge-patch+json", "application/json-patch+json"],
    ) -> JsonObject:
        """Patch a custom object: a merge patch (a dict) or a JSON patch (a list).

        A JSON patch whose `test` op fails raises `TestFailed` (a `Conflict`)."""
        _check_body(patch, content_type)
        path = path_of(kind, _required(namespace, kind) if kind.namespaced else None, name)
        self._fenced()
        try:
            return await write(self._connection, "PATCH", path, patch, content_type=content_type)
        except KubeError as exc:
            if content_type == JSON_PATCH and isinstance(patch, Sequence):
                raise for_json_patch(exc, patch) from exc
            raise

    async def patch_status(
        self, kind: KindRef, namespace: str | None, name: str, patch: Mapping[str, Any]
    ) -> JsonObject:
        """Merge-patch the status subresource of a custom object."""
        path = path_of(kind, _required(namespace, kind) if kind.namespaced else None, name,
                       "status")
        self._fenced()
        return await write(self._connection, "PATCH", path, patch, content_type=MERGE_PATCH)

    async def create_migration(
        self, kind: KindRef, namespace: str, name: str, vmi_name: str, *,
        labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None,
    ) -> JsonObject:
        """Create a VirtualMachineInstanceMigration (`kind`, as the flavour names it) of
        `vmi_name`.

        The name is the caller's, so that creating twice yields `AlreadyExists`
        instead of a second migration.
        """
        body = {
            "apiVersion": kind.api_version,
            "kind": kind.kind,
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {}),
                         **({"annotations": dict(annotations)} if annotations else {})},
            "spec": {"vmiName": vmi_name},
        }
        self._fenced()
        return await write(self._connection, "POST", path_of(kind, namespace), body)

    async def create_vm_operation(
        self, kind: KindRef, namespace: str, name: str, spec: Mapping[str, Any], *,
        labels: Mapping[str, str], annotations: Mapping[str, str],
    ) -> JsonObject:
        """Create a Deckhouse `VirtualMachineOperation` named by the caller (creating it
        twice yields `AlreadyExists`), `spec` as given (`type`, `virtualMachineName`)."""
        body = {
            "apiVersion": kind.api_version,
            "kind": kind.kind,
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels),
                         "annotations": dict(annotations)},
            "spec": dict(spec),
        }
        self._fenced()
        return await write(self._connection, "POST", path_of(kind, namespace), body)

    async def list_migrations(self, kind: KindRef, *, label_selector: str) -> list[JsonObject]:
        """Every VirtualMachineInstanceMigration (`kind`, as the flavour names it)
        matching `label_selector`, cluster-wide, fresh from the server."""
        return await self.list_labelled(kind, label_selector=label_selector)

    async def list_labelled(self, kind: KindRef, *, label_selector: str) -> list[JsonObject]:
        """Every object of a custom `kind` matching `label_selector`, cluster-wide,
        fresh from the server."""
        listed = await fetch_object(self._custom.list_cluster_custom_object(
            kind.group, kind.version, kind.plural, label_selector=label_selector,
            **self._options()))
        items = listed.get("items")
        return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

    async def create_object(self, kind: KindRef, body: JsonObject) -> JsonObject:
        """Create a namespaced object nicplug owns whole (its operation objects)."""
        namespace = _required(body.get("metadata", {}).get("namespace"), kind)
        self._fenced()
        return await write(self._connection, "POST", path_of(kind, namespace), body)

    async def list_objects(
        self, kind: KindRef, namespace: str | None, *, label_selector: str | None = None
    ) -> list[JsonObject]:
        """Every object of a custom `kind`, in `namespace` or (None) cluster-wide, only
        those matching `label_selector` when one is given."""
        options = self._options()
        if label_selector is not None:
            options["label_selector"] = label_selector
        if namespace is None:
            listed = await fetch_object(self._custom.list_cluster_custom_object(
                kind.group, kind.version, kind.plural, **options))
        else:
            listed = await fetch_object(self._custom.list_namespaced_custom_object(
                kind.group, kind.version, namespace, kind.plural, **options))
        items = listed.get("items")
        return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

    async def create_event(self, note: EventNote) -> JsonObject:
        """Record an `events.k8s.io/v1` Event in the namespace of the object it regards."""
        metadata = note.involved.get("metadata") or {}
        namespace = metadata.get("namespace") or "default"
        body: Any = {
            "apiVersion": EVENTS.api_version,
            "kind": EVENTS.kind,
            "metadata": {
                "name": f"{metadata.get('name', 'unknown')}.{secrets.token_hex(8)}",
                "namespace": namespace,
            },
            "regarding": {
                "apiVersion": note.involved.get("apiVersion"),
                "kind": note.involved.get("kind"),
                "name": metadata.get("name"),
                "namespace": metadata.get("namespace"),
                "uid": metadata.get("uid"),
            },
            "reason": note.reason,
            "note": _at_most(note.message, NOTE_LIMIT),
            "type": note.type,
            "action": note.action,
            "eventTime": self._micro_time(),
            "reportingController": note.component,
            "reportingInstance": note.instance or note.component,
        }
        self._fenced()
        return await write(self._connection, "POST", path_of(EVENTS, namespace), body)

    async def patch_event_series(self, namespace: str, name: str, count: int) -> JsonObject:
        """Say that the Event `name` was observed again: its `series` (`count` in all,
        last observed now), as client-go's event recorder does for an isomorphic one."""
        patch = {"series": {"count": count, "lastObservedTime": self._micro_time()}}
        self._fenced()
        return await write(self._connection, "PATCH", path_of(EVENTS, namespace, name), patch,
                           content_type=MERGE_PATCH)

    def _micro_time(self) -> str:
        """A `MicroTime`, as the events API has it."""
        return self._wall_clock().strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    async def delete(
        self, kind: KindRef, namespace: str, name: str, *, uid: str | None = None
    ) -> JsonObject:
        """Delete a namespaced custom object; with `uid`, only that incarnation of it."""
        body: Any = {"preconditions": {"uid": uid}} if uid else {}
        self._fenced()
        return await write(self._connection, "DELETE", path_of(kind, namespace, name), body)


def _at_most(text: str, limit: int) -> str:
    """`text` cut to `limit` bytes of UTF-8 (on a character boundary), marked as cut."""
    encoded = text.encode()
    if len(encoded) <= limit:
        return text
    return encoded[:limit - 3].decode(errors="ignore") + "…"


def _required(namespace: str | None, kind: KindRef) -> str:
    if not namespace:
        raise ValueError(f"{kind.name} is namespaced: a namespace is required")
    return namespace


def _check_body(patch: object, content_type: str) -> None:
    if content_type == JSON_PATCH and not isinstance(patch, Sequence):
        raise TypeError("a JSON patch is a list of operations")
    if content_type == MERGE_PATCH and not isinstance(patch, Mapping):
        raise TypeError("a merge patch is an object")

