"""The actors seen through the wire: the unmodified kubernetes_asyncio client and kubectl."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client, config

from nicplug.simulator import networking as nw
from nicplug.simulator.clock import VirtualSimClock
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures, fixture_mac, request_entry
from nicplug.simulator.knobs import Delays, Knobs

ROOT = Path(__file__).resolve().parents[2]
NS, VM = "default", "vm-00000"
KV = ("internal.virtualization.deckhouse.io", "v1", NS)  # Deckhouse's renamed KubeVirt
VM_NAME = "vm.kubevirt.internal.virtualization.deckhouse.io/name"


async def test_a_controller_over_http_plugs_in_the_right_order() -> None:
    knobs = Knobs(dialect="deckhouse", delays=Delays(sdn_configure=0.5, attach=0.1),
                  native_hotplug=False)  # the test is the controller that plugs
    async with SimulatedCluster(knobs, clock=VirtualSimClock(),
                                fixtures=Fixtures(vms=2)) as cluster:
        assert cluster.kubeconfig_path is not None
        api = await config.new_client_from_config(str(cluster.kubeconfig_path))
        async with api:
            core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
            pods = await core.list_namespaced_pod(NS, label_selector=f"{VM_NAME}={VM}")
            (pod,) = pods.items
            upstream = f"{nw.VM_NAME_LABEL}={VM}"  # no stored label has KubeVirt's own name
            assert (await core.list_namespaced_pod(NS, label_selector=upstream)).items == []
            entry = request_entry(knobs, NS, VM, "Network", "user-net", 2)
            await core.patch_namespaced_pod(pod.metadata.name, NS, {"metadata": {"annotations": {
                nw.DECKHOUSE_REQUEST: json.dumps([entry])}}})
            await cluster.advance(0.5)
            pod = await core.read_namespaced_pod(pod.metadata.name, NS)
            (status,) = json.loads(pod.metadata.annotations[nw.DECKHOUSE_STATUS])
            assert nw.deckhouse_ready(status)

            if_name = nw.mac_if_name("Network", fixture_mac(NS, VM, 2))
            base = "/spec/template/spec"
            await custom.patch_namespaced_custom_object(
                *KV, "internalvirtualizationvirtualmachines", VM,
                [{"op": "add", "path": f"{base}/networks/-",
                  "value": {"name": if_name, "pod": {}}},
                 {"op": "add", "path": f"{base}/domain/devices/interfaces/-",
                  "value": {"name": if_name, "bridge": {}}}],
                _content_type="application/json-patch+json")
            await cluster.advance(0.1)
            vmi = await custom.get_namespaced_custom_object(
                *KV, "internalvirtualizationvirtualmachineinstances", VM)
            attached = [i for i in vmi["status"]["interfaces"] if i["name"] == if_name]
            assert attached and "domain" in attached[0]["infoSource"]
            assert cluster.link_not_found == [] and cluster.actor_errors == []


async def test_injected_faults_hit_clients_never_the_actors() -> None:
    knobs = Knobs(dialect="deckhouse", delays=Delays(sdn_configure=0.5))
    async with SimulatedCluster(knobs, clock=VirtualSimClock(),
                                fixtures=Fixtures(vms=1)) as cluster:
        assert cluster.kubeconfig_path is not None
        cluster.faults.fail_requests(500, times=1, verb="patch")
        cluster.faults.stall_watches()
        api = await config.new_client_from_config(str(cluster.kubeconfig_path))
        async with api:
            core = client.CoreV1Api(api)
            (pod,) = (await core.list_namespaced_pod(NS)).items
            body = {"metadata": {"annotations": {nw.DECKHOUSE_REQUEST: json.dumps(
                [request_entry(knobs, NS, VM, "Network", "user-net", 2)])}}}
            with pytest.raises(client.ApiException) as failed:
                await core.patch_namespaced_pod(pod.metadata.name, NS, body)
            assert failed.value.status == 500
            await core.patch_namespaced_pod(pod.metadata.name, NS, body)
            await cluster.advance(0.5)
            pod = await core.read_namespaced_pod(pod.metadata.name, NS)
            (status,) = json.loads(pod.metadata.annotations[nw.DECKHOUSE_STATUS])
            assert nw.deckhouse_ready(status)  # the SDN agent's watch was not stalled
        cluster.faults.clear()


@contextlib.contextmanager
def sim_serve(kubeconfig: Path, *argv: str) -> Iterator[list[str]]:
    """`nicplug sim serve` as a real process; yields its first three lines of output and
    checks on exit that Ctrl-C stopped it cleanly."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "nicplug.adapters.cli", "sim", "serve",
         "--kubeconfig", str(kubeconfig),
         *argv],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    try:
        yield [proc.stdout.readline() for _ in range(3)]
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "stopped" in out


@pytest.mark.slow
def test_sim_serve_prints_where_it_is_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    with sim_serve(kubeconfig, "--vms", "3", "--flavour", "kubevirt") as lines:
        assert lines[0].startswith(
            "simulated cluster (multus, upstream KubeVirt API, 3 VMs) at http://127.0.0.1:"
        ), lines
        assert lines[1].strip() == f"kubeconfig: {kubeconfig}"
        assert f"kubectl --kubeconfig {kubeconfig} get pods -A" in lines[2]
        server = lines[0].rsplit(" at ", 1)[1].strip()
        assert server in kubeconfig.read_text()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_lists_the_launcher_pods_of_sim_serve(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    with sim_serve(kubeconfig, "--vms", "3", "--vm-network", "Network/user-net") as lines:
        assert lines[1].strip() == f"kubeconfig: {kubeconfig}", lines
        result = subprocess.run(
            ["kubectl", "--kubeconfig", str(kubeconfig), "get", "pods", "-A", "-o", "json"],
            capture_output=True, text=True, timeout=30, check=False,
        )
        assert result.returncode == 0, result.stderr
        pods = json.loads(result.stdout)["items"]
        names = sorted(p["metadata"]["labels"][VM_NAME] for p in pods)
        assert names == ["vm-00000", "vm-00001", "vm-00002"]
        for pod in pods:
            (status,) = json.loads(pod["metadata"]["annotations"][nw.DECKHOUSE_STATUS])
            assert status["name"] == "user-net" and nw.deckhouse_ready(status)
