"""One VM's World from a cache that also holds other VMs' objects and broken ones."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import orjson
import pytest

from nicplug.adapters.kube.translate import MalformedObject, VMObjects, assemble_world
from nicplug.adapters.sdn import dialect_for
from nicplug.machines.world import ClusterConfig, KVVMNetwork, SDNRequest
from tests.unit.translate import bodies as b

DECKHOUSE = dialect_for("deckhouse")
MULTUS = dialect_for("multus", cluster_nad_namespace="cluster-nets")
NETWORKS = [
    {"type": "Main", "id": 1},
    {"type": "Network", "name": "user-net", "id": 2},
    {"type": "ClusterNetwork", "name": "storage", "id": 3},
]


def plugging_storage() -> VMObjects:
    """`web` hot-plugs ClusterNetwork/storage: the pod asks for it, the KVVM has not yet."""
    requested = b.deckhouse_annotation(("Network", "user-net", 2), ("ClusterNetwork", "storage", 3))
    return VMObjects(
        namespace=b.NS,
        name=b.VM,
        vm=b.deckhouse_vm(NETWORKS),
        kvvm=b.kvvm(
            annotations={DECKHOUSE.request_annotation: b.deckhouse_annotation(
                ("Network", "user-net", 2))},
        ),
        vmi=b.vmi(),
        pods=[
            b.launcher_pod(annotations={DECKHOUSE.request_annotation: requested}),
            b.launcher_pod("virt-launcher-db-q9w8e", uid="db-pod", vm="db"),
            b.launcher_pod("virt-launcher-web-old01", uid="old-pod", phase="Succeeded"),
            b.launcher_pod("virt-launcher-web-going", uid="going-pod",
                           deletionTimestamp="2026-11-30T10:00:00Z"),
            b.launcher_pod("virt-launcher-web-other", uid="other-ns", namespace="ns2"),
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "unlabelled"}},
        ],
        migrations=[
            b.migration("web-m2", created="2026-11-30T11:00:00Z", phase="Pending"),
            b.migration("web-m1", created="2026-11-30T10:00:00Z", phase="Failed"),
            b.migration("db-m1", vmi_name="db"),
        ],
        kubevirts=[b.kubevirt_cr(strategy="Stage", methods=["LiveMigrate"])],
        networks=[b.sdn_network("user-net"), b.sdn_network("lab", ready="False")],
        cluster_networks=[b.sdn_network("backup", cluster=True)],
    )


def test_world_of_a_vm_hot_plugging_a_cluster_network() -> None:
    translation = assemble_world(plugging_storage(), dialect=DECKHOUSE)
    world = translation.world
    assert world.vm is not None and world.vm.name == "web"
    assert [n.identity for n in world.vm.networks or ()] == [
        "Main", "Network/user-net", "ClusterNetwork/storage"
    ]
    assert world.kvvm is not None and world.kvvm.running
    # Deckhouse's annotation holds no MAC: the entry's is its interface's `macAddress`
    assert world.kvvm.template_requests == (
        SDNRequest("Network/user-net", b.USER_NET_IF, 2, "aa:bb:cc:dd:ee:01"),)
    assert world.vmi is not None and world.vmi.uid == b.VMI_UID
    assert [p.name for p in world.pods] == ["virt-launcher-web-x7k2p"]
    (pod,) = world.pods
    assert [r.identity for r in pod.requested] == ["Network/user-net", "ClusterNetwork/storage"]
    assert [m.name for m in world.migrations] == ["web-m1", "web-m2"]
    assert world.cluster == ClusterConfig("Stage", ("LiveMigrate",))
    assert world.networks_ready == {"Network/user-net": True}
    assert world.networks_missing == {"ClusterNetwork/storage"}  # no such ClusterNetwork
    assert world.observation_errors == ()
    assert translation.network_identities == {
        "default": "Main",
        b.USER_NET_IF: "Network/user-net",
        b.STORAGE_IF: "ClusterNetwork/storage",
    }


def test_assembly_is_deterministic_whatever_the_cache_order() -> None:
    objects = plugging_storage()
    first = assemble_world(objects, dialect=DECKHOUSE)
    shuffled_pods, shuffled_migrations = list(objects.pods), list(objects.migrations)
    random.Random(7).shuffle(shuffled_pods)
    random.Random(7).shuffle(shuffled_migrations)
    shuffled = _with(objects, pods=shuffled_pods, migrations=shuffled_migrations)
    assert assemble_world(shuffled, dialect=DECKHOUSE) == first


def test_both_launcher_pods_during_a_migration() -> None:
    objects = plugging_storage()
    target = b.launcher_pod("virt-launcher-web-a1b2c", uid=b.TARGET_POD_UID, phase="Pending")
    pods = [*objects.pods, target]
    world = assemble_world(_with(objects, pods=pods), dialect=DECKHOUSE).world
    assert [(p.name, p.phase) for p in world.pods] == [
        ("virt-launcher-web-a1b2c", "Pending"), ("virt-launcher-web-x7k2p", "Running")
    ]


def test_a_deleted_vm_still_shows_what_is_left_of_it() -> None:
    objects = _with(plugging_storage(), vm=None)
    translation = assemble_world(objects, dialect=DECKHOUSE)
    world = translation.world
    assert world.vm is None and world.kvvm is not None and len(world.pods) == 1
    assert world.networks_ready == {}
    assert translation.network_identities[b.STORAGE_IF] == "ClusterNetwork/storage"


def test_a_stopped_vm_has_only_its_kvvm() -> None:
    objects = VMObjects(namespace=b.NS, name=b.VM, vm=b.deckhouse_vm(NETWORKS),
                        kvvm=b.kvvm(runStrategy="Halted"))
    world = assemble_world(objects, dialect=DECKHOUSE).world
    assert world.kvvm is not None and not world.kvvm.running
    assert world.vmi is None and world.pods == () and world.migrations == ()
    assert world.cluster == ClusterConfig()  # no KubeVirt CR seen: KubeVirt's defaults


def test_a_malformed_vm_is_raised_for_the_caller_to_report() -> None:
    vm = b.deckhouse_vm([{"type": "Network", "name": 5}])
    with pytest.raises(MalformedObject) as raised:
        assemble_world(_with(plugging_storage(), vm=vm), dialect=DECKHOUSE)
    assert (raised.value.kind, raised.value.namespace, raised.value.name) == (
        "VirtualMachine", "ns1", "web"
    )


def test_other_malformed_objects_are_left_out_and_named() -> None:
    objects = plugging_storage()
    broken_kvvm = b.kvvm()
    broken_kvvm["spec"]["template"]["spec"]["networks"] = "default"
    broken_vmi = b.vmi()
    broken_vmi["status"]["phase"] = ["Running"]
    broken_pod = b.launcher_pod("virt-launcher-web-zz", uid="zz")
    broken_pod["status"]["phase"] = 1
    broken_migration = b.migration("web-m3")
    broken_migration["status"] = {"phase": None, "targetPod": 7}
    broken_migration["metadata"]["uid"] = ""
    broken_kubevirt = b.kubevirt_cr(strategy="Later")
    broken_network = b.sdn_network("user-net")
    broken_network["status"]["conditions"] = [{"type": "Ready"}]
    world = assemble_world(
        _with(
            objects,
            kvvm=broken_kvvm,
            vmi=broken_vmi,
            pods=[*objects.pods, broken_pod],
            migrations=[*objects.migrations, broken_migration],
            kubevirts=[broken_kubevirt],
            networks=[broken_network],
        ),
        dialect=DECKHOUSE,
    ).world
    assert world.kvvm is None and world.vmi is None
    assert [p.name for p in world.pods] == ["virt-launcher-web-x7k2p"]
    assert [m.name for m in world.migrations] == ["web-m1", "web-m2"]
    assert world.cluster == ClusterConfig()
    assert world.networks_ready == {}  # the broken Network is unreadable: nothing known
    assert world.networks_missing == {"ClusterNetwork/storage"}
    prefixes = sorted(e.split(":")[0] for e in world.observation_errors)
    assert prefixes == [
        "KubeVirt VirtualMachine ns1/web",
        "KubeVirt kubevirt/kubevirt",
        "Network ns1/user-net",
        "Pod ns1/virt-launcher-web-zz",
        "VirtualMachineInstance ns1/web",
        "VirtualMachineInstanceMigration ns1/web-m3",
    ]


def test_broken_objects_of_other_vms_do_not_concern_this_one() -> None:
    objects = plugging_storage()
    elsewhere = b.sdn_network("user-net")
    elsewhere["metadata"]["namespace"] = "ns2"
    unwanted = b.sdn_network("lab")
    foreign_migration = b.migration("web-m9")
    foreign_migration["metadata"]["namespace"] = "ns2"
    other_pod = b.launcher_pod("virt-launcher-db-zz", uid="zz", vm="db")
    for body in (elsewhere, unwanted, foreign_migration, other_pod):
        body["status"] = {"phase": 1, "conditions": "broken"}
    world = assemble_world(
        _with(
            objects,
            networks=[*objects.networks, elsewhere, unwanted],
            migrations=[*objects.migrations, foreign_migration],
            pods=[*objects.pods, other_pod],
        ),
        dialect=DECKHOUSE,
    ).world
    assert world.observation_errors == ()
    assert world.networks_ready["Network/user-net"] is True


def test_unreadable_annotations_are_observation_errors() -> None:
    objects = plugging_storage()
    bad_pod = b.launcher_pod(annotations={DECKHOUSE.request_annotation: "[{]"})
    kvvm = b.kvvm(annotations={DECKHOUSE.request_annotation: '[{"type": "Main"}]'})
    world = assemble_world(_with(objects, pods=[bad_pod], kvvm=kvvm), dialect=DECKHOUSE).world
    (pod,) = world.pods
    assert pod.observation_error is not None and "not JSON" in pod.observation_error
    (error,) = world.observation_errors
    assert error.startswith("KubeVirt VirtualMachine ns1/web: annotation network.deckhouse.io")
    assert world.kvvm is not None and world.kvvm.template_requests == ()


def test_multus_world_tells_identities_from_the_network_names() -> None:
    networks = [
        {"name": "default", "pod": {}},
        {"name": b.USER_NET_IF, "multus": {"networkName": "ns1/user-net"}},
        {"name": b.STORAGE_IF, "multus": {"networkName": "cluster-nets/storage"}},
        {"name": "veth_nforeign", "multus": {"networkName": "elsewhere/x"}},
    ]
    status = orjson.dumps([
        {"name": "kindnet", "interface": "eth0", "default": True},
        {"name": "ns1/user-net", "interface": MULTUS.pod_interface(if_name=b.USER_NET_IF)},
    ]).decode()
    requested = orjson.dumps([  # as KubeVirt's generator writes it
        {"name": "user-net", "namespace": b.NS,
         "interface": MULTUS.pod_interface(if_name=b.USER_NET_IF)},
    ]).decode()
    pod = b.launcher_pod(annotations={
        MULTUS.request_annotation: requested, MULTUS.status_annotation: status
    })
    objects = VMObjects(
        namespace=b.NS, name=b.VM, vm=b.deckhouse_vm([]),
        kvvm=b.kvvm(networks=networks), vmi=b.vmi(networks=networks), pods=[pod],
    )
    translation = assemble_world(objects, dialect=MULTUS)
    world = translation.world
    # the desired state is the KubeVirt VM's template (its interfaces: default, user-net);
    # the Deckhouse VM is not read at all in this flavour
    assert world.vm is not None and world.vm.in_template
    assert [(n.identity, n.if_name) for n in world.vm.networks or ()] == [
        ("Main", "default"), ("Network/user-net", b.USER_NET_IF)]
    assert world.vm.macs == {"Network/user-net": "aa:bb:cc:dd:ee:01"}
    assert world.kvvm is not None
    assert world.kvvm.networks[1] == KVVMNetwork(b.USER_NET_IF, "ns1/user-net")
    (launcher,) = world.pods
    assert [(s.identity, s.ready) for s in launcher.reported] == [("Network/user-net", True)]
    assert translation.network_identities == {
        "default": "Main",
        b.USER_NET_IF: "Network/user-net",
        b.STORAGE_IF: "ClusterNetwork/storage",
    }


def test_the_kubevirt_flavour_reads_what_users_write_into_the_template() -> None:
    """The user guide's hotplug: an interface `dyniface1` on `new-fancy-net`, then the
    same set `absent`. The user's name is kept; the pod's entries under KubeVirt's hash of
    it are that network's; `absent` is not desired; a NAD elsewhere is not nicplug's."""
    networks = [
        {"name": "default", "pod": {}},
        {"name": "dyniface1", "multus": {"networkName": "new-fancy-net"}},
        {"name": "other", "multus": {"networkName": "elsewhere/x"}},
    ]
    interfaces = [{"name": "default", "masquerade": {}},
                  {"name": "dyniface1", "bridge": {}, "macAddress": "02:00:00:00:00:01"},
                  {"name": "other", "bridge": {}}]
    pod_side = MULTUS.pod_interface(if_name="dyniface1")
    requested = orjson.dumps([
        {"interface": pod_side, "mac": "02:00:00:00:00:01", "name": "new-fancy-net",
         "namespace": b.NS},
        {"interface": MULTUS.pod_interface(if_name="other"), "name": "x",
         "namespace": "elsewhere"},
    ]).decode()
    status = orjson.dumps([
        {"name": "kindnet", "interface": "eth0", "default": True},
        {"name": f"{b.NS}/new-fancy-net", "interface": pod_side},
    ]).decode()
    pod = b.launcher_pod(annotations={
        MULTUS.request_annotation: requested, MULTUS.status_annotation: status})
    kvvm = b.kvvm(networks=networks, interfaces=interfaces)
    objects = VMObjects(namespace=b.NS, name=b.VM, vm=None, kvvm=kvvm,
                        vmi=b.vmi(networks=networks), pods=[pod])
    world = assemble_world(objects, dialect=MULTUS).world
    assert world.vm is not None and world.vm.uid == "0a1b2c3d-kvvm"
    assert [(n.identity, n.if_name) for n in world.vm.networks or ()] == [
        ("Main", "default"), ("Network/new-fancy-net", "dyniface1")]
    assert world.vm.macs == {"Network/new-fancy-net": "02:00:00:00:00:01"}
    (launcher,) = world.pods
    assert [(r.identity, r.if_name) for r in launcher.requested] == [
        ("Network/new-fancy-net", "dyniface1")]
    assert [(s.identity, s.if_name) for s in launcher.reported] == [
        ("Network/new-fancy-net", "dyniface1")]
    interfaces[1] = {**interfaces[1], "state": "absent"}
    unplugged = _with(objects, kvvm=b.kvvm(networks=networks, interfaces=interfaces))
    world = assemble_world(unplugged, dialect=MULTUS).world
    assert world.vm is not None
    assert [n.identity for n in world.vm.networks or ()] == ["Main"]


def _nad(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"namespace": namespace, "name": name, "uid": f"nad-{name}"}}


def test_the_kubevirt_flavour_tells_a_missing_nad_where_nads_are_known() -> None:
    """A template's network whose NAD the cluster lacks is missing: a Network's in the
    VM's namespace, a ClusterNetwork's in the cluster network NAD namespace (a NAD of
    the same name elsewhere is not it); with NADs unknown nothing is."""
    networks = [
        {"name": "default", "pod": {}},
        {"name": "a", "multus": {"networkName": "user-net"}},
        {"name": b.STORAGE_IF, "multus": {"networkName": "cluster-nets/storage"}},
        {"name": "c", "multus": {"networkName": f"{b.NS}/typo-net"}},
    ]
    interfaces = [{"name": "default", "masquerade": {}},
                  *({"name": n["name"], "bridge": {}} for n in networks[1:])]
    kvvm = b.kvvm(networks=networks, interfaces=interfaces)
    objects = VMObjects(namespace=b.NS, name=b.VM, vm=None, kvvm=kvvm,
                        nads=[_nad(b.NS, "user-net"), _nad(b.NS, "storage"),
                              _nad("elsewhere", "typo-net")])
    world = assemble_world(objects, dialect=MULTUS).world
    assert world.vm is not None
    assert [n.identity for n in world.vm.networks or ()] == [
        "Main", "Network/user-net", "ClusterNetwork/storage", "Network/typo-net"]
    assert world.networks_missing == {"ClusterNetwork/storage", "Network/typo-net"}
    assert world.networks_ready == {}  # a NAD has no readiness
    nads = [_nad(b.NS, "user-net"), _nad("cluster-nets", "storage"), _nad(b.NS, "typo-net")]
    assert assemble_world(_with(objects, nads=nads), dialect=MULTUS).world.networks_missing \
        == frozenset()
    unknown = assemble_world(_with(objects, nads=None), dialect=MULTUS).world
    assert unknown.networks_missing == frozenset()


def _with(objects: VMObjects, **changes: Any) -> VMObjects:
    return replace(objects, **changes)


def _vmop(name: str, type_: str, vm: str, *, vmi_uid: str | None, phase: str = "",
          message: str = "") -> dict[str, Any]:
    annotations = {} if vmi_uid is None else {"nicplug.io/restart-of-vmi": vmi_uid}
    body: dict[str, Any] = {
        "apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": "VirtualMachineOperation",
        "metadata": {"name": name, "namespace": b.NS, "uid": f"uid-{name}",
                     "annotations": annotations,
                     "labels": {"app.kubernetes.io/managed-by": "nicplug"}},
        "spec": {"type": type_, "virtualMachineName": vm},
    }
    if phase:
        body["status"] = {"phase": phase, "conditions": [
            {"type": "Completed", "status": "False", "reason": "NotReadyToBeExecuted",
             "message": message, "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    return body


def test_the_vms_restart_operations_and_run_policy_are_read() -> None:
    objects = VMObjects(
        namespace=b.NS, name=b.VM, vm=b.deckhouse_vm(NETWORKS), kvvm=b.kvvm(), vmi=b.vmi(),
        vm_operations=[
            _vmop("stop", "Stop", b.VM, vmi_uid="vmi-1", phase="Failed", message="blocked"),
            _vmop("start", "Start", b.VM, vmi_uid="vmi-1"),
            _vmop("someone-elses", "Stop", b.VM, vmi_uid=None),  # no restart of nicplug's
            _vmop("restart", "Restart", b.VM, vmi_uid="vmi-1"),  # an AlwaysOn VM's restart
            _vmop("other-vm", "Stop", "db", vmi_uid="vmi-9"),
        ])
    world = assemble_world(objects, dialect=DECKHOUSE).world
    assert [(o.name, o.type, o.vmi_uid, o.phase, o.message) for o in world.vm_operations] == [
        ("restart", "Restart", "vmi-1", "", ""), ("start", "Start", "vmi-1", "", ""),
        ("stop", "Stop", "vmi-1", "Failed", "blocked")]
    assert world.vm is not None and world.vm.run_policy == "AlwaysOn"
    assert world.stopped_for_restart is None  # a failed Stop stopped nothing


def test_a_malformed_restart_operation_is_an_observation_error() -> None:
    broken = _vmop("stop", "Stop", b.VM, vmi_uid="vmi-1")
    broken["spec"]["type"] = 7
    objects = VMObjects(namespace=b.NS, name=b.VM, vm=b.deckhouse_vm(NETWORKS),
                        kvvm=b.kvvm(), vmi=b.vmi(), vm_operations=[broken])
    world = assemble_world(objects, dialect=DECKHOUSE).world
    assert world.vm_operations == ()
    assert any("VirtualMachineOperation" in e for e in world.observation_errors)
