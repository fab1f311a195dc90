"""Which VM each watched object concerns, and the raw objects of one VM.

The informers keep every object of a kind; this index keeps, for each VM
(`namespace/name`), the keys of its launcher pods and migrations (kinds named as the
cluster's KubeVirt `Flavour` names them), so assembling one
VM's world never scans a namespace. It holds references to the informers' dicts, never
copies, and never decides anything: it only answers "which VMs does this change touch"
and "what are the objects of this VM".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from nicplug.adapters.kube.flavour import Flavour
from nicplug.adapters.kube.resources import KindRef, object_key
from nicplug.adapters.kube.translate.assemble import VMObjects, active_pod_uids

_MAPPING = (dict, Mapping)
"""`isinstance` of a JSON body: dict first, an exact type check (the ABC's is slow)."""

Body = dict[str, Any]


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
        kinds = flavour
        # kinds are told apart by name: a string compare, where a KindRef compares
        # every field
        self._pods, self._vmims, self._vmis = (
            kinds.launcher_pods.name, kinds.vmims.name, kinds.vmis.name)
        self._every_vm = frozenset(
            {k.name for k in (kinds.kubevirts, kinds.networks, kinds.cluster_networks)})
        self._named_after_vm = frozenset(
            {k.name for k in (kinds.virtual_machines, kinds.kvvms, kinds.vmis)})
        self._created_by = flavour.created_by_label
        self._objects: dict[str, dict[str, Body]] = defaultdict(dict)
        self._migrations_of: dict[str, set[str]] = defaultdict(set)
        self._owner: dict[tuple[str, str], str] = {}
        self._pods_by_creator: dict[str, set[str]] = defaultdict(set)  # VMI uid → pod keys
        self._pod_by_uid: dict[str, str] = {}  # pod uid → pod key
        self._pod_links: dict[str, tuple[str, str]] = {}  # pod key → (creator, own uid)
        self._vm_of_vmi_uid: dict[str, str] = {}  # VMI uid → VM key
        self._vm_of_pod_uid: dict[str, str] = {}  # pod uid (activePods) → VM key
        self._vmi_links: dict[str, tuple[str, tuple[str, ...]]] = {}  # VM key → the above

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
        if kind.name == self._pods:
            return self._apply_pod(key, event_type, obj)
        namespace = str(_meta(obj).get("namespace") or "")
        vm_key = self._vm_of(kind, namespace, obj)
        if kind.name == self._vmis and vm_key is not None:
            self._link_vmi(vm_key, event_type, obj)
        touched: set[str] = set()
        if kind.name == self._vmims:
            previous = self._owner.get((kind.name, key))
            if previous is not None and previous != vm_key:
                self._migrations_of.get(previous, set()).discard(key)
                touched.add(previous)
        if vm_key is not None:
            if kind.name == self._vmims:
                if event_type == "DELETED":
                    self._migrations_of.get(vm_key, set()).discard(key)
                    self._owner.pop((kind.name, key), None)
                else:
                    self._migrations_of[vm_key].add(key)
                    self._owner[(kind.name, key)] = vm_key
            touched.add(vm_key)
        if kind.name in self._every_vm:
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

    def _vm_of(self, kind: KindRef, namespace: str, obj: Mapping[str, Any]) -> str | None:
        name: object = None
        if kind.name in self._named_after_vm:
            name = _meta(obj).get("name")
        elif kind.name == self._vmims:
            spec = obj.get("spec")
            name = spec.get("vmiName") if isinstance(spec, _MAPPING) else None
        if isinstance(name, str) and name and namespace:
            return f"{namespace}/{name}"
        return None

    def _pod_keys_of(self, vmi: Body | None) -> list[str]:
        if vmi is None:
            return []
        uid = _meta(vmi).get("uid")
        keys = set(self._pods_by_creator.get(uid, ())) if isinstance(uid, str) else set()
        keys.update(k for u in active_pod_uids(vmi) if (k := self._pod_by_uid.get(u)))
        return sorted(keys)

    def vm_keys(self) -> Iterable[str]:
        """Every VM known by any of its objects."""
        keys = set(self._objects[self.flavour.virtual_machines.name])
        keys.update(self._objects[self.flavour.kvvms.name])
        return keys

    def vm_body(self, vm_key: str) -> Body | None:
        """The VirtualMachine `vm_key`, as last seen."""
        return self._objects[self.flavour.virtual_machines.name].get(vm_key)

    def objects_of(self, vm_key: str) -> VMObjects:
        namespace, _, name = vm_key.partition("/")
        table, kinds = self._objects, self.flavour
        pods = table[kinds.launcher_pods.name]
        migrations = table[kinds.vmims.name]
        vmi = table[kinds.vmis.name].get(vm_key)
        return VMObjects(
            namespace=namespace,
            name=name,
            vm=table[kinds.virtual_machines.name].get(vm_key),
            kvvm=table[kinds.kvvms.name].get(vm_key),
            vmi=vmi,
            pods=[pods[k] for k in self._pod_keys_of(vmi) if k in pods],
            migrations=[
                migrations[k]
                for k in sorted(self._migrations_of.get(vm_key, ()))
                if k in migrations
            ],
            kubevirts=list(table[kinds.kubevirts.name].values()),
            networks=[
                body for k, body in table[kinds.networks.name].items()
                if k.startswith(namespace + "/")
            ],
            cluster_networks=list(table[kinds.cluster_networks.name].values()),
            created_by_label=kinds.created_by_label,
        )

    def version_of(self, kind: KindRef, key: str) -> str:
        obj = self._objects[kind.name].get(key)
        return str(_meta(obj).get("resourceVersion") or "") if obj else ""
