"""Which VM each watched object concerns, and the raw objects of one VM.

The informers keep every object of a kind; this index keeps, for each VM
(`namespace/name`), the keys of its launcher pods and migrations (kinds named as the
cluster's KubeVirt `Flavour` names them), so assembling one
VM's world never scans a namespace, and for each Network and ClusterNetwork the VMs
whose `spec.networks` ask for it, so a Network's change touches only those VMs and a
world holds only the networks its VM asks for; in the kubevirt flavour the same for
each NetworkAttachmentDefinition a KubeVirt VM's template names. A KubeVirt CR's
change touches every VM, but only when something nicplug reads of it changed (its
status churns). It holds each object as its JSON encoding (`held_objects.py`), decoded
when a VM's objects are asked for, and never decides anything: it only answers "which
VMs does this change touch" and "what are the objects of this VM".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from sys import intern
from typing import Any

from nicplug.adapters.core.held_objects import Change, HeldObjects
from nicplug.adapters.kube import resources as kinds
from nicplug.adapters.kube.encoded import decode
from nicplug.adapters.kube.flavour import DECKHOUSE, UPSTREAM, Flavour
from nicplug.adapters.kube.resources import VM_UID_LABEL, KindRef, object_key
from nicplug.adapters.kube.translate import objects as read
from nicplug.adapters.kube.translate.assemble import VMObjects, active_pod_uids
from nicplug.adapters.kube.translate.projection import Shape, compiled, merged, shape_of

_MAPPING = (dict, Mapping)
"""`isinstance` of a JSON body: dict first, an exact type check (the ABC's is slow)."""

Body = dict[str, Any]

# kinds are told apart by name: a string compare, where a KindRef compares every field
_VMS = kinds.VIRTUAL_MACHINES.name
_NETWORKS, _CLUSTER_NETWORKS = kinds.NETWORKS.name, kinds.CLUSTER_NETWORKS.name
_NAMESPACES = kinds.NAMESPACES.name
_NADS = kinds.NADS.name
_ASKED = frozenset({_NETWORKS, _CLUSTER_NETWORKS, _NADS})
_IP_ADDRESSES = kinds.IP_ADDRESSES.name

NetworkRef = tuple[str, str]
"""(kind name, object key) of a Network (`namespace/name`) or ClusterNetwork (`name`)."""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, _MAPPING) else {}


class WorldIndex:
    """Raw objects by kind, plus VM → pods / migrations indexes.

    A launcher pod belongs to the VM whose VMI lists the pod's uid in
    `status.activePods` or whose uid the pod's created-by label holds (both as KubeVirt
    links them; the VM-name label is a lossy hostname). Either side may be seen first,
    so pods are indexed by the VMI uid they name and by their own uid, and resolved to a
    VM when its objects are asked for.
    """

    def __init__(self, flavour: Flavour) -> None:
        self.flavour = flavour
        self._pods, self._vmims, self._vmis = (
            flavour.launcher_pods.name, flavour.vmims.name, flavour.vmis.name)
        self._kvvms, self._kubevirts = flavour.kvvms.name, flavour.kubevirts.name
        self._named_after_vm = frozenset({_VMS, self._kvvms, self._vmis})
        self._created_by = flavour.created_by_label
        self._objects: dict[str, HeldObjects] = defaultdict(HeldObjects)  # kind → key → object
        self._migrations_of: dict[str, set[str]] = defaultdict(set)
        vmops = flavour.vm_operations
        self._vmops = vmops.name if vmops is not None else None
        self._operations_of: dict[str, set[str]] = defaultdict(set)  # VM key → VMOp keys
        self._owner: dict[tuple[str, str], str] = {}
        self._asks: dict[str, frozenset[NetworkRef]] = {}  # VM → the networks it asks for
        self._nad_asks: dict[str, frozenset[NetworkRef]] = {}  # KubeVirt VM → its NADs
        self._nads_known = False  # listed, or one seen: else multus's NADs are unknown
        self._ipam_known = False  # IPAddresses listed, or one seen: else no IPAM is known
        self._ip_addresses_in: dict[str, set[str]] = defaultdict(set)  # namespace → keys
        self._askers: dict[NetworkRef, set[str]] = defaultdict(set)  # network → VMs
        self._pods_by_creator: dict[str, set[str]] = defaultdict(set)  # VMI uid → pod keys
        self._pod_by_uid: dict[str, str] = {}  # pod uid → pod key
        self._pod_links: dict[str, tuple[str, str]] = {}  # pod key → (creator, own uid)
        self._vm_of_vmi_uid: dict[str, str] = {}  # VMI uid → VM key
        self._vm_of_pod_uid: dict[str, str] = {}  # pod uid (activePods) → VM key
        self._vmi_links: dict[str, tuple[str, tuple[str, ...]]] = {}  # VM key → the above
        macs = flavour.vm_mac_addresses
        self._vmmacs = macs.name if macs is not None else None
        self._vm_of_uid: dict[str, str] = {}  # VM uid → VM key
        self._uid_of_vm: dict[str, str] = {}  # VM key → VM uid
        self._vmmacs_of: dict[str, set[str]] = defaultdict(set)  # VM uid → VMMAC keys
        self._vmmac_owner: dict[str, str] = {}  # VMMAC key → the VM uid it is labelled with
        self._moved: set[str] = set()  # VMs whose objects moved in resourceVersion alone

    def apply(self, kind: KindRef, event_type: str, obj: Body) -> set[str]:
        """Record one change; return the VM keys (`ns/name`) whose world it changes in
        what a decision reads.

        A Network or ClusterNetwork concerns the VMs that ask for it; a KubeVirt CR
        every VM, when what nicplug reads of it changed. An object that arrives the
        same as it is held (its kept fields byte for byte) changes no world: it touches
        none; one whose resourceVersion alone moved touches none either, and its VMs
        are told by `moved` (what waits for a newer world may go on).
        """
        try:
            key = object_key(obj)
        except ValueError:
            return set()
        table = self._objects[kind.name]
        if event_type == "DELETED":
            return self._touched(kind, key, event_type, obj, table.pop(key))
        change, before = table.put(key, obj)
        if change is Change.NONE:
            return set()  # what is kept of it did not change: no VM's world did
        if change is Change.READ:
            return self._touched(kind, key, event_type, obj, before)
        # its links are as they were: only which VMs it concerns is asked
        if kind.name == self._pods:
            links = self._pod_links.get(key)
            if links is not None:  # as `_vms_of_pod`, without a set per event
                for vm in (self._vm_of_vmi_uid.get(links[0]), self._vm_of_pod_uid.get(links[1])):
                    if vm is not None:
                        self._moved.add(vm)
        elif kind.name == self._vmis:
            vm_key = self._vm_of(kind, str(_meta(obj).get("namespace") or ""), obj)
            if vm_key is not None:
                self._moved.add(vm_key)
        else:
            self._moved.update(self._touched(kind, key, event_type, obj, before))
        return set()

    @property
    def any_moved(self) -> bool:
        return bool(self._moved)

    def moved(self) -> set[str]:
        """The VMs an object of which changed in its resourceVersion alone since last
        asked (their worlds are the same for decisions); forgotten once asked."""
        moved, self._moved = self._moved, set()
        return moved

    def _touched(
        self, kind: KindRef, key: str, event_type: str, obj: Body, before: bytes | None
    ) -> set[str]:
        """Keep the links of the changed object current; the VMs it concerns. `before`:
        the object held before, encoded (its resourceVersion may be older)."""
        if kind.name == self._pods:
            return self._apply_pod(key, event_type, obj)
        if kind.name == _NAMESPACES:  # its label may opt its VMs in to migrations
            return {vm for vm in self.vm_keys() if vm.partition("/")[0] == key}
        if kind.name == self._vmmacs:
            return self._apply_vmmac(key, event_type, obj)
        if kind.name == _IP_ADDRESSES:
            return self._apply_ip_address(key, event_type)
        namespace = str(_meta(obj).get("namespace") or "")
        vm_key = self._vm_of(kind, namespace, obj)
        if kind.name == self._vmis and vm_key is not None:
            self._link_vmi(vm_key, event_type, obj)
        touched: set[str] = set()
        members = (self._migrations_of if kind.name == self._vmims
                   else self._operations_of if kind.name == self._vmops else None)
        if members is not None:
            previous = self._owner.get((kind.name, key))
            if previous is not None and previous != vm_key:
                members.get(previous, set()).discard(key)
                touched.add(previous)
        if vm_key is not None:
            if members is not None:
                if event_type == "DELETED":
                    members.get(vm_key, set()).discard(key)
                    self._owner.pop((kind.name, key), None)
                else:
                    members[vm_key].add(key)
                    self._owner[(kind.name, key)] = vm_key
            touched.add(vm_key)
        if kind.name == _VMS and vm_key is not None:
            self._ask(vm_key, None if event_type == "DELETED" else obj)
            self._link_vm_uid(vm_key, event_type, obj)
        elif kind.name == self._kvvms and vm_key is not None:
            asks = frozenset(_asked_nads(vm_key, obj)) if event_type != "DELETED" else frozenset()
            self._index_asks(vm_key, asks, self._nad_asks)
        elif kind.name in _ASKED:
            if kind.name == _NADS and not self._nads_known:
                self._nads_known = True
                touched.update(self._nad_asks)
            touched.update(self._askers.get((kind.name, key), ()))
        elif kind.name == self._kubevirts and (
            before is None or event_type == "DELETED"
            or kubevirt_reads(decode(before)) != kubevirt_reads(obj)
        ):
            touched.update(self.vm_keys())
        return touched

    def _link_vmi(self, vm_key: str, event_type: str, obj: Body) -> None:
        old_uid, old_pods = self._vmi_links.pop(vm_key, ("", ()))
        self._vm_of_vmi_uid.pop(old_uid, None)
        for pod_uid in old_pods:
            self._vm_of_pod_uid.pop(pod_uid, None)
        uid = _meta(obj).get("uid")
        if event_type == "DELETED" or not isinstance(uid, str):
            return
        pods = active_pod_uids(obj)
        self._vmi_links[vm_key] = (uid, pods)
        self._vm_of_vmi_uid[uid] = vm_key
        for pod_uid in pods:
            self._vm_of_pod_uid[pod_uid] = vm_key

    def _link_vm_uid(self, vm_key: str, event_type: str, obj: Body) -> None:
        old = self._uid_of_vm.pop(vm_key, None)
        if old is not None:
            self._vm_of_uid.pop(old, None)
        uid = _meta(obj).get("uid")
        if event_type != "DELETED" and isinstance(uid, str) and uid:
            self._uid_of_vm[vm_key] = uid
            self._vm_of_uid[uid] = vm_key

    def _apply_vmmac(self, key: str, event_type: str, obj: Body) -> set[str]:
        """A VMMAC concerns the VM whose uid its label holds (Deckhouse's link)."""
        touched: set[str] = set()
        old = self._vmmac_owner.pop(key, None)
        if old is not None:
            self._vmmacs_of.get(old, set()).discard(key)
            touched.update(vm for vm in (self._vm_of_uid.get(old),) if vm is not None)
        if event_type != "DELETED":
            labels = _meta(obj).get("labels")
            uid = labels.get(VM_UID_LABEL) if isinstance(labels, _MAPPING) else None
            if isinstance(uid, str) and uid:
                self._vmmac_owner[key] = uid
                self._vmmacs_of[uid].add(key)
                touched.update(vm for vm in (self._vm_of_uid.get(uid),) if vm is not None)
        return touched

    def _apply_ip_address(self, key: str, event_type: str) -> set[str]:
        """An IPAddress (IPAM) concerns any VM of its namespace: a VM's automatic one is
        found by its labels, a static one by the name the VM's spec gives."""
        namespace = key.partition("/")[0]
        if event_type == "DELETED":
            self._ip_addresses_in.get(namespace, set()).discard(key)
        else:
            self._ip_addresses_in[namespace].add(key)
        if not self._ipam_known:
            self._ipam_known = True
            return set(self.vm_keys())
        return {vm for vm in self.vm_keys() if vm.partition("/")[0] == namespace}

    def _apply_pod(self, key: str, event_type: str, obj: Body) -> set[str]:
        touched: set[str] = set()
        old = self._pod_links.pop(key, None)
        if old is not None:
            self._pods_by_creator.get(old[0], set()).discard(key)
            self._pod_by_uid.pop(old[1], None)
            touched.update(self._vms_of_pod(*old))
        if event_type != "DELETED":
            meta = _meta(obj)
            labels = meta.get("labels")
            creator = labels.get(self._created_by) if isinstance(labels, _MAPPING) else None
            uid = meta.get("uid")
            links = (creator if isinstance(creator, str) else "",
                     uid if isinstance(uid, str) else "")
            self._pod_links[key] = links
            if links[0]:
                self._pods_by_creator[links[0]].add(key)
            if links[1]:
                self._pod_by_uid[links[1]] = key
            touched.update(self._vms_of_pod(*links))
        return touched

    def _vms_of_pod(self, creator: str, uid: str) -> set[str]:
        found = {self._vm_of_vmi_uid.get(creator), self._vm_of_pod_uid.get(uid)}
        return {vm for vm in found if vm is not None}

    def _pod_keys_of(self, vmi: Body | None) -> list[str]:
        if vmi is None:
            return []
        uid = _meta(vmi).get("uid")
        keys = set(self._pods_by_creator.get(uid, ())) if isinstance(uid, str) else set()
        keys.update(k for u in active_pod_uids(vmi) if (k := self._pod_by_uid.get(u)))
        return sorted(keys)

    def presence(self, kind: KindRef, present: bool) -> set[str]:
        """The server serves `kind` (or stopped serving it); return the VMs whose world
        that changes: for multus's NADs, every VM whose template names one; for IPAM's
        IPAddresses, every VM (a cluster without them has no IPAM)."""
        if kind.name == _IP_ADDRESSES and present != self._ipam_known:
            self._ipam_known = present
            return set(self.vm_keys())
        if kind.name != _NADS or present == self._nads_known:
            return set()
        self._nads_known = present
        return set(self._nad_asks)

    def _ask(self, vm_key: str, vm: Body | None) -> None:
        """Keep the network → VMs index current for one VM's (new) spec."""
        asks = frozenset(_asked_networks(vm_key, vm)) if vm is not None else frozenset()
        self._index_asks(vm_key, asks, self._asks)

    def _index_asks(
        self, vm_key: str, asks: frozenset[NetworkRef], table: dict[str, frozenset[NetworkRef]]
    ) -> None:
        old = table.get(vm_key, frozenset())
        if asks == old:
            return
        for ref in old - asks:
            askers = self._askers.get(ref)
            if askers is not None:
                askers.discard(vm_key)
                if not askers:
                    del self._askers[ref]
        for ref in asks - old:
            self._askers[ref].add(vm_key)
        if asks:
            table[vm_key] = asks
        else:
            table.pop(vm_key, None)

    def _vm_of(self, kind: KindRef, namespace: str, obj: Mapping[str, Any]) -> str | None:
        name: object = None
        if kind.name in self._named_after_vm:
            name = _meta(obj).get("name")
        elif kind.name == self._vmims:
            spec = obj.get("spec")
            name = spec.get("vmiName") if isinstance(spec, _MAPPING) else None
        elif kind.name == self._vmops:
            spec = obj.get("spec")
            name = spec.get("virtualMachineName") if isinstance(spec, _MAPPING) else None
        if isinstance(name, str) and name and namespace:
            # interned: the one string the object keys, the links and the runtime share
            return intern(f"{namespace}/{name}")
        return None

    def vm_keys(self) -> Iterable[str]:
        """Every VM known by any of its objects."""
        keys = set(self._objects[_VMS])
        keys.update(self._objects[self._kvvms])
        return keys

    def held(self, kind: KindRef) -> dict[str, bytes]:
        """Every object of `kind` the index holds (key → encoded): what a new informer
        of the kind starts from, so that its first list tells which of them went while
        no informer watched (`Informer(known=...)`)."""
        held = self._objects.get(kind.name)
        return held.encoded() if held is not None else {}

    def addresses_of(self, vm_key: str) -> list[tuple[str, str]]:
        """(namespace, name) of every object of the VM alone, as linked now: the VM (its
        KVVM and VMI are named alike), its launcher pods, migrations, VM operations and
        VMMACs; not the networks or the KubeVirt CR, which other VMs read too."""
        keys = {vm_key}
        uid, active = self._vmi_links.get(vm_key, ("", ()))
        keys.update(self._pods_by_creator.get(uid, ()))
        keys.update(k for u in active if (k := self._pod_by_uid.get(u)))
        keys.update(self._migrations_of.get(vm_key, ()))
        keys.update(self._operations_of.get(vm_key, ()))
        vm_uid = self._uid_of_vm.get(vm_key)
        if vm_uid is not None:
            keys.update(self._vmmacs_of.get(vm_uid, ()))
        return [(namespace, name) for namespace, _, name in (k.partition("/") for k in keys)]

    def get(self, kind: KindRef, key: str) -> Body | None:
        """The object `key` of `kind`, as last seen."""
        return self._objects[kind.name].body(key)

    def vm_body(self, vm_key: str) -> Body | None:
        """The VirtualMachine `vm_key`, as last seen."""
        return self._objects[_VMS].body(vm_key)

    def objects_of(self, vm_key: str) -> VMObjects:
        """The VM's objects, decoded anew on each call (nothing holds them after)."""
        namespace, _, name = vm_key.partition("/")
        table = self._objects
        vmi = table[self._vmis].body(vm_key)
        return VMObjects(
            namespace=namespace,
            name=name,
            vm=table[_VMS].body(vm_key),
            kvvm=table[self._kvvms].body(vm_key),
            vmi=vmi,
            pods=self._decoded_all(self._pods, self._pod_keys_of(vmi)),
            migrations=self._decoded_all(
                self._vmims, sorted(self._migrations_of.get(vm_key, ()))),
            kubevirts=self._decoded_all(self._kubevirts, table[self._kubevirts]),
            networks=self._networks_asked(vm_key, _NETWORKS),
            cluster_networks=self._networks_asked(vm_key, _CLUSTER_NETWORKS),
            created_by_label=self._created_by,
            namespace_object=table[_NAMESPACES].body(namespace),
            vm_mac_addresses=self._vm_mac_addresses_of(vm_key),
            vm_operations=self._vm_operations_of(vm_key),
            nads=self._decoded_all(_NADS, sorted(k for _, k in self._nad_asks.get(vm_key, ())))
            if self._nads_known else None,
            ip_addresses=self._decoded_all(
                _IP_ADDRESSES, sorted(self._ip_addresses_in.get(namespace, ())))
            if self._ipam_known else None,
        )

    def _decoded_all(self, kind_name: str, keys: Iterable[str]) -> list[Body]:
        """The objects of `keys` still held, in that order, decoded."""
        return self._objects[kind_name].bodies(keys)

    def _vm_operations_of(self, vm_key: str) -> list[Body]:
        if self._vmops is None:
            return []
        return self._decoded_all(self._vmops, sorted(self._operations_of.get(vm_key, ())))

    def _vm_mac_addresses_of(self, vm_key: str) -> list[Body] | None:
        if self._vmmacs is None:
            return None
        uid = self._uid_of_vm.get(vm_key)
        keys = sorted(self._vmmacs_of.get(uid, ())) if uid is not None else []
        return self._decoded_all(self._vmmacs, keys)

    def _networks_asked(self, vm_key: str, kind_name: str) -> list[Body]:
        return self._decoded_all(
            kind_name, [key for kind, key in self._asks.get(vm_key, ()) if kind == kind_name])

    def version_of(self, kind: KindRef, key: str) -> str:
        obj = self._objects[kind.name].body(key)
        return str(_meta(obj).get("resourceVersion") or "") if obj else ""


def _asked_networks(vm_key: str, vm: Body) -> list[NetworkRef]:
    """The Networks and ClusterNetworks a raw VM's `spec.networks` name; whatever is
    unreadable names nothing (the translation reports it)."""
    spec = vm.get("spec")
    networks = spec.get("networks") if isinstance(spec, _MAPPING) else None
    if not isinstance(networks, list):
        return []
    namespace = vm_key.partition("/")[0]
    found: list[NetworkRef] = []
    for entry in networks:
        if not isinstance(entry, _MAPPING):
            continue
        type_, name = entry.get("type"), entry.get("name")
        if not isinstance(name, str) or not name:
            continue
        if type_ == "Network":
            found.append((_NETWORKS, f"{namespace}/{name}"))
        elif type_ == "ClusterNetwork":
            found.append((_CLUSTER_NETWORKS, name))
    return found


def _asked_nads(vm_key: str, kvvm: Body) -> list[NetworkRef]:
    """The NADs a raw KubeVirt VM's template names (`multus.networkName`: `name` in the
    VM's namespace or `namespace/name`, as KubeVirt's `NetAttachDefNamespacedName`)."""
    spec = kvvm.get("spec")
    template = spec.get("template") if isinstance(spec, _MAPPING) else None
    inner = template.get("spec") if isinstance(template, _MAPPING) else None
    networks = inner.get("networks") if isinstance(inner, _MAPPING) else None
    if not isinstance(networks, list):
        return []
    found: list[NetworkRef] = []
    for entry in networks:
        multus = entry.get("multus") if isinstance(entry, _MAPPING) else None
        name = multus.get("networkName") if isinstance(multus, _MAPPING) else None
        if isinstance(name, str) and name:
            found.append((_NADS, name if "/" in name else f"{vm_key.partition('/')[0]}/{name}"))
    return found


def kubevirt_reads(body: Body) -> object:
    """What nicplug reads of a KubeVirt CR (its resourceVersion aside): equal before and
    after a change, the change concerns no VM."""
    meta, spec, status = (body.get(part) for part in ("metadata", "spec", "status"))
    meta = dict(meta) if isinstance(meta, _MAPPING) else meta
    if isinstance(meta, dict):
        meta.pop("resourceVersion", None)
        meta.pop("managedFields", None)
    phase = status.get("phase") if isinstance(status, _MAPPING) else status
    return (meta, spec, phase)


_READ_AS: dict[str, type[read.KubeObject]] = {
    kinds.VIRTUAL_MACHINES.name: read.VirtualMachineObject,
    kinds.NETWORKS.name: read.SDNNetworkObject,
    kinds.CLUSTER_NETWORKS.name: read.SDNNetworkObject,
    **{
        name: model
        for f in (UPSTREAM, DECKHOUSE)
        for name, model in (
            (f.kvvms.name, read.KVVMObject), (f.vmis.name, read.VMIObject),
            (f.launcher_pods.name, read.PodObject), (f.vmims.name, read.VMIMObject),
            (f.kubevirts.name, read.KubeVirtObject),
        )
    },
    kinds.VM_MAC_ADDRESSES.name: read.VMMACObject,
    kinds.VIRTUAL_MACHINE_OPERATIONS.name: read.VMOPObject,
    _NADS: read.KubeObject,  # only whether it exists: its metadata
}
_ENVELOPE: Shape = {"apiVersion": None, "kind": None}  # how tapes and logs tell kinds apart

WRITTEN_FROM: dict[str, Shape] = {
    kinds.VIRTUAL_MACHINES.name: {"status": {"conditions": None}},
    **{
        f.kvvms.name: {"spec": {"template": {"spec": {
            "domain": {"devices": {"interfaces": None}}, "networks": None}}}}
        for f in (UPSTREAM, DECKHOUSE)
    },
}
"""What the effect executor writes back whole besides what the translation reads: a
patch of the KVVM template's interface and network lists, or of the VM's conditions,
replaces the list, so every field of every entry must be in the cache it is built
from (`executor.Cached`). Annotations, uids and resourceVersions the models keep."""


def cache_projection(kind: KindRef) -> Callable[[Body], Body] | None:
    """What to keep of each object of `kind` as it arrives (`cache_shape`), as a
    transform; None for a kind it does not read."""
    shape = cache_shape(kind)
    return compiled(shape) if shape is not None else None


def cache_shape(kind: KindRef) -> Shape | None:
    """The fields of `kind` the translation reads (`translate/projection.py`) and those
    writes are built from (`WRITTEN_FROM`); None for a kind it does not read."""
    model = _READ_AS.get(kind.name)
    if model is None:
        return None
    return merged(shape_of(model), {**_ENVELOPE, **WRITTEN_FROM.get(kind.name, {}),
                                    **_IPAM_READ.get(kind.name, {})})


_IPAM_READ: dict[str, Shape] = {
    name: {"spec": {"ipam": None}} for name in (_NETWORKS, _CLUSTER_NETWORKS)}
"""A Network's IPAM pool (`translate/ipam.py`), read from the body, not the model."""
