"""The kinds nicplug reads and writes, and how each is addressed on the API server.

The kinds whose names do not depend on which KubeVirt API the cluster serves; the
KubeVirt kinds and the launcher pods' labels are in `flavour`. It describes addresses
only: it never holds objects and never calls the server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from sys import intern


@dataclass(frozen=True, slots=True)
class KindRef:
    """An API resource: `group` is "" for the core group.

    `name` is `plural` for the core group, else `plural.group` (as kubectl names
    them); derived once, as every watch event asks for it.
    """

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    label_selector: str | None = None  # what nicplug watches of it, when not everything
    follows_scope: bool = True  # False: watched in every namespace even when restricted
    optional: bool = False  # a 404 on its list means "not installed", not an error
    name: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        name = f"{self.plural}.{self.group}" if self.group else self.plural
        object.__setattr__(self, "name", name)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def core(self) -> bool:
        return self.group == ""


VIRTUAL_MACHINES = KindRef(
    "virtualization.deckhouse.io", "v1alpha2", "virtualmachines", "VirtualMachine", True
)
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_NICPLUG = f"{MANAGED_BY_LABEL}=nicplug"
"""The label on what nicplug creates (migrations, VM operations), and its selector."""
OPERATION_ANNOTATION = "nicplug.io/operation"
"""On a migration nicplug created: the operation (stream: `<vm uid>/<network>/<direction>/
<attempt>`) it was created for, so `kubectl` and the simulation's invariants can tell."""
WORKLOAD_UPDATE_ANNOTATION = "kubevirt.io/workloadUpdateMigration"
"""On a migration KubeVirt's workload updater created (`workload-updater.go`)."""
VIRTUAL_MACHINE_OPERATIONS = KindRef(
    "virtualization.deckhouse.io", "v1alpha2", "virtualmachineoperations",
    "VirtualMachineOperation", True,
)
"""How Deckhouse asks its controller to start, stop or restart a VM. nicplug watches
its own (the restarts it began) and the user's: a start or stop the user asked for
after nicplug's `Stop` takes the VM back, and nicplug never starts it again."""
VMOP_VMI_UID_ANNOTATION = "nicplug.io/restart-of-vmi"
"""On a VirtualMachineOperation nicplug created: the uid of the VMI whose restart it is
part of (its name holds only a digest of it)."""
VMOP_RESTART_FOR_ANNOTATION = "nicplug.io/restart-for"
"""On nicplug's `Stop`: the operations (streams, comma-separated) the restart is for.
When the user takes the VM back before nicplug starts it, nicplug does not stop it
again for them (`World.taken_back`)."""
VMOP_RESTART_NUMBER_ANNOTATION = "nicplug.io/restart-number"
"""On nicplug's `Stop`: its place among nicplug's `Stop`s of the VM (1, 2, ...). Which
`Stop` is the latest is this, not `creationTimestamp`, which is in whole seconds
(`VMOperation.number`)."""
VMOP_RESTART_AFTER_ANNOTATION = "nicplug.io/restart-after"
"""On nicplug's `Stop`: the user's operations (names, comma-separated) of the latest
second among those nicplug had seen when it asked for it. They came before it, though
`creationTimestamp`, in whole seconds, may tie: they do not take the VM back
(`World.taken_back`)."""
VM_UID_LABEL = "virtualization.deckhouse.io/virtual-machine-uid"
"""The label Deckhouse puts on each `VirtualMachineMACAddress` it creates for a VM
(`annotations.LabelVirtualMachineUID`): the VM's uid."""
VM_MAC_ADDRESSES = KindRef(
    "virtualization.deckhouse.io", "v1alpha2", "virtualmachinemacaddresses",
    "VirtualMachineMACAddress", True, label_selector=VM_UID_LABEL,
)
"""The MAC address Deckhouse allocates for each additional network of a VM."""
NETWORKS = KindRef("network.deckhouse.io", "v1alpha1", "networks", "Network", True)
CLUSTER_NETWORKS = KindRef(
    "network.deckhouse.io", "v1alpha1", "clusternetworks", "ClusterNetwork", False
)
IP_ADDRESSES = KindRef("network.deckhouse.io", "v1alpha1", "ipaddresses", "IPAddress", True,
                       optional=True)
"""IPAM's addresses (deckhouse/virtualization #2612): a network of a pool is requested
once its IPAddress is allocated. Optional: a cluster without the CRD (a 404 on its list)
has no IPAM, and every network is requested without an address."""
EVENTS = KindRef("events.k8s.io", "v1", "events", "Event", True)
NADS = KindRef("k8s.cni.cncf.io", "v1", "network-attachment-definitions",
               "NetworkAttachmentDefinition", True, follows_scope=False, optional=True)
"""multus's network of the kubevirt flavour: a Network's NAD is in the VM's namespace, a
ClusterNetwork's in the cluster network NAD namespace (so watched in every namespace).
Optional: a cluster without multus answers its list with a 404, and then nicplug cannot
tell a missing NAD from a present one (`docs/decisions/missing-networks.md`)."""
OPERATIONS = KindRef("nicplug.io", "v1alpha1", "networkinterfaceoperations",
                     "NetworkInterfaceOperation", True)
"""nicplug's own kind: one object per interface operation, the journal's projection
(`adapters/core/operation_objects.py`); its CRD is in `deploy/base/`."""
NAMESPACES = KindRef("", "v1", "namespaces", "Namespace", False)
"""Read only under `--migrations opt-in`: a namespace's label opts its VMs in."""
LEASES = KindRef("coordination.k8s.io", "v1", "leases", "Lease", True)


@dataclass(frozen=True, slots=True)
class Scope:
    """Where to watch: every namespace (None) or one."""

    namespace: str | None = None

    def namespace_for(self, kind: KindRef) -> str | None:
        """The namespace to address for `kind`: None for cluster-scoped kinds."""
        return self.namespace if kind.namespaced and kind.follows_scope else None


def object_key(obj: dict[str, object]) -> str:
    """The cache key of an object: `namespace/name`, or `name` when cluster-scoped."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        raise ValueError("object has no metadata")
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("object has no metadata.name")
    namespace = metadata.get("namespace")
    # interned: the informer's cache, the world index and the runtime key the object by
    # one string, not a copy each
    return intern(f"{namespace}/{name}" if isinstance(namespace, str) and namespace else name)
