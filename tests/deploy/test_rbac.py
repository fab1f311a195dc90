"""Least privilege, proven: the RBAC of deploy/ grants what the controller does, no more.

The controller runs in-process through the demo's scenarios (hotplug, hot-unplug,
remove Main, SDN failure, revert, Stage with Automatic approval — RestartVM deletes the
VMI —, Stage with Manual approval, upstream KubeVirt with multus: an opted-in VM
migrated — CreateMigration —, an opted-out one waiting, a hotplug under Stage) against
simulated clusters whose API servers log every request as RBAC names it. Every request
must be allowed by a role bound to the controller's service account, and every grant
must have been used — or be listed in `UNEXERCISED` with the reason it is needed all
the same.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.deploy import manifests
from tests.deploy.exercise import PLANS, WorldRun, play_all

UNEXERCISED: dict[str, str] = {
    # "<role>: <verb> <resource> (<group>)": "why the grant is needed although no
    # scenario uses it (an error path, an option the scenarios leave off)".
    "ClusterRole/nicplug: create internalvirtualizationvirtualmachineinstancemigrations":
        "a migration under Deckhouse's KubeVirt; the demo's migration world runs multus "
        "on upstream KubeVirt",
    "ClusterRole/nicplug: get virtualmachineoperations (virtualization.deckhouse.io)":
        "a restart's Stop or Start retried after its create was applied but not answered "
        "finds one of that name: it is read back to check it is nicplug's "
        "(tests/kube/test_executor_restart_operations.py exercises it)",
    "ClusterRole/nicplug: patch virtualmachineoperations (virtualization.deckhouse.io)":
        "a change replaced in the instant its restart was asked joins the Stop made for "
        "the first: its nicplug.io/restart-for names both "
        "(tests/kube/test_executor_restart_operations.py exercises it)",
    "ClusterRole/nicplug: delete networkinterfaceoperations (nicplug.io)":
        "the retention deletes the objects of the operations it archived, after 30 days "
        "by default (tests/integration/test_operation_objects.py exercises it)",
    "ClusterRole/nicplug: delete virtualmachineoperations (virtualization.deckhouse.io)":
        "nicplug's finished VM operations are deleted a day after their creation by "
        "default (tests/integration/test_cleanup.py exercises it)",
    "ClusterRole/nicplug: delete internalvirtualizationvirtualmachineinstancemigrations":
        "nicplug's finished migrations under Deckhouse's KubeVirt are deleted a day after "
        "their creation by default (tests/integration/test_cleanup.py exercises it)",
    "ClusterRole/nicplug: patch events (events.k8s.io)":
        "a repeat of the same Event within 6 minutes counts in its series; no scenario "
        "fails the same way twice (tests/kube/test_events.py exercises it)",
}

USED_BY_TIMING: dict[str, str] = {
    # grants the plays use or not depending on how the real clock falls
    "ClusterRole/nicplug: patch networkinterfaceoperations (nicplug.io)":
        "an operation's object written again at a later step: steps within a second of "
        "each other are one write, so a quick play may create each object in its final "
        "state (tests/integration/test_operation_objects.py exercises it)",
}

FORBIDDEN_RESOURCES = {"secrets", "configmaps", "serviceaccounts/token", "*"}
FORBIDDEN_VERBS = {"*", "escalate", "bind", "impersonate", "deletecollection"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[WorldRun]:
    directory: Path = tmp_path_factory.mktemp("rbac")
    lease = (manifests.namespace(), manifests.config()["NICPLUG_LEASE_NAME"])
    return asyncio.run(play_all(directory, lease))


def test_every_demo_world_is_played() -> None:
    from nicplug.adapters.demo.scenarios import WORLDS

    assert set(PLANS) == {w.name for w in WORLDS}


def test_the_scenarios_reach_their_outcomes(runs: list[WorldRun]) -> None:
    for run in runs:
        assert not run.missed, f"world {run.name}: {run.missed}\n{run.rows}"
        assert not run.actor_errors, f"world {run.name}: {run.actor_errors}"


def test_every_logged_request_is_the_controllers(runs: list[WorldRun]) -> None:
    """The user's edits bypass HTTP, so the log holds only what RBAC must allow."""
    for run in runs:
        agents = {r.user_agent for r in run.requests}
        assert agents and all(f"(rbac-{run.name})" in a for a in agents), agents


def test_every_request_of_the_controller_is_granted(runs: list[WorldRun]) -> None:
    grants = manifests.controller_grants()
    denied = sorted({
        f"{manifests.permission_of(r)} ns={r.namespace} name={r.name}"
        for run in runs for r in run.requests
        if not any(g.allows(r) for g in grants)
    })
    assert not denied, "requests the deployed RBAC would deny:\n" + "\n".join(denied)


def test_every_grant_is_used_or_explained(runs: list[WorldRun]) -> None:
    requests = [r for run in runs for r in run.requests]
    unused = {
        str(g) for g in manifests.controller_grants()
        if not any(g.allows(r) for r in requests)
    }
    unexplained = sorted(
        g for g in unused
        if not any(g.startswith(k) for k in (*UNEXERCISED, *USED_BY_TIMING))
    )
    assert not unexplained, "grants no scenario used:\n" + "\n".join(unexplained)
    stale = sorted(k for k in UNEXERCISED if not any(g.startswith(k) for g in unused))
    assert not stale, f"explained as unused but used after all: {stale}"


def test_the_scenarios_exercise_every_kind_of_write(runs: list[WorldRun]) -> None:
    """The proof is only as good as the paths taken: each effect's request appears."""
    seen = {manifests.permission_of(r) for run in runs for r in run.requests}
    P = manifests.Permission
    kv = "internal.virtualization.deckhouse.io"  # Deckhouse's renamed KubeVirt
    for needed in (
        (P("", "pods", "patch"),),  # PatchPodNetworks
        (P(kv, "internalvirtualizationvirtualmachines", "patch"),),  # PatchVirtualMachine
        (P("virtualization.deckhouse.io", "virtualmachines/status", "patch"),),  # SetVMCondition
        (P("kubevirt.io", "virtualmachineinstancemigrations", "create"),  # CreateMigration
         P(kv, "internalvirtualizationvirtualmachineinstancemigrations", "create")),
        (P("events.k8s.io", "events", "create"),),  # EmitEvent
        (P("coordination.k8s.io", "leases", "create"),),  # the first leader
        (P("coordination.k8s.io", "leases", "update"),),  # taking over a released Lease
        (P("coordination.k8s.io", "leases", "patch"),),  # releasing it on a clean stop
    ):
        assert seen & set(needed), f"no scenario made a request to any of {needed}"
    # the kubevirt flavour writes nothing of the KubeVirt VM: KubeVirt's VM controller
    # would remove a condition of nicplug's at once (`targets.conditions_kept`)
    assert not {p for p in seen if p.group == "kubevirt.io"
                and p.resource.startswith("virtualmachines") and p.verb not in ("list", "watch")}


def test_the_cluster_role_grants_what_the_flavour_table_names() -> None:
    """Every KubeVirt kind in the RBAC is named as a flavour of nicplug names it, and
    each flavour's every need is granted: a rename cannot leave the RBAC behind."""
    from nicplug.adapters.kube.flavour import FLAVOURS, flavour_for, rbac_rules

    wanted = {
        (g.group, resource, verb)
        for name in FLAVOURS for g in rbac_rules(flavour_for(name))
        for resource in g.resources for verb in g.verbs
    }
    granted = {
        (g.permission.group, g.permission.resource, g.permission.verb)
        for g in manifests.controller_grants() if g.role.startswith("ClusterRole/")
    }
    assert granted == wanted, (sorted(granted - wanted), sorted(wanted - granted))


def test_no_wildcards_secrets_or_escalation() -> None:
    for kind in ("ClusterRole", "Role"):
        for role in manifests.find(kind):
            for rule in manifests.rules_of(role):
                name = f"{kind}/{role['metadata']['name']}"
                assert "nonResourceURLs" not in rule, name
                for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                    assert "*" not in (rule.get(key) or ()), f"{name}: * in {key}"
                assert not FORBIDDEN_RESOURCES & set(rule.get("resources") or ()), name
                assert not FORBIDDEN_VERBS & set(rule.get("verbs") or ()), name


def test_the_lease_is_granted_only_in_the_controllers_namespace() -> None:
    for grant in manifests.controller_grants():
        if grant.permission.resource == "leases":
            assert grant.namespace == manifests.namespace(), str(grant)
