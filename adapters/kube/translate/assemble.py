"""One VM's `World`, assembled from the objects the informers hold.

The machines decide from everything observed about a VM at once, so this gathers
it: the VirtualMachine, its KVVM and VMI (same name), the virt-launcher pods
(those its VMI lists in `status.activePods` or that carry its uid in the
created-by label), the migrations of its VMI (`spec.vmiName`), the
KubeVirt configuration and the readiness of the networks it asks for (in the kubevirt
flavour: whether their NetworkAttachmentDefinitions exist). It is a pure
function of raw API bodies: no I/O, no clock, the same input gives the same World.

A malformed VM raises `MalformedObject` (there is nothing to decide from); any other
malformed object is left out and named in `World.observation_errors`, so the
machines can tell "absent" from "unreadable" and hold still.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar, cast

from nicplug.adapters.kube.flavour import UPSTREAM
from nicplug.adapters.kube.resources import VM_UID_LABEL
from nicplug.adapters.kube.translate import ipam, macs, records
from nicplug.adapters.kube.translate.objects import (
    KubeVirtObject,
    KVVMObject,
    MalformedObject,
    PodObject,
    SDNNetworkObject,
    VirtualMachineObject,
    VMIMObject,
    VMIObject,
    VMMACObject,
    VMOPObject,
    address_of,
    read,
)
from nicplug.adapters.sdn import Dialect
from nicplug.adapters.sdn.codec import split_identity
from nicplug.machines.world import (
    KVVM,
    VMI,
    ClusterConfig,
    DesiredVM,
    KVVMNetwork,
    LauncherPod,
    Migration,
    VMOperation,
    World,
    if_name_of,
    if_name_of_mac,
)

_MAPPING = (dict, Mapping)
"""`isinstance` of a JSON body: dict first, an exact type check (the ABC's is slow)."""

Body = Mapping[str, Any]

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
    created_by_label: str = UPSTREAM.created_by_label  # as the cluster's Flavour names it
    namespace_object: Body | None = None  # the VM's Namespace, where watched
    vm_mac_addresses: Iterable[Body] | None = None
    """The VM's `VirtualMachineMACAddress`es where the platform names interfaces after
    their MAC (Deckhouse); None where it does not (upstream KubeVirt)."""
    vm_operations: Iterable[Body] = ()
    """nicplug's `VirtualMachineOperation`s (Deckhouse) of the VM."""
    nads: Iterable[Body] | None = None
    """The kubevirt flavour's networks: the multus NetworkAttachmentDefinitions the
    VM's template names (more are fine); None where they are not known (not watched,
    or the cluster serves no such kind: multus is not installed)."""
    ip_addresses: Iterable[Body] | None = None
    """The IPAddresses of the VM's namespace where IPAM's are watched and served
    (Deckhouse); None where they are not: no network is then requested with an address."""


def active_pod_uids(vmi: Body) -> tuple[str, ...]:
    """The pod uids a VMI's `status.activePods` names (keys: pod uid, values: node)."""
    status = vmi.get("status")
    active = status.get("activePods") if isinstance(status, _MAPPING) else None
    return tuple(k for k in active if isinstance(k, str)) if isinstance(active, _MAPPING) else ()


def _vmi_links(vmi: Body | None) -> tuple[str | None, frozenset[str]]:
    if not isinstance(vmi, _MAPPING):
        return None, frozenset()
    metadata = vmi.get("metadata")
    uid = metadata.get("uid") if isinstance(metadata, _MAPPING) else None
    return (uid if isinstance(uid, str) else None), frozenset(active_pod_uids(vmi))


T = TypeVar("T")


class ReadMemo:
    """What bodies translated to, remembered per object and served again while the
    object is the same.

    Reading an object (pydantic, SDN annotations) is most of the cost of assembling a
    world, and a VM observed again usually changed in one object only. An object is
    the same while its uid and resourceVersion are (the API server gives every change
    a new resourceVersion), so a body decoded anew from a cache is recognised; a body
    without them (a hand-made one) is the same only while it is the very same dict.
    One memo per dialect; at most one entry per object and translation, dropped by
    `forget` when the object is deleted.
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], dict[str, tuple[object, object]]] = {}

    def get(self, what: str, body: Body, make: Callable[[], T]) -> T:
        entries = self._entries.setdefault(address_of(body), {})
        hit = entries.get(what)
        seen = _version(body)
        if hit is not None and (hit[0] is seen or hit[0] == seen):
            return cast(T, hit[1])
        value = make()
        entries[what] = (seen, value)
        return value

    def derive(self, what: str, body: Body, inputs: tuple[object, ...], make: Callable[[], T]) -> T:
        """A value computed from `inputs` only, kept with the object `body` is: served
        again while the inputs are equal (a tuple compares each by identity first, so
        records the memo itself served compare at once)."""
        entries = self._entries.setdefault(address_of(body), {})
        hit = entries.get(what)
        if hit is not None and hit[0] == inputs:
            return cast(T, hit[1])
        value = make()
        entries[what] = (inputs, value)
        return value

    def forget(self, body: Body) -> None:
        self._entries.pop(address_of(body), None)

    def drop(self, addresses: Iterable[tuple[str, str]]) -> None:
        """Forget what the objects at `addresses` (namespace, name) read as: they are
        read again when next asked for."""
        for address in addresses:
            self._entries.pop(address, None)


def _version(body: Body) -> object:
    """What tells one state of an object from another: its uid and resourceVersion,
    or, lacking either, the body itself (compared by identity: a dict compares equal
    to another with the same content, but it is not the same object for that)."""
    metadata = body.get("metadata") if isinstance(body, _MAPPING) else None
    if isinstance(metadata, _MAPPING):
        uid, version = metadata.get("uid"), metadata.get("resourceVersion")
        if type(uid) is str and type(version) is str and uid and version:
            return (uid, version)
    return _Identity(body)


@dataclass(frozen=True, slots=True, eq=False)
class _Identity:
    """A body compared by identity only."""

    body: object

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Identity) and other.body is self.body

    def __hash__(self) -> int:
        return id(self.body)


def _memoized(memo: ReadMemo | None, what: str, body: Body, make: Callable[[], T]) -> T:
    return make() if memo is None else memo.get(what, body, make)


@dataclass(frozen=True, slots=True)
class Translation:
    """The World, plus what the World has no field for yet.

    `network_identities` maps every KubeVirt network name (ifName) seen on the KVVM,
    the VMI or the pods to the identity it stands for, where it can be told; it is
    worked out when asked (observing a VM does not need it).
    """

    world: World
    dialect: Dialect

    @property
    def network_identities(self) -> Mapping[str, str]:
        return _identities(self.world, self.dialect)


def assemble_world(
    objects: VMObjects, *, dialect: Dialect, memo: ReadMemo | None = None
) -> Translation:
    """The World of the VM `objects.namespace/objects.name`; `memo` (optional) saves
    reading again the objects that did not change."""
    errors: list[str] = []
    namespace, name = objects.namespace, objects.name

    vm = None
    by_mac: tuple[DesiredVM, macs.VMNetworks] | None = None
    in_template = dialect.kubevirt_owns_requests  # the kubevirt flavour
    if in_template:
        if (template_body := objects.kvvm) is not None:
            vm = _memoized(memo, "desired", template_body, lambda: records.desired_in_template(
                read(KVVMObject, template_body, kind="KubeVirt VirtualMachine"),
                cluster_nad_namespace=dialect.cluster_nad_namespace))
    elif (vm_body := objects.vm) is not None and objects.vm_mac_addresses is None:
        vm = _memoized(memo, "vm", vm_body, lambda: records.desired_vm(
            read(VirtualMachineObject, vm_body, kind="VirtualMachine")))
    elif vm_body is not None:  # named by MAC: once the pods are read (below)
        by_mac = _memoized(memo, "vm-unnamed", vm_body, partial(_vm_to_name, vm_body))

    vmi: VMI | None = None
    if (vmi_body := objects.vmi) is not None:
        try:
            vmi = _memoized(memo, "vmi", vmi_body, lambda: records.vmi(
                read(VMIObject, vmi_body, kind="VirtualMachineInstance")))
        except MalformedObject as e:
            errors.append(str(e))

    kvvm: KVVM | None = None
    if (kvvm_body := objects.kvvm) is not None:
        vmi_exists = objects.vmi is not None
        try:
            kvvm, template_error = _memoized(
                memo, f"kvvm:{vmi_exists}", kvvm_body, lambda: records.kvvm(
                    read(KVVMObject, kvvm_body, kind="KubeVirt VirtualMachine"),
                    dialect=dialect, vmi_exists=vmi_exists,
                ))
            if template_error is not None:
                errors.append(f"KubeVirt VirtualMachine {namespace}/{name}: {template_error}")
        except MalformedObject as e:
            errors.append(str(e))

    named = _pod_interfaces(kvvm, vmi, dialect) if in_template else None
    pods = _launcher_pods(objects, dialect, errors, memo, named)
    if by_mac is not None and vm_body is not None:
        vmmacs = tuple(_vm_mac_addresses(objects, by_mac[0].uid, errors, memo))
        named_by_mac = partial(_desired_named_by_mac, *by_mac, vmmacs)
        inputs = (by_mac, vmmacs)
        vm = named_by_mac() if memo is None else memo.derive("vm", vm_body, inputs, named_by_mac)
    if vm is not None and objects.ip_addresses is not None:  # IPAM: `ipam.py`
        vm = ipam.with_addresses(vm, ipam.pooled_networks(
            objects.networks, objects.cluster_networks), objects.ip_addresses)
    migrations = _migrations(objects, errors, memo)
    every_operation = _vm_operations(objects, errors, memo)
    operations = tuple(o for o in every_operation if o.vmi_uid)
    cluster = _cluster_config(objects.kubevirts, errors, memo)

    wanted = [n.identity for n in (vm.networks or ()) if n.type != "Main"] if vm else []
    if in_template:  # the networks are NADs: they exist or not, none is "not ready"
        networks_ready: dict[str, bool] = {}
        missing = _missing_nads(objects, wanted, dialect.cluster_nad_namespace)
    else:
        networks_ready, missing = _ready_networks(objects, wanted, errors, memo)

    world = World(
        vm=vm,
        kvvm=kvvm,
        vmi=vmi,
        pods=pods,
        migrations=migrations,
        cluster=cluster,
        networks_ready=networks_ready,
        networks_missing=missing,
        observation_errors=tuple(errors),
        namespace_labels=_labels_of(objects.namespace_object),
        vm_operations=operations,
        user_vm_operations=tuple(o for o in every_operation if not o.vmi_uid),
    )
    return Translation(world=world, dialect=dialect)


def _vm_to_name(body: Body) -> tuple[DesiredVM, macs.VMNetworks]:
    """A Deckhouse VM's record before its networks are named, and what naming them by
    MAC reads of it: records, not the pydantic model (~3 KB per VM in the memo)."""
    model = read(VirtualMachineObject, body, kind="VirtualMachine")
    return records.desired_vm(model), macs.vm_networks(model)


def _desired_named_by_mac(
    vm: DesiredVM,
    networks: macs.VMNetworks,
    vmmacs: Sequence[macs.MACAddress],
) -> DesiredVM:
    """The Deckhouse VM's desired networks, each named by the MAC it holds (`macs.py`):
    a function of these inputs only, so the memo keeps it while they stay equal."""
    return records.named_by_mac(vm, macs.macs_of(networks, vmmacs))


def _pod_interfaces(kvvm: KVVM | None, vmi: VMI | None, dialect: Dialect) -> dict[str, str]:
    """Pod-side interface name → KubeVirt network name, for every multus network the
    template or the VMI's spec names: where users name the interfaces, this is how a
    pod's entries are told to be theirs."""
    named: dict[str, str] = {}
    for record in (kvvm, vmi):
        for network in record.networks if record is not None else ():
            if network.multus_network is not None:
                named[dialect.pod_interface(if_name=network.name)] = network.name
    return named


def _labels_of(body: Body | None) -> Mapping[str, str]:
    """A Namespace's labels; whatever is not a string label is not a label."""
    metadata = body.get("metadata") if isinstance(body, _MAPPING) else None
    labels = metadata.get("labels") if isinstance(metadata, _MAPPING) else None
    if not isinstance(labels, _MAPPING):
        return {}
    return {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)}


def _launcher_pods(
    objects: VMObjects,
    dialect: Dialect,
    errors: list[str],
    memo: ReadMemo | None,
    named: Mapping[str, str] | None = None,
) -> tuple[LauncherPod, ...]:
    """The VMI's launcher pods: listed in its `activePods` or labelled with its uid;
    none without a VMI (a pod outliving its VMI runs nothing nicplug can change)."""
    pods = []
    vmi_uid, active = _vmi_links(objects.vmi)
    if vmi_uid is None:
        return ()
    for body in objects.pods:
        metadata = body.get("metadata") if isinstance(body, _MAPPING) else None
        labels = metadata.get("labels") if isinstance(metadata, _MAPPING) else None
        creator = labels.get(objects.created_by_label) if isinstance(labels, _MAPPING) else None
        uid = metadata.get("uid") if isinstance(metadata, _MAPPING) else None
        if creator != vmi_uid and uid not in active:
            continue
        if address_of(body)[0] != objects.namespace:
            continue
        what = "launcher" if not named else "launcher:" + ",".join(sorted(named.values()))
        try:
            record = _memoized(memo, what, body, partial(_launcher_pod, body, dialect, named))
        except MalformedObject as e:
            errors.append(str(e))
            continue
        if record is not None:
            pods.append(record)
    return tuple(sorted(pods, key=lambda p: p.name))


def _launcher_pod(
    body: Body, dialect: Dialect, named: Mapping[str, str] | None
) -> LauncherPod | None:
    """The pod's record, or None when it is gone or going (no SDN request of it matters
    any more). The memo keeps this, not the pydantic model: ~2 KB less per VM."""
    pod = read(PodObject, body, kind="Pod")
    if pod.metadata.deletion_timestamp or pod.status.phase in FINISHED_POD_PHASES:
        return None
    return records.launcher_pod(pod, dialect=dialect, interfaces=named)


def _vm_mac_addresses(
    objects: VMObjects, vm_uid: str, errors: list[str], memo: ReadMemo | None
) -> list[macs.MACAddress]:
    """The VMMACs Deckhouse made for the VM: labelled with its uid, in its namespace."""
    found = []
    for body in objects.vm_mac_addresses or ():
        metadata = body.get("metadata") if isinstance(body, _MAPPING) else None
        labels = metadata.get("labels") if isinstance(metadata, _MAPPING) else None
        if not isinstance(labels, _MAPPING) or labels.get(VM_UID_LABEL) != vm_uid:
            continue
        if address_of(body)[0] != objects.namespace:
            continue
        try:
            found.append(_memoized(memo, "vmmac", body, partial(_read_mac, body)))
        except MalformedObject as e:
            errors.append(str(e))
    return found


def _read_mac(body: Body) -> macs.MACAddress:
    return macs.mac_address(read(VMMACObject, body, kind="VirtualMachineMACAddress"))


def _vm_operations(
    objects: VMObjects, errors: list[str], memo: ReadMemo | None
) -> tuple[VMOperation, ...]:
    """The restart steps nicplug asked of Deckhouse for this VM, and the operations
    others (the user) asked (no VMI uid), by name."""
    found = []
    for body in objects.vm_operations:
        spec = body.get("spec") if isinstance(body, _MAPPING) else None
        if not isinstance(spec, _MAPPING) or spec.get("virtualMachineName") != objects.name:
            continue
        if address_of(body)[0] != objects.namespace:
            continue
        try:
            record = _memoized(memo, "vmop", body, partial(_read_operation, body))
        except MalformedObject as e:
            errors.append(str(e))
            continue
        if record is not None:
            found.append(record)
    return tuple(sorted(found, key=lambda o: o.name))


def _read_operation(body: Body) -> VMOperation | None:
    return records.vm_operation(read(VMOPObject, body, kind="VirtualMachineOperation"))


def _migrations(
    objects: VMObjects, errors: list[str], memo: ReadMemo | None
) -> tuple[Migration, ...]:
    found = []
    for body in objects.migrations:
        spec = body.get("spec") if isinstance(body, _MAPPING) else None
        if not isinstance(spec, _MAPPING) or spec.get("vmiName") != objects.name:
            continue
        if address_of(body)[0] != objects.namespace:
            continue
        try:
            found.append(_memoized(memo, "vmim", body, partial(
                read, VMIMObject, body, kind="VirtualMachineInstanceMigration")))
        except MalformedObject as e:
            errors.append(str(e))
    found.sort(key=lambda m: (m.metadata.creation_timestamp, m.metadata.name))
    return tuple(records.migration(m) for m in found)


def _cluster_config(
    bodies: Iterable[Body], errors: list[str], memo: ReadMemo | None
) -> ClusterConfig:
    """The deployed KubeVirt CR's configuration (the first by namespace/name when
    several claim it); KubeVirt's defaults when there is none."""
    candidates = []
    for body in bodies:
        try:
            candidates.append(_memoized(
                memo, "kubevirt", body, partial(read, KubeVirtObject, body, kind="KubeVirt")))
        except MalformedObject as e:
            errors.append(str(e))
    if not candidates:
        return ClusterConfig()
    candidates.sort(
        key=lambda k: (k.status.phase != "Deployed", k.metadata.namespace, k.metadata.name)
    )
    return records.cluster_config(candidates[0])


def _ready_networks(
    objects: VMObjects, wanted: Iterable[str], errors: list[str], memo: ReadMemo | None
) -> tuple[dict[str, bool], frozenset[str]]:
    """Readiness of each wanted identity whose Network (in the VM's namespace) or
    ClusterNetwork is read (`Ready=True` or not), and the wanted identities the cluster
    has no object for. An unreadable one is in neither: nothing is known of it."""
    wanted = set(wanted)
    ready: dict[str, bool] = {}
    found: set[str] = set()
    kinds = (("Network", objects.networks), ("ClusterNetwork", objects.cluster_networks))
    for kind, bodies in kinds:
        for body in bodies:
            namespace, name = address_of(body)
            identity = f"{kind}/{name}"
            if identity not in wanted or (kind == "Network" and namespace != objects.namespace):
                continue
            found.add(identity)
            try:
                ready[identity] = _memoized(memo, kind, body, partial(_read_ready, body, kind))
            except MalformedObject as e:
                errors.append(str(e))
    return ready, frozenset(w for w in wanted if w not in found)


def _missing_nads(
    objects: VMObjects, wanted: Iterable[str], cluster_nad_namespace: str
) -> frozenset[str]:
    """The wanted identities whose NAD the cluster lacks: a `Network/x`'s is `x` in the
    VM's namespace, a `ClusterNetwork/x`'s `x` in the cluster network NAD namespace
    (`world.nad_identity`, read backwards). Nothing is missing while NADs are unknown."""
    if objects.nads is None:
        return frozenset()
    present = {address_of(body) for body in objects.nads}
    where = {"Network": objects.namespace, "ClusterNetwork": cluster_nad_namespace}
    return frozenset(w for w in wanted
                     if (where.get(w.partition("/")[0], ""), w.partition("/")[2]) not in present)


def _read_ready(body: Body, kind: str) -> bool:
    return read(SDNNetworkObject, body, kind=kind).ready


def _identities(world: World, dialect: Dialect) -> dict[str, str]:
    """ifName → identity: first what the desired list and the annotations say, then
    whatever the dialect can tell from the KVVM's and VMI's networks."""
    known: dict[str, str] = {}
    if world.vm is not None:
        for spec in world.vm.networks or ():
            known[spec.if_name] = spec.identity
        by_mac = any(spec.named_by_mac for spec in world.vm.networks or ())
        for identity, mac in world.vm.macs.items():  # status.networks: may outlive the spec
            type_, name = split_identity(identity)
            named = if_name_of_mac(type_, mac) if by_mac else if_name_of(type_, name)
            known.setdefault(named, identity)
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
