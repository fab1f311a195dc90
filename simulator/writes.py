"""The API server's rules for a write over a stored object, and its patch formats.

An update or a patch of an existing object leaves what these say: the names, the
namespace and the uid stay; a resourceVersion or uid precondition that fails is a
`Conflict`; the status is written only through its subresource where the kind has one,
and never through it otherwise; `generation` counts changes of everything but metadata
(and status); a write that changes nothing changes nothing. A patch is one of the three
formats `patching.py` applies, chosen by its content type. Pure: the store commits
what comes out (`store.py`).
"""

from __future__ import annotations

from typing import Any

from nicplug.simulator import patching
from nicplug.simulator.documents import Obj, ordered
from nicplug.simulator.errors import (
    BadRequest,
    Conflict,
    Invalid,
    NotFound,
    UnsupportedMediaType,
)
from nicplug.simulator.resources import Resource

_BUILT_IN_GROUPS = frozenset({"", "coordination.k8s.io"})
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


def replaced(res: Resource, current: Obj, body: Obj, subresource: str | None) -> Obj:
    """What writing `body` over `current` with update semantics leaves (a new dict,
    equal to `current` when the write changes nothing), or the server's refusal:
    `NotFound` for an unknown subresource, `BadRequest` for a renamed or moved object,
    `Conflict` for a failed uid or resourceVersion precondition."""
    if subresource not in (None, "status"):
        raise NotFound(f"{res.key} has no subresource {subresource!r}")
    if subresource == "status" and not res.has_status:
        raise NotFound(f"{res.key} has no status subresource")
    meta, old_meta = body["metadata"], current["metadata"]
    if meta.get("name", old_meta["name"]) != old_meta["name"]:
        raise BadRequest("metadata.name does not match the object being written")
    if res.namespaced and meta.get("namespace", old_meta["namespace"]) != old_meta[
        "namespace"
    ]:
        raise BadRequest("metadata.namespace does not match the object being written")
    wanted_uid = meta.get("uid")
    if wanted_uid and wanted_uid != old_meta["uid"]:
        raise Conflict(
            f'Precondition failed for {res.key} "{old_meta["name"]}": UID in '
            f"precondition: {wanted_uid}, UID in object meta: {old_meta['uid']}"
        )
    wanted_rv = meta.get("resourceVersion")
    if wanted_rv and str(wanted_rv) != old_meta["resourceVersion"]:
        raise Conflict(
            f'Operation cannot be fulfilled on {res.key} "{old_meta["name"]}": the object '
            "has been modified; please apply your changes to the latest version and try "
            "again",
            details={"name": old_meta["name"], "group": res.group, "kind": res.plural},
        )
    if subresource == "status":
        new = {k: v for k, v in current.items() if k != "status"}
        if body.get("status") is not None:
            new["status"] = body["status"]
        new["metadata"] = dict(old_meta)
    else:
        new = ordered(res, body)
        if res.has_status:
            new.pop("status", None)
            if "status" in current:
                new["status"] = current["status"]
        kept = ("uid", "creationTimestamp", "generation", "deletionTimestamp", "namespace")
        new_meta = {"name": old_meta["name"]}
        new_meta.update({k: old_meta[k] for k in kept if k in old_meta})
        new_meta.update(
            {k: v for k, v in meta.items() if k not in new_meta and k not in kept}
        )
        new["metadata"] = new_meta
        if _spec_of(res, new) != _spec_of(res, current):
            new_meta["generation"] = old_meta.get("generation", 1) + 1
    new["metadata"]["resourceVersion"] = old_meta["resourceVersion"]
    return new


def _spec_of(res: Resource, obj: Obj) -> Obj:
    """What bumps `generation`: everything but metadata (and status, when it is a
    subresource)."""
    skip = ("metadata", "status") if res.has_status else ("metadata",)
    return {k: v for k, v in obj.items() if k not in skip}


def patched(res: Resource, current: Obj, patch: Any, content_type: str) -> Obj:
    """`current` with `patch` applied in the format `content_type` names, as the server
    accepts it for `res` (a strategic merge patch only for built-in kinds)."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media == MERGE_PATCH:
        if not isinstance(patch, dict):
            raise BadRequest("a merge patch must be a JSON object")
        result = patching.merge_patch(current, patch)
    elif media == JSON_PATCH:
        result = patching.json_patch(current, patch)
    elif media == STRATEGIC_PATCH:
        if res.group not in _BUILT_IN_GROUPS:
            raise UnsupportedMediaType(
                f"the body of the request was in an unknown format - accepted media "
                f"types for {res.key} are {MERGE_PATCH} and {JSON_PATCH}"
            )
        if not isinstance(patch, dict):
            raise BadRequest("a strategic merge patch must be a JSON object")
        result = patching.strategic_merge_patch(current, patch)
    else:
        raise UnsupportedMediaType(f"unsupported patch type {content_type!r}")
    if not isinstance(result, dict):
        raise Invalid("the patched object is not a JSON object")
    return result
