"""Who asks, and what Deckhouse's admission policy lets them write, over real HTTP."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException

from nicplug.simulator import admission_policy, rbac
from nicplug.simulator.clock import VirtualSimClock
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.identity import DEFAULT_USER, service_account, token_for, username_of
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.resources import KVVMS

FIXTURES = Path(__file__).parents[1] / "fixtures" / "deckhouse"
NS, VM = "default", "vm-00000"
GROUP = "internal.virtualization.deckhouse.io"
KVVM_PATH = f"/apis/{GROUP}/v1/namespaces/{NS}/internalvirtualizationvirtualmachines/{VM}"
NICPLUG = service_account("nicplug-system", "nicplug")
D8_SYSTEM = service_account("d8-system", "nicplug")
MERGE = {"Content-Type": "application/merge-patch+json"}


def test_a_token_names_its_user_and_no_token_is_the_default_user() -> None:
    assert username_of(f"Bearer {token_for(NICPLUG)}") == NICPLUG
    assert username_of(None) == DEFAULT_USER
    assert username_of("Bearer nicplug-sim") == DEFAULT_USER
    with pytest.raises(ValueError):
        service_account("ns", "")


def _policy_fixture() -> tuple[dict[str, Any], dict[str, Any]]:
    policy, binding = yaml.safe_load_all((FIXTURES / "admission-policy.yaml").read_text())
    return policy, binding


def test_the_simulated_policy_is_the_one_deckhouse_installs() -> None:
    policy, binding = _policy_fixture()
    assert policy["metadata"]["name"] == admission_policy.POLICY
    assert binding["metadata"]["name"] == admission_policy.BINDING
    assert binding["spec"]["policyName"] == admission_policy.POLICY
    assert binding["spec"]["validationActions"] == ["Deny"]
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert frozenset(rule["apiGroups"]) == admission_policy.GROUPS
    assert rule["resources"] == ["*"]  # resources, not their subresources
    assert set(rule["operations"]) == set(admission_policy.OPERATIONS.values())
    (validation,) = policy["spec"]["validations"]
    assert validation["message"] == admission_policy.MESSAGE
    assert "reason" not in validation  # so the API server answers 422 Invalid
    expression = validation["expression"]
    prefixes = re.findall(r'username\.startsWith\("([^"]+)"\)', expression)
    assert tuple(prefixes) == admission_policy.ADMITTED_PREFIXES
    listed = re.search(r"username in \[(.*?)\]", expression, re.S)
    assert listed is not None
    assert frozenset(re.findall(r'"([^"]+)"', listed.group(1))) == admission_policy.ADMITTED_USERS


async def _patch(session: aiohttp.ClientSession, url: str, user: str | None,
                 body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    headers = dict(MERGE)
    if user is not None:
        headers["Authorization"] = f"Bearer {token_for(user)}"
    async with session.patch(url, json=body, headers=headers) as response:
        return response.status, await response.json()


async def test_a_kvvm_patch_is_refused_to_nicplugs_identity_and_taken_from_d8_system() -> None:
    async with SimulatedCluster(Knobs(dialect="deckhouse"), clock=VirtualSimClock(),
                                fixtures=Fixtures(vms=1)) as cluster, \
            aiohttp.ClientSession() as session:
        url = cluster.url + KVVM_PATH
        mark = {"metadata": {"annotations": {"example.com/mark": "1"}}}
        code, status = await _patch(session, url, NICPLUG, mark)
        cause = ("ValidatingAdmissionPolicy 'virtualization-restricted-access-policy' with "
                 "binding 'virtualization-restricted-access-policy-binding' denied request: "
                 "Operation forbidden for this user.")
        assert (code, status["reason"], status["code"]) == (422, "Invalid", 422)
        assert status["message"] == (
            f'internalvirtualizationvirtualmachines.{GROUP} "{VM}" is forbidden: {cause}')
        assert status["details"] == {"name": VM, "group": GROUP,
                                     "kind": "internalvirtualizationvirtualmachines",
                                     "causes": [{"message": cause}]}
        assert "example.com/mark" not in cluster.store.get(KVVMS, NS, VM)["metadata"].get(
            "annotations", {})
        # the status subresource is no resource the policy names
        code, _ = await _patch(session, url + "/status", NICPLUG, {"status": {"x": 1}})
        assert code == 200
        code, _ = await _patch(session, url.replace(VM, "no-such-vm"), NICPLUG, mark)
        assert code == 404  # the registry answers before admission runs
        code, _ = await _patch(session, url, D8_SYSTEM, mark)
        assert code == 200
        assert cluster.store.get(KVVMS, NS, VM)["metadata"]["annotations"]["example.com/mark"]
        async with session.delete(url, headers={
                "Authorization": f"Bearer {token_for(NICPLUG)}"}) as response:
            assert response.status == 422
        users = [(r.username, r.verb, r.subresource) for r in cluster.requests]
        assert users == [(NICPLUG, "patch", None), (NICPLUG, "patch", "status"),
                         (NICPLUG, "patch", None), (D8_SYSTEM, "patch", None),
                         (NICPLUG, "delete", None)]
        # each with what it was answered, so a test can count the writes that landed
        assert [(r.answered, r.landed) for r in cluster.requests] == [
            ([422], False), ([200], True), ([404], False), ([200], True), ([422], False)]
        kvvms = "internalvirtualizationvirtualmachines"
        assert cluster.request_counts(NICPLUG) == {
            ("patch", kvvms): 2, ("patch", f"{kvvms}/status"): 1, ("delete", kvvms): 1}
        assert sum(cluster.request_counts().values()) == 5


async def test_the_upstream_api_names_nothing_the_policy_matches() -> None:
    async with SimulatedCluster(Knobs(dialect="deckhouse", kubevirt_api="upstream"),
                                clock=VirtualSimClock(), fixtures=Fixtures(vms=1)) as cluster, \
            aiohttp.ClientSession() as session:
        url = f"{cluster.url}/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines/{VM}"
        code, _ = await _patch(session, url, NICPLUG, {"metadata": {"labels": {"a": "b"}}})
        assert code == 200


async def test_a_kubeconfig_for_a_service_account_makes_its_requests_its_own(
    tmp_path: Path,
) -> None:
    async with SimulatedCluster(Knobs(dialect="deckhouse"), clock=VirtualSimClock(),
                                fixtures=Fixtures(vms=1)) as cluster:
        path = cluster.write_kubeconfig(tmp_path / "nicplug", user=NICPLUG)
        for kubeconfig, user in ((path, NICPLUG), (cluster.kubeconfig_path, DEFAULT_USER)):
            api = await config.new_client_from_config(str(kubeconfig))
            async with api:
                await client.CoreV1Api(api).list_namespaced_pod(NS)
            (record,) = cluster.take_requests()
            assert (record.username, record.resource, record.verb) == (user, "pods", "list")


def _role_fixture() -> dict[str, Any]:
    role: dict[str, Any] = yaml.safe_load(
        (FIXTURES / "clusterrole-virtualization-controller.yaml").read_text())
    return role


def test_the_served_cluster_role_is_the_rendered_one() -> None:
    role = _role_fixture()
    served = rbac.controller_role(native_hotplug=True)
    assert served["metadata"] == role["metadata"]
    assert served["rules"] == role["rules"]
    assert rbac.HOTPLUG_RULE in role["rules"]
    older = rbac.controller_role(native_hotplug=False)
    assert rbac.HOTPLUG_RULE not in older["rules"]
    assert len(older["rules"]) == len(role["rules"]) - 2  # networks, then IPAM's ipaddresses


@pytest.mark.parametrize("native", [True, False])
async def test_the_cluster_role_says_whether_the_platform_hot_plugs(native: bool) -> None:
    async with SimulatedCluster(Knobs(dialect="deckhouse", native_hotplug=native),
                                clock=VirtualSimClock()) as cluster:
        assert cluster.kubeconfig_path is not None
        api = await config.new_client_from_config(str(cluster.kubeconfig_path))
        async with api:
            rbac_api = client.RbacAuthorizationV1Api(api)
            role = await rbac_api.read_cluster_role(rbac.NAME)
            listed = await rbac_api.list_cluster_role()
        rules = [(r.api_groups, r.resources, r.verbs) for r in role.rules]
        hotplug = (["network.deckhouse.io"], ["networks", "clusternetworks"],
                   ["get", "list", "watch"])
        assert (hotplug in rules) is native
        assert [r.metadata.name for r in listed.items] == [rbac.NAME]
        api = await config.new_client_from_config(str(cluster.kubeconfig_path))
        async with api, watch.Watch() as stream:
            seen = [event async for event in stream.stream(
                client.RbacAuthorizationV1Api(api).list_cluster_role, timeout_seconds=1)]
        assert [(e["type"], e["object"].metadata.name) for e in seen] == [("ADDED", rbac.NAME)]


async def test_a_multus_world_has_no_deckhouse_cluster_role() -> None:
    async with SimulatedCluster(Knobs(dialect="multus"), clock=VirtualSimClock()) as cluster:
        assert cluster.kubeconfig_path is not None
        api = await config.new_client_from_config(str(cluster.kubeconfig_path))
        async with api:
            with pytest.raises(ApiException) as caught:
                await client.RbacAuthorizationV1Api(api).read_cluster_role(rbac.NAME)
        assert caught.value.status == 404


def test_native_hotplug_is_a_deckhouse_setting() -> None:
    assert Knobs().hotplugs and not Knobs(dialect="multus").hotplugs
    assert not Knobs(native_hotplug=False).hotplugs
    with pytest.raises(ValueError, match="native_hotplug"):
        Knobs(dialect="multus", native_hotplug=True)


def test_a_nic_kept_in_the_domain_is_a_deckhouse_setting() -> None:
    assert Knobs().detaches_live and not Knobs(detaches_live=False).detaches_live
    with pytest.raises(ValueError, match="detaches_live"):
        Knobs(dialect="multus", detaches_live=False)


async def test_the_clusters_own_kubeconfig_can_be_written_for_a_user() -> None:
    async with SimulatedCluster(Knobs(dialect="deckhouse"), clock=VirtualSimClock(),
                                kubeconfig_user=NICPLUG) as cluster:
        assert cluster.kubeconfig_path is not None
        api = await config.new_client_from_config(str(cluster.kubeconfig_path))
        async with api:
            await client.CoreV1Api(api).list_namespace()
        assert cluster.request_counts(NICPLUG) == {("list", "namespaces"): 1}
