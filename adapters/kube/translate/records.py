"""From the edge models to the domain's frozen records, one object at a time.

Each function here turns one validated object into the `World` record the machines
read, with the SDN annotations parsed by the configured `Dialect`. They are total:
whatever a validated object holds maps to a record, and an annotation a dialect
cannot read ends up as an observation error beside the record, never as an
exception. Nothing here looks at more than one object or decides anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import lru_cache

from nicplug.adapters.kube.resources import (
    MANAGED_BY_LABEL,
    VMOP_RESTART_AFTER_ANNOTATION,
    VMOP_RESTART_FOR_ANNOTATION,
    VMOP_RESTART_NUMBER_ANNOTATION,
    VMOP_VMI_UID_ANNOTATION,
    WORKLOAD_UPDATE_ANNOTATION,
)
from nicplug.adapters.kube.translate.objects import (
    ConditionModel,
    KubeVirtObject,
    KVVMObject,
    PodObject,
    VirtualMachineObject,
    VMIMObject,
    VMIObject,
    VMISpec,
    VMOPObject,
)
from nicplug.adapters.sdn import Dialect, MalformedAnnotation
from nicplug.machines.world import (
    KVVM,
    RESTART_ANNOTATION,
    RUNNING,
    VMI,
    ClusterConfig,
    Condition,
    DesiredVM,
    KVVMInterface,
    KVVMNetwork,
    LauncherPod,
    Migration,
    NetworkSpec,
    SDNRequest,
    SDNStatus,
    VMIInterfaceStatus,
    VMOperation,
    identity_of,
    nad_network,
)

ABSENT = "absent"
"""`state: absent` on an interface asks KubeVirt to hot-unplug it."""

RUNNING_STRATEGIES = frozenset({"Always", "RerunOnFailure"})
"""Run strategies that keep a VM running whatever happens to its VMI."""

FOLLOWS_THE_VMI = frozenset({"Manual", "Once", "WaitAsReceiver"})
"""Run strategies whose intent shows only in whether a VMI exists."""


def conditions(models: Sequence[ConditionModel], *, since: bool = False) -> tuple[Condition, ...]:
    """`since`: keep each condition's `lastTransitionTime` (the VMI's: when KubeVirt's
    `MigrationRequired=False` grace began)."""
    return tuple(Condition(c.type, c.status, c.reason, c.message,
                           (c.last_transition_time or "") if since else "")
                 for c in models)


def desired_vm(vm: VirtualMachineObject, macs: Mapping[str, str] | None = None) -> DesiredVM:
    """The VM's record; with `macs`, every additional network named by its MAC
    (`named_by_mac`)."""
    networks = vm.spec.networks
    record = DesiredVM(
        uid=vm.metadata.uid,
        namespace=vm.metadata.namespace,
        name=vm.metadata.name,
        resource_version=vm.metadata.resource_version,
        networks=None
        if networks is None
        else tuple(NetworkSpec(n.type, n.name, n.id, ip_address_name=n.ip_address_name)
                   for n in networks),
        approval=vm.spec.disruptions.restart_approval_mode,
        macs={
            identity_of(n.type, n.name): n.mac_address
            for n in vm.status.networks
            if n.mac_address
        },
        conditions=conditions(vm.status.conditions),
        labels=vm.metadata.labels,
        run_policy=vm.spec.run_policy,
    )
    return record if macs is None else named_by_mac(record, macs)


def named_by_mac(vm: DesiredVM, macs: Mapping[str, str]) -> DesiredVM:
    """`vm` where the platform names each additional network's interface after the MAC
    it allocated (Deckhouse): `macs` maps an identity to that MAC; a network without
    one is left unnamed."""
    if vm.networks is None:
        return vm
    return replace(vm, networks=tuple(
        NetworkSpec(n.type, n.name, n.id, mac=macs.get(n.identity), named_by_mac=True,
                    ip_address_name=n.ip_address_name)
        for n in vm.networks))


def desired_in_template(obj: KVVMObject, *, cluster_nad_namespace: str) -> DesiredVM:
    """The kubevirt flavour's desired state: the KubeVirt VirtualMachine's own template,
    as users edit it (`kubevirt/user-guide` `docs/network/hotplug/interfaces.md`).

    Each interface of `spec.template.spec.domain.devices.interfaces` with its network
    of the same name is wanted: a `pod` network is `Main`, a `multus` one the Network
    or ClusterNetwork its `networkName` names (`nad_network`), under the interface name
    the user gave it; an interface `state: absent` is not wanted (KubeVirt unplugs it,
    then drops it). A NAD in any other namespace, and an interface without a network,
    are not nicplug's: left out. A template with neither interfaces nor networks gets
    KubeVirt's default pod network (`None`: `[Main]`). The interface's `macAddress` is
    the MAC, the VM's labels and status conditions are the VM's.
    """
    namespace = obj.metadata.namespace
    template = obj.spec.template.spec
    by_name = {n.name: n for n in template.networks}
    interfaces = template.domain.devices.interfaces
    networks: tuple[NetworkSpec, ...] | None = None
    macs: dict[str, str] = {}
    if interfaces or template.networks:
        wanted: list[NetworkSpec] = []
        for interface in interfaces:
            network = by_name.get(interface.name)
            if interface.state == ABSENT or network is None:
                continue
            if network.multus is None:
                if network.pod is not None:
                    wanted.append(NetworkSpec("Main", interface=interface.name))
                continue
            found = nad_network(
                network.multus.network_name, namespace, cluster_nad_namespace, interface.name)
            if found is None:
                continue
            spec = NetworkSpec(found[0], found[1], interface=interface.name)
            wanted.append(spec)
            if interface.mac_address:
                macs[spec.identity] = interface.mac_address
        networks = tuple(wanted)
    return DesiredVM(
        uid=obj.metadata.uid,
        namespace=namespace,
        name=obj.metadata.name,
        resource_version=obj.metadata.resource_version,
        networks=networks,
        macs=macs,
        conditions=conditions(obj.status.conditions),
        labels=obj.metadata.labels,
        in_template=True,
    )


def kvvm(
    obj: KVVMObject, *, dialect: Dialect, vmi_exists: bool
) -> tuple[KVVM, MalformedAnnotation | None]:
    """The KVVM record and, when its template's SDN annotation is unreadable, why."""
    spec = obj.spec
    if spec.running is not None:
        running = spec.running
    elif spec.run_strategy in RUNNING_STRATEGIES:
        running = True
    else:
        running = spec.run_strategy in FOLLOWS_THE_VMI and vmi_exists
    namespace = obj.metadata.namespace
    error = None
    requests: tuple[SDNRequest, ...] = ()
    try:
        requests = dialect.parse_requests(
            value=spec.template.metadata.annotations.get(dialect.request_annotation),
            namespace=namespace,
        )
    except MalformedAnnotation as e:
        error = e
    interfaces, networks = _devices(spec.template.spec)
    requests = _with_interface_macs(requests, spec.template.spec)
    if spec.run_strategy is not None:
        strategy: str = spec.run_strategy
    else:
        strategy = RUNNING if spec.running else ""
    record = KVVM(
        resource_version=obj.metadata.resource_version,
        running=running,
        interfaces=interfaces,
        networks=networks,
        template_requests=requests,
        labels=obj.metadata.labels,
        eviction_strategy=spec.template.spec.eviction_strategy,
        run_strategy=strategy,
        resumes=obj.metadata.annotations.get(RESTART_ANNOTATION),
    )
    return record, error


def vmi(obj: VMIObject) -> VMI:
    interfaces, networks = _devices(obj.spec)
    status = obj.status
    return VMI(
        uid=obj.metadata.uid,
        resource_version=obj.metadata.resource_version,
        phase=status.phase,
        interfaces=interfaces,
        networks=networks,
        status_interfaces=tuple(
            VMIInterfaceStatus(
                name=i.name,
                interface_name=i.interface_name,
                mac=i.mac,
                info_source=info_sources(i.info_source),
            )
            for i in status.interfaces
        ),
        conditions=conditions(status.conditions, since=True),
        active_pods=dict(status.active_pods),
    )


@lru_cache(maxsize=256)
def info_sources(value: str) -> frozenset[str]:
    """`"domain, guest-agent, multus-status"` as a set; tolerant of spacing. Every VMI
    says one of a few such lists: they share one set each (~0.2 KB per VM less)."""
    return frozenset(part.strip() for part in value.split(",") if part.strip())


def launcher_pod(
    pod: PodObject, *, dialect: Dialect, interfaces: Mapping[str, str] | None = None
) -> LauncherPod:
    """The pod with its SDN annotations parsed (`interfaces`: the pod-side names of the
    networks the VM's spec names, see `Dialect.parse_requests`). An unreadable
    annotation becomes the pod's observation error and reads as empty; the other one is
    still read."""
    annotations = pod.metadata.annotations
    namespace = pod.metadata.namespace
    problems: list[str] = []
    requested: tuple[SDNRequest, ...] = ()
    reported: tuple[SDNStatus, ...] = ()
    try:
        requested = dialect.parse_requests(
            value=annotations.get(dialect.request_annotation), namespace=namespace,
            interfaces=interfaces,
        )
    except MalformedAnnotation as e:
        problems.append(str(e))
    try:
        reported = dialect.parse_statuses(
            value=annotations.get(dialect.status_annotation), namespace=namespace,
            interfaces=interfaces,
        )
    except MalformedAnnotation as e:
        problems.append(str(e))
    return LauncherPod(
        namespace=namespace,
        name=pod.metadata.name,
        uid=pod.metadata.uid,
        resource_version=pod.metadata.resource_version,
        phase=pod.status.phase,
        node=pod.spec.node_name,
        requested=requested,
        reported=reported,
        observation_error=f"Pod {namespace}/{pod.metadata.name}: {'; '.join(problems)}"
        if problems
        else None,
    )


def vm_operation(obj: VMOPObject) -> VMOperation | None:
    """nicplug's own restart step; another's (the user's) operation, with no VMI uid;
    None for one nicplug created that is not a restart step."""
    vmi_uid = obj.metadata.annotations.get(VMOP_VMI_UID_ANNOTATION)
    if vmi_uid is None:
        ours = obj.metadata.labels.get(MANAGED_BY_LABEL) == "nicplug"
        vmi_uid = None if ours else ""
    if vmi_uid is None or (vmi_uid and obj.spec.type not in ("Stop", "Start", "Restart")):
        return None
    completed = next((c for c in obj.status.conditions if c.type == "Completed"), None)
    said = obj.metadata.annotations.get(VMOP_RESTART_FOR_ANNOTATION, "") if vmi_uid else ""
    number = obj.metadata.annotations.get(VMOP_RESTART_NUMBER_ANNOTATION, "") if vmi_uid else ""
    after = obj.metadata.annotations.get(VMOP_RESTART_AFTER_ANNOTATION, "") if vmi_uid else ""
    return VMOperation(obj.metadata.name, obj.spec.type, vmi_uid, obj.status.phase,
                       completed.message if completed is not None else "",
                       obj.metadata.creation_timestamp,
                       tuple(s for s in said.split(",") if s),
                       number=int(number) if number.isdigit() else 0,
                       after=tuple(s for s in after.split(",") if s))


def migration(obj: VMIMObject) -> Migration:
    state = obj.status.migration_state
    return Migration(
        name=obj.metadata.name, uid=obj.metadata.uid, phase=obj.status.phase,
        failure=state.failure_reason if state is not None else "",
        workload_update=WORKLOAD_UPDATE_ANNOTATION in obj.metadata.annotations,
    )


def cluster_config(obj: KubeVirtObject) -> ClusterConfig:
    return ClusterConfig(
        rollout_strategy=obj.spec.configuration.vm_rollout_strategy,
        workload_update_methods=tuple(obj.spec.workload_update_strategy.workload_update_methods),
    )


def _with_interface_macs(
    requests: tuple[SDNRequest, ...], spec: VMISpec
) -> tuple[SDNRequest, ...]:
    """Each template request with the MAC the template carries for it: the annotation's,
    else its interface's `macAddress`. A dialect whose annotation holds no MAC
    (Deckhouse's) writes it on the interface alone, so read from the annotation only,
    a written entry would never equal the request it was written from, and the KVVM
    would be written again, the same, for nothing."""
    if all(r.mac for r in requests):
        return requests
    macs = {i.name: i.mac_address for i in spec.domain.devices.interfaces if i.mac_address}
    if not macs:
        return requests
    return tuple(
        r if r.mac or r.if_name not in macs else replace(r, mac=macs[r.if_name])
        for r in requests
    )


def _devices(spec: VMISpec) -> tuple[tuple[KVVMInterface, ...], tuple[KVVMNetwork, ...]]:
    interfaces = tuple(
        KVVMInterface(name=i.name, absent=i.state == ABSENT, binding=i.bound_by)
        for i in spec.domain.devices.interfaces
    )
    networks = tuple(
        KVVMNetwork(name=n.name, multus_network=n.multus.network_name if n.multus else None)
        for n in spec.networks
    )
    return interfaces, networks
