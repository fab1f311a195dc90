"""A populated cluster, made the way the virtualization controller and KubeVirt make it.

`populate` writes straight into the store (no actor round trips, so 10k VMs take
seconds): namespaces, the KubeVirt CR with the chosen rollout strategy, Ready `Network`
/ `ClusterNetwork` objects, and per VM the `virtualization.deckhouse.io` VirtualMachine,
its KVVM (template with the dialect's networks, interfaces and SDN request annotation),
a Running VMI with every interface attached, and a running launcher pod whose SDN has
already configured every requested network. The shapes come from `objects`, the same
builders the KubeVirt actor uses.
"""

from __future__ import annotations

import contextlib
import json
import random
from dataclasses import dataclass

from nicplug.simulator import deckhouse_networks as dn
from nicplug.simulator import networking as nw
from nicplug.simulator import objects as ob
from nicplug.simulator import pod_networks
from nicplug.simulator.errors import AlreadyExists
from nicplug.simulator.knobs import ROLLOUT_STRATEGIES, Knobs, RolloutStrategy
from nicplug.simulator.networking import Json
from nicplug.simulator.resources import (
    CLUSTER_NETWORKS,
    KUBEVIRTS,
    KVVMS,
    NADS,
    NAMESPACES,
    NETWORKS,
    PODS,
    VMIS,
    VMMACS,
    VMS,
    Resource,
)
from nicplug.simulator.store import Store

NetworkRef = tuple[str, str]  # (type, name): ("Network", "user-net")


@dataclass(frozen=True, slots=True)
class Fixtures:
    vms: int = 0
    namespaces: tuple[str, ...] = ("default",)  # VMs are spread over them in turn
    networks: tuple[str, ...] = ("user-net",)  # a Ready Network of each name per namespace
    cluster_networks: tuple[str, ...] = ("storage",)
    vm_networks: tuple[NetworkRef, ...] = ()  # extra networks every VM starts with
    rollout_strategy: RolloutStrategy = "LiveUpdate"
    vm_prefix: str = "vm-"
    pod_network_binding: str = "masquerade"  # multus: `bridge` makes the VMs non-migratable
    # deckhouse: the Networks / ClusterNetworks of these names have an IPAM pool
    # (`spec.ipam.ipAddressPoolRef`); no VM starts with one (it would need an IPAddress)
    ipam_networks: tuple[str, ...] = ()
    # the KubeVirt CR's workloadUpdateMethods; None: the platform's (Deckhouse sets
    # LiveMigrate; upstream KubeVirt sets none, and then migrates nothing by itself)
    workload_update_methods: tuple[str, ...] | None = None
    parallel_migrations: int | None = None  # the CR's parallelMigrationsPerCluster

    def __post_init__(self) -> None:
        if self.vms < 0:
            raise ValueError(f"the number of VMs must be >= 0, not {self.vms}")
        if not self.namespaces:
            raise ValueError("at least one namespace is needed")
        if self.rollout_strategy not in ROLLOUT_STRATEGIES:
            raise ValueError(f"rollout strategy must be one of {', '.join(ROLLOUT_STRATEGIES)}"
                             f", not {self.rollout_strategy!r}")
        for type_, name in self.vm_networks:
            if type_ not in ("Network", "ClusterNetwork") or not name:
                raise ValueError(f"a VM network is (Network|ClusterNetwork, name), not "
                                 f"{(type_, name)!r}")
            if name in self.ipam_networks:
                raise ValueError(f"no VM starts with the IPAM network {name!r}")

    def vm_names(self) -> list[tuple[str, str]]:
        """(namespace, name) of every VM, in creation order."""
        width = max(5, len(str(self.vms)))
        return [(self.namespaces[i % len(self.namespaces)], f"{self.vm_prefix}{i:0{width}d}")
                for i in range(self.vms)]


def nad_namespace(knobs: Knobs, type_: str, vm_namespace: str) -> str:
    return vm_namespace if type_ == "Network" else knobs.cluster_network_nad_namespace


def vmmac_name(vm: str, id_: int) -> str:
    """The VirtualMachineMACAddress a fixture VM holds for its network of id `id_`
    (Deckhouse generates `<vm>-<random>`; fixtures need stable names)."""
    return f"{vm}-n{id_}"


def fixture_mac(namespace: str, vm: str, id_: int) -> str:
    """The MAC a fixture VM's network of id `id_` holds: its VMMAC's address."""
    return nw.allocated_mac(namespace, vmmac_name(vm, id_))


def request_entry(knobs: Knobs, namespace: str, vm: str, type_: str, name: str, id_: int) -> Json:
    """The dialect's SDN request entry for one network of one VM."""
    if knobs.dialect == "deckhouse":
        return nw.deckhouse_request(type_, name, id_, mac=fixture_mac(namespace, vm, id_))
    if_name = nw.if_name(type_, name)
    return nw.multus_request(nad_namespace(knobs, type_, namespace), name, if_name,
                             nw.mac_for(namespace, vm, if_name))


def kvvm_for(knobs: Knobs, namespace: str, vm: str, extra: tuple[NetworkRef, ...],
             main_binding: str = "masquerade") -> Json:
    """A running KVVM with Main and `extra` networks (ids 2, 3, ...)."""
    refs: list[tuple[str, str, int]] = [("Main", "", 1)] + [
        (t, n, i) for i, (t, n) in enumerate(extra, start=2)]
    deckhouse = knobs.dialect == "deckhouse"
    networks = [nw.kubevirt_network(knobs.dialect, t, n, nad_namespace(knobs, t, namespace),
                                    fixture_mac(namespace, vm, i) if deckhouse else "")
                for t, n, i in refs]
    interfaces = [nw.deckhouse_interface(t, fixture_mac(namespace, vm, i), i)
                  if deckhouse and t != "Main" else nw.kubevirt_interface(t, n)
                  for t, n, i in refs]
    if knobs.dialect == "multus":  # upstream: what binds the pod network decides migrations
        interfaces[0] = {"name": nw.MAIN_IF_NAME, main_binding: {}}
    annotations: dict[str, str] = {}
    if extra and knobs.dialect == "deckhouse":  # multus: KubeVirt generates the pods' own
        entries = [request_entry(knobs, namespace, vm, t, n, i) for t, n, i in refs[1:]]
        annotations[ob.request_annotation(knobs.dialect)] = nw.dump_list(entries)
    # Deckhouse gives every run policy runStrategy Manual and starts and stops the VM
    # itself (`pkg/controller/kvbuilder/kvvm.go`, `sync_power_state.go`)
    strategy = "Manual" if deckhouse else "Always"
    return {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": vm, "namespace": namespace},
        "spec": {"runStrategy": strategy, "template": {
            "metadata": {"labels": {nw.VM_NAME_LABEL: vm}, "annotations": annotations},
            "spec": {"domain": {"devices": {"interfaces": interfaces}, "cpu": {"cores": 1},
                                "memory": {"guest": "1Gi"}},
                     "networks": networks}}},
        "status": {"created": True, "ready": True, "printableStatus": "Running"},
    }


def populate(store: Store, knobs: Knobs, fixtures: Fixtures) -> list[tuple[str, str]]:
    """Create the fixtures; returns the (namespace, name) of every VM."""
    rng = random.Random(knobs.seed)
    for namespace in dict.fromkeys(("kubevirt", knobs.cluster_network_nad_namespace,
                                    *fixtures.namespaces)):
        _ensure(store, NAMESPACES, {"metadata": {"name": namespace},
                                    "status": {"phase": "Active"}})
    methods = fixtures.workload_update_methods
    if methods is None:
        methods = ("LiveMigrate",) if knobs.dialect == "deckhouse" else ()
    configuration: dict[str, object] = {"vmRolloutStrategy": fixtures.rollout_strategy}
    if fixtures.parallel_migrations is not None:
        configuration["migrations"] = {
            "parallelMigrationsPerCluster": fixtures.parallel_migrations}
    _ensure(store, KUBEVIRTS, {
        "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {"configuration": configuration,
                 "workloadUpdateStrategy": {"workloadUpdateMethods": list(methods)}},
        "status": {"phase": "Deployed"},
    })
    ready = {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready"}]}

    def spec(name: str) -> Json:
        if name not in fixtures.ipam_networks:
            return {"type": "Access"}
        return {"type": "Access", "ipam": {"ipAddressPoolRef": {"name": f"{name}-pool"}}}

    for namespace in fixtures.namespaces:
        for name in fixtures.networks:
            _ensure(store, NETWORKS, {"metadata": {"name": name, "namespace": namespace},
                                      "spec": spec(name), "status": ready})
    for name in fixtures.cluster_networks:
        _ensure(store, CLUSTER_NETWORKS, {"metadata": {"name": name},
                                          "spec": spec(name), "status": ready})
    if knobs.dialect == "multus" and knobs.nads_served:  # the NADs the networks stand for
        nads = [(namespace, name) for namespace in fixtures.namespaces
                for name in fixtures.networks]
        nads += [(knobs.cluster_network_nad_namespace, n) for n in fixtures.cluster_networks]
        for namespace, name in nads:
            _ensure(store, NADS, {"metadata": {"name": name, "namespace": namespace},
                                  "spec": {"config": _nad_config(name)}})
    names = fixtures.vm_names()
    for namespace, vm in names:
        _create_vm(store, knobs, rng, namespace, vm, fixtures.vm_networks,
                   fixtures.pod_network_binding)
    return names


def _nad_config(name: str) -> str:
    """A NAD's CNI configuration (multus passes it on; nothing here reads it)."""
    return json.dumps({"cniVersion": "0.3.1", "name": name, "type": "bridge",
                       "bridge": f"br-{name[:11]}"})


def _ensure(store: Store, res: Resource, obj: Json) -> None:
    with contextlib.suppress(AlreadyExists):
        store.create(res, {"apiVersion": res.api_version, "kind": res.kind} | obj)


def _create_vm(store: Store, knobs: Knobs, rng: random.Random, namespace: str, vm: str,
               extra: tuple[NetworkRef, ...], main_binding: str = "masquerade") -> None:
    deckhouse = knobs.dialect == "deckhouse"
    macs = {(t, n): fixture_mac(namespace, vm, i) if deckhouse
            else nw.mac_for(namespace, vm, nw.if_name(t, n))
            for i, (t, n) in enumerate(extra, start=2)}
    built = kvvm_for(knobs, namespace, vm, extra, main_binding)
    if deckhouse:  # upstream KubeVirt: the KubeVirt VM is the user's own
        created = _create_deckhouse_vm(store, namespace, vm, extra, macs)
        for i in range(2, len(extra) + 2):
            store.create(VMMACS, ob.vm_mac_address(
                created, vmmac_name(vm, i), fixture_mac(namespace, vm, i), phase="Attached"))
        # the spec Deckhouse's controller built the KVVM from (`SetLastAppliedSpec`); a
        # release with native hotplug also gates the tap provisioning (`kvvm_utils.go`)
        built["metadata"]["annotations"] = {dn.LAST_APPLIED: json.dumps(
            created["spec"], separators=(",", ":"))}
        if extra and knobs.hotplugs:
            built["spec"]["template"]["metadata"]["annotations"][dn.TAP_PROVISION] = "true"
    kvvm = store.create(KVVMS, built)
    vmi = store.create(VMIS, ob.vmi_for(kvvm, KVVMS))
    request = (ob.dig(kvvm, "spec", "template", "metadata", "annotations") or {}).get(
        ob.request_annotation(knobs.dialect))
    if knobs.dialect == "multus":
        generated = pod_networks.generate(vmi.get("spec") or {}, namespace,
                                          bindings=knobs.network_bindings)
        request = generated or None
    suffix = "".join(rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
    node = rng.choice(("node-a", "node-b", "node-c"))
    pod = ob.launcher_pod(vmi, VMIS, name=f"virt-launcher-{vm}-{suffix}", node=node,
                          dialect=knobs.dialect, request=request)
    if knobs.dialect == "deckhouse" and request:
        pod["metadata"]["annotations"][nw.DECKHOUSE_STATUS] = nw.dump_list(
            [nw.deckhouse_status(r, mac=nw.mac_for(namespace, vm, str(r.get("ifName"))))
             for r in nw.parse_list(request) or []])
    pod = store.create(PODS, pod)
    spec = vmi.get("spec") or {}
    links = ob.links_in(pod, spec, knobs.dialect)
    multus = knobs.dialect == "multus"
    status: Json = {
        "phase": "Running", "nodeName": node, "activePods": {pod["metadata"]["uid"]: node},
        "interfaces": [ob.attached_interface(str(i["name"]), index, links[str(i["name"])],
                                             multus=multus and i["name"] != nw.MAIN_IF_NAME)
                       for index, i in enumerate(ob.interfaces_of(spec)) if i["name"] in links],
    }
    ob.set_migratable(status, vmi, knobs.dialect)
    ob.set_condition(status, "Ready", "True", "")
    vmi = store.update(VMIS, vmi | {"status": status}, subresource="status")
    synced = dict(kvvm.get("status") or {})
    ob.sync_conditions(synced, vmi)  # as KubeVirt's VM controller has synced them
    if synced != (kvvm.get("status") or {}):
        store.update(KVVMS, kvvm | {"status": synced}, subresource="status")


def _create_deckhouse_vm(store: Store, namespace: str, vm: str, extra: tuple[NetworkRef, ...],
                         macs: dict[NetworkRef, str]) -> Json:
    return store.create(VMS, {
        "apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": "VirtualMachine",
        "metadata": {"name": vm, "namespace": namespace},
        # the fields Deckhouse's CRD requires (crds/virtualmachines.yaml)
        "spec": {"virtualMachineClassName": "generic", "cpu": {"cores": 1},
                 "memory": {"size": "1Gi"},
                 "blockDeviceRefs": [{"kind": "VirtualDisk", "name": f"{vm}-root"}],
                 "runPolicy": "AlwaysOnUnlessStoppedManually",  # the CRD's default
                 "disruptions": {"restartApprovalMode": "Manual"},
                 "networks": [{"type": "Main", "id": 1}] + [
                     {"type": t, "name": n, "id": i} for i, (t, n) in enumerate(extra, start=2)]},
        "status": {"phase": "Running", "networks": [{"type": "Main", "id": 1}] + [
            {"type": t, "name": n, "id": i, "macAddress": macs[(t, n)]}
            for i, (t, n) in enumerate(extra, start=2)]},
    })
