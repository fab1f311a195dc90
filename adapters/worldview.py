"""Which VM each watched object concerns, and the raw objects of one VM.

The informers keep every object of a kind; this index keeps, for each VM
(`namespace/name`), the keys of its launcher pods and migrations, so assembling one
VM's world never scans a namespace, and for each Network and ClusterNetwork the VMs
whose `spec.networks` ask for it, so a Network's change touches only those VMs and a
world holds only the networks its VM asks for. A KubeVirt CR's change touches every
VM, but only when something nicplug reads of it changed (its status churns). It holds
references to the informers' dicts, never copies, and never decides anything: it only
answers "which VMs does this change touch" and "what are the objects of this VM".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from nicplug.adapters.kube import resources as kinds
from nicplug.adapters.kube.resources import KindRef, object_key
from nicplug.adapters.kube.translate import objects as read
from nicplug.adapters.kube.translate.assemble import VM_NAME_LABEL, VMObjects
from nicplug.adapters.kube.translate.projection import Shape, projector

_MAPPING = (dict, Mapping)
"""`isinstance` of a JSON body: dict first, an exact type check (the ABC's is slow)."""

Body = dict[str, Any]

# kinds are told apart by name: a string compare, where a KindRef compares every field
_PODS, _VMIMS = kinds.LAUNCHER_PODS.name, kinds.VMIMS.name
_INDEXED = frozenset({_PODS, _VMIMS})
_VMS, _KUBEVIRTS = kinds.VIRTUAL_MACHINES.name, kinds.KUBEVIRTS.name
_NETWORKS, _CLUSTER_NETWORKS = kinds.NETWORKS.name, kinds.CLUSTER_NETWORKS.name
_ASKED = frozenset({_NETWORKS, _CLUSTER_NETWORKS})
_NAMED_AFTER_VM = frozenset({k.name for k in (kinds.VIRTUAL_MACHINES, kinds.KVVMS, kinds.VMIS)})

NetworkRef = tuple[str, str]
"""(kind name, object key) of a Network (`namespace/name`) or ClusterNetwork (`name`)."""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, _MAPPING) else {}


class WorldIndex:
    """Raw objects by kind, plus VM → pods / migrations indexes."""

    def __init__(self) -> None:
        self._objects: dict[str, dict[str, Body]] = defaultdict(dict)
        self._pods_of: dict[str, set[str]] = defaultdict(set)
        self._migrations_of: dict[str, set[str]] = defaultdict(set)
        self._owner: dict[tuple[str, str], str] = {}
        self._asks: dict[str, frozenset[NetworkRef]] = {}  # VM → the networks it asks for
        self._askers: dict[NetworkRef, set[str]] = defaultdict(set)  # network → VMs

    def apply(self, kind: KindRef, event_type: str, obj: Body) -> set[str]:
        """Record one change; return the VM keys (`ns/name`) whose world it changes.

        A Network or ClusterNetwork concerns the VMs that ask for it; a KubeVirt CR
        every VM, when what nicplug reads of it changed.
        """
        try:
            key = object_key(obj)
        except ValueError:
            return set()
        table = self._objects[kind.name]
        if event_type == "DELETED":
            before = table.pop(key, None)
        else:
            before = table.get(key)
            table[key] = obj
        namespace = str(_meta(obj).get("namespace") or "")
        vm_key = self._vm_of(kind, namespace, obj)
        previous = self._owner.get((kind.name, key))
        touched: set[str] = set()
        if previous is not None and previous != vm_key:
            self._index(kind).get(previous, set()).discard(key)
            touched.add(previous)
        if vm_key is not None:
            if event_type == "DELETED":
                self._index(kind).get(vm_key, set()).discard(key)
                self._owner.pop((kind.name, key), None)
            elif kind.name in _INDEXED:
                self._index(kind)[vm_key].add(key)
                self._owner[(kind.name, key)] = vm_key
            touched.add(vm_key)
        if kind.name == _VMS and vm_key is not None:
            self._ask(vm_key, None if event_type == "DELETED" else obj)
        elif kind.name in _ASKED:
            touched.update(self._askers.get((kind.name, key), ()))
        elif kind.name == _KUBEVIRTS and (
            before is None or event_type == "DELETED"
            or kubevirt_reads(before) != kubevirt_reads(obj)
        ):
            touched.update(self.vm_keys())
        return touched

    def _ask(self, vm_key: str, vm: Body | None) -> None:
        """Keep the network → VMs index current for one VM's (new) spec."""
        asks = frozenset(_asked_networks(vm_key, vm)) if vm is not None else frozenset()
        old = self._asks.get(vm_key, frozenset())
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
            self._asks[vm_key] = asks
        else:
            self._asks.pop(vm_key, None)

    def _index(self, kind: KindRef) -> dict[str, set[str]]:
        return self._pods_of if kind.name == _PODS else self._migrations_of

    @staticmethod
    def _vm_of(kind: KindRef, namespace: str, obj: Mapping[str, Any]) -> str | None:
        name: object = None
        if kind.name in _NAMED_AFTER_VM:
            name = _meta(obj).get("name")
        elif kind.name == _PODS:
            labels = _meta(obj).get("labels")
            name = labels.get(VM_NAME_LABEL) if isinstance(labels, _MAPPING) else None
        elif kind.name == _VMIMS:
            spec = obj.get("spec")
            name = spec.get("vmiName") if isinstance(spec, _MAPPING) else None
        if isinstance(name, str) and name and namespace:
            return f"{namespace}/{name}"
        return None

    def vm_keys(self) -> Iterable[str]:
        """Every VM known by any of its objects."""
        keys = set(self._objects[kinds.VIRTUAL_MACHINES.name])
        keys.update(self._objects[kinds.KVVMS.name])
        return keys

    def objects_of(self, vm_key: str) -> VMObjects:
        namespace, _, name = vm_key.partition("/")
        table = self._objects
        pods = table[kinds.LAUNCHER_PODS.name]
        migrations = table[kinds.VMIMS.name]
        return VMObjects(
            namespace=namespace,
            name=name,
            vm=table[kinds.VIRTUAL_MACHINES.name].get(vm_key),
            kvvm=table[kinds.KVVMS.name].get(vm_key),
            vmi=table[kinds.VMIS.name].get(vm_key),
            pods=[pods[k] for k in sorted(self._pods_of.get(vm_key, ())) if k in pods],
            migrations=[
                migrations[k]
                for k in sorted(self._migrations_of.get(vm_key, ()))
                if k in migrations
            ],
            kubevirts=list(table[_KUBEVIRTS].values()),
            networks=self._networks_asked(vm_key, _NETWORKS),
            cluster_networks=self._networks_asked(vm_key, _CLUSTER_NETWORKS),
        )

    def _networks_asked(self, vm_key: str, kind_name: str) -> list[Body]:
        table = self._objects[kind_name]
        found = [table.get(key) for kind, key in self._asks.get(vm_key, ()) if kind == kind_name]
        return [body for body in found if body is not None]

    def version_of(self, kind: KindRef, key: str) -> str:
        obj = self._objects[kind.name].get(key)
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
    kinds.KVVMS.name: read.KVVMObject,
    kinds.VMIS.name: read.VMIObject,
    kinds.LAUNCHER_PODS.name: read.PodObject,
    kinds.VMIMS.name: read.VMIMObject,
    kinds.KUBEVIRTS.name: read.KubeVirtObject,
    kinds.NETWORKS.name: read.SDNNetworkObject,
    kinds.CLUSTER_NETWORKS.name: read.SDNNetworkObject,
}
_ENVELOPE: Shape = {"apiVersion": None, "kind": None}  # how tapes and logs tell kinds apart


def cache_projection(kind: KindRef) -> Callable[[Body], Body] | None:
    """What to keep of each object of `kind` as it arrives: the fields the translation
    reads (`translate/projection.py`); None for a kind it does not read."""
    model = _READ_AS.get(kind.name)
    return projector(model, keep=_ENVELOPE) if model is not None else None
