"""Which KubeVirt API a cluster serves: every KubeVirt kind and label name, in one table.

Upstream KubeVirt serves `kubevirt.io/v1`. Deckhouse runs its own copy of KubeVirt
renamed by its API rewriter (`src/kubevirt-rules/kubevirt_rules.go` in
deckhouse/virtualization): group `internal.virtualization.deckhouse.io`, kinds and
plurals prefixed `InternalVirtualization` / `internalvirtualization`, and every label,
annotation and finalizer under `kubevirt.io/` or `vm.kubevirt.io/` moved under
`kubevirt.internal.virtualization.deckhouse.io/` / `vm.kubevirt.internal.…/`. Only
Deckhouse's own controller sees `kubevirt.io` names, through a sidecar; a client of the
API server (nicplug) sees the renamed ones, so it gets a 404 and finds no launcher pod
unless it speaks them.

Everything that addresses KubeVirt reads its names from a `Flavour`: the informers, the
calls, the index of a VM's objects, the tape reader and the RBAC in `deploy/` (checked
against `rbac_rules`). It only describes names; it never calls the server.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from nicplug.adapters.kube.resources import (
    CLUSTER_NETWORKS,
    EVENTS,
    IP_ADDRESSES,
    LEASES,
    NADS,
    NAMESPACES,
    NETWORKS,
    OPERATIONS,
    VIRTUAL_MACHINE_OPERATIONS,
    VIRTUAL_MACHINES,
    VM_MAC_ADDRESSES,
    KindRef,
)
from nicplug.machines.policy import RestartMethod

FlavourName = Literal["upstream", "deckhouse"]
FLAVOURS: tuple[FlavourName, ...] = ("upstream", "deckhouse")

_UPSTREAM_GROUP = "kubevirt.io"
_DECKHOUSE_GROUP = "internal.virtualization.deckhouse.io"
_KIND_PREFIX = "InternalVirtualization"
_PLURAL_PREFIX = "internalvirtualization"


@dataclass(frozen=True, slots=True)
class Flavour:
    """The names one KubeVirt API flavour gives the kinds and labels nicplug uses.

    `created_by_label` holds the VMI uid on each of its launcher pods (the migration
    target too); `vm_name_label` holds only the sanitized hostname, so it is never used
    to find a pod (`pkg/virt-controller/services/template.go`).

    How a VM is restarted (`restarts`): upstream, nicplug halts the KVVM, writes the
    change and starts it, as `virtctl stop`/`start` do; on Deckhouse, whose controller
    owns the KVVM's run strategy (`Manual` for every run policy), through the platform's
    own `VirtualMachineOperation`s (`vm_operations`): a `Stop`, the change written to
    the stopped VM's KVVM, a `Start` (`executor.KubeExecutor._restart`).
    """

    name: FlavourName
    kvvms: KindRef
    vmis: KindRef
    vmims: KindRef
    kubevirts: KindRef
    created_by_label: str
    vm_name_label: str
    vm_mac_addresses: KindRef | None = None
    """Deckhouse's `VirtualMachineMACAddress`es: the MAC (and so the interface name) of
    each additional network. None where nothing allocates MACs; a controller takes it
    from its dialect (`with_dialect`: the deckhouse dialect reads them)."""
    vm_operations: KindRef | None = None
    """Deckhouse's `VirtualMachineOperation`s (nicplug's own), through which it
    restarts a VM; None where it halts and starts the KVVM itself."""
    launcher_pods: KindRef = field(init=False)
    virtual_machines: KindRef = field(default=VIRTUAL_MACHINES, init=False)
    networks: KindRef = field(default=NETWORKS, init=False)
    cluster_networks: KindRef = field(default=CLUSTER_NETWORKS, init=False)
    events: KindRef = field(default=EVENTS, init=False)
    leases: KindRef = field(default=LEASES, init=False)

    def __post_init__(self) -> None:
        # KubeVirt labels each launcher pod (a migration's target too) with its VMI's uid
        pods = KindRef("", "v1", "pods", "Pod", True, label_selector=self.created_by_label)
        object.__setattr__(self, "launcher_pods", pods)

    @property
    def restarts(self) -> RestartMethod:
        """How nicplug restarts a VM on this cluster (`MachineConfig.restarts`)."""
        return "run-strategy" if self.vm_operations is None else "operations"

    @property
    def watched(self) -> tuple[KindRef, ...]:
        """Every kind the controller lists and watches to build the world of each VM."""
        # the Deckhouse SDN's kinds come together: its MACs, and IPAM's addresses
        macs = () if self.vm_mac_addresses is None else (self.vm_mac_addresses, IP_ADDRESSES)
        vmops = () if self.vm_operations is None else (self.vm_operations,)
        return (
            self.virtual_machines, self.kvvms, self.vmis, self.vmims, self.kubevirts,
            self.networks, self.cluster_networks, self.launcher_pods, *macs, *vmops,
        )

    def watched_by(
        self, *, desired_in_template: bool, namespace_opt_in: bool = False
    ) -> tuple[KindRef, ...]:
        """What a controller watches: in the kubevirt flavour (the desired state is the
        KubeVirt VM's template) no Deckhouse kind, which an upstream cluster lacks; the
        Namespaces too where a namespace's label opts its VMs in to migrations. There
        the networks are multus's NetworkAttachmentDefinitions (`NADS`)."""
        kinds = self.watched
        if desired_in_template:
            deckhouse = (self.virtual_machines, self.networks, self.cluster_networks,
                         self.vm_operations, IP_ADDRESSES)
            kinds = (*(k for k in kinds if k not in deckhouse), NADS)
        return (*kinds, NAMESPACES) if namespace_opt_in else kinds


def _kubevirt_kind(group: str, plural: str, kind: str, *, renamed: bool) -> KindRef:
    follows_scope = kind != "KubeVirt"  # the configuration lives in KubeVirt's namespace
    if renamed:
        return KindRef(_DECKHOUSE_GROUP, "v1", _PLURAL_PREFIX + plural, _KIND_PREFIX + kind,
                       True, follows_scope=follows_scope)
    return KindRef(group, "v1", plural, kind, True, follows_scope=follows_scope)


def _flavour(name: FlavourName) -> Flavour:
    renamed = name == "deckhouse"
    label_domain = "kubevirt.internal.virtualization.deckhouse.io" if renamed else "kubevirt.io"
    vm_domain = "vm." + label_domain
    return Flavour(
        name=name,
        kvvms=_kubevirt_kind(_UPSTREAM_GROUP, "virtualmachines", "VirtualMachine",
                             renamed=renamed),
        vmis=_kubevirt_kind(_UPSTREAM_GROUP, "virtualmachineinstances",
                            "VirtualMachineInstance", renamed=renamed),
        vmims=_kubevirt_kind(_UPSTREAM_GROUP, "virtualmachineinstancemigrations",
                             "VirtualMachineInstanceMigration", renamed=renamed),
        kubevirts=_kubevirt_kind(_UPSTREAM_GROUP, "kubevirts", "KubeVirt", renamed=renamed),
        created_by_label=f"{label_domain}/created-by",
        vm_name_label=f"{vm_domain}/name",
        vm_mac_addresses=VM_MAC_ADDRESSES if renamed else None,
        vm_operations=VIRTUAL_MACHINE_OPERATIONS if renamed else None,
    )


UPSTREAM = _flavour("upstream")
DECKHOUSE = _flavour("deckhouse")
_BY_NAME: dict[str, Flavour] = {"upstream": UPSTREAM, "deckhouse": DECKHOUSE}


def flavour_for(name: str) -> Flavour:
    """The flavour named `name`; a `ValueError` naming the choices otherwise."""
    found = _BY_NAME.get(name)
    if found is None:
        raise ValueError(f"unknown KubeVirt API {name!r}: choose upstream or deckhouse")
    return found


def with_dialect(flavour: Flavour, dialect: str) -> Flavour:
    """`flavour` as a controller of `dialect` watches it: the deckhouse dialect (the
    Deckhouse platform) names interfaces after the MACs of its VirtualMachineMACAddresses,
    whichever names its KubeVirt API has; the others read none."""
    macs = VM_MAC_ADDRESSES if dialect == "deckhouse" else None
    return flavour if flavour.vm_mac_addresses == macs else replace(
        flavour, vm_mac_addresses=macs)


def default_for_dialect(dialect: str) -> FlavourName:
    """A Deckhouse SDN runs only under Deckhouse's renamed KubeVirt; anything else
    under upstream KubeVirt."""
    return "deckhouse" if dialect == "deckhouse" else "upstream"


@dataclass(frozen=True, slots=True)
class Grant:
    """One RBAC rule nicplug needs: `verbs` on `resources` of `group`."""

    group: str
    resources: tuple[str, ...]
    verbs: tuple[str, ...]


_OPERATION_OBJECTS = Grant(OPERATIONS.group, (OPERATIONS.plural,),
                           ("list", "create", "patch", "delete"))
"""nicplug's own objects (`--operation-objects on`): listed at a term's start, written
on each step, deleted with the retention."""


def rbac_rules(flavour: Flavour) -> tuple[Grant, ...]:
    """What the controller does to each kind, named as `flavour` names the kinds.

    `deploy/clusterrole.yaml` must grant exactly the union of these over the flavours
    it is meant for (a test checks it), so a rename never leaves the RBAC behind.
    """
    f = flavour
    if f.name == "upstream":
        # the kubevirt flavour: the KubeVirt VM is the user's, only read (KubeVirt removes
        # conditions it did not set, so nicplug writes none: `targets.conditions_kept`);
        # KubeVirt writes the VMI, the pods' networks annotation and the template
        return (
            Grant(f.kvvms.group, (f.kvvms.plural,), ("list", "watch")),
            Grant(f.vmis.group, (f.vmis.plural,), ("list", "watch")),
            Grant(f.vmims.group, (f.vmims.plural,), ("list", "watch", "create")),
            Grant(f.kubevirts.group, (f.kubevirts.plural,), ("list", "watch")),
            Grant("", (f.launcher_pods.plural,), ("list", "watch")),
            Grant(NADS.group, (NADS.plural,), ("list", "watch")),  # a missing one: at once
            Grant(f.events.group, (f.events.plural,), ("create", "patch")),
            Grant("", (NAMESPACES.plural,), ("list", "watch")),  # --migrations opt-in
            _OPERATION_OBJECTS,
        )
    return (
        # get: a condition write refused with a 409 is read again from the server
        Grant(f.virtual_machines.group, (f.virtual_machines.plural,), ("get", "list", "watch")),
        Grant(f.virtual_machines.group, (f.virtual_machines.plural + "/status",), ("patch",)),
        Grant(f.kvvms.group, (f.kvvms.plural,), ("list", "watch", "patch")),
        # get: a write for a stopped VM's next boot reads afresh that no VMI runs
        Grant(f.vmis.group, (f.vmis.plural,), ("get", "list", "watch")),
        # delete: its own finished ones, after the retention (`core/created_objects.py`)
        Grant(f.vmims.group, (f.vmims.plural,), ("list", "watch", "create", "delete")),
        Grant(f.kubevirts.group, (f.kubevirts.plural,), ("list", "watch")),
        Grant(f.networks.group, (f.networks.plural, f.cluster_networks.plural),
              ("list", "watch")),
        Grant("", (f.launcher_pods.plural,), ("list", "watch", "patch")),
        Grant(f.events.group, (f.events.plural,), ("create", "patch")),
        Grant("", (NAMESPACES.plural,), ("list", "watch")),  # --migrations opt-in
        # --mode auto: the platform controller's ClusterRole (that one, `resourceNames`)
        Grant("rbac.authorization.k8s.io", ("clusterroles",), ("get",)),
        _OPERATION_OBJECTS,
    ) + (() if f.vm_mac_addresses is None else (
        Grant(f.vm_mac_addresses.group, (f.vm_mac_addresses.plural,), ("list", "watch")),
        Grant(IP_ADDRESSES.group, (IP_ADDRESSES.plural,), ("list", "watch")),
    )) + (() if f.vm_operations is None else (
        # a restart's Stop and Start; get: one found already made is checked to be ours;
        # patch: operations that join a Stop made for others are named on it;
        # delete: its own finished ones, after the retention
        Grant(f.vm_operations.group, (f.vm_operations.plural,),
              ("get", "list", "watch", "create", "patch", "delete")),
    ))


ALL_WATCHED: tuple[KindRef, ...] = tuple(
    dict.fromkeys((*UPSTREAM.watched, *DECKHOUSE.watched, NAMESPACES, NADS)))
"""The watched kinds of every flavour: a tape is read by whichever names it holds."""
