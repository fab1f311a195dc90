"""The domain's view of one VM's world, dialect-neutral and typed.

The adapters translate Kubernetes objects into these records (pydantic at the edge,
frozen dataclasses here); the machines decide from a whole `World`, never from a
single watch event. SDN annotations arrive already parsed by a dialect into
`SDNRequest` / `SDNStatus`; a malformed annotation arrives as `observation_error`.

The KVVM, VMI and pod records carry one slot more, `derived`: what the machines
derived from the record (`facts.py`), filled the first time a decision asks. It is not
part of the record's value (never compared, hashed or printed), and it is a pure
function of the record's fields, so a record reused across decisions (the informers'
and the replay's records are, while their object does not change) is read once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from nicplug.engine.records import quick_init

NetworkType = Literal["Main", "Network", "ClusterNetwork"]
ApprovalMode = Literal["Manual", "Automatic"]
RolloutStrategy = Literal["LiveUpdate", "Stage"]

MAIN_IF_NAME = "default"

RESTARTABLE = frozenset({"Always", "RerunOnFailure", "running"})
"""Run strategies under which a halted VM, started again, runs: nicplug may restart
those (halt, write, start) where it restarts through the KVVM's run strategy. Under
`Manual`, `Once` or `WaitAsReceiver` a VM stopped by anyone but its user would not come
back as it was: nicplug waits for the user. (Where the platform restarts, Deckhouse's
`VirtualMachineOperation`s, the KVVM's strategy is the platform's business: see
`STOPPABLE_POLICIES`.)"""

STOPPABLE_POLICIES = frozenset({"Manual", "AlwaysOnUnlessStoppedManually", ""})
"""Deckhouse run policies under which its controller runs a `Stop` and a `Start`
`VirtualMachineOperation` (`IsApplicableForRunPolicy` in
`pkg/controller/vmop/powerstate/internal/service/stop.go`, `start.go`); `""` is the
CRD's default, `AlwaysOnUnlessStoppedManually`. Under `AlwaysOn` Deckhouse refuses to
stop a VM (it would start it again at once, from the unchanged template), under
`AlwaysOff` it never runs: nicplug leaves the restart to the user."""


def identity_of(type_: NetworkType, name: str) -> str:
    """`Main`, `Network/<name>` or `ClusterNetwork/<name>`: the identity of an entry."""
    return "Main" if type_ == "Main" else f"{type_}/{name}"


def if_name_of(type_: NetworkType, name: str) -> str:
    """The KubeVirt network/interface name where no MAC names it (the kubevirt flavour):
    `veth_n`/`veth_cn` + md5 of `<type>/<name>`, stable, at most 15 characters."""
    if type_ == "Main":
        return MAIN_IF_NAME
    return _hashed(type_, f"{type_}/{name}")


def if_name_of_mac(type_: NetworkType, mac: str) -> str:
    """The name Deckhouse gives the interface of an additional network: `veth_n` /
    `veth_cn` + the first 8 hex digits of md5 of its MAC address, as the MAC is written
    (`pkg/common/network/spec.go`, `generateInterfaceName`)."""
    if type_ == "Main":
        return MAIN_IF_NAME
    return _hashed(type_, mac)


def _hashed(type_: NetworkType, text: str) -> str:
    prefix = "veth_n" if type_ == "Network" else "veth_cn"
    return prefix + hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()[:8]


def nad_network(
    network_name: str, namespace: str, cluster_nad_namespace: str, interface: str = ""
) -> tuple[NetworkType, str] | None:
    """The network a KubeVirt `multus.networkName` (`[<ns>/]<nad>`) stands for in the
    kubevirt flavour, where users name interfaces themselves: a NAD in the VM's own
    namespace is a `Network`, one in the ClusterNetworks' NAD namespace a
    `ClusterNetwork`. Where the two namespaces coincide it is a `Network`, unless the
    interface (or network) carries nicplug's name for the ClusterNetwork. A NAD
    anywhere else is not nicplug's to track (None)."""
    nad_namespace, _, nad = network_name.rpartition("/")
    nad_namespace = nad_namespace or namespace
    if not nad:
        return None
    if nad_namespace == namespace:
        if nad_namespace == cluster_nad_namespace and interface == if_name_of(
            "ClusterNetwork", nad
        ):
            return "ClusterNetwork", nad
        return "Network", nad
    if nad_namespace == cluster_nad_namespace:
        return "ClusterNetwork", nad
    return None


def nad_identity(
    network_name: str, namespace: str, cluster_nad_namespace: str, interface: str = ""
) -> str | None:
    """The identity of `nad_network`, or None."""
    found = nad_network(network_name, namespace, cluster_nad_namespace, interface)
    return identity_of(*found) if found is not None else None


@quick_init
@dataclass(frozen=True, slots=True)
class NetworkSpec:
    """One entry of the VM's `spec.networks`.

    `identity` and `if_name` are derived once, when the entry is built (the machines ask
    for them on every decision). `interface` is the KubeVirt interface name where the
    user chose it (the kubevirt flavour reads it from the VM template). Where the
    platform names interfaces after their MAC (Deckhouse: `named_by_mac`), `mac` is the
    address Deckhouse's pool gives the entry (a `VirtualMachineMACAddress`); until one is
    allocated `mac` is None and `if_name` is `""`: the network cannot be written anywhere
    yet. Otherwise nicplug names it (`if_name_of`).

    Deckhouse with IPAM (`ipam.with_ipam`): `ip_address_name` is the spec's own
    `ipAddressName`; `ip_assignment_mode` / `ip_address_names` what the SDN is asked
    for; `awaits_address` while the network must not be requested yet (its IPAddress
    is not allocated, or it names one on a network without a pool).
    """

    type: NetworkType
    name: str = ""
    id: int | None = None
    interface: str = ""
    mac: str | None = None
    named_by_mac: bool = False
    ip_address_name: str = ""
    ip_assignment_mode: str = ""
    ip_address_names: tuple[str, ...] = ()
    awaits_address: bool = False
    identity: str = field(init=False, repr=False, compare=False)
    if_name: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "identity", identity_of(self.type, self.name))
        if self.interface:
            if_name = self.interface
        elif not self.named_by_mac:
            if_name = if_name_of(self.type, self.name)
        elif self.mac:
            if_name = if_name_of_mac(self.type, self.mac)
        else:
            if_name = MAIN_IF_NAME if self.type == "Main" else ""
        object.__setattr__(self, "if_name", if_name)

    @property
    def awaits_mac(self) -> bool:
        """An additional network whose MAC address is not allocated yet."""
        return not self.if_name


@quick_init
@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str
    reason: str = ""
    message: str = ""
    since: str = ""
    """`lastTransitionTime` (RFC 3339), where the platform wrote one."""


@quick_init
@dataclass(frozen=True, slots=True)
class DesiredVM:
    """What the user wants: the `virtualization.deckhouse.io` VirtualMachine, or in the
    kubevirt flavour the KubeVirt VirtualMachine's own template (`in_template`).

    `networks` is None when `spec.networks` is missing (== `[Main]`).
    `macs` maps an identity to `status.networks[].macAddress` (in the template: the
    interface's `macAddress`) where known. `in_template`: the desired list is the KVVM
    template itself, so what is applied is what the running VMI's spec holds, and
    nicplug never writes the template.
    """

    uid: str
    namespace: str
    name: str
    resource_version: str
    networks: tuple[NetworkSpec, ...] | None
    approval: ApprovalMode = "Manual"
    macs: Mapping[str, str] = field(default_factory=dict)
    conditions: tuple[Condition, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    in_template: bool = False
    run_policy: str = ""
    """Deckhouse's `spec.runPolicy` (`""`: unset, the CRD's default)."""


@quick_init
@dataclass(frozen=True, slots=True)
class KVVMInterface:
    """`spec.template.spec.domain.devices.interfaces[]`: `{name, bridge: {}, state?}`.
    `binding`: how it is bound (`bridge`, `sriov`, `masquerade`, `plugin/<name>`; "":
    not said, which KubeVirt takes for a bridge)."""

    name: str
    absent: bool = False
    binding: str = field(default="", compare=False)
    """Not part of the value: an effect's precondition pins a template by its interfaces'
    names and states only (`KVVMTemplate`), and a binding changes only with its name."""

    @property
    def hot_pluggable(self) -> bool:
        """Does upstream KubeVirt hot-plug it? Bridge and SR-IOV interfaces only
        (`applyDynamicIfaceRequestOnVMI`, `pkg/network/controllers/vm.go`)."""
        return self.binding in ("", "bridge", "sriov")


@quick_init
@dataclass(frozen=True, slots=True)
class KVVMNetwork:
    """`spec.template.spec.networks[]`: `pod: {}` or `multus: {networkName}`."""

    name: str
    multus_network: str | None = None


RESTART_ANNOTATION = "nicplug.io/restart-resumes"
"""On a KVVM nicplug halted to restart it: the run strategy its start puts back."""

RUNNING = "running"
"""The run strategy of a KVVM that says `spec.running: true` instead."""


@quick_init
@dataclass(frozen=True, slots=True)
class KVVM:
    """The `kubevirt.io/v1` VirtualMachine of the same name.

    `run_strategy` is `spec.runStrategy`, or `running` / `""` for `spec.running`
    true / false or unset; `resumes` is the strategy nicplug will put back once it has
    written the change of a restart it began by halting the VM (`RESTART_ANNOTATION`).
    """

    resource_version: str
    running: bool
    interfaces: tuple[KVVMInterface, ...] = ()
    networks: tuple[KVVMNetwork, ...] = ()
    template_requests: tuple[SDNRequest, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    eviction_strategy: str | None = None
    """`spec.template.spec.evictionStrategy`; `None` (the string) forbids migrating it."""
    run_strategy: str = "Always"
    resumes: str | None = None
    derived: Any = field(default=None, init=False, repr=False, compare=False, hash=False)


@quick_init
@dataclass(frozen=True, slots=True)
class VMIInterfaceStatus:
    """`status.interfaces[]`; attached to the guest when `domain` is in `info_source`."""

    name: str
    interface_name: str = ""
    mac: str = ""
    info_source: frozenset[str] = frozenset()

    @property
    def attached(self) -> bool:
        return "domain" in self.info_source


@quick_init
@dataclass(frozen=True, slots=True)
class VMI:
    """The `kubevirt.io/v1` VirtualMachineInstance."""

    uid: str
    resource_version: str
    phase: str
    interfaces: tuple[KVVMInterface, ...] = ()
    networks: tuple[KVVMNetwork, ...] = ()
    status_interfaces: tuple[VMIInterfaceStatus, ...] = ()
    conditions: tuple[Condition, ...] = ()
    active_pods: Mapping[str, str] = field(default_factory=dict)
    derived: Any = field(default=None, init=False, repr=False, compare=False, hash=False)

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    @property
    def live_migratable(self) -> bool:
        cond = self.condition("LiveMigratable")
        return cond is not None and cond.status == "True"


@quick_init
@dataclass(frozen=True, slots=True)
class SDNRequest:
    """One entry of the pod's SDN request annotation, dialect-neutral.

    Deckhouse with IPAM: `ip_assignment_mode` (`DHCP`) and `ip_address_names` (the
    network's `IPAddress`) on a network whose object names an address pool."""

    identity: str
    if_name: str
    id: int | None = None
    mac: str | None = None
    ip_assignment_mode: str = ""
    ip_address_names: tuple[str, ...] = ()


@quick_init
@dataclass(frozen=True, slots=True)
class SDNStatus:
    """One entry of the SDN status annotation; `error` set when the SDN failed it for
    good, `message` what it says while the entry is not ready yet."""

    identity: str
    if_name: str
    ready: bool
    error: str | None = None
    message: str = ""


@quick_init
@dataclass(frozen=True, slots=True)
class LauncherPod:
    """A virt-launcher pod of the VMI (two during a migration)."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    phase: str
    node: str = ""
    requested: tuple[SDNRequest, ...] = ()
    reported: tuple[SDNStatus, ...] = ()
    observation_error: str | None = None
    derived: Any = field(default=None, init=False, repr=False, compare=False, hash=False)


@quick_init
@dataclass(frozen=True, slots=True)
class Migration:
    """A `VirtualMachineInstanceMigration` for the VMI. `failure`: KubeVirt's words for
    a failed one (`status.migrationState.failureReason`); `workload_update`: KubeVirt's
    workload updater created it (annotation `kubevirt.io/workloadUpdateMigration`)."""

    name: str
    uid: str
    phase: str
    failure: str = ""
    workload_update: bool = False

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


VMOP_FINISHED = frozenset({"Completed", "Failed", "Superseded"})
RUNNING_VM_OPERATIONS = frozenset({"Stop", "Restart", "Migrate", "Evict"})
"""Operations Deckhouse applies only to a VM that runs (`IsApplicableForVMPhase`): one
the user made that Deckhouse ran acted on the VM before nicplug's `Stop` stopped it, or
after a `Start` of theirs, so it never takes the VM back by itself (`World.taken_back`).
A user's `Restart` that ran in the second of nicplug's `Stop`, before it, unseen when
nicplug asked for it, took the VM from nicplug otherwise."""


@quick_init
@dataclass(frozen=True, slots=True)
class VMOperation:
    """A Deckhouse `VirtualMachineOperation` nicplug created to restart the VM: `type`
    `Stop` or `Start`, `vmi_uid` the VMI whose restart it is part of (nicplug notes it
    on the object), `phase` and the `Completed` condition's message as Deckhouse
    reports them."""

    name: str
    type: str
    vmi_uid: str
    phase: str = ""
    message: str = ""
    created: str = ""
    """`metadata.creationTimestamp` (RFC 3339: its order is the text's)."""
    for_streams: tuple[str, ...] = ()
    """A `Stop` of nicplug's: the operations its restart is for (none: not said)."""
    after: tuple[str, ...] = ()
    """A `Stop` of nicplug's: the user's operations of the latest second among those
    nicplug had seen when it asked for it, which came before it whatever their
    `created` (`World.taken_back`; none: not said)."""
    number: int = 0
    """A `Stop` of nicplug's: one more than the highest number of nicplug's `Stop`s of
    the VM it saw when it asked for it (0: not said, a `Stop` made before numbers).
    Which `Stop` is the latest is this number first: `created` is in whole seconds."""

    @property
    def finished(self) -> bool:
        return self.phase in VMOP_FINISHED


@quick_init
@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """From the KubeVirt CR; a missing strategy means `LiveUpdate`."""

    rollout_strategy: RolloutStrategy = "LiveUpdate"
    workload_update_methods: tuple[str, ...] = ()


FirstSeen = tuple[tuple[str, str, int | None], ...]
"""(network identity, interface name, id) triples, sorted."""


@quick_init
@dataclass(frozen=True, slots=True)
class World:
    """Everything observed about one VM at one moment."""

    vm: DesiredVM | None
    kvvm: KVVM | None = None
    vmi: VMI | None = None
    pods: tuple[LauncherPod, ...] = ()
    migrations: tuple[Migration, ...] = ()
    cluster: ClusterConfig = ClusterConfig()
    networks_ready: Mapping[str, bool] = field(default_factory=dict)
    """Each desired network's Network/ClusterNetwork read: `Ready=True` or not. A network
    the cluster lacks, or whose object cannot be read, is not listed."""
    networks_missing: frozenset[str] = frozenset()
    """Desired networks the cluster has no Network/ClusterNetwork for (deckhouse), or no
    NetworkAttachmentDefinition (kubevirt; empty while NADs cannot be listed)."""
    observation_errors: tuple[str, ...] = ()
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    """The labels of the VM's namespace, where read (`--migrations opt-in`)."""
    vm_operations: tuple[VMOperation, ...] = ()
    """The `VirtualMachineOperation`s nicplug created for this VM (Deckhouse)."""
    user_vm_operations: tuple[VMOperation, ...] = ()
    """The ones others (the user: `d8 v start|stop|restart`) created, `vmi_uid` empty."""
    first_seen: FirstSeen | None = None
    """The VM's desired networks (bar Main) in the first world of it this process
    assembled: its first listing, before any decision could fold it together with later
    changes (`observed_done.py`). None where not known (a world built by hand)."""

    def vm_operation(self, type_: str, vmi_uid: str) -> VMOperation | None:
        """nicplug's operation of `type_` for the restart of VMI `vmi_uid`, if any."""
        return next((o for o in self.vm_operations
                     if o.type == type_ and o.vmi_uid == vmi_uid), None)

    @property
    def stopped_for_restart(self) -> VMOperation | None:
        """nicplug's latest `Stop`, when Deckhouse completed it and no `Start` of
        nicplug's followed: the VM is stopped for a restart of nicplug's, to be started
        again. (An older `Stop` left without a `Start` was overtaken: the VM ran again;
        so was one the user's own operation followed: `taken_back`.)"""
        latest = self._last_stop()
        if latest is None or self.taken_back is not None:
            return None
        return latest

    @property
    def taken_back(self) -> VMOperation | None:
        """nicplug's latest `Stop`, completed with no `Start` of nicplug's, when the user
        started, stopped or restarted the VM since (an operation of theirs Deckhouse
        did not refuse): the VM is theirs again, nicplug starts nothing and does not
        stop it again for the operations that `Stop` was for."""
        latest = self._last_stop()
        if latest is None:
            return None
        if any(o.created >= latest.created and o.name not in latest.after
               and o.phase != "Failed" and o.type not in RUNNING_VM_OPERATIONS
               for o in self.user_vm_operations):
            # (one Deckhouse refused, a restart of the VM nicplug stopped, asked nothing)
            return latest
        return None

    @property
    def operation_unfinished(self) -> VMOperation | None:
        """An operation of the VM's, nicplug's or the user's, Deckhouse has not finished.
        Deckhouse runs a VM's operations one at a time, the older first, by
        `creationTimestamp` then name (`findOlderActiveVMOPs`), and a `Stop` supersedes
        an unfinished `Start`, `Migrate` or `Evict` only when it is the newer by that
        order (`supersede.CanSupersede`). A `Stop` made in the second nicplug's `Start`
        was made in, while that `Start` waited for the VM to run, sorted before it by
        its digest name: it ran, the `Start` was left `InProgress` for good, and
        Deckhouse refused every later `Start`. The VM stayed stopped."""
        return next((o for o in (*self.vm_operations, *self.user_vm_operations)
                     if not o.finished), None)

    @property
    def latest_user_operations(self) -> tuple[str, ...]:
        """The names of the user's operations made in the latest second any was made in:
        those a `Stop` nicplug asks for now follows though `created` may tie
        (`VMOperation.after`)."""
        latest = max((o.created for o in self.user_vm_operations), default=None)
        return tuple(sorted(o.name for o in self.user_vm_operations if o.created == latest))

    @property
    def next_stop_number(self) -> int:
        """The number nicplug's next `Stop` of the VM carries (`VMOperation.number`)."""
        return 1 + max((o.number for o in self.vm_operations if o.type == "Stop"), default=0)

    @property
    def latest_stop(self) -> VMOperation | None:
        """nicplug's latest `Stop` Deckhouse did not refuse, whatever followed it."""
        # one Deckhouse refused stopped nothing: asked from a world that had not caught
        # up with nicplug's own Stop yet, it ties with that one on number and second
        stops = [o for o in self.vm_operations if o.type == "Stop" and o.phase != "Failed"]
        if not stops:
            return None
        # two Stops in one second (a Start completes at once, the next change comes in
        # the same second) tie on `created`: their names are digests, their order none
        return max(stops, key=lambda o: (o.number, o.created, o.name))

    def _last_stop(self) -> VMOperation | None:
        latest = self.latest_stop
        if latest is None:
            return None
        if latest.phase != "Completed" or self.vm_operation("Start", latest.vmi_uid):
            return None
        return latest

