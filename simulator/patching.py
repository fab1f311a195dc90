"""The three patch formats a Kubernetes API server accepts, applied to plain JSON dicts.

* JSON merge patch (RFC 7386): maps merge, `null` deletes, everything else replaces.
* JSON patch (RFC 6902): add/remove/replace/move/copy/test over JSON pointers; a failed
  `test` or a missing path is `Invalid` (422) with the API server's own words for any
  patch that does not apply (`PATCH_NOT_APPLIED`, no details: it keeps the json-patch
  error to itself), a malformed document `BadRequest` (400).
  Written here rather than taken from a library: the RFC is small, and the errors must
  be the server's own types with Kubernetes' codes.
* Strategic merge patch, the subset clients send for built-in kinds: maps merge, lists
  named in `MERGE_KEYS` merge element-wise by their key, `finalizers` merge as a set,
  other lists replace; `$patch: delete|replace|merge`, `$deleteFromPrimitiveList/...`,
  `$retainKeys` and `$setElementOrder/...` (ordering hints, dropped) are understood.

Every function returns a new document and never mutates its inputs.
"""

from __future__ import annotations

import copy
from typing import Any

from nicplug.simulator.errors import BadRequest, Invalid

MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "conditions": "type",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
}
SET_LISTS = frozenset({"finalizers"})


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result: dict[str, Any] = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# ----------------------------------------------------------------------- JSON patch


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise BadRequest(f"invalid JSON pointer {path!r}")
    if path == "":
        return []
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], token: str, *, for_add: bool) -> int:
    if for_add and token == "-":
        return len(container)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise Invalid(f"invalid array index {token!r}")
    index = int(token)
    limit = len(container) if for_add else len(container) - 1
    if index > limit:
        raise Invalid(f"array index {index} out of bounds")
    return index


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, for_add=False)]
        else:
            raise Invalid(f"path {path!r} does not exist")
    return node


def _get(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, for_add=False)]
    raise Invalid(f"path {path!r} does not exist")


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    tokens = _pointer(path)
    if not tokens:
        raise Invalid("cannot remove the whole document")
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, last, for_add=False))
    raise Invalid(f"path {path!r} does not exist")


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, for_add=True), value)
    else:
        raise Invalid(f"path {path!r} does not exist")
    return doc


PATCH_NOT_APPLIED = "the server rejected our request due to an error in our request"
"""What the API server says of a JSON patch that does not apply to the object (its
`NewGenericServerResponse` for 422), whatever the reason: clients tell a lost
compare-and-swap from a refusal by it."""


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902; the whole patch applies or none of it does."""
    try:
        return _json_patch(target, operations)
    except Invalid:
        raise Invalid(PATCH_NOT_APPLIED) from None


def _json_patch(target: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise BadRequest("a JSON patch must be a JSON array of operations")
    doc = copy.deepcopy(target)
    for number, op in enumerate(operations):
        if not isinstance(op, dict) or not isinstance(op.get("op"), str) or "path" not in op:
            raise BadRequest(f"JSON patch operation {number} needs 'op' and 'path'")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise BadRequest(f"JSON patch operation {number} ({kind}) needs 'value'")
        if kind in ("move", "copy") and "from" not in op:
            raise BadRequest(f"JSON patch operation {number} ({kind}) needs 'from'")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            doc, _ = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            doc, _ = _remove(doc, path) if _pointer(path) else (doc, None)
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "move":
            doc, value = _remove(doc, op["from"])
            doc = _add(doc, path, value)
        elif kind == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, op["from"])))
        elif kind == "test":
            if _get(doc, path) != op["value"]:
                raise Invalid(f"JSON patch test failed at {path!r}")
        else:
            raise BadRequest(f"unknown JSON patch operation {kind!r}")
    return doc


# -------------------------------------------------------------- strategic merge patch


def _strategic_list(field: str, target: Any, patch: list[Any]) -> list[Any]:
    if field in SET_LISTS:
        current = list(target) if isinstance(target, list) else []
        return current + [v for v in patch if v not in current]
    key = MERGE_KEYS.get(field)
    if key is None or not all(isinstance(e, dict) for e in patch):
        return [copy.deepcopy(e) for e in patch]
    if any(e.get("$patch") == "replace" for e in patch):
        return [copy.deepcopy(e) for e in patch if "$patch" not in e]
    result = [e for e in target if isinstance(e, dict)] if isinstance(target, list) else []
    for element in patch:
        if key not in element:
            raise BadRequest(f"strategic merge patch: an element of {field} lacks {key!r}")
        position = next((i for i, e in enumerate(result) if e.get(key) == element[key]), None)
        if element.get("$patch") == "delete":
            if position is not None:
                result.pop(position)
        elif position is None:
            result.append(strategic_merge_patch({}, element))
        else:
            result[position] = strategic_merge_patch(result[position], element)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Kubernetes' strategic merge patch (the subset described in the module docstring)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    if directive not in (None, "merge"):
        raise BadRequest(f"strategic merge patch: unknown $patch directive {directive!r}")
    result: dict[str, Any] = dict(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list) and isinstance(value, list):
                result[field] = [v for v in result[field] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list):
            result[key] = _strategic_list(key, result.get(key), value)
        elif isinstance(value, dict):
            merged = strategic_merge_patch(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        else:
            result[key] = value
    return result
