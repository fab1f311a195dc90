"""Which world nicplug is in: does the platform's own controller hot-plug?

With `--mode auto` on Deckhouse, nicplug reads the ClusterRole of Deckhouse's
virtualization controller, `d8:virtualization:virtualization-controller`. The release
that brought native NIC hotplug (deckhouse/virtualization #2187, commit 3d5170713)
added to it, together with the network watcher that makes its controller re-converge a
VM when a `Network` / `ClusterNetwork` changes, `get`/`list`/`watch` on `networks` and
`clusternetworks` of `network.deckhouse.io`; releases without native hotplug have no
such grant, and the controller cannot run that watcher without it. So a role granting
it is a platform that hot-plugs: observe; a role without it: drive. Why this and not a
version, a Deployment image or a feature flag: docs/decisions/observe-or-drive.md.

A role nicplug may not read (403) or that does not exist (404), or a read that fails,
is said in the log and read as observe: never a second writer by accident. `--mode
observe|drive` is obeyed without asking; the kubevirt flavour always observes.

`judge` is pure (the rule, tested on real objects); `find_mode` does the one read.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kubernetes_asyncio.client.api.rbac_authorization_v1_api import RbacAuthorizationV1Api

from nicplug.adapters.core.settings import Settings
from nicplug.adapters.kube.client import ApiConnection
from nicplug.adapters.kube.errors import KubeError, translate
from nicplug.adapters.kube.wire import fetch_object
from nicplug.machines.policy import Mode

log = logging.getLogger("nicplug.adapters.platform_mode")  # the name log pipelines filter on

CONTROLLER_ROLE = "d8:virtualization:virtualization-controller"
"""The ClusterRole of Deckhouse's virtualization controller
(`templates/virtualization-controller/rbac-for-us.yaml`)."""
NETWORK_GROUP = "network.deckhouse.io"
HOTPLUG_GRANT = frozenset(
    (resource, verb)
    for resource in ("networks", "clusternetworks")
    for verb in ("get", "list", "watch")
)
"""What the controller's role gains with native hotplug (#2187): its network watcher."""

Source = Literal["setting", "flavour", "clusterrole", "fallback"]


@dataclass(frozen=True, slots=True)
class ModeFinding:
    """The mode nicplug runs in, where it comes from, and why, in words."""

    mode: Mode
    source: Source
    why: str

    def describe(self) -> str:
        return f"{self.mode} mode ({self.source}: {self.why})"


def granted(role: Mapping[str, Any]) -> frozenset[tuple[str, str]]:
    """The (resource, verb) pairs of `network.deckhouse.io` a ClusterRole's rules grant,
    wildcards spelled out for the pairs `HOTPLUG_GRANT` asks about."""
    pairs: set[tuple[str, str]] = set()
    for rule in role.get("rules") or ():
        if not isinstance(rule, Mapping):
            continue
        groups = set(rule.get("apiGroups") or ())
        if not groups & {NETWORK_GROUP, "*"}:
            continue
        resources = set(rule.get("resources") or ())
        verbs = set(rule.get("verbs") or ())
        for resource, verb in HOTPLUG_GRANT:
            if resources & {resource, "*"} and verbs & {verb, "*"}:
                pairs.add((resource, verb))
    return frozenset(pairs)


def judge(role: Mapping[str, Any]) -> ModeFinding:
    """The mode a readable ClusterRole of the platform's controller says."""
    missing = HOTPLUG_GRANT - granted(role)
    if not missing:
        return ModeFinding(
            "observe", "clusterrole",
            f"ClusterRole {CONTROLLER_ROLE} grants get/list/watch on networks and "
            f"clusternetworks of {NETWORK_GROUP}: the platform hot-plugs NICs itself")
    lacking = ", ".join(f"{verb} {resource}" for resource, verb in sorted(missing))
    return ModeFinding(
        "drive", "clusterrole",
        f"ClusterRole {CONTROLLER_ROLE} lacks {lacking} of {NETWORK_GROUP}: a release "
        f"without native NIC hotplug, nicplug writes the pods and KVVMs")


def unreadable(error: KubeError) -> ModeFinding:
    """The mode when the role cannot be read: observe, saying why and what to do."""
    if error.status == 403:
        what = (f"nicplug may not read ClusterRole {CONTROLLER_ROLE} (403; deploy/ grants "
                f"get on it)")
    elif error.status == 404:
        what = (f"no ClusterRole {CONTROLLER_ROLE} (404): no Deckhouse virtualization "
                f"controller to ask")
    else:
        what = f"ClusterRole {CONTROLLER_ROLE} could not be read ({error})"
    return ModeFinding(
        "observe", "fallback",
        f"{what}; observing, so as never to be a second writer by accident (--mode drive "
        f"to write the pods and KVVMs)")


def fixed(settings: Settings) -> ModeFinding | None:
    """The mode the settings alone decide, or None: ask the cluster."""
    mode = settings.fixed_mode()
    if mode is None:
        return None
    if settings.dialect == "multus":
        return ModeFinding(mode, "flavour",
                           "upstream KubeVirt hot-plugs itself: nicplug follows it")
    return ModeFinding(mode, "setting", f"--mode {mode}")


async def find_mode(settings: Settings, connection: ApiConnection) -> ModeFinding:
    """The mode to run in: as set, else as the platform controller's ClusterRole says."""
    found = fixed(settings)
    if found is not None:
        return found
    rbac = RbacAuthorizationV1Api(connection.client)
    try:
        role = await fetch_object(rbac.read_cluster_role(
            CONTROLLER_ROLE, _preload_content=False,
            _request_timeout=connection.request_timeout))
    except KubeError as error:
        return unreadable(error)
    except Exception as error:  # a transport failure, translated
        return unreadable(translate(error))
    return judge(role)
