"""A simulated Deckhouse cluster serves KubeVirt renamed, as Deckhouse's API rewriter does.

The names are the ones `src/kubevirt-rules/kubevirt_rules.go` and `crds/embedded/` of
deckhouse/virtualization give: group `internal.virtualization.deckhouse.io`, kinds and
plurals prefixed, labels under `kubevirt.internal.virtualization.deckhouse.io/`. The
test speaks raw HTTP, so nothing of nicplug's own table is taken on trust; a second
test checks that the table and the server agree.
"""

from __future__ import annotations

import asyncio
import shutil
from typing import Any

import aiohttp
from kubernetes_asyncio import client, config

from nicplug.adapters.kube.flavour import DECKHOUSE, UPSTREAM
from nicplug.simulator.apis import served_api
from nicplug.simulator.clock import VirtualSimClock
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.resources import ALL, KVVMS, PODS, VMIS

GROUP = "internal.virtualization.deckhouse.io"
CREATED_BY = "kubevirt.internal.virtualization.deckhouse.io/created-by"
NS, VM = "default", "vm-00000"


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with session.get(url) as response:
        return response.status, await response.json(content_type=None)


async def test_kubevirt_is_served_under_the_renamed_group_only() -> None:
    async with SimulatedCluster(Knobs(dialect="deckhouse"), clock=VirtualSimClock(),
                                fixtures=Fixtures(vms=1)) as cluster, aiohttp.ClientSession() as s:
        base = f"{cluster.url}/apis/{GROUP}/v1/namespaces/{NS}"
        code, vmi = await _get(s, f"{base}/internalvirtualizationvirtualmachineinstances/{VM}")
        assert code == 200
        assert (vmi["apiVersion"], vmi["kind"]) == (
            f"{GROUP}/v1", "InternalVirtualizationVirtualMachineInstance")
        code, _ = await _get(s, f"{cluster.url}/apis/kubevirt.io/v1/namespaces/{NS}"
                                f"/virtualmachineinstances/{VM}")
        assert code == 404
        code, kvvm = await _get(s, f"{base}/internalvirtualizationvirtualmachines/{VM}")
        template_labels = kvvm["spec"]["template"]["metadata"]["labels"]
        assert "vm.kubevirt.internal.virtualization.deckhouse.io/name" in template_labels
        code, pods = await _get(
            s, f"{cluster.url}/api/v1/namespaces/{NS}/pods?labelSelector={CREATED_BY}")
        (pod,) = pods["items"]
        labels = pod["metadata"]["labels"]
        assert labels[CREATED_BY] == vmi["metadata"]["uid"]
        assert labels["kubevirt.internal.virtualization.deckhouse.io"] == "virt-launcher"
        assert not [k for k in labels if k.split("/")[0].endswith("kubevirt.io")]
        assert pod["metadata"]["uid"] in vmi["status"]["activePods"]
        code, none = await _get(
            s, f"{cluster.url}/api/v1/namespaces/{NS}/pods?labelSelector=kubevirt.io/created-by")
        assert none["items"] == []
        code, groups = await _get(s, f"{cluster.url}/apis")
        assert GROUP in {g["name"] for g in groups["groups"]}
        assert "kubevirt.io" not in {g["name"] for g in groups["groups"]}
        code, listing = await _get(s, f"{cluster.url}/apis/{GROUP}/v1")
        by_name = {r["name"]: r for r in listing["resources"]}
        vmis = by_name["internalvirtualizationvirtualmachineinstances"]
        assert (vmis["shortNames"], vmis["categories"]) == (["intvirtvmi"], ["intvirt"])
        assert "shortNames" not in by_name["internalvirtualizationkubevirts"]


async def test_writes_in_renamed_names_reach_kubevirt_in_its_own() -> None:
    async with SimulatedCluster(Knobs(dialect="deckhouse"), clock=VirtualSimClock(),
                                fixtures=Fixtures(vms=1)) as cluster, aiohttp.ClientSession() as s:
        (pod,), _ = cluster.store.list(PODS, NS)
        url = f"{cluster.url}/api/v1/namespaces/{NS}/pods/{pod['metadata']['name']}"
        patch = [{"op": "add",
                  "path": "/metadata/labels/kubevirt.internal.virtualization.deckhouse.io~1extra",
                  "value": "yes"}]
        headers = {"Content-Type": "application/json-patch+json"}
        async with s.patch(url, json=patch, headers=headers) as response:
            assert response.status == 200
            served = await response.json()
        assert served["metadata"]["labels"]["kubevirt.internal.virtualization.deckhouse.io/extra"]
        stored = cluster.store.get(PODS, NS, pod["metadata"]["name"])
        assert stored["metadata"]["labels"]["kubevirt.io/extra"] == "yes"
        kvvm_url = f"{cluster.url}/apis/{GROUP}/v1/namespaces/{NS}/" \
                   f"internalvirtualizationvirtualmachines/{VM}"
        merge = {"metadata": {"annotations": {"kubevirt.internal.virtualization.deckhouse.io/x":
                                              "1"}}}
        headers = {"Content-Type": "application/merge-patch+json"}
        async with s.patch(kvvm_url, json=merge, headers=headers) as response:
            assert response.status == 200
        assert cluster.store.get(KVVMS, NS, VM)["metadata"]["annotations"]["kubevirt.io/x"] == "1"
        assert cluster.store.get(VMIS, NS, VM)["apiVersion"] == "kubevirt.io/v1"


def test_nicplugs_flavour_table_names_what_each_server_serves() -> None:
    for flavour, api in ((UPSTREAM, served_api("upstream")), (DECKHOUSE, served_api("deckhouse"))):
        faces = {(r.group, r.plural, r.kind) for r in (api.served(res) for res in ALL)}
        for kind in (flavour.kvvms, flavour.vmis, flavour.vmims, flavour.kubevirts,
                     flavour.virtual_machines, flavour.networks, flavour.cluster_networks):
            assert (kind.group, kind.plural, kind.kind) in faces, kind
        pod = api.outward({"metadata": {"labels": {"kubevirt.io/created-by": "u",
                                                   "vm.kubevirt.io/name": "v"}}})
        assert pod["metadata"]["labels"] == {flavour.created_by_label: "u",
                                             flavour.vm_name_label: "v"}


async def test_every_custom_kind_has_its_crd_for_kubernetes_asyncio_and_kubectl() -> None:
    async with SimulatedCluster(Knobs(dialect="deckhouse"), clock=VirtualSimClock(),
                                fixtures=Fixtures(vms=1)) as cluster:
        assert cluster.kubeconfig_path is not None
        api = await config.new_client_from_config(str(cluster.kubeconfig_path))
        async with api:
            crds = await client.ApiextensionsV1Api(api).list_custom_resource_definition()
        by_name = {c.metadata.name: c for c in crds.items}
        vmi = by_name[f"internalvirtualizationvirtualmachineinstances.{GROUP}"]
        assert (vmi.spec.names.short_names, vmi.spec.names.categories) == (
            ["intvirtvmi"], ["intvirt"])
        assert by_name["virtualmachines.virtualization.deckhouse.io"].spec.names.short_names == [
            "vm"]
        assert not [n for n in by_name if n.endswith(".kubevirt.io")]
        if shutil.which("kubectl") is None:
            return  # kubernetes_asyncio has checked the objects; kubectl is optional here
        for args in (["get", "crd", "-o", "name"], ["get", "vm", "-A", "-o", "name"],
                     ["get", "intvirt", "-A", "-o", "name"]):
            kubectl = await asyncio.create_subprocess_exec(
                "kubectl", "--kubeconfig", str(cluster.kubeconfig_path), *args,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(kubectl.communicate(), 30)
            assert kubectl.returncode == 0, (args, err)
            assert out.strip(), args
