"""The CustomResourceDefinition of every custom kind the simulated server serves.

Clients look for them before they watch a kind (kopf waits for the CRD of each kind it
handles; `kubectl get crd` lists them), so the server keeps one per kind, named as it
serves the kind (`ServedApi`: KubeVirt's are Deckhouse's renamed ones in the deckhouse
API), with its short names, categories, scope and status subresource. The schema only
says "an object, fields kept": the simulator does not validate against schemas (the
contract tests check its objects against the real ones instead).
"""

from __future__ import annotations

from typing import Any

from nicplug.simulator.apis import ServedApi
from nicplug.simulator.resources import CRDS, Resource

BUILT_IN_GROUPS = frozenset({"", "coordination.k8s.io", "apiextensions.k8s.io",
                             "rbac.authorization.k8s.io", "events.k8s.io"})

Json = dict[str, Any]


def definitions(api: ServedApi) -> list[Json]:
    """One CRD (without server-set metadata) per custom kind `api` serves."""
    return [_definition(res) for res in api.all_served if res.group not in BUILT_IN_GROUPS]


def _definition(res: Resource) -> Json:
    names: Json = {"kind": res.kind, "listKind": f"{res.kind}List", "plural": res.plural,
                   "singular": res.kind.lower()}
    if res.short_names:
        names["shortNames"] = list(res.short_names)
    if res.categories:
        names["categories"] = list(res.categories)
    version: Json = {
        "name": res.version, "served": True, "storage": True,
        "schema": {"openAPIV3Schema": {"type": "object",
                                       "x-kubernetes-preserve-unknown-fields": True}},
    }
    if res.has_status:
        version["subresources"] = {"status": {}}
    if res.columns:
        version["additionalPrinterColumns"] = [
            {"name": c.name, "type": c.type, "jsonPath": c.json_path,
             **({"priority": c.priority} if c.priority else {})} for c in res.columns]
    return {
        "apiVersion": CRDS.api_version, "kind": CRDS.kind,
        "metadata": {"name": res.key},
        "spec": {"group": res.group, "names": names,
                 "scope": "Namespaced" if res.namespaced else "Cluster",
                 "versions": [version]},
        "status": {
            "acceptedNames": names, "storedVersions": [res.version],
            "conditions": [
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted"},
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"},
            ],
        },
    }
