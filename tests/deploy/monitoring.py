"""The monitoring component read for its tests: its alerts, its dashboard's queries,
the series both name, and one promtool test per alert.

A promtool test gives series over time in which the alert is quiet at one moment and
fires at a later one, with the labels it must carry. The expected annotations are the
rule's own, rendered with those labels (the templates use only `$labels.<name>` and
`$value`), so a wrong label shows in the text.

    python -m tests.deploy.monitoring   # print the promtool test file, to run by hand
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.deploy import manifests

COMPONENT = manifests.DEPLOY / "components" / "monitoring"
RULES = COMPONENT / "prometheusrule.yaml"
DASHBOARD = COMPONENT / "dashboards" / "nicplug.json"
RUNBOOKS = manifests.ROOT / "docs" / "runbooks"
EXTERNAL = {
    "up": "Prometheus's own: whether the scrape succeeded",
    "kubelet_volume_stats_available_bytes": "the kubelet's, of the journal's claim",
    "kubelet_volume_stats_capacity_bytes": "the kubelet's, of the journal's claim",
}
"""Series the alerts read that nicplug does not export, and whose they are."""
_SERIES = re.compile(r"\b(?:nicplug|process|python|up|kubelet)_?[a-zA-Z0-9_:]*")
JOB = 'job="nicplug-metrics", pod="nicplug-0"'


@dataclass(frozen=True)
class Case:
    alert: str
    series: dict[str, str]  # promtool `series` -> `values`
    quiet_at: str  # an eval time at which the alert does not fire
    fires_at: str  # an eval time at which it fires
    labels: dict[str, str] = field(default_factory=dict)  # besides alertname and severity
    value: str = ""  # what `$value` renders as, where the description uses it


def _histogram(name: str, labels: str, buckets: dict[str, str]) -> dict[str, str]:
    return {f'{name}_bucket{{{labels}, le="{le}"}}': values for le, values in buckets.items()}


CASES: tuple[Case, ...] = (
    Case("NicplugDown", {f"up{{{JOB}}}": "1x10 0x30"}, "8m", "20m"),
    Case("NicplugNoLeader", {f"nicplug_leader{{{JOB}}}": "1x10 0x30"}, "8m", "20m"),
    Case("NicplugJournalRefusesWrites", {f"nicplug_journal_writable{{{JOB}}}": "1x10 0x10"},
         "5m", "15m", {"pod": "nicplug-0"}),
    Case("NicplugJournalVolumeFilling", {
        'kubelet_volume_stats_available_bytes{job="kubelet", namespace="nicplug-system", '
        'persistentvolumeclaim="nicplug-journal"}': "50x10 10x60",
        'kubelet_volume_stats_capacity_bytes{job="kubelet", namespace="nicplug-system", '
        'persistentvolumeclaim="nicplug-journal"}': "100x70",
    }, "5m", "50m", {"job": "kubelet", "namespace": "nicplug-system",
                     "persistentvolumeclaim": "nicplug-journal"}),
    Case("NicplugJournalSlow", _histogram(
        "nicplug_journal_commit_latency_seconds", JOB,
        {"0.1": "0+10x10 100x40", "1": "0+10x50", "+Inf": "0+10x50"}), "5m", "40m"),
    Case("NicplugEventLoopStalled", _histogram(
        "nicplug_event_loop_lag_seconds", JOB,
        {"0.01": "0+10x10 100x40", "1": "0+10x50", "+Inf": "0+10x50"}), "5m", "40m"),
    Case("NicplugMemoryNearLimit",
         {f"process_resident_memory_bytes{{{JOB}}}": "300000000x10 700000000x30"}, "5m", "35m"),
    Case("NicplugOperationsFailing", {
        f'nicplug_operation_failures_total{{{JOB}, direction="plug", reason="SDNTimeout"}}':
            "_x10 1x40",
        f'nicplug_operation_failures_total{{{JOB}, direction="plug", reason="SDNError"}}':
            "0x20 1x30",
    }, "5m", "12m", {"direction": "plug", "reason": "SDNTimeout"}),
    Case("NicplugOperationsNotProgressing", {
        f'nicplug_operations{{{JOB}, state="SDNReady"}}': "1x100",
        f'nicplug_transitions_total{{{JOB}, to="SDNReady"}}': "0+1x10 10x90",
    }, "20m", "80m"),
    Case("NicplugOperationsWaitingForSomeone", {
        f'nicplug_operations{{{JOB}, state="RestartRequired"}}': "0x10 2x80",
    }, "30m", "80m", value="2"),
    Case("NicplugOperationsSlow", _histogram(
        "nicplug_operation_duration_seconds",
        f'{JOB}, direction="plug", flavour="deckhouse", outcome="Attached"',
        {"10": "0+1x60 60x120", "600": "0+1x180", "+Inf": "0+1x180"}),
        "50m", "170m", {"direction": "plug"}),
    Case("NicplugEffectsPending",
         {f"nicplug_pending_effect_oldest_age_seconds{{{JOB}}}": "0x10 0+60x30"}, "15m", "35m"),
    Case("NicplugUnreadableObjects",
         {f'nicplug_observation_errors_total{{{JOB}, kind="object"}}': "0x10 1x30"},
         "5m", "15m", {"kind": "object"}),
    Case("NicplugRolloutBypassed",
         {f"nicplug_rollout_bypassed_total{{{JOB}}}": "0x10 1x30"}, "5m", "15m"),
    Case("NicplugForbidden", {
        f'nicplug_api_requests_total{{{JOB}, verb="patch", resource="pods", code="403"}}':
            "_x10 1x30",
        f'nicplug_api_requests_total{{{JOB}, verb="patch", resource="pods", code="200"}}':
            "0+5x40",
    }, "5m", "12m", {"verb": "patch", "resource": "pods"}),
    Case("NicplugAPIErrors", {
        f'nicplug_api_requests_total{{{JOB}, verb="list", resource="pods", code="500"}}':
            "0x10 0+60x40",
    }, "5m", "35m"),
    Case("NicplugWatchesStalled",
         {f'nicplug_watch_lag_seconds{{{JOB}, kind="Pod"}}': "10x10 200x30"}, "5m", "30m",
         {"kind": "Pod"}),
)


def rules() -> list[dict[str, Any]]:
    """Every alerting rule of the component, as the PrometheusRule lists them."""
    loaded = yaml.safe_load(RULES.read_text())
    return [rule for group in loaded["spec"]["groups"] for rule in group["rules"]]


def dashboard_queries() -> list[str]:
    """Every query of every panel of the Grafana dashboard."""
    loaded = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in loaded["panels"] for target in panel.get("targets", ())]


def named_series() -> dict[str, set[str]]:
    """The series each expression of the alerts and the dashboard names (sample names:
    a histogram's `_bucket`, `_sum`, `_count`, a counter's `_total`), by where."""
    named: dict[str, set[str]] = {}
    for rule in rules():
        named.setdefault(f"alert {rule['alert']}", set()).update(_names(rule["expr"]))
    for number, query in enumerate(dashboard_queries(), 1):
        named.setdefault(f"dashboard query {number}", set()).update(_names(query))
    return named


def _names(expr: str) -> set[str]:
    # label values are quoted, label names follow `by`, `on`… or precede `=`: no series
    unquoted = re.sub(r'"[^"]*"', '""', expr)
    unquoted = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "",
                      unquoted)
    return {m.group(0) for m in _SERIES.finditer(unquoted)
            if not unquoted[m.end():].lstrip().startswith(("=", "!="))}


def rule_file() -> str:
    """The PrometheusRule's `spec`: a rule file promtool reads."""
    return yaml.safe_dump(yaml.safe_load(RULES.read_text())["spec"], sort_keys=False)


def _rendered(text: str, labels: dict[str, str], value: str) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "$value":
            return value
        return labels[name.removeprefix("$labels.")]

    return re.sub(r"{{ (\$value|\$labels\.\w+) }}", one, text)


def promtool_tests(rule_path: str) -> dict[str, Any]:
    """The promtool test file: for each case, the alert quiet, then firing."""
    by_name = {rule["alert"]: rule for rule in rules()}
    tests = []
    for case in CASES:
        rule = by_name[case.alert]
        annotations = {k: _rendered(v, case.labels, case.value)
                       for k, v in rule["annotations"].items()}
        tests.append({
            "name": case.alert,
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in case.series.items()],
            "alert_rule_test": [
                {"eval_time": case.quiet_at, "alertname": case.alert, "exp_alerts": []},
                {"eval_time": case.fires_at, "alertname": case.alert, "exp_alerts": [{
                    "exp_labels": {**case.labels, "severity": rule["labels"]["severity"]},
                    "exp_annotations": annotations,
                }]},
            ],
        })
    return {"rule_files": [rule_path], "evaluation_interval": "1m", "tests": tests}


if __name__ == "__main__":
    print(yaml.safe_dump(promtool_tests(str(Path("rules.yaml"))), sort_keys=False))
