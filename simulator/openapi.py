"""A minimal OpenAPI v3 description, enough for kubectl to trust the server's validation.

kubectl (create, apply, replace) validates a manifest before sending it: it reads
`/openapi/v3/<group-version>` and, when the PATCH operation of the kind lists the
`fieldValidation` query parameter, leaves validation to the server (which the
simulator, holding no schemas, accepts as given). Without this document kubectl falls
back to downloading `/openapi/v2` and refuses to apply. The documents declare paths and
parameters only, no schemas, so kubectl's apply builds its strategic merge patches from
its compiled-in types. Pure functions of the served kinds.
"""

from __future__ import annotations

from typing import Any

from nicplug.simulator.resources import Resource

_HASH = "0000000000000000"


def _prefix(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def index(served: tuple[Resource, ...]) -> dict[str, Any]:
    """`/openapi/v3`: where each group version's document lives."""
    paths: dict[str, Any] = {}
    for res in served:
        prefix = _prefix(res.group, res.version)
        paths[prefix] = {"serverRelativeURL": f"/openapi/v3/{prefix}?hash={_HASH}"}
    return {"paths": paths}


def _operation(res: Resource, action: str) -> dict[str, Any]:
    return {
        "operationId": f"{action}{res.kind}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {
            "group": res.group,
            "version": res.version,
            "kind": res.kind,
        },
        "parameters": [
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
        ],
        "responses": {"200": {"description": "OK"}},
    }


def document(served: tuple[Resource, ...], prefix: str) -> dict[str, Any] | None:
    """`/openapi/v3/<prefix>` (e.g. `api/v1`, `apis/kubevirt.io/v1`), or None."""
    kinds = [r for r in served if _prefix(r.group, r.version) == prefix]
    if not kinds:
        return None
    paths: dict[str, Any] = {}
    for res in kinds:
        scope = "/namespaces/{namespace}" if res.namespaced else ""
        collection = f"/{prefix}{scope}/{res.plural}"
        paths[collection] = {
            "get": _operation(res, "list"),
            "post": _operation(res, "post"),
        }
        paths[f"{collection}/{{name}}"] = {
            "get": _operation(res, "get"),
            "put": _operation(res, "put"),
            "patch": _operation(res, "patch"),
            "delete": _operation(res, "delete"),
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "nicplug simulated Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }
