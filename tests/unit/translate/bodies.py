"""API bodies written the way Deckhouse, KubeVirt and the kubelet write them.

Each builder returns a fresh dict with the fields real objects carry besides the
ones nicplug reads (finalizers, owner references, disks, ...), so the models are
tested against what a cluster actually serves.
"""

from __future__ import annotations

from typing import Any

import orjson

from nicplug.machines.world import if_name_of

NS = "ns1"
VM = "web"
VM_UID = "5f0c3a1e-2d4b-4c8e-9a71-0d6e8f2b7c11"
VMI_UID = "9b2e4f60-7a1c-4d3e-8f55-1c2d3e4f5a6b"
POD_UID = "c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e5f"
TARGET_POD_UID = "d2e3f4a5-b6c7-4d8e-9f0a-1b2c3d4e5f60"
USER_NET_IF = if_name_of("Network", "user-net")
STORAGE_IF = if_name_of("ClusterNetwork", "storage")

Body = dict[str, Any]


def meta(name: str, *, uid: str, rv: str, namespace: str | None = NS, **extra: Any) -> Body:
    body: Body = {
        "name": name,
        "uid": uid,
        "resourceVersion": rv,
        "generation": 3,
        "creationTimestamp": "2026-11-30T09:12:44Z",
        "managedFields": [{"manager": "kubectl", "operation": "Update"}],
    }
    if namespace is not None:
        body["namespace"] = namespace
    body.update(extra)
    return body


def deckhouse_vm(networks: list[Body] | None = None, **spec_extra: Any) -> Body:
    spec: Body = {
        "virtualMachineClassName": "generic",
        "runPolicy": "AlwaysOn",
        "cpu": {"cores": 1, "coreFraction": "100%"},
        "memory": {"size": "1Gi"},
        "blockDeviceRefs": [{"kind": "VirtualDisk", "name": "web-root"}],
        "disruptions": {"restartApprovalMode": "Manual"},
    }
    if networks is not None:
        spec["networks"] = networks
    spec.update(spec_extra)
    return {
        "apiVersion": "virtualization.deckhouse.io/v1alpha2",
        "kind": "VirtualMachine",
        "metadata": meta(VM, uid=VM_UID, rv="1001", finalizers=["virtualization.deckhouse.io/vm"]),
        "spec": spec,
        "status": {
            "phase": "Running",
            "node": "node-1",
            "networks": [
                {"type": "Main", "id": 1, "macAddress": "aa:bb:cc:dd:ee:00"},
                {"type": "Network", "name": "user-net", "id": 2, "macAddress": "aa:bb:cc:dd:ee:01"},
            ],
            "conditions": [
                {
                    "type": "AwaitingRestartToApplyConfiguration",
                    "status": "True",
                    "reason": "ChangesPendingRestart",
                    "message": "network Main added",
                    "lastTransitionTime": "2026-11-30T09:15:00Z",
                    "observedGeneration": 3,
                }
            ],
        },
    }


def deckhouse_annotation(*entries: tuple[str, str, int]) -> str:
    return orjson.dumps(
        [
            {"type": t, "name": n, "id": i, "ifName": if_name_of(t, n), "uid": 64535, "gid": 64535}
            for t, n, i in entries
        ]
    ).decode()


def kubevirt_spec(networks: list[Body], interfaces: list[Body]) -> Body:
    return {
        "domain": {
            "cpu": {"cores": 1, "sockets": 1},
            "memory": {"guest": "1Gi"},
            "devices": {
                "disks": [{"name": "root", "disk": {"bus": "virtio"}}],
                "interfaces": interfaces,
            },
            "resources": {},
        },
        "networks": networks,
        "volumes": [{"name": "root", "persistentVolumeClaim": {"claimName": "web-root"}}],
    }


def pod_networks(*names: str) -> list[Body]:
    return [{"name": "default", "pod": {}}] + [{"name": n, "pod": {}} for n in names]


def bridges(*names: str, absent: tuple[str, ...] = ()) -> list[Body]:
    found: list[Body] = [{"name": "default", "bridge": {}}]
    for name in names:
        entry: Body = {"name": name, "bridge": {}, "macAddress": "aa:bb:cc:dd:ee:01"}
        if name in absent:
            entry["state"] = "absent"
        found.append(entry)
    return found


def kvvm(
    *,
    networks: list[Body] | None = None,
    interfaces: list[Body] | None = None,
    annotations: dict[str, str] | None = None,
    **run: Any,
) -> Body:
    spec: Body = dict(run) if run else {"runStrategy": "Always"}
    spec["template"] = {
        "metadata": {
            "creationTimestamp": None,
            "labels": {"kubevirt.io/vm": VM},
            "annotations": annotations or {},
        },
        "spec": kubevirt_spec(
            networks if networks is not None else pod_networks(USER_NET_IF),
            interfaces if interfaces is not None else bridges(USER_NET_IF),
        ),
    }
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": meta(VM, uid="0a1b2c3d-kvvm", rv="2001",
                         annotations={"kubevirt.io/latest-observed-api-version": "v1"}),
        "spec": spec,
        "status": {"created": True, "ready": True, "printableStatus": "Running"},
    }


def vmi(
    *,
    networks: list[Body] | None = None,
    interfaces: list[Body] | None = None,
    status_interfaces: list[Body] | None = None,
    conditions: list[Body] | None = None,
    active_pods: dict[str, str] | None = None,
) -> Body:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": meta(VM, uid=VMI_UID, rv="3001", labels={"kubevirt.io/nodeName": "node-1"}),
        "spec": kubevirt_spec(
            networks if networks is not None else pod_networks(USER_NET_IF),
            interfaces if interfaces is not None else bridges(USER_NET_IF),
        ),
        "status": {
            "phase": "Running",
            "nodeName": "node-1",
            "activePods": active_pods if active_pods is not None else {POD_UID: "node-1"},
            "conditions": conditions
            if conditions is not None
            else [
                {"type": "Ready", "status": "True", "lastProbeTime": None},
                {"type": "LiveMigratable", "status": "True", "lastProbeTime": None},
            ],
            "interfaces": status_interfaces
            if status_interfaces is not None
            else [
                {"name": "default", "interfaceName": "eth0", "mac": "aa:bb:cc:dd:ee:00",
                 "infoSource": "domain, guest-agent", "ipAddress": "10.66.0.4", "queueCount": 1},
                {"name": USER_NET_IF, "interfaceName": "eth1", "mac": "aa:bb:cc:dd:ee:01",
                 "infoSource": "domain, guest-agent, multus-status", "queueCount": 1},
            ],
            "migrationMethod": "BlockMigration",
            "qosClass": "Burstable",
        },
    }


def launcher_pod(
    name: str = "virt-launcher-web-x7k2p",
    *,
    uid: str = POD_UID,
    vm: str = VM,
    namespace: str = NS,
    phase: str = "Running",
    annotations: dict[str, str] | None = None,
    created_by: str | None = None,
    **metadata_extra: Any,
) -> Body:
    """A virt-launcher pod of `vm`'s VMI (`created_by`: its uid, `VMI_UID` for `VM`)."""
    creator = created_by or (VMI_UID if vm == VM else f"vmi-of-{vm}")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta(
            name,
            uid=uid,
            rv="4001",
            namespace=namespace,
            labels={
                "kubevirt.io": "virt-launcher",
                "kubevirt.io/created-by": creator,
                "vm.kubevirt.io/name": vm,
            },
            annotations={"kubevirt.io/domain": vm, **(annotations or {})},
            ownerReferences=[{"kind": "VirtualMachineInstance", "name": vm, "uid": creator}],
            **metadata_extra,
        ),
        "spec": {"nodeName": "node-1", "containers": [{"name": "compute", "image": "launcher"}]},
        "status": {"phase": phase, "podIP": "10.66.0.4", "qosClass": "Burstable"},
    }


def kubevirt_cr(*, strategy: str | None = None, methods: list[str] | None = None) -> Body:
    configuration: Body = {"developerConfiguration": {"featureGates": ["HotplugNICs"]}}
    if strategy is not None:
        configuration["vmRolloutStrategy"] = strategy
    spec: Body = {"configuration": configuration, "certificateRotateStrategy": {}}
    if methods is not None:
        spec["workloadUpdateStrategy"] = {"workloadUpdateMethods": methods}
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": meta("kubevirt", uid="kv-1", rv="10", namespace="kubevirt"),
        "spec": spec,
        "status": {"phase": "Deployed", "observedKubeVirtVersion": "v1.6.0"},
    }


def migration(name: str, *, vmi_name: str = VM, phase: str = "Running", created: str = "") -> Body:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": meta(name, uid=f"uid-{name}", rv="5001",
                         creationTimestamp=created or "2026-11-30T10:00:00Z"),
        "spec": {"vmiName": vmi_name},
        "status": {"phase": phase, "phaseTransitionTimestamps": []},
    }


def sdn_network(name: str, *, cluster: bool = False, ready: str = "True") -> Body:
    return {
        "apiVersion": "network.deckhouse.io/v1alpha1",
        "kind": "ClusterNetwork" if cluster else "Network",
        "metadata": meta(name, uid=f"uid-{name}", rv="6001", namespace=None if cluster else NS),
        "spec": {"type": "Access", "parentNodeNetworkInterfaces": {"labelSelector": {}}},
        "status": {
            "conditions": [
                {"type": "Ready", "status": ready, "reason": "AllNodesConfigured",
                 "lastTransitionTime": "2026-11-30T08:00:00Z"}
            ]
        },
    }
