"""The JSON documents the simulated store takes in and hands out.

The store never shares a dict with a caller: what it takes in is copied and checked
here first (`owned`: a JSON object of the resource's kind and apiVersion, labels and
annotations mapping strings to strings), what it hands out is a copy (`deep_copy`), and
what it prints comes in the real server's order (`ordered`). Also the small
conventions of the API server it follows: object keys, timestamps, the names it
accepts (`valid_name`) and the continue tokens of a chunked list. No state, no I/O.
"""

from __future__ import annotations

import base64
import gc
import re
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import orjson

from nicplug.simulator.errors import BadRequest, Invalid
from nicplug.simulator.resources import Resource

_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
# RBAC objects take any name that is a valid path segment (`ValidatePathSegmentName`)
_PATH_SEGMENT_RE = re.compile(r"^(?!\.\.?$)[^/%]+$")
_PATH_SEGMENT_GROUPS = frozenset({"rbac.authorization.k8s.io"})

Obj = dict[str, Any]
_T = TypeVar("_T")


def deep_copy(obj: _T) -> _T:
    """A deep copy of a JSON document: an orjson round trip (several times faster than
    `copy.deepcopy`), with the cyclic garbage collector paused, since a JSON tree holds
    no cycles and a full collection triggered mid-copy would walk every stored object."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return cast(_T, orjson.loads(orjson.dumps(obj)))
    except TypeError as e:
        raise BadRequest(f"the object is not plain JSON: {e}") from e
    finally:
        if collecting:
            gc.enable()


def timestamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def key_of(obj: Obj) -> tuple[str, str]:
    meta = obj["metadata"]
    return table_key(meta.get("namespace"), meta["name"])


def write_token(rv: int, key: tuple[str, str]) -> str:
    raw = orjson.dumps({"rv": rv, "start": list(key)})
    return base64.urlsafe_b64encode(raw).decode()


def read_token(token: str) -> tuple[int, tuple[str, str]]:
    try:
        data = orjson.loads(base64.urlsafe_b64decode(token.encode()))
        return int(data["rv"]), (str(data["start"][0]), str(data["start"][1]))
    except (ValueError, TypeError, KeyError, IndexError, orjson.JSONDecodeError) as e:
        raise BadRequest(f"invalid continue token {token!r}") from e


def table_key(namespace: str | None, name: str) -> tuple[str, str]:
    return (namespace or "", name)


def valid_name(res: Resource, name: object) -> bool:
    """Is `name` one the API server accepts for `res`?"""
    valid = _PATH_SEGMENT_RE if res.group in _PATH_SEGMENT_GROUPS else _NAME_RE
    return isinstance(name, str) and bool(valid.match(name)) and len(name) <= 253


def owned(res: Resource, obj: Any) -> Obj:
    """A private copy of a client's object, checked for shape and kind."""
    if not isinstance(obj, dict):
        raise BadRequest(f"a {res.kind} must be a JSON object")
    body: Obj = deep_copy(obj)
    meta = body.get("metadata")
    if meta is None:
        meta = body["metadata"] = {}
    if not isinstance(meta, dict):
        raise BadRequest("metadata must be a JSON object")
    if body.get("kind", res.kind) != res.kind:
        raise BadRequest(f"the body is a {body['kind']}, expected a {res.kind}")
    if body.get("apiVersion", res.api_version) != res.api_version:
        raise BadRequest(f"the body is {body['apiVersion']}, expected {res.api_version}")
    for field in ("labels", "annotations"):
        value = meta.get(field)
        if value is not None and not (
            isinstance(value, dict)
            and all(isinstance(v, str) for v in value.values())
        ):
            raise Invalid(f"metadata.{field} must map strings to strings")
    if not res.namespaced:
        meta.pop("namespace", None)
    return body


def ordered(res: Resource, body: Obj) -> Obj:
    """apiVersion, kind and metadata first, as the real server prints them."""
    head = {"apiVersion": res.api_version, "kind": res.kind, "metadata": body["metadata"]}
    return head | {k: v for k, v in body.items() if k not in head}
