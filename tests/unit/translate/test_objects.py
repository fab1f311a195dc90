"""Each kind, read from a body as the cluster serves it, into the domain's record."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from nicplug.adapters.kube.translate import records
from nicplug.adapters.kube.translate.objects import (
    KubeVirtObject,
    KVVMObject,
    MalformedObject,
    PodObject,
    SDNNetworkObject,
    VirtualMachineObject,
    VMIMObject,
    VMIObject,
    read,
)
from nicplug.adapters.sdn import dialect_for
from nicplug.machines.world import (
    ClusterConfig,
    Condition,
    KVVMInterface,
    KVVMNetwork,
    NetworkSpec,
    SDNRequest,
)
from tests.unit.translate import bodies as b

DECKHOUSE = dialect_for("deckhouse")
MULTUS = dialect_for("multus", cluster_nad_namespace="cluster-nets")


def desired(body: dict[str, Any]) -> Any:
    return records.desired_vm(read(VirtualMachineObject, body, kind="VirtualMachine"))


# -- the Deckhouse VirtualMachine ---------------------------------------------------


def test_vm_reads_networks_approval_macs_and_conditions() -> None:
    vm = desired(b.deckhouse_vm([{"type": "Main", "id": 1},
                                 {"type": "Network", "name": "user-net", "id": 2},
                                 {"type": "ClusterNetwork", "name": "storage", "id": 3}]))
    assert (vm.uid, vm.namespace, vm.name, vm.resource_version) == (b.VM_UID, "ns1", "web", "1001")
    assert vm.networks == (
        NetworkSpec("Main", "", 1),
        NetworkSpec("Network", "user-net", 2),
        NetworkSpec("ClusterNetwork", "storage", 3),
    )
    assert vm.approval == "Manual"
    assert vm.macs == {"Main": "aa:bb:cc:dd:ee:00", "Network/user-net": "aa:bb:cc:dd:ee:01"}
    assert vm.conditions == (
        Condition("AwaitingRestartToApplyConfiguration", "True", "ChangesPendingRestart",
                  "network Main added"),
    )


@pytest.mark.parametrize(
    ("networks", "expected"),
    [(None, None), ([], ()), ([{"type": "Main"}], (NetworkSpec("Main"),))],
    ids=["missing", "empty", "only-main"],
)
def test_vm_networks_missing_stays_distinct_from_empty(
    networks: list[dict[str, Any]] | None, expected: tuple[NetworkSpec, ...] | None
) -> None:
    assert desired(b.deckhouse_vm(networks)).networks == expected


def test_vm_null_networks_and_automatic_approval() -> None:
    body = b.deckhouse_vm(None, disruptions={"restartApprovalMode": "Automatic"})
    body["spec"]["networks"] = None
    del body["status"]
    vm = desired(body)
    assert vm.networks is None and vm.approval == "Automatic" and vm.macs == {}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda s: s.update(networks=[{"type": "Bridge", "name": "x"}]), "spec.networks[0].type"),
        (lambda s: s.update(networks=[{"type": "Network"}]), "a Network needs a name"),
        (lambda s: s.update(networks=[{"type": "Main", "name": "x"}]), "Main has no name"),
        (lambda s: s.update(networks=[{"type": "Network", "name": "a", "id": "2"}]),
         "spec.networks[0].id"),
        (lambda s: s.update(networks=[{"type": "Network", "name": "a", "id": -1}]),
         "spec.networks[0].id"),
        (lambda s: s.update(networks={"type": "Main"}), "spec.networks"),
        (lambda s: s.update(disruptions={"restartApprovalMode": "Sometimes"}),
         "spec.disruptions.restartApprovalMode"),
    ],
)
def test_malformed_vm_names_the_object_and_the_field(change: Any, problem: str) -> None:
    body = b.deckhouse_vm()
    change(body["spec"])
    with pytest.raises(MalformedObject) as raised:
        desired(body)
    error = raised.value
    assert (error.kind, error.namespace, error.name) == ("VirtualMachine", "ns1", "web")
    assert problem in str(error)
    assert str(error).startswith("VirtualMachine ns1/web: ")


@pytest.mark.parametrize(
    "body",
    [None, [], "web", {}, {"metadata": {"namespace": "ns1"}}, {"metadata": {"name": "web"}},
     {"metadata": "web"}],
)
def test_bodies_without_identity_are_malformed(body: Any) -> None:
    with pytest.raises(MalformedObject, match="VirtualMachine"):
        read(VirtualMachineObject, body, kind="VirtualMachine")


def test_many_problems_are_summed_up() -> None:
    body = b.deckhouse_vm([{"type": "X"}, {"type": "Y"}, {"type": "Z"}, {"type": "W"}])
    with pytest.raises(MalformedObject, match=r"and 1 more"):
        desired(body)


# -- the KubeVirt VirtualMachine (KVVM) ----------------------------------------------


def kvvm_record(body: dict[str, Any], *, vmi_exists: bool = True, dialect: Any = DECKHOUSE) -> Any:
    obj = read(KVVMObject, body, kind="KubeVirt VirtualMachine")
    return records.kvvm(obj, dialect=dialect, vmi_exists=vmi_exists)


@pytest.mark.parametrize(
    ("run", "vmi_exists", "running"),
    [
        ({"runStrategy": "Always"}, False, True),
        ({"runStrategy": "RerunOnFailure"}, False, True),
        ({"runStrategy": "Halted"}, True, False),
        ({"runStrategy": "Manual"}, True, True),
        ({"runStrategy": "Manual"}, False, False),
        ({"runStrategy": "Once"}, True, True),
        ({"running": True}, False, True),
        ({"running": False}, True, False),
        ({}, True, False),
    ],
)
def test_kvvm_running_follows_running_or_run_strategy(
    run: dict[str, Any], vmi_exists: bool, running: bool
) -> None:
    body = b.kvvm()
    body["spec"] = {"template": body["spec"]["template"], **run}
    record, error = kvvm_record(body, vmi_exists=vmi_exists)
    assert record.running is running and error is None


def test_kvvm_reads_template_interfaces_networks_and_annotation() -> None:
    annotation = b.deckhouse_annotation(("Network", "user-net", 2))
    body = b.kvvm(
        interfaces=b.bridges(b.USER_NET_IF, b.STORAGE_IF, absent=(b.STORAGE_IF,)),
        networks=b.pod_networks(b.USER_NET_IF, b.STORAGE_IF),
        annotations={DECKHOUSE.request_annotation: annotation},
    )
    record, error = kvvm_record(body)
    assert error is None
    assert record.resource_version == "2001"
    assert record.interfaces == (
        KVVMInterface("default", binding="bridge"),
        KVVMInterface(b.USER_NET_IF, binding="bridge"),
        KVVMInterface(b.STORAGE_IF, absent=True, binding="bridge"),
    )
    assert record.networks == (
        KVVMNetwork("default"), KVVMNetwork(b.USER_NET_IF), KVVMNetwork(b.STORAGE_IF)
    )
    # the annotation names no MAC (Deckhouse's format): the interface's is the entry's
    mac = body["spec"]["template"]["spec"]["domain"]["devices"]["interfaces"][1]["macAddress"]
    assert record.template_requests == (SDNRequest("Network/user-net", b.USER_NET_IF, 2, mac),)


def test_kvvm_link_state_down_is_not_absent() -> None:
    interfaces = b.bridges(b.USER_NET_IF)
    interfaces[1]["state"] = "down"
    record, _ = kvvm_record(b.kvvm(interfaces=interfaces))
    assert record.interfaces[1] == KVVMInterface(b.USER_NET_IF, absent=False, binding="bridge")


@pytest.mark.parametrize(("interface", "binding", "hot"), [
    ({"bridge": {}}, "bridge", True),
    ({"sriov": {}}, "sriov", True),
    ({}, "", True),  # KubeVirt defaults a secondary interface to a bridge
    ({"masquerade": {}}, "masquerade", False),
    ({"binding": {"name": "passt"}}, "plugin/passt", False),
])
def test_kvvm_interfaces_say_how_they_are_bound(
    interface: dict[str, object], binding: str, hot: bool
) -> None:
    interfaces = b.bridges()
    interfaces.append({"name": b.USER_NET_IF, **interface})
    record, _ = kvvm_record(b.kvvm(interfaces=interfaces))
    assert record.interfaces[1].binding == binding
    assert record.interfaces[1].hot_pluggable is hot


def test_kvvm_multus_networks_keep_their_network_name() -> None:
    networks = [{"name": "default", "pod": {}},
                {"name": b.USER_NET_IF, "multus": {"networkName": "ns1/user-net"}}]
    record, _ = kvvm_record(b.kvvm(networks=networks), dialect=MULTUS)
    assert record.networks[1] == KVVMNetwork(b.USER_NET_IF, multus_network="ns1/user-net")


def test_kvvm_unreadable_template_annotation_is_returned_not_raised() -> None:
    body = b.kvvm(annotations={DECKHOUSE.request_annotation: "{not json"})
    record, error = kvvm_record(body)
    assert record.template_requests == ()
    assert error is not None and error.key == DECKHOUSE.request_annotation


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda s: s.pop("template"), "spec.template"),
        (lambda s: s.update(running=True), "mutually exclusive"),
        (lambda s: s.update(runStrategy="Sometimes"), "spec.runStrategy"),
        (lambda s: s.update(running="yes", runStrategy=None), "spec.running"),
        (lambda s: s["template"]["spec"]["domain"]["devices"]["interfaces"].append({"bridge": {}}),
         "spec.template.spec.domain.devices.interfaces[2].name"),
        (lambda s: s["template"]["spec"]["networks"].append(
            {"name": "x", "multus": {"networkName": 7}}),
         "spec.template.spec.networks[2].multus.networkName"),
        (lambda s: s["template"]["metadata"].update(annotations={"a": 1}),
         "spec.template.metadata.annotations.a"),
    ],
)
def test_malformed_kvvm(change: Any, problem: str) -> None:
    body = b.kvvm()
    change(body["spec"])
    with pytest.raises(MalformedObject, match=r"KubeVirt VirtualMachine ns1/web: ") as raised:
        kvvm_record(body)
    assert problem in str(raised.value)


# -- the VMI -------------------------------------------------------------------------


def test_vmi_reads_phase_devices_interfaces_conditions_and_active_pods() -> None:
    record = records.vmi(read(VMIObject, b.vmi(), kind="VirtualMachineInstance"))
    assert (record.uid, record.resource_version, record.phase) == (b.VMI_UID, "3001", "Running")
    assert record.networks == (KVVMNetwork("default"), KVVMNetwork(b.USER_NET_IF))
    assert [i.name for i in record.interfaces] == ["default", b.USER_NET_IF]
    default, user_net = record.status_interfaces
    assert default.info_source == {"domain", "guest-agent"}
    assert user_net.info_source == {"domain", "guest-agent", "multus-status"}
    assert user_net.attached and user_net.interface_name == "eth1"
    assert user_net.mac == "aa:bb:cc:dd:ee:01"
    assert record.active_pods == {b.POD_UID: "node-1"}
    assert record.live_migratable


@pytest.mark.parametrize(
    ("info_source", "attached"),
    [("domain", True), ("guest-agent, multus-status", False), ("", False),
     ("multus-status,domain", True), (" domain ,guest-agent", True), ("domainx", False)],
)
def test_attached_means_domain_is_an_info_source(info_source: str, attached: bool) -> None:
    body = b.vmi(status_interfaces=[{"name": b.USER_NET_IF, "infoSource": info_source}])
    record = records.vmi(read(VMIObject, body, kind="VirtualMachineInstance"))
    assert record.status_interfaces[0].attached is attached


def test_vmi_migration_required_condition_and_minimal_status() -> None:
    conditions = [
        {"type": "MigrationRequired", "status": "False", "reason": "AutoMigrationPending"},
        {"type": "LiveMigratable", "status": "False", "reason": "DisksNotLiveMigratable",
         "message": "cannot migrate VMI: PVC root is not shared"},
    ]
    body = b.vmi(conditions=conditions)
    record = records.vmi(read(VMIObject, body, kind="VirtualMachineInstance"))
    required = record.condition("MigrationRequired")
    assert required == Condition("MigrationRequired", "False", "AutoMigrationPending")
    assert not record.live_migratable
    body = b.vmi()
    body["status"] = {"phase": "Pending"}
    record = records.vmi(read(VMIObject, body, kind="VirtualMachineInstance"))
    assert record.status_interfaces == () and record.active_pods == {}


@pytest.mark.parametrize(
    "status",
    [{"phase": 3}, {"interfaces": [{"name": 1}]}, {"activePods": {"uid": 5}},
     {"conditions": [{"type": "Ready"}]}, {"interfaces": {"name": "x"}}],
)
def test_malformed_vmi(status: dict[str, Any]) -> None:
    body = b.vmi()
    body["status"] = status
    with pytest.raises(MalformedObject, match="VirtualMachineInstance ns1/web: status"):
        read(VMIObject, body, kind="VirtualMachineInstance")


# -- launcher pods -------------------------------------------------------------------


def test_pod_reads_both_annotations_with_the_dialect() -> None:
    status = orjson.dumps([{
        "type": "Network", "name": "user-net", "ifName": b.USER_NET_IF,
        "conditions": [{"type": "Configured", "status": "True"},
                       {"type": "Negotiated", "status": "True"}],
    }]).decode()
    body = b.launcher_pod(annotations={
        DECKHOUSE.request_annotation: b.deckhouse_annotation(("Network", "user-net", 2)),
        DECKHOUSE.status_annotation: status,
    })
    pod = records.launcher_pod(read(PodObject, body, kind="Pod"), dialect=DECKHOUSE)
    assert (pod.namespace, pod.name, pod.uid, pod.phase, pod.node) == (
        "ns1", "virt-launcher-web-x7k2p", b.POD_UID, "Running", "node-1"
    )
    assert [r.identity for r in pod.requested] == ["Network/user-net"]
    assert [(s.identity, s.ready) for s in pod.reported] == [("Network/user-net", True)]
    assert pod.observation_error is None


def test_pod_with_an_unreadable_annotation_keeps_the_other() -> None:
    body = b.launcher_pod(annotations={
        DECKHOUSE.request_annotation: b.deckhouse_annotation(("Network", "user-net", 2)),
        DECKHOUSE.status_annotation: '{"type": "Network"}',
    })
    pod = records.launcher_pod(read(PodObject, body, kind="Pod"), dialect=DECKHOUSE)
    assert [r.identity for r in pod.requested] == ["Network/user-net"]
    assert pod.reported == ()
    assert pod.observation_error is not None
    assert pod.observation_error.startswith("Pod ns1/virt-launcher-web-x7k2p: annotation ")
    assert DECKHOUSE.status_annotation in pod.observation_error


def test_pod_without_annotations_requests_nothing() -> None:
    body = b.launcher_pod()
    del body["metadata"]["annotations"]
    pod = records.launcher_pod(read(PodObject, body, kind="Pod"), dialect=MULTUS)
    assert pod.requested == () and pod.reported == () and pod.observation_error is None


# -- KubeVirt CR, migrations, networks ----------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "methods", "expected"),
    [
        (None, None, ClusterConfig("LiveUpdate", ())),
        ("Stage", ["LiveMigrate"], ClusterConfig("Stage", ("LiveMigrate",))),
        ("LiveUpdate", ["LiveMigrate", "Evict"],
         ClusterConfig("LiveUpdate", ("LiveMigrate", "Evict"))),
    ],
)
def test_kubevirt_configuration(
    strategy: str | None, methods: list[str] | None, expected: ClusterConfig
) -> None:
    body = b.kubevirt_cr(strategy=strategy, methods=methods)
    assert records.cluster_config(read(KubeVirtObject, body, kind="KubeVirt")) == expected


def test_kubevirt_unknown_strategy_is_malformed() -> None:
    with pytest.raises(MalformedObject, match=r"KubeVirt kubevirt/kubevirt: spec\.configuration"):
        read(KubeVirtObject, b.kubevirt_cr(strategy="Eventually"), kind="KubeVirt")


def test_migration_phase_and_finish() -> None:
    running = records.migration(read(VMIMObject, b.migration("m1"), kind="VMIM"))
    assert (running.name, running.uid, running.phase, running.finished) == (
        "m1", "uid-m1", "Running", False
    )
    body = b.migration("m2", phase="Failed")
    assert records.migration(read(VMIMObject, body, kind="VMIM")).finished
    body = b.migration("m3")
    del body["status"]
    assert records.migration(read(VMIMObject, body, kind="VMIM")).phase == ""
    body = b.migration("m4")
    body["spec"] = {}
    with pytest.raises(MalformedObject, match=r"spec\.vmiName"):
        read(VMIMObject, body, kind="VirtualMachineInstanceMigration")


@pytest.mark.parametrize(
    ("status", "ready"), [("True", True), ("False", False), ("Unknown", False)]
)
def test_network_ready_condition(status: str, ready: bool) -> None:
    body = b.sdn_network("user-net", ready=status)
    assert read(SDNNetworkObject, body, kind="Network").ready is ready


def test_network_without_status_is_not_ready() -> None:
    body = copy.deepcopy(b.sdn_network("storage", cluster=True))
    del body["status"]
    assert not read(SDNNetworkObject, body, kind="ClusterNetwork").ready


def test_a_kvvm_patch_read_from_bound_interfaces_still_pins_the_same_template() -> None:
    """The binding is read, but a patch's precondition pins a template by its interfaces'
    names and states: a round trip through the effect's payload still finds the same
    template (reading bindings once made every KVVM patch fail its precondition)."""
    from nicplug.machines.effects import KVVMTemplate
    from nicplug.machines.facts import template_read

    interfaces = b.bridges(b.USER_NET_IF)
    interfaces[1] = {"name": b.USER_NET_IF, "binding": {"name": "bpfbridge"}}
    record, _ = kvvm_record(b.kvvm(interfaces=interfaces))
    read = template_read(record)
    again = KVVMTemplate.from_payload(read.to_payload())
    assert again.same_template(record.interfaces, record.networks, record.template_requests)
