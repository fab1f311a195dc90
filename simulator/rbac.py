"""The ClusterRole of Deckhouse's virtualization controller, as the simulated cluster serves it.

Deckhouse installs `d8:virtualization:virtualization-controller`
(`templates/virtualization-controller/rbac-for-us.yaml`). The release that taught the
controller to hot-plug networks (#2187, `3d5170713`) added the rule that lets it watch
`networks` and `clusternetworks` of `network.deckhouse.io`, and IPAM (#2612) the one on
`ipaddresses` after it; a release without native hotplug has neither. A controller
beside the platform can read which release runs from this object (`knobs.hotplugs`
decides which one the simulator serves). The rules are the rendered template's,
kept in `deckhouse_clusterrole.json`; nothing here touches the store.
"""

from __future__ import annotations

import copy
import json
from importlib import resources
from typing import Any

from nicplug.simulator.resources import CLUSTER_ROLES

NAME = "d8:virtualization:virtualization-controller"
LABELS = {"heritage": "deckhouse", "module": "virtualization", "app": "virtualization-controller"}
NETWORK_GROUP = "network.deckhouse.io"
HOTPLUG_RULE = {"apiGroups": [NETWORK_GROUP], "resources": ["networks", "clusternetworks"],
                "verbs": ["get", "list", "watch"]}
"""The rule #2187 added with the network watcher."""
_IPAM_RESOURCES = ["ipaddresses"]


def _rules() -> list[dict[str, Any]]:
    text = resources.files("nicplug.simulator").joinpath("deckhouse_clusterrole.json").read_text()
    rules: list[dict[str, Any]] = json.loads(text)["rules"]
    return rules


def controller_role(*, native_hotplug: bool) -> dict[str, Any]:
    """The ClusterRole as the release with (or without) native network hotplug renders it."""
    rules = copy.deepcopy(_rules())
    if not native_hotplug:
        rules = [r for r in rules if not (
            r.get("apiGroups") == [NETWORK_GROUP]
            and (r.get("resources") == HOTPLUG_RULE["resources"]
                 or r.get("resources") == _IPAM_RESOURCES))]
    return {"apiVersion": CLUSTER_ROLES.api_version, "kind": CLUSTER_ROLES.kind,
            "metadata": {"name": NAME, "labels": dict(LABELS)}, "rules": rules}
