"""Every object a simulated Deckhouse cluster serves fits Deckhouse's real CRD schemas.

The schemas are Deckhouse's own (`tests/fixtures/deckhouse/crds/`, with provenance):
its VirtualMachine, VirtualMachineOperation and VirtualMachineMACAddress, and the
KubeVirt VM and VMI under the names Deckhouse serves them by. Each object, as a client
reads it over HTTP, must be valid and lose nothing to pruning — including what nicplug
itself writes (a KVVM interface as the deckhouse dialect builds it, a Restart
operation), so a field the real API server would drop cannot pass unnoticed here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import yaml
from kubernetes_asyncio.client import CustomObjectsApi

from nicplug.adapters.kube.calls import JSON_PATCH, KubeCalls
from nicplug.adapters.kube.client import ClientSettings, connect
from nicplug.adapters.kube.flavour import DECKHOUSE, UPSTREAM
from nicplug.adapters.kube.resources import VIRTUAL_MACHINE_OPERATIONS as VMOPS_REF
from nicplug.adapters.sdn import dialect_for
from nicplug.machines.world import SDNRequest
from nicplug.simulator.clock import VirtualSimClock
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.resources import VMS
from tests.contract.structural import check, load_crds

CRDS = Path(__file__).parents[1] / "fixtures" / "deckhouse" / "crds"
SCHEMAS = load_crds(*sorted(CRDS.glob("*.yaml")))
PLURALS = {
    "VirtualMachine": "virtualmachines",
    "VirtualMachineOperation": "virtualmachineoperations",
    "VirtualMachineMACAddress": "virtualmachinemacaddresses",
    "InternalVirtualizationVirtualMachine": "internalvirtualizationvirtualmachines",
    "InternalVirtualizationVirtualMachineInstance":
        "internalvirtualizationvirtualmachineinstances",
}
NS, VM = "default", "vm-00000"


async def _served(session: aiohttp.ClientSession, url: str) -> dict[str, list[dict[str, Any]]]:
    found = {}
    for (group, version, kind) in SCHEMAS:
        async with session.get(f"{url}/apis/{group}/{version}/{PLURALS[kind]}") as response:
            assert response.status == 200, (kind, response.status)
            found[kind] = (await response.json())["items"]
    return found


async def test_what_the_simulator_and_nicplug_write_fits_the_real_schemas() -> None:
    assert set(PLURALS) == {kind for (_g, _v, kind) in SCHEMAS}
    fixtures = Fixtures(vms=2, vm_networks=(("Network", "user-net"),))
    knobs = Knobs(dialect="deckhouse", native_hotplug=False)  # nicplug's writes, alone
    async with SimulatedCluster(knobs, clock=VirtualSimClock(),
                                fixtures=fixtures) as cluster, aiohttp.ClientSession() as s:
        assert cluster.kubeconfig_path is not None
        connection = await connect(ClientSettings(kubeconfig=cluster.kubeconfig_path))
        try:
            calls = KubeCalls(connection)
            dialect = dialect_for("deckhouse")
            request = SDNRequest("ClusterNetwork/storage", "veth_cn0a1b2c3d", id=3)
            interface = dialect.kubevirt_interface(request=request, current=None)
            network = dialect.kubevirt_network(request=request, namespace=NS)
            base = "/spec/template/spec"
            await calls.patch(DECKHOUSE.kvvms, NS, VM, [
                {"op": "add", "path": f"{base}/domain/devices/interfaces/-", "value": interface},
                {"op": "add", "path": f"{base}/networks/-", "value": network},
            ], content_type=JSON_PATCH)
            # a VirtualMachineOperation as a user's tool would ask for one (nicplug does not)
            await CustomObjectsApi(connection.client).create_namespaced_custom_object(
                VMOPS_REF.group, VMOPS_REF.version, NS, VMOPS_REF.plural, {
                    "apiVersion": VMOPS_REF.api_version, "kind": VMOPS_REF.kind,
                    "metadata": {"name": "restart-vm-00001", "namespace": NS},
                    "spec": {"type": "Restart", "virtualMachineName": "vm-00001"},
                })
            await cluster.settle()
        finally:
            await connection.close()
        served = await _served(s, cluster.url)

    assert all(served.values()), {k: len(v) for k, v in served.items()}
    kvvm = next(o for o in served["InternalVirtualizationVirtualMachine"]
                if o["metadata"]["name"] == VM)
    assert interface in kvvm["spec"]["template"]["spec"]["domain"]["devices"]["interfaces"]
    assert _problems(served) == {}


def _problems(served: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    problems = {}
    for (group, version, kind), schema in SCHEMAS.items():
        for obj in served[kind]:
            assert obj["apiVersion"] == f"{group}/{version}"
            findings = check(obj, schema)
            if findings:
                problems[f"{kind} {obj['metadata']['name']}"] = (findings.pruned,
                                                                 findings.invalid)
    return problems


async def test_what_the_platforms_own_hotplug_writes_fits_the_real_schemas() -> None:
    fixtures = Fixtures(vms=2, vm_networks=(("Network", "user-net"),))
    async with SimulatedCluster(Knobs(dialect="deckhouse"), clock=VirtualSimClock(),
                                fixtures=fixtures) as cluster, aiohttp.ClientSession() as s:
        vm = cluster.store.get(VMS, NS, VM)
        vm["spec"]["networks"].append({"type": "ClusterNetwork", "name": "storage", "id": 3})
        cluster.store.update(VMS, vm)  # storage plugged by the platform
        await cluster.advance(5.0)
        served = await _served(s, cluster.url)
        assert cluster.actor_errors == []
    kvvm = next(o for o in served["InternalVirtualizationVirtualMachine"]
                if o["metadata"]["name"] == VM)
    acpi = [i.get("acpiIndex") for i in kvvm["spec"]["template"]["spec"]["domain"]["devices"][
        "interfaces"] if i.get("state") != "absent"]
    assert acpi == [1, 2, 3]
    assert _problems(served) == {}


def test_the_checker_sees_pruned_and_invalid_fields() -> None:
    schema = SCHEMAS[("virtualization.deckhouse.io", "v1alpha2", "VirtualMachine")]
    findings = check({"apiVersion": "x", "kind": "VirtualMachine", "metadata": {},
                      "spec": {"virtualMachineClassName": "c", "cpu": {"cores": "two"},
                               "memory": {"size": "1Gi"}, "blockDeviceRefs": [],
                               "runPolicy": "Sometimes", "made": "up"}}, schema)
    assert findings.pruned == [".spec.made"]
    assert ".spec.runPolicy: 'Sometimes' not in" in " ".join(findings.invalid)
    assert any(f.startswith(".spec.cpu.cores") for f in findings.invalid)


# -- upstream KubeVirt ---------------------------------------------------------------

KUBEVIRT_SCHEMAS = Path(__file__).parents[1] / "fixtures" / "kubevirt" / "crds"
UPSTREAM_KINDS = {  # fixture (KubeVirt's own CRD name) → (plural served, kind)
    "virtualmachine": ("virtualmachines", "VirtualMachine"),
    "virtualmachineinstance": ("virtualmachineinstances", "VirtualMachineInstance"),
    "virtualmachineinstancemigration": ("virtualmachineinstancemigrations",
                                        "VirtualMachineInstanceMigration"),
    "kubevirt": ("kubevirts", "KubeVirt"),
}


def _kubevirt_schema(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = yaml.safe_load(
        (KUBEVIRT_SCHEMAS / f"{name}.yaml").read_text())["openAPIV3Schema"]
    return schema


async def test_what_the_simulator_and_nicplug_write_fits_kubevirts_own_schemas() -> None:
    """The upstream flavour: KubeVirt's schemas as its operator installs them
    (`validations_generated.go`), every served VM, VMI, migration and KubeVirt CR,
    including a KVVM interface and network as the user guide adds them and a
    migration as nicplug creates one."""
    fixtures = Fixtures(vms=2, vm_networks=(("Network", "user-net"),))
    async with SimulatedCluster(Knobs(dialect="multus"), clock=VirtualSimClock(),
                                fixtures=fixtures) as cluster, aiohttp.ClientSession() as s:
        assert cluster.kubeconfig_path is not None
        connection = await connect(ClientSettings(kubeconfig=cluster.kubeconfig_path))
        try:
            calls = KubeCalls(connection)
            # the user's hotplug edit, as KubeVirt's user guide writes it
            interface = {"name": "veth_cn0a1b2c3d", "bridge": {},
                         "macAddress": "02:00:00:00:00:03"}
            network = {"name": "veth_cn0a1b2c3d", "multus": {"networkName": "default/storage"}}
            base = "/spec/template/spec"
            await calls.patch(UPSTREAM.kvvms, NS, VM, [
                {"op": "add", "path": f"{base}/domain/devices/interfaces/-", "value": interface},
                {"op": "add", "path": f"{base}/networks/-", "value": network},
            ], content_type=JSON_PATCH)
            await calls.create_migration(UPSTREAM.vmims, NS, "nicplug-vm-00001-1", "vm-00001",
                                         labels={"app.kubernetes.io/managed-by": "nicplug"})
            await cluster.settle()
        finally:
            await connection.close()
        served = {}
        for name, (plural, _kind) in UPSTREAM_KINDS.items():
            async with s.get(f"{cluster.url}/apis/kubevirt.io/v1/{plural}") as response:
                assert response.status == 200, (plural, response.status)
                served[name] = (await response.json())["items"]

    assert all(served.values()), {k: len(v) for k, v in served.items()}
    problems = {}
    for name, (_plural, kind) in UPSTREAM_KINDS.items():
        schema = _kubevirt_schema(name)
        for obj in served[name]:
            assert (obj["apiVersion"], obj["kind"]) == ("kubevirt.io/v1", kind)
            findings = check(obj, schema)
            if findings:
                problems[f"{kind} {obj['metadata']['name']}"] = (findings.pruned,
                                                                 findings.invalid)
    assert problems == {}


def test_kubevirts_schemas_prune_and_refuse_as_the_api_server_would() -> None:
    schema = _kubevirt_schema("virtualmachine")
    findings = check({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                      "metadata": {}, "spec": {"runStrategy": "Always", "made": "up",
                                               "template": {"spec": {"domain": {
                                                   "devices": {"interfaces": [{"name": 7}]}}}}}},
                     schema)
    assert findings.pruned == [".spec.made"]
    assert any(".spec.template.spec.domain.devices.interfaces[0].name" in f
               for f in findings.invalid), findings.invalid


MULTUS_CRDS = Path(__file__).parents[1] / "fixtures" / "multus" / "networks-crd.yaml"


async def test_the_served_nads_fit_multus_own_schema() -> None:
    """The NetworkAttachmentDefinitions a simulated upstream cluster creates for its
    networks fit the CRD of the network-attachment-definition-client, nothing pruned;
    served under multus's group, version and plural."""
    (schema,) = load_crds(MULTUS_CRDS).values()
    fixtures = Fixtures(vms=1, networks=("user-net", "lab"))
    async with SimulatedCluster(Knobs(dialect="multus"), clock=VirtualSimClock(),
                                fixtures=fixtures) as cluster, aiohttp.ClientSession() as s:
        url = f"{cluster.url}/apis/k8s.cni.cncf.io/v1/network-attachment-definitions"
        async with s.get(url) as response:
            assert response.status == 200
            served = (await response.json())["items"]
    assert sorted((o["metadata"]["namespace"], o["metadata"]["name"]) for o in served) == [
        ("default", "lab"), ("default", "storage"), ("default", "user-net")]
    for obj in served:
        assert (obj["apiVersion"], obj["kind"]) == ("k8s.cni.cncf.io/v1",
                                                    "NetworkAttachmentDefinition")
        findings = check(obj, schema)
        assert (findings.pruned, findings.invalid) == ([], []), obj


async def test_a_cluster_without_multus_serves_no_nads() -> None:
    async with SimulatedCluster(Knobs(dialect="multus", nads_served=False),
                                clock=VirtualSimClock(), fixtures=Fixtures(vms=1)) as cluster, \
            aiohttp.ClientSession() as s:
        url = f"{cluster.url}/apis/k8s.cni.cncf.io/v1/network-attachment-definitions"
        async with s.get(url) as response:
            assert response.status == 404
        async with s.get(f"{cluster.url}/apis") as response:
            groups = [g["name"] for g in (await response.json())["groups"]]
        assert "k8s.cni.cncf.io" not in groups
