"""Every installation deploy/ offers renders with kustomize into valid objects.

deploy/ is a kustomize layout: `base/` (what every installation has), `overlays/<name>/`
(a whole installation of its own, applied instead of the base) and
`components/<name>/` (an optional part, `kind: Component`, any installation adds under
`components:`). This test finds them on disk, so an overlay or a component added later
is checked without being listed here: each overlay renders alone, each component on top
of the base, and every object it renders validates against the Kubernetes schemas, kept
in the one namespace of the installation.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate.utils import validate

from tests.deploy import manifests

KUBERNETES_VERSION = "1.31"
CLUSTER_SCOPED = {
    "Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
}
# Kinds of CRDs an installation may ship objects of; the schemas know only built-ins.
FOREIGN_GROUPS = ("monitoring.coreos.com/", "postgresql.cnpg.io/", "nicplug.io/")


def installations() -> list[Path]:
    """deploy/ itself and every overlay: the directories `kubectl apply -k` takes."""
    overlays = sorted(p.parent for p in manifests.DEPLOY.glob("overlays/*/kustomization.yaml"))
    return [manifests.DEPLOY, *overlays]


def components() -> list[Path]:
    return sorted(p.parent for p in manifests.DEPLOY.glob("components/*/kustomization.yaml"))


def render(kubectl: str, directory: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [kubectl, "kustomize", str(directory)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, f"{directory}: {done.stderr}"
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def check(docs: list[dict[str, Any]], where: str) -> None:
    namespaces = {d["metadata"].get("namespace") for d in docs
                  if d["kind"] not in CLUSTER_SCOPED}
    assert len(namespaces) == 1 and None not in namespaces, f"{where}: {namespaces}"
    for doc in docs:
        if doc["apiVersion"].startswith(FOREIGN_GROUPS):
            continue
        validate(doc, KUBERNETES_VERSION, strict=True)


def kubectl_or_skip() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: `kubectl kustomize` cannot render deploy/")
    return kubectl


def test_every_component_says_it_is_one() -> None:
    for directory in components():
        loaded = yaml.safe_load((directory / "kustomization.yaml").read_text())
        assert loaded["kind"] == "Component", directory


@pytest.mark.slow
@pytest.mark.parametrize("directory", installations(), ids=lambda p: p.name)
def test_every_installation_renders_valid_objects(directory: Path) -> None:
    check(render(kubectl_or_skip(), directory), str(directory))


@pytest.mark.slow
@pytest.mark.parametrize("component", components(), ids=lambda p: p.name)
def test_every_component_renders_on_the_base(component: Path, tmp_path: Path) -> None:
    kubectl = kubectl_or_skip()
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        # kustomize takes only relative paths to other kustomizations
        "resources": [os.path.relpath(manifests.BASE, tmp_path)],
        "components": [os.path.relpath(component, tmp_path)],
    }))
    check(render(kubectl, tmp_path), str(component))
