"""docs/operations.md stays true to the code: every option of `nicplug run` is there
with its environment variable, every metric the controller exports is explained, and
the Kubernetes objects it shows validate like the manifests do."""

from __future__ import annotations

import re

import yaml
from kubernetes_validate.utils import SchemaNotFoundError, validate

from nicplug.adapters.core.observability import Metrics
from tests.deploy import manifests
from tests.deploy.test_manifests import KUBERNETES_VERSIONS, run_options

GUIDE = manifests.ROOT / "docs" / "operations.md"


def guide() -> str:
    return GUIDE.read_text()


def test_every_option_of_run_is_documented_with_its_environment_variable() -> None:
    text = guide()
    for envvar, option in run_options().items():
        row = next((line for line in text.splitlines()
                    if line.startswith(f"| `{option.opts[0]}` |")), None)
        assert row is not None, f"no row for {option.opts[0]}"
        assert f"`{envvar}`" in row, f"{option.opts[0]}: {envvar} missing from its row"


def test_every_metric_is_documented() -> None:
    exported = {m.name for m in Metrics().registry.collect()}
    assert exported, "no metrics found"
    for name in exported:
        assert f"`{name}" in guide(), f"{name} is not in docs/operations.md"


def test_the_objects_shown_validate() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", guide(), flags=re.S)
    validated = []
    for block in blocks:
        doc = yaml.safe_load(block)
        if not isinstance(doc, dict) or "kind" not in doc:
            continue  # a fragment to paste into a manifest
        try:
            validate(doc, KUBERNETES_VERSIONS[0], strict=True)
        except SchemaNotFoundError:
            continue  # a custom resource (ServiceMonitor): no schema shipped for it
        validated.append(doc["kind"])
    assert "Pod" in validated  # the restore pod


def test_the_restore_pod_mounts_the_journals_claim() -> None:
    pod = next(d for d in (yaml.safe_load(b) for b in
                           re.findall(r"```yaml\n(.*?)```", guide(), flags=re.S))
               if isinstance(d, dict) and d.get("kind") == "Pod")
    claim = manifests.one("PersistentVolumeClaim")["metadata"]["name"]
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim
    mount = pod["spec"]["containers"][0]["volumeMounts"][0]["mountPath"]
    assert manifests.config()["NICPLUG_JOURNAL"].startswith(mount + "/")


def test_the_tolerations_fragment_parses() -> None:
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", guide(), flags=re.S)
              if "tolerations" in b]
    assert blocks
    for block in blocks:
        tolerations = yaml.safe_load(block)["tolerations"]
        assert {t["key"] for t in tolerations} == {
            "node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"}


def test_readme_links_the_operations_guide() -> None:
    assert "docs/operations.md" in (manifests.ROOT / "README.md").read_text()


def test_the_rbac_table_grants_what_the_clusterrole_grants() -> None:
    """Every row of "What it may do (RBAC)" names a resource (`plural.group`) and the
    verbs the ClusterRole gives on it, and every rule of the ClusterRole has its row."""
    granted: dict[str, set[str]] = {}
    for rule in manifests.one("ClusterRole", "nicplug")["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                plural, _, sub = resource.partition("/")
                name = (f"{plural}/{sub}" if sub else plural) + (f".{group}" if group else "")
                granted.setdefault(name, set()).update(rule["verbs"])
    section = guide().split("## What it may do (RBAC)")[1].split("\n## ")[0]
    rows = re.findall(r"^\| `([^`]+)` \| ([a-z, ]+) \|", section, flags=re.M)
    shown = {name: {v.strip() for v in verbs.split(",")} for name, verbs in rows}
    assert shown == granted
