"""One VM's `World`, assembled from the objects the informers hold.

The machines decide from everything observed about a VM at once, so this gathers
it: the VirtualMachine, its KVVM and VMI (same name), the virt-launcher pods
(label `vm.kubevirt.io/name`), the migrations of its VMI (`spec.vmiName`), the
KubeVirt configuration and the readiness of the networks it asks for. It is a pure
function of raw API bodies: no I/O, no clock, the same input gives the same World.

A malformed VM raises `MalformedObject` (there is nothing to decide from); any other
malformed object is left out and named in `World.observation_errors`, so the
machines can tell "absent" from "unreadable" and hold still.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

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
    address_of,
    read,
)
from nicplug.adapters.sdn import Dialect
from nicplug.adapters.sdn.codec import split_identity
from nicplug.machines.world import (
    KVVM,
    VMI,
    ClusterConfig,
    KVVMNetwork,
    LauncherPod,
    Migration,
    World,
    if_name_of,
)

Body = Mapping[str, Any]

VM_NAME_LABEL = "vm.kubevirt.io/name"
FINISHED_POD_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class VMObjects:
    """The raw bodies around one VM, as cached. Collections may hold more than this
    VM's objects (a namespace's pods, every migration): they are filtered here."""

    namespace: str
    name: str
    vm: Body | None
    kvvm: Body | None = None
    vmi: Body | None = None
    pods: Iterable[Body] = ()
    migrations: Iterable[Body] = ()
    kubevirts: Iterable[Body] = ()
    networks: Iterable[Body] = ()
    cluster_networks: Iterable[Body] = ()


@dataclass(frozen=True, slots=True)
class Translation:
    """The World, plus what the World has no field for yet.

    `network_identities` maps every KubeVirt network name (ifName) seen on the KVVM,
    the VMI or the pods to the identity it stands for, where it can be told.
    """

    world: World
    network_identities: Mapping[str, str] = field(default_factory=dict)


def assemble_world(objects: VMObjects, *, dialect: Dialect) -> Translation:
    """The World of the VM `objects.namespace/objects.name`."""
    errors: list[str] = []
    namespace, name = objects.namespace, objects.name

    vm = None
    if objects.vm is not None:
        vm = records.desired_vm(read(VirtualMachineObject, objects.vm, kind="VirtualMachine"))

    vmi: VMI | None = None
    if objects.vmi is not None:
        try:
            vmi = records.vmi(read(VMIObject, objects.vmi, kind="VirtualMachineInstance"))
        except MalformedObject as e:
            errors.append(str(e))

    kvvm: KVVM | None = None
    if objects.kvvm is not None:
        try:
            parsed = read(KVVMObject, objects.kvvm, kind="KubeVirt VirtualMachine")
            kvvm, template_error = records.kvvm(
                parsed, dialect=dialect, vmi_exists=objects.vmi is not None
            )
            if template_error is not None:
                errors.append(f"KubeVirt VirtualMachine {namespace}/{name}: {template_error}")
        except MalformedObject as e:
            errors.append(str(e))

    pods = _launcher_pods(objects, dialect, errors)
    migrations = _migrations(objects, errors)
    cluster = _cluster_config(objects.kubevirts, errors)

    wanted = [n.identity for n in (vm.networks or ()) if n.type != "Main"] if vm else []
    networks_ready = _ready_networks(objects, wanted, errors)

    world = World(
        vm=vm,
        kvvm=kvvm,
        vmi=vmi,
        pods=pods,
        migrations=migrations,
        cluster=cluster,
        networks_ready=networks_ready,
        observation_errors=tuple(errors),
    )
    return Translation(world=world, network_identities=_identities(world, dialect))


def _launcher_pods(
    objects: VMObjects, dialect: Dialect, errors: list[str]
) -> tuple[LauncherPod, ...]:
    pods = []
    for body in objects.pods:
        metadata = body.get("metadata") if isinstance(body, Mapping) else None
        labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
        if not isinstance(labels, Mapping) or labels.get(VM_NAME_LABEL) != objects.name:
            continue
        if address_of(body)[0] != objects.namespace:
            continue
        try:
            pod = read(PodObject, body, kind="Pod")
        except MalformedObject as e:
            errors.append(str(e))
            continue
        if pod.metadata.deletion_timestamp or pod.status.phase in FINISHED_POD_PHASES:
            continue  # gone or going: no SDN request of it matters any more
        record = records.launcher_pod(pod, dialect=dialect)
        pods.append(record)
    return tuple(sorted(pods, key=lambda p: p.name))


def _migrations(objects: VMObjects, errors: list[str]) -> tuple[Migration, ...]:
    found = []
    for body in objects.migrations:
        spec = body.get("spec") if isinstance(body, Mapping) else None
        if not isinstance(spec, Mapping) or spec.get("vmiName") != objects.name:
            continue
        if address_of(body)[0] != objects.namespace:
            continue
        try:
            found.append(read(VMIMObject, body, kind="VirtualMachineInstanceMigration"))
        except MalformedObject as e:
            errors.append(str(e))
    found.sort(key=lambda m: (m.metadata.creation_timestamp, m.metadata.name))
    return tuple(records.migration(m) for m in found)


def _cluster_config(bodies: Iterable[Body], errors: list[str]) -> ClusterConfig:
    """The deployed KubeVirt CR's configuration (the first by namespace/name when
    several claim it); KubeVirt's defaults when there is none."""
    candidates = []
    for body in bodies:
        try:
            candidates.append(read(KubeVirtObject, body, kind="KubeVirt"))
        except MalformedObject as e:
            errors.append(str(e))
    if not candidates:
        return ClusterConfig()
    candidates.sort(
        key=lambda k: (k.status.phase != "Deployed", k.metadata.namespace, k.metadata.name)
    )
    return records.cluster_config(candidates[0])


def _ready_networks(
    objects: VMObjects, wanted: Iterable[str], errors: list[str]
) -> dict[str, bool]:
    """Readiness of each wanted identity: its Network (in the VM's namespace) or
    ClusterNetwork has `Ready=True`; missing or unreadable counts as not ready."""
    ready = dict.fromkeys(wanted, False)
    kinds = (("Network", objects.networks), ("ClusterNetwork", objects.cluster_networks))
    for kind, bodies in kinds:
        for body in bodies:
            namespace, name = address_of(body)
            identity = f"{kind}/{name}"
            if identity not in ready or (kind == "Network" and namespace != objects.namespace):
                continue
            try:
                ready[identity] = read(SDNNetworkObject, body, kind=kind).ready
            except MalformedObject as e:
                errors.append(str(e))
    return ready


def _identities(world: World, dialect: Dialect) -> dict[str, str]:
    """ifName → identity: first what the desired list and the annotations say, then
    whatever the dialect can tell from the KVVM's and VMI's networks."""
    known: dict[str, str] = {}
    if world.vm is not None:
        for spec in world.vm.networks or ():
            known[spec.if_name] = spec.identity
        for identity in world.vm.macs:  # status.networks: may outlive the spec entry
            known.setdefault(if_name_of(*split_identity(identity)), identity)
    for pod in world.pods:
        for request in pod.requested:
            known.setdefault(request.if_name, request.identity)
        for status in pod.reported:
            if status.if_name:
                known.setdefault(status.if_name, status.identity)
    if world.kvvm is not None:
        for request in world.kvvm.template_requests:
            known.setdefault(request.if_name, request.identity)
    namespace = world.vm.namespace if world.vm is not None else ""
    networks: list[KVVMNetwork] = []
    if world.kvvm is not None:
        networks.extend(world.kvvm.networks)
    if world.vmi is not None:
        networks.extend(world.vmi.networks)
    resolved = dict(known)
    for network in networks:
        found = dialect.network_identity(network=network, namespace=namespace, known=known)
        if found is not None:
            resolved.setdefault(network.name, found)
    return resolved
