"""The monitoring component (deploy/components/monitoring/) checked with the tools that
will read it: promtool checks the rules and fires every alert in a test of its own; every
alert has its runbook under docs/runbooks/, in the four parts kubevirt/monitoring's
runbooks have; the dashboard is JSON Grafana loads. That every series named here is one a
running controller exports is checked against a scrape
(tests/integration/test_metrics_exported.py)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy import manifests
from tests.deploy.monitoring import (
    CASES,
    COMPONENT,
    DASHBOARD,
    RUNBOOKS,
    promtool_tests,
    rule_file,
    rules,
)

SEVERITIES = {"critical", "warning", "info"}
SECTIONS = ("## Meaning", "## Impact", "## Diagnosis", "## Mitigation")


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus): the "
                    "rules and their alert tests cannot be run")
    return found


def test_promtool_checks_the_rules(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(rule_file())
    done = subprocess.run([promtool(), "check", "rules", str(tmp_path / "rules.yaml")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


def test_every_alert_is_quiet_then_fires_in_a_promtool_test(tmp_path: Path) -> None:
    assert sorted(c.alert for c in CASES) == sorted(r["alert"] for r in rules())
    (tmp_path / "rules.yaml").write_text(rule_file())
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(promtool_tests("rules.yaml")))
    done = subprocess.run([promtool(), "test", "rules", "tests.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_wrong_expectation_fails_the_promtool_test(tmp_path: Path) -> None:
    """The promtool test can fail: an alert expected before it fires is reported."""
    tests = promtool_tests("rules.yaml")
    first = tests["tests"][0]["alert_rule_test"]
    first[0]["exp_alerts"] = first[1]["exp_alerts"]  # firing already while quiet
    (tmp_path / "rules.yaml").write_text(rule_file())
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    done = subprocess.run([promtool(), "test", "rules", "tests.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0 and "FAILED" in done.stdout + done.stderr


@pytest.mark.parametrize("rule", rules(), ids=lambda r: r["alert"])
def test_every_alert_says_how_bad_what_and_where_to_read_on(rule: dict[str, object]) -> None:
    labels, annotations = rule["labels"], rule["annotations"]
    assert isinstance(labels, dict) and isinstance(annotations, dict)
    assert labels["severity"] in SEVERITIES
    assert set(annotations) == {"summary", "description", "runbook_url"}
    assert annotations["runbook_url"] == f"docs/runbooks/{rule['alert']}.md"
    runbook = (manifests.ROOT / str(annotations["runbook_url"])).read_text()
    assert runbook.startswith(f"# {rule['alert']}\n")
    positions = [runbook.find(section) for section in SECTIONS]
    assert -1 not in positions and positions == sorted(positions), positions
    assert "nicplug " in runbook or "kubectl " in runbook  # diagnosis with commands


def test_every_runbook_is_an_alerts() -> None:
    assert sorted(p.stem for p in RUNBOOKS.glob("*.md")) == sorted(r["alert"] for r in rules())


def test_the_operations_guide_lists_every_alert() -> None:
    guide = (manifests.ROOT / "docs" / "operations.md").read_text()
    for rule in rules():
        assert f"[{rule['alert']}](runbooks/{rule['alert']}.md)" in guide, rule["alert"]


def test_the_memory_alert_is_set_against_the_deployments_limit() -> None:
    limit = manifests.one("Deployment")["spec"]["template"]["spec"]["containers"][0][
        "resources"]["limits"]["memory"]
    assert limit.endswith("Mi")
    (rule,) = [r for r in rules() if r["alert"] == "NicplugMemoryNearLimit"]
    assert re.search(rf"\b{int(limit[:-2]) * 2**20}\b", rule["expr"]), rule["expr"]


def test_the_dashboard_is_a_grafana_dashboard_for_the_sidecar() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "nicplug" and dashboard["panels"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    titles = " ".join(p["title"].lower() for p in dashboard["panels"])
    for shown in ("by state", "duration", "failures by reason", "pending effects", "leader",
                  "journal", "event loop"):
        assert shown in titles, shown
    kustomization = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Component"
    (generated,) = kustomization["configMapGenerator"]
    assert generated["options"]["labels"]["grafana_dashboard"] == "1"
    assert generated["files"] == ["dashboards/nicplug.json"]


def test_prometheus_finds_the_service_and_reaches_its_port() -> None:
    """The ServiceMonitor selects the metrics Service by its labels and names its port;
    the NetworkPolicy lets that port in, to the controller's pods; the alerts' `job` is
    the Service's name, as the Prometheus operator sets it."""
    monitor = yaml.safe_load((COMPONENT / "servicemonitor.yaml").read_text())
    policy = yaml.safe_load((COMPONENT / "networkpolicy.yaml").read_text())
    service = manifests.one("Service")
    labels = service["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [manifests.namespace()]
    ports = {p["name"] for p in service["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports
    pod_labels = manifests.one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]} <= ports
    assert all(f'job="{service["metadata"]["name"]}"' in r["expr"] or r["alert"] ==
               "NicplugJournalVolumeFilling" for r in rules())
