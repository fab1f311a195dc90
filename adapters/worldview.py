"""Which VM each watched object concerns, and the raw objects of one VM.

The informers keep every object of a kind; this index keeps, for each VM
(`namespace/name`), the keys of its launcher pods and migrations, so assembling one
VM's world never scans a namespace. It holds references to the informers' dicts, never
copies, and never decides anything: it only answers "which VMs does this change touch"
and "what are the objects of this VM".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from nicplug.adapters.kube import resources as kinds
from nicplug.adapters.kube.resources import KindRef, object_key
from nicplug.adapters.kube.translate.assemble import VM_NAME_LABEL, VMObjects

_MAPPING = (dict, Mapping)
"""`isinstance` of a JSON body: dict first, an exact type check (the ABC's is slow)."""

Body = dict[str, Any]

# kinds are told apart by name: a string compare, where a KindRef compares every field
_PODS, _VMIMS = kinds.LAUNCHER_PODS.name, kinds.VMIMS.name
_INDEXED = frozenset({_PODS, _VMIMS})
_EVERY_VM = frozenset({k.name for k in (kinds.KUBEVIRTS, kinds.NETWORKS, kinds.CLUSTER_NETWORKS)})
_NAMED_AFTER_VM = frozenset({k.name for k in (kinds.VIRTUAL_MACHINES, kinds.KVVMS, kinds.VMIS)})


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

    def apply(self, kind: KindRef, event_type: str, obj: Body) -> set[str]:
        """Record one change; return the VM keys (`ns/name`) whose world it changes.

        A change of the KubeVirt configuration or of a Network concerns every VM
        (the caller may then re-observe all of them).
        """
        try:
            key = object_key(obj)
        except ValueError:
            return set()
        table = self._objects[kind.name]
        if event_type == "DELETED":
            table.pop(key, None)
        else:
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
        if kind.name in _EVERY_VM:
            touched.update(self.vm_keys())
        return touched

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
            kubevirts=list(table[kinds.KUBEVIRTS.name].values()),
            networks=[
                body for k, body in table[kinds.NETWORKS.name].items()
                if k.startswith(namespace + "/")
            ],
            cluster_networks=list(table[kinds.CLUSTER_NETWORKS.name].values()),
        )

    def version_of(self, kind: KindRef, key: str) -> str:
        obj = self._objects[kind.name].get(key)
        return str(_meta(obj).get("resourceVersion") or "") if obj else ""
