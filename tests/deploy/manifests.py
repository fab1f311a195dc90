"""The manifests of deploy/base/, read the way kustomize and the API server's RBAC read them.

Loads every resource the kustomization lists, and turns the Roles and ClusterRoles that
are bound to the controller's service account into `Grant`s that can be checked against
the requests the simulated API server logged. Reading only: nothing here writes or
renders (kubectl does that in the tests that need it).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nicplug.simulator.server import RequestRecord

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BASE = DEPLOY / "base"
"""What every installation has; the overlays (`deploy/overlays/`) and components
(`deploy/components/`) build on it."""

Manifest = dict[str, Any]


def kustomization() -> Manifest:
    loaded: Manifest = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    return loaded


def namespace() -> str:
    """The namespace kustomize puts every namespaced resource in."""
    return str(kustomization()["namespace"])


def resource_files() -> list[Path]:
    return [BASE / name for name in kustomization()["resources"]]


def documents() -> Iterator[tuple[Path, Manifest]]:
    """Every YAML document of every resource file, with the file it came from."""
    for path in resource_files():
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                yield path, doc


def find(kind: str, name: str | None = None) -> list[Manifest]:
    return [
        doc for _, doc in documents()
        if doc["kind"] == kind and (name is None or doc["metadata"]["name"] == name)
    ]


def one(kind: str, name: str | None = None) -> Manifest:
    found = find(kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def config() -> dict[str, str]:
    """The controller's environment from its ConfigMap."""
    return dict(one("ConfigMap", "nicplug-config")["data"])


def service_account() -> str:
    """The service account the controller's pods run as."""
    deployment = one("Deployment")
    return str(deployment["spec"]["template"]["spec"]["serviceAccountName"])


@dataclass(frozen=True, order=True)
class Permission:
    """What RBAC authorizes: a verb on `resource` (`plural` or `plural/subresource`)."""

    group: str
    resource: str
    verb: str

    def __str__(self) -> str:
        return f"{self.verb} {self.resource} ({self.group or 'core'})"


def permission_of(record: RequestRecord) -> Permission:
    resource = record.resource + (f"/{record.subresource}" if record.subresource else "")
    return Permission(record.group, resource, record.verb)


@dataclass(frozen=True, order=True)
class Grant:
    """One permission of one role; `namespace` None: everywhere (a ClusterRoleBinding);
    `names` empty: any object (RBAC's resourceNames)."""

    role: str
    namespace: str | None
    permission: Permission
    names: frozenset[str]

    def allows(self, record: RequestRecord) -> bool:
        if permission_of(record) != self.permission:
            return False
        if self.namespace is not None and record.namespace != self.namespace:
            return False
        # As the real authorizer: a rule with resourceNames never allows a request
        # without a name (create, list, watch).
        return not self.names or (record.name is not None and record.name in self.names)

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        names = f" named {sorted(self.names)}" if self.names else ""
        return f"{self.role}: {self.permission}{names}{where}"


def _binds_controller(binding: Manifest, default_namespace: str) -> bool:
    account = service_account()
    return any(
        s.get("kind") == "ServiceAccount" and s.get("name") == account
        and s.get("namespace", default_namespace) == default_namespace
        for s in binding.get("subjects") or ()
    )


def rules_of(role: Manifest) -> list[Manifest]:
    return list(role.get("rules") or ())


def _grants(role: Manifest, label: str, where: str | None) -> Iterator[Grant]:
    for rule in rules_of(role):
        for group in rule.get("apiGroups") or ():
            for resource in rule.get("resources") or ():
                for verb in rule.get("verbs") or ():
                    yield Grant(label, where, Permission(group, resource, verb),
                                frozenset(rule.get("resourceNames") or ()))


def controller_grants() -> list[Grant]:
    """Every permission the controller's service account holds through deploy/."""
    ns = namespace()
    grants: list[Grant] = []
    for binding in find("ClusterRoleBinding"):
        if _binds_controller(binding, ns):
            role = one("ClusterRole", binding["roleRef"]["name"])
            grants += _grants(role, f"ClusterRole/{role['metadata']['name']}", None)
    for binding in find("RoleBinding"):
        if _binds_controller(binding, ns):
            ref = binding["roleRef"]
            role = one(ref["kind"], ref["name"])
            grants += _grants(role, f"{ref['kind']}/{ref['name']}", ns)
    return sorted(grants)
