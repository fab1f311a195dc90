"""Discovery documents (`/version`, `/api`, `/apis`, `/api/v1`, `/apis/<g>/<v>`).

Clients (kubectl, kubernetes_asyncio's dynamic client) find the served kinds, their
plurals, scope, verbs and subresources here before they make any other request, so the
documents are derived from the served kinds (`ServedApi.all_served`) and nothing else.
Pure functions of them.
"""

from __future__ import annotations

from typing import Any

from nicplug.simulator.resources import Resource

SERVED_VERSION = {"major": "1", "minor": "32"}

_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
def version() -> dict[str, Any]:
    return {
        **SERVED_VERSION,
        "gitVersion": "v1.32.0-nicplug-sim",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.23.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def core_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def groups(served: tuple[Resource, ...]) -> dict[str, Any]:
    """The APIGroupList of `/apis` (every group serves one version)."""
    seen: dict[str, str] = {}
    for res in served:
        if res.group:
            seen.setdefault(res.group, res.version)
    entries = []
    for group, ver in seen.items():
        gv = {"groupVersion": f"{group}/{ver}", "version": ver}
        entries.append({"name": group, "versions": [gv], "preferredVersion": gv})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": entries}


def resource_list(
    served: tuple[Resource, ...], group: str, ver: str
) -> dict[str, Any] | None:
    """The APIResourceList of one group version, or None when it is not served."""
    kinds = [r for r in served if r.group == group and r.version == ver]
    if not kinds:
        return None
    resources: list[dict[str, Any]] = []
    for res in kinds:
        resources.append(
            {
                "name": res.plural,
                "singularName": res.kind.lower(),
                "namespaced": res.namespaced,
                "kind": res.kind,
                "verbs": _VERBS,
                "shortNames": list(res.short_names),
                "categories": list(res.categories),
            }
        )
        if res.has_status:
            resources.append(
                {
                    "name": f"{res.plural}/status",
                    "singularName": "",
                    "namespaced": res.namespaced,
                    "kind": res.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
    for entry in resources:
        for optional in ("shortNames", "categories"):
            if not entry.get(optional, True):
                entry.pop(optional, None)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{ver}" if group else ver,
        "resources": resources,
    }
