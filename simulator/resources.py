"""The kinds the simulated API server serves, and how each is addressed.

One table, so the HTTP layer, the store and the actors agree on every group, version,
plural and scope. The simulator speaks only of these; anything else is a 404.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Column:
    """A column of `kubectl get`'s table, as a CRD's `additionalPrinterColumns` has it."""

    name: str
    json_path: str  # dotted, from the object's root: `.status.state`
    type: str = "string"  # string | integer | date
    priority: int = 0  # 0: always shown; 1: with `-o wide`


@dataclass(frozen=True, slots=True)
class Resource:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    has_status: bool  # a /status subresource; the main endpoint ignores .status
    short_names: tuple[str, ...] = ()  # as the kind's CRD (or the built-in) declares them
    categories: tuple[str, ...] = ()
    columns: tuple[Column, ...] = ()  # besides Name; none: Name and Age, as for a CRD

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """`plural` for the core group, else `plural.group` (as kubectl names them)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False, has_status=True,
                      short_names=("ns",))
PODS = Resource("", "v1", "pods", "Pod", namespaced=True, has_status=True,
                short_names=("po",), categories=("all",))
EVENTS = Resource("", "v1", "events", "Event", namespaced=True, has_status=False,
                  short_names=("ev",))
EVENTS_V1 = Resource("events.k8s.io", "v1", "events", "Event", namespaced=True,
                     has_status=False)
"""The `events.k8s.io/v1` view of Events: served, never stored. The store keeps every
Event as core/v1 (`EVENTS`), and `event_views` shows it through either group, as a
real API server keeps one object behind both views."""
LEASES = Resource(
    "coordination.k8s.io", "v1", "leases", "Lease", namespaced=True, has_status=False
)
VMS = Resource(
    "virtualization.deckhouse.io", "v1alpha2", "virtualmachines", "VirtualMachine",
    namespaced=True, has_status=True, short_names=("vm",), categories=("all", "virtualization"),
)
KVVMS = Resource(
    "kubevirt.io", "v1", "virtualmachines", "VirtualMachine", namespaced=True, has_status=True,
    short_names=("vm", "vms"), categories=("all",),
)
VMIS = Resource(
    "kubevirt.io", "v1", "virtualmachineinstances", "VirtualMachineInstance",
    namespaced=True, has_status=True, short_names=("vmi", "vmis"), categories=("all",),
)
VMIMS = Resource(
    "kubevirt.io", "v1", "virtualmachineinstancemigrations",
    "VirtualMachineInstanceMigration", namespaced=True, has_status=True,
    short_names=("vmim", "vmims"), categories=("all",),
)
KUBEVIRTS = Resource("kubevirt.io", "v1", "kubevirts", "KubeVirt", namespaced=True,
                     has_status=True, short_names=("kv", "kvs"), categories=("all",))
VMOPS = Resource(
    "virtualization.deckhouse.io", "v1alpha2", "virtualmachineoperations",
    "VirtualMachineOperation", namespaced=True, has_status=True, short_names=("vmop",),
    categories=("virtualization",),
)
VMMACS = Resource(
    "virtualization.deckhouse.io", "v1alpha2", "virtualmachinemacaddresses",
    "VirtualMachineMACAddress", namespaced=True, has_status=True, short_names=("vmmac",),
    categories=("virtualization",),
)
NETWORKS = Resource(
    "network.deckhouse.io", "v1alpha1", "networks", "Network", namespaced=True, has_status=True
)
CLUSTER_NETWORKS = Resource(
    "network.deckhouse.io", "v1alpha1", "clusternetworks", "ClusterNetwork",
    namespaced=False, has_status=True,
)
IP_ADDRESSES = Resource(
    "network.deckhouse.io", "v1alpha1", "ipaddresses", "IPAddress", namespaced=True,
    has_status=True,
)
"""The SDN's IPAddress: an address of an IPAM pool for one interface of a VM."""
NADS = Resource(
    "k8s.cni.cncf.io", "v1", "network-attachment-definitions", "NetworkAttachmentDefinition",
    namespaced=True, has_status=False, short_names=("net-attach-def",),
)
"""multus's network (its CRD: `tests/fixtures/multus/`): KubeVirt's `multus.networkName`
names one, in the VM's namespace or as `namespace/name`. Unserved where multus is not
installed (`Knobs.nads_served`)."""
CLUSTER_ROLES = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False,
    has_status=False,
)

OPERATIONS = Resource(
    "nicplug.io", "v1alpha1", "networkinterfaceoperations", "NetworkInterfaceOperation",
    namespaced=True, has_status=False, short_names=("nicops", "nicop"), categories=("nicplug",),
    columns=(
        Column("VM", ".spec.virtualMachine"), Column("Interface", ".spec.interface"),
        Column("Network", ".spec.network"), Column("Direction", ".spec.direction"),
        Column("State", ".status.state"), Column("Reason", ".status.reason"),
        Column("Age", ".metadata.creationTimestamp", "date"),
    ),
)
"""nicplug's own kind: one read-only object per interface operation, the journal's
projection (`adapters/kube/operation_objects.py`); `deploy/base/crd-networkinterfaceoperations
.yaml` is its definition. No status subresource: nicplug writes the whole object in one
request, and nobody else writes it."""

CRDS = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
    namespaced=False, has_status=True, short_names=("crd", "crds"),
)

ALL: tuple[Resource, ...] = (
    NAMESPACES, PODS, EVENTS, EVENTS_V1, LEASES, CRDS, VMS, KVVMS, VMIS, VMIMS, KUBEVIRTS, VMOPS,
    VMMACS,
    NETWORKS, CLUSTER_NETWORKS, IP_ADDRESSES, CLUSTER_ROLES, OPERATIONS, NADS,
)
