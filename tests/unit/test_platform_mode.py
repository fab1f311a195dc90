"""`--mode auto`: the ClusterRole of Deckhouse's virtualization controller tells whether
the platform hot-plugs, read from the role as the repository renders it before and
after native NIC hotplug (deckhouse/virtualization #2187)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from nicplug.adapters.core.platform_mode import CONTROLLER_ROLE, fixed, judge, unreadable
from nicplug.adapters.core.settings import Settings
from nicplug.adapters.kube.errors import NotFound, PatchRejected

RBAC = Path(__file__).resolve().parents[1] / "fixtures" / "deckhouse" / "rbac"


def controller_role(release: str) -> dict[str, Any]:
    """The controller's ClusterRole from the Helm template: its template-only lines left
    out, the chart's name filled in."""
    text = (RBAC / f"rbac-for-us.{release}.yaml").read_text()
    lines = [line.replace("{{ .Chart.Name }}", "virtualization")
             for line in text.splitlines() if not line.strip().startswith("{{")]
    for doc in yaml.safe_load_all("\n".join(lines)):
        if doc and doc.get("kind") == "ClusterRole" and doc["metadata"]["name"] == CONTROLLER_ROLE:
            return dict(doc)
    raise AssertionError(f"no {CONTROLLER_ROLE} in {release}")


def test_a_release_with_native_hotplug_is_observed() -> None:
    found = judge(controller_role("native-hotplug"))
    assert (found.mode, found.source) == ("observe", "clusterrole")
    assert "hot-plugs" in found.why


def test_a_release_before_native_hotplug_is_driven() -> None:
    found = judge(controller_role("before-hotplug"))
    assert (found.mode, found.source) == ("drive", "clusterrole")
    assert "lacks get clusternetworks" in found.why


def test_wildcards_and_split_rules_grant_it_too() -> None:
    role = {"rules": [
        {"apiGroups": ["network.deckhouse.io"], "resources": ["networks"], "verbs": ["*"]},
        {"apiGroups": ["*"], "resources": ["clusternetworks"],
         "verbs": ["get", "list", "watch"]},
    ]}
    assert judge(role).mode == "observe"
    only_get = {"rules": [{"apiGroups": ["network.deckhouse.io"],
                           "resources": ["networks", "clusternetworks"], "verbs": ["get"]}]}
    assert judge(only_get).mode == "drive"


@pytest.mark.parametrize(("error", "said"), [
    (PatchRejected("403 Forbidden: no", status=403, reason="Forbidden"), "may not read"),
    (NotFound("404 NotFound: none", status=404, reason="NotFound"), "no ClusterRole"),
])
def test_an_unreadable_role_is_observed_never_a_second_writer(error: Any, said: str) -> None:
    found = unreadable(error)
    assert (found.mode, found.source) == ("observe", "fallback")
    assert said in found.why and "--mode drive" in found.why


def test_the_setting_and_the_flavour_decide_without_asking() -> None:
    assert fixed(Settings()) is None  # auto on Deckhouse: ask the cluster
    drive = fixed(Settings(mode="drive"))
    assert drive is not None and (drive.mode, drive.source) == ("drive", "setting")
    kubevirt = fixed(Settings(dialect="multus"))
    assert kubevirt is not None and (kubevirt.mode, kubevirt.source) == ("observe", "flavour")
    with pytest.raises(ValueError, match="only observes"):
        Settings(dialect="multus", mode="drive")
