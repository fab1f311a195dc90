"""A small pure simulation of one VM's world reacting to nicplug's effects.

It plays KubeVirt (KVVM → VMI sync, `MigrationRequired` without a dynamic-networks
controller, migrations, restarts), virt-handler (attach only what the SDN reports
ready on the pod, detach `absent` interfaces) and the SDN (ready one step after a
request), with a clock the test drives. The driver feeds every world to the decider,
folds its events through `evolve`, executes its effects and fires due timers; it also
checks the two ordering invariants on every effect.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from nicplug.engine.model import (
    Cause,
    Decision,
    EffectOutcome,
    EffectRequest,
    Input,
    Key,
    Observed,
    RecordedEvent,
    StreamId,
    TimerFired,
    Trigger,
)
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.effects import (
    CreateMigration,
    PatchPodNetworks,
    PatchVirtualMachine,
    RemoveVMCondition,
    RestartVM,
    SetVMCondition,
    effect_from_payload,
)
from nicplug.machines.facts import facts_of
from nicplug.machines.observed_done import first_seen_of
from nicplug.machines.operation import VMState
from nicplug.machines.world import (
    KVVM,
    VMI,
    ClusterConfig,
    Condition,
    DesiredVM,
    FirstSeen,
    KVVMInterface,
    KVVMNetwork,
    LauncherPod,
    Migration,
    NetworkSpec,
    SDNRequest,
    SDNStatus,
    VMIInterfaceStatus,
    VMOperation,
    World,
    nad_network,
)

KEY = Key("ns/vm")
MAIN = NetworkSpec("Main")


def net(name: str, id_: int, type_: str = "Network") -> NetworkSpec:
    return NetworkSpec(type_, name, id_)  # type: ignore[arg-type]


class InvariantBroken(AssertionError):
    pass


@dataclass
class Sim:
    """The mutable world; `world()` snapshots it as the decider sees it."""

    networks: tuple[NetworkSpec, ...] | None = None
    approval: str = "Manual"
    strategy: str = "LiveUpdate"
    dynamic_networks: bool = True
    live_migratable: bool = True
    sdn_fails: frozenset[str] = frozenset()
    sdn_silent: frozenset[str] = frozenset()
    networks_missing: frozenset[str] = frozenset()  # no Network/ClusterNetwork of the name
    networks_not_ready: frozenset[str] = frozenset()  # one whose Ready is not True
    running: bool = True
    vm_conditions: dict[str, Condition] = field(default_factory=dict)
    kvvm_ifaces: list[KVVMInterface] = field(default_factory=lambda: [KVVMInterface("default")])
    kvvm_nets: list[KVVMNetwork] = field(default_factory=lambda: [KVVMNetwork("default")])
    template: list[SDNRequest] = field(default_factory=list)
    vmi_uid: str | None = "vmi-1"
    vmi_ifaces: list[KVVMInterface] = field(default_factory=lambda: [KVVMInterface("default")])
    attached: set[str] = field(default_factory=lambda: {"default"})
    migration_required: bool = False
    pod: int = 1
    requested: list[SDNRequest] = field(default_factory=list)
    reported: list[SDNStatus] = field(default_factory=list)
    migrations: list[Migration] = field(default_factory=list)
    restarting: int = 0
    vm_deleted: bool = False
    handler_stuck: bool = False
    migration_fails: bool = False
    # KubeVirt fails the migration before it runs (the target cannot be scheduled...)
    migration_refused: str = ""
    # KubeVirt's grace: MigrationRequired stays False (AutoMigrationPending) this many
    # steps before it turns True; with a dynamic-networks controller it is False while
    # an interface of the VMI spec waits for its link (the evaluator's `pendingMigration`)
    grace: int = 0
    # KubeVirt's workload updater (`workloadUpdateMethods: [LiveMigrate]`): it migrates
    # a live-migratable VMI whose MigrationRequired is True, one migration at a time
    workload_update: bool = False
    # NAD swaps (`LiveUpdateNADRef`): the multus network each VMI interface names in the
    # VMI spec (KubeVirt copies a changed `networkName` into a migratable VMI; the pod
    # keeps the NAD it was born with), and a KubeVirt whose evaluator never notices
    vmi_nads: dict[str, str] = field(default_factory=dict)
    evaluator_off: bool = False
    required_for: int = 0
    pending_link: bool = False
    migration_stuck: bool = False
    # KubeVirt as it is without a dynamic-networks controller: an unplug leaves the guest
    # at once, the pod keeps the link (and reports it) until a migration replaces the pod
    pod_keeps_links: bool = False
    # Deckhouse: an SDN agent that keeps these links after the networks-spec lets them go
    sdn_keeps: frozenset[str] = frozenset()
    # upstream KubeVirt with multus: virt-controller writes the pod's networks annotation
    # from the VMI spec (new pods too), virt-handler waits for multus to report a link,
    # and without a dynamic-networks controller a running pod's status never changes
    kubevirt_owns_pod: bool = False
    kvvm_labels: dict[str, str] = field(default_factory=dict)
    eviction_strategy: str | None = None
    live_migratable_reason: str = ""
    kubevirt_stuck: str = ""  # "sync": the VMI lags the KVVM; "annotation": the pod does
    names: dict[str, str] = field(default_factory=dict)
    # the KVVM's runStrategy, and the one nicplug noted to put back after halting it
    run_strategy: str = "Always"
    resumes: str | None = None
    # KubeVirt recreates a deleted VMI at once, before anyone sees the VM stopped
    recreate_at_once: bool = False
    # Deckhouse: the VM's runPolicy and the VirtualMachineOperations nicplug created;
    # `vmop_phase` is how Deckhouse ends a Stop (Completed, or Failed: refused)
    run_policy: str = ""
    vm_operations: list[VMOperation] = field(default_factory=list)
    user_vm_operations: list[VMOperation] = field(default_factory=list)  # the user's own
    vmop_phase: str = "Completed"
    # the kubevirt flavour: the desired state is the KVVM template, which the user edits
    # (`user_plugs`, `user_unplugs`); `networks` is not read
    in_template: bool = False

    # the VM's desired networks in the first world of it (`World.first_seen`): what the
    # observing side of a running nicplug remembers; None: not seen yet (a new process)
    first_sight: FirstSeen | None = None

    _edited: tuple[NetworkSpec, ...] | None = field(default=None, repr=False)
    """The `networks` last turned into template edits (`in_template`)."""

    def user_plugs(self, nad: str, interface: str, nad_namespace: str = "ns",
                   binding: str = "bridge") -> None:
        """The user guide's hotplug: an interface with its multus network."""
        self.kvvm_ifaces = [i for i in self.kvvm_ifaces if i.name != interface]
        self.kvvm_ifaces.append(KVVMInterface(interface, binding=binding))
        if all(n.name != interface for n in self.kvvm_nets):
            self.kvvm_nets.append(KVVMNetwork(interface, f"{nad_namespace}/{nad}"))

    def _edit_template(self) -> None:
        """In the kubevirt flavour a scenario written as a desired list (`networks`) is
        the user editing the template as the user guide says: a network the list gains
        is plugged (an interface named as nicplug names it, with its NAD), one it loses
        is marked absent; `default` is deleted when Main leaves (back when it returns)."""
        networks = self.networks if self.networks is not None else (NetworkSpec("Main"),)
        if not self.in_template or networks == self._edited:
            return
        self._edited = networks
        wanted = {s.identity: s for s in networks}
        have = {s.identity: s for s in self.template_networks()}
        for spec in networks:
            if spec.identity in have:
                continue
            if spec.type == "Main":  # the pod network's interface, back or not absent
                others = [i for i in self.kvvm_ifaces if i.name != "default"]
                self.kvvm_ifaces = [KVVMInterface("default"), *others]
                if all(n.name != "default" for n in self.kvvm_nets):
                    self.kvvm_nets.insert(0, KVVMNetwork("default"))
                continue
            where = "ns" if spec.type == "Network" else "default"
            self.user_plugs(spec.name, spec.if_name, where)
        for identity, spec in have.items():
            if identity in wanted:
                continue
            if spec.type == "Main":
                # KubeVirt's admission refuses `state: absent` on the pod network
                # (kubevirt/kubevirt pkg/network/admitter, "not supported on the default
                # network"): a user who drops it deletes its interface and network
                self.kvvm_ifaces = [i for i in self.kvvm_ifaces if i.name != spec.if_name]
                self.kvvm_nets = [n for n in self.kvvm_nets if n.name != spec.if_name]
                continue
            self.user_unplugs(spec.if_name)

    def user_unplugs(self, interface: str) -> None:
        """The user guide's unplug: the interface `state: absent`."""
        self.kvvm_ifaces = [KVVMInterface(i.name, i.absent or i.name == interface)
                            for i in self.kvvm_ifaces]

    def template_networks(self) -> tuple[NetworkSpec, ...]:
        """The desired list as the adapter reads it from the template."""
        specs = []
        nets = {n.name: n for n in self.kvvm_nets}
        for iface in self.kvvm_ifaces:
            network = nets.get(iface.name)
            if iface.absent or network is None:
                continue
            if network.multus_network is None:
                specs.append(NetworkSpec("Main", interface=iface.name))
                continue
            found = nad_network(network.multus_network, "ns", "default", iface.name)
            if found is not None:
                specs.append(NetworkSpec(found[0], found[1], interface=iface.name))
        for spec in specs:
            self.names[spec.if_name] = spec.identity
        return tuple(specs)

    def world(self) -> World:
        self._edit_template()
        vm = None
        if not self.vm_deleted and self.in_template:
            vm = DesiredVM(
                "uid-1", "ns", "vm", "1", self.template_networks(),
                conditions=tuple(self.vm_conditions.values()), labels=dict(self.kvvm_labels),
                in_template=True,
            )
        elif not self.vm_deleted:
            vm = DesiredVM(
                "uid-1", "ns", "vm", "1", self.networks, self.approval,  # type: ignore[arg-type]
                conditions=tuple(self.vm_conditions.values()), run_policy=self.run_policy,
            )  # fmt: skip
        kvvm = KVVM("1", self.running, tuple(self.kvvm_ifaces), tuple(self.kvvm_nets),
                    tuple(self.template), dict(self.kvvm_labels), self.eviction_strategy,
                    self.run_strategy, self.resumes)  # fmt: skip
        vmi = None
        pods: tuple[LauncherPod, ...] = ()
        nads = self.vmi_nads if self.kubevirt_owns_pod else {}
        if self.vmi_uid is not None:
            conditions = [Condition("LiveMigratable", "True" if self.live_migratable else "False",
                                    self.live_migratable_reason)]  # fmt: skip
            if self.migration_required and self.required_for >= self.grace:
                reason = "AutoMigrationDueToLiveUpdate"
                conditions.append(Condition("MigrationRequired", "True", reason))
            elif self.migration_required or self.pending_link:
                conditions.append(Condition("MigrationRequired", "False",
                                            "AutoMigrationPending", "",
                                            "2026-12-04T10:00:00Z"))
            pod_uid = f"pod-{self.pod}"
            vmi = VMI(
                self.vmi_uid, "1", "Running", tuple(self.vmi_ifaces),
                tuple(KVVMNetwork(i.name, nads.get(i.name)) for i in self.vmi_ifaces),
                tuple(VMIInterfaceStatus(n, info_source=frozenset({"domain"}))
                      for n in sorted(self.attached)),
                tuple(conditions), {pod_uid: "node-1"},
            )  # fmt: skip
            pods = (
                LauncherPod("ns", f"virt-launcher-vm-{self.pod}", pod_uid, "1", "Running",
                            "node-1", tuple(self.requested), tuple(self.reported)),
            )  # fmt: skip
        methods = ("LiveMigrate",) if self.workload_update else ()
        cluster = ClusterConfig(self.strategy, methods)  # type: ignore[arg-type]
        if vm is not None and self.first_sight is None:
            self.first_sight = first_seen_of(vm)
        return World(vm, kvvm, vmi, pods, tuple(self.migrations), cluster,
                     networks_ready=dict.fromkeys(self.networks_not_ready, False),
                     networks_missing=self.networks_missing,
                     vm_operations=tuple(self.vm_operations),
                     user_vm_operations=tuple(self.user_vm_operations),
                     first_seen=self.first_sight if vm is not None else None)

    # -- effects --------------------------------------------------------------------------

    def execute(self, request: EffectRequest) -> EffectOutcome | None:
        effect = effect_from_payload(request.type, request.payload)
        if isinstance(effect, PatchPodNetworks):
            if self.vmi_uid is not None and effect.pod_uid == f"pod-{self.pod}":
                self.requested = list(effect.entries)
        elif isinstance(effect, PatchVirtualMachine):
            self.kvvm_ifaces = [KVVMInterface(n.if_name, n.absent) for n in effect.networks]
            self.kvvm_nets = [KVVMNetwork(n.if_name) for n in effect.networks]
            self.template = list(effect.template_requests)
        elif isinstance(effect, SetVMCondition):
            self.vm_conditions[effect.type] = Condition(
                effect.type, effect.status, effect.reason, effect.message
            )
        elif isinstance(effect, RemoveVMCondition):
            current = self.vm_conditions.get(effect.type)
            if current is not None and effect.message in ("", current.message):
                self.vm_conditions.pop(effect.type)
        elif isinstance(effect, CreateMigration):
            if all(m.name != effect.migration for m in self.migrations):
                self.migrations.append(Migration(effect.migration, effect.migration, "Pending"))
        elif isinstance(effect, RestartVM):
            self.restart_step(effect)
        return None

    def restart_step(self, effect: RestartVM) -> None:
        step = getattr(effect, "step", None)
        if effect.by == "operation":
            self.operation(effect)
        elif step is None:  # a restart by deleting the VMI
            if effect.vmi_uid == self.vmi_uid:
                self.restart()
        elif step == "halt":  # preconditions: the same VMI, the same run strategy
            if effect.vmi_uid == self.vmi_uid and self.run_strategy == effect.resumes:
                self.run_strategy, self.resumes, self.running = "Halted", effect.resumes, False
                self.stop()
        elif self.resumes == effect.resumes:
            self.run_strategy, self.resumes, self.running = effect.resumes, None, True

    def operation(self, effect: RestartVM) -> None:
        """Deckhouse runs a `Stop` (the VMI deleted; under its `Manual` run strategy the
        VM stays stopped), a `Start`, or a `Restart` VirtualMachineOperation (stopped, and
        started again two steps later); one name per VMI and step."""
        type_ = {"halt": "Stop", "start": "Start", "restart": "Restart"}[effect.step]
        name = f"{type_.lower()}-{effect.vmi_uid}"
        if any(o.name == name for o in self.vm_operations):
            return  # AlreadyExists: ours
        if type_ in ("Stop", "Restart") and (
                effect.vmi_uid != self.vmi_uid or self.vmop_phase != "Completed"):
            self.vm_operations.append(VMOperation(name, type_, effect.vmi_uid, "Failed", "refused",
                                                  f"{len(self.vm_operations):04d}"))
            return
        self.vm_operations.append(VMOperation(name, type_, effect.vmi_uid, "Completed", "",
                                              f"{len(self.vm_operations):04d}",
                                              effect.for_streams, number=effect.number,
                                              after=effect.after))
        if type_ == "Stop":
            self.stop()
            self.running = False
        elif type_ == "Restart":
            self.stop()
            self.restarting = 2
        else:
            self.running = True
            self.start()

    def restart(self) -> None:
        """The VMI is deleted: stop now; under a run strategy that recreates it, a new
        VMI starts two steps later (one observed while stopped), or at once."""
        self.stop()
        if self.run_strategy not in ("Always", "RerunOnFailure"):
            self.running = False  # Manual: deleting the VMI stops the VM
        elif self.recreate_at_once:
            self.start()
        else:
            self.restarting = 2

    def stop(self) -> None:
        self.vmi_uid = None
        self.attached = set()
        self.requested, self.reported = [], []
        self.migration_required = False

    def start(self) -> None:
        """A new VMI and pod from the KVVM template (a boot or a migration target)."""
        self.vmi_uid = f"vmi-{self.pod + 1}"
        self.pod += 1
        self.vmi_ifaces = [i for i in self.kvvm_ifaces if not i.absent]
        self.vmi_nads = self._template_nads()
        born = self.generated(fresh=True) if self.kubevirt_owns_pod else list(self.template)
        self.requested = born
        self.reported = [SDNStatus(r.identity, r.if_name, True) for r in born]
        self.attached = {i.name for i in self.vmi_ifaces}
        self.migration_required = False

    def generated(self, fresh: bool = False) -> list[SDNRequest]:
        """virt-controller's networks annotation for the VMI spec: every interface not
        absent, bar the default one. A running pod keeps the NAD it asks for already (a
        NAD swap reaches only a new pod: `fresh`)."""
        for spec in self.networks or ():
            self.names[spec.if_name] = spec.identity
        kept = {} if fresh else {r.if_name: r.identity for r in self.requested}
        return [
            SDNRequest(kept.get(i.name) or self._vmi_identity(i.name), i.name)
            for i in self.vmi_ifaces
            if not i.absent and i.name != "default" and i.name in self.names
        ]

    def _vmi_identity(self, if_name: str) -> str:
        nad = self.vmi_nads.get(if_name)
        found = nad_network(nad, "ns", "default", if_name) if nad else None
        return f"{found[0]}/{found[1]}" if found else self.names[if_name]

    def _template_nads(self) -> dict[str, str]:
        return {n.name: n.multus_network for n in self.kvvm_nets if n.multus_network}

    def user_swaps(self, interface: str, nad: str) -> None:
        """The user points an interface at another NAD (`networkName`)."""
        self.kvvm_nets = [KVVMNetwork(n.name, f"ns/{nad}") if n.name == interface else n
                          for n in self.kvvm_nets]

    # -- the other controllers, one step ----------------------------------------------------

    def settle(self) -> None:
        if (self.workload_update and self.migration_required and self.live_migratable
                and self.required_for >= self.grace and self.vmi_uid is not None
                and all(m.finished for m in self.migrations)):
            name = f"kubevirt-workload-update-{len(self.migrations)}"
            self.migrations.append(Migration(name, name, "Pending", workload_update=True))
        self.required_for = self.required_for + 1 if self.migration_required else 0
        self.pending_link = False
        if self.restarting:
            self.restarting -= 1
            if not self.restarting:
                self.start()
            return
        if self.vmi_uid is None:
            if self.running:
                self.start()
            return
        for i, m in enumerate(self.migrations):
            if m.phase == "Pending" and self.migration_refused:
                self.migrations[i] = replace(m, phase="Failed", failure=self.migration_refused)
                return
            if m.phase == "Pending":
                self.migrations[i] = replace(m, phase="Running")
                return
            if m.phase == "Running" and self.migration_stuck:
                continue
            if m.phase == "Running" and self.migration_fails:
                self.migrations[i] = replace(m, phase="Failed", failure="the migration failed")
                return
            if m.phase == "Running":
                self.migrations[i] = replace(m, phase="Succeeded")
                uid, spec, nads = self.vmi_uid, self.vmi_ifaces, dict(self.vmi_nads)
                self.start()
                self.vmi_uid = uid
                if self.kubevirt_owns_pod:
                    # the target runs the VMI's spec, not the template: an interface the
                    # VMI holds absent leaves with the old pod (KubeVirt plugs it anew
                    # from the template later, if the template asks for it again)
                    self.vmi_ifaces = [i for i in spec if not i.absent]
                    self.vmi_nads = nads
                    self.requested = self.generated(fresh=True)
                    self.reported = [SDNStatus(r.identity, r.if_name, True)
                                     for r in self.requested]
                    self.attached = {i.name for i in self.vmi_ifaces}
                return
        # the SDN answers one step after the request changes
        wanted = {r.identity: r for r in self.requested}
        frozen = self.kubevirt_owns_pod and not self.dynamic_networks
        if frozen:
            wanted = {}  # no dynamic-networks controller: the pod stays as it was born
        if not (self.pod_keeps_links or frozen):
            self.reported = [s for s in self.reported
                             if s.identity in wanted or s.identity in self.sdn_keeps]
        for identity, r in wanted.items():
            if identity in self.sdn_silent or any(s.identity == identity for s in self.reported):
                continue
            if self.kubevirt_owns_pod and identity in self.networks_missing:
                continue  # multus: no NetworkAttachmentDefinition, nothing attached
            error = "link setup failed" if identity in self.sdn_fails else None
            self.reported.append(SDNStatus(identity, r.if_name, error is None, error))
        # KubeVirt syncs the KVVM to the VMI spec; virt-handler attaches / detaches
        if self.kubevirt_owns_pod and self.kubevirt_stuck != "sync":
            # KubeVirt live-updates the VMI's multus interfaces only: the pod network's
            # interface, added or deleted in the template, waits for a restart
            born = [i for i in self.vmi_ifaces if i.name == "default"]
            # an unplug it took is never taken back (`applyDynamicIfaceRequestOnVMI`):
            # the interface stays absent until nothing reports it, then leaves the VMI
            unplugged = {i.name for i in self.vmi_ifaces if i.absent}
            # and it hot-plugs bridge and SR-IOV interfaces only (`vm.go`)
            running = {i.name for i in self.vmi_ifaces}
            self.vmi_ifaces = born + [
                KVVMInterface(i.name, True) if i.name in unplugged else i
                for i in self.kvvm_ifaces
                if i.name != "default" and (i.hot_pluggable or i.name in running)
            ]
        elif not self.kubevirt_owns_pod:
            self.vmi_ifaces = list(self.kvvm_ifaces)
        if self.kubevirt_owns_pod and self.kubevirt_stuck != "sync":
            # KubeVirt copies a changed NAD into a migratable VMI only (`syncNetworks`),
            # and its evaluator asks at once for the migration that brings it to the pod
            template = self._template_nads()
            for synced in self.vmi_ifaces:
                name = synced.name
                if name in template and (self.live_migratable or name not in self.vmi_nads):
                    self.vmi_nads[name] = template[name]
            if not self.evaluator_off and any(
                    r.identity != self._vmi_identity(r.if_name)
                    for r in self.requested if r.if_name in self.vmi_nads):
                self.migration_required = True
        if self.kubevirt_owns_pod and not self.kubevirt_stuck:
            self.requested = self.generated()
        if self.handler_stuck:
            return
        ready = {s.if_name for s in self.reported if s.ready}
        for iface in self.vmi_ifaces:
            if self.kubevirt_owns_pod and iface.name != "default":
                self._kubevirt_handles(iface, ready)
            elif iface.absent and self.pod_keeps_links:
                self.attached.discard(iface.name)
                if any(s.if_name == iface.name for s in self.reported):
                    self.migration_required = True
            elif iface.absent and not self.dynamic_networks and iface.name in self.attached:
                self.migration_required = True
            elif iface.absent:
                self.attached.discard(iface.name)
            elif iface.name not in self.attached and iface.name != "default":
                if not self.dynamic_networks:
                    self.migration_required = True
                elif iface.name in ready:
                    self.attached.add(iface.name)
                else:
                    raise InvariantBroken(f"Link not found: {iface.name} attached before its tap")
        # KubeVirt drops interfaces that were unplugged
        if self.kubevirt_owns_pod:
            # an absent interface leaves the VMI once its status no longer reports it (the
            # guest and the pod let go: `clearDetachedIfacesFromVMI`), and the template
            # once neither the VMI's spec nor its status holds it (`...FromVM`)
            reported = self.attached | {s.if_name for s in self.reported}
            self.vmi_ifaces = [i for i in self.vmi_ifaces
                               if not (i.absent and i.name not in reported)]
            held = reported | {i.name for i in self.vmi_ifaces}
            gone = {i.name for i in self.kvvm_ifaces if i.absent and i.name not in held}
        else:
            gone = {i.name for i in self.kvvm_ifaces if i.absent and i.name not in self.attached}
        self.kvvm_ifaces = [i for i in self.kvvm_ifaces if i.name not in gone]
        self.kvvm_nets = [n for n in self.kvvm_nets if n.name not in gone]
        self.vmi_ifaces = [i for i in self.vmi_ifaces if i.name not in gone]


    def _kubevirt_handles(self, iface: KVVMInterface, ready: set[str]) -> None:
        """virt-handler detaches an absent interface at once and attaches only what
        multus reports; KubeVirt asks for a migration where the pod lags the spec."""
        if iface.absent:
            self.attached.discard(iface.name)
            if iface.name in ready:
                self.migration_required = not self.dynamic_networks
        elif iface.name not in self.attached:
            if iface.name in ready:
                self.attached.add(iface.name)
            elif not self.dynamic_networks:
                self.migration_required = True
            else:
                self.pending_link = bool(self.grace)


def check_invariants(world: World, decision: Decision, multus: bool = False) -> None:
    """The ordering rules, checked on every effect of a decision."""
    facts = facts_of(world)
    for request in decision.effects:
        effect = effect_from_payload(request.type, request.payload)
        if isinstance(effect, PatchVirtualMachine) and facts.live and facts.pods and not multus:
            for n in effect.networks:
                if n.absent or n.identity == "Main" or n.if_name in facts.kvvm_present:
                    continue
                if not facts.sdn_ready(n.identity):
                    raise InvariantBroken(f"{n.identity} added to the KVVM before SDN ready")
        if isinstance(effect, PatchPodNetworks) and multus:
            raise InvariantBroken("a pod's networks annotation written where KubeVirt owns it")
        if isinstance(effect, PatchVirtualMachine | RestartVM) and world.vm is not None \
                and world.vm.in_template:
            raise InvariantBroken("the user's KubeVirt VM written in the kubevirt flavour")
        if isinstance(effect, PatchVirtualMachine) and multus:
            kvvm = world.kvvm
            if kvvm is not None and effect.template_requests != kvvm.template_requests:
                raise InvariantBroken("the KVVM template's networks annotation rewritten")
        if isinstance(effect, PatchPodNetworks):
            kept = {e.identity for e in effect.entries}
            for pod in world.pods:
                for r in pod.requested:
                    if r.identity not in kept and r.if_name in facts.attached:
                        raise InvariantBroken(f"{r.identity} removed while the guest has it")


@dataclass
class Driver:
    """Feeds worlds to the decider and effects to the simulation, on a virtual clock."""

    decider: HotplugDecider
    sim: Sim
    state: VMState = field(default_factory=lambda: VMState(KEY, {}))
    now: float = 0.0
    position: int = 0
    timers: dict[tuple[StreamId, str], float] = field(default_factory=dict)
    log: list[tuple[Trigger, Decision]] = field(default_factory=list)
    effects: list[EffectRequest] = field(default_factory=list)
    answer: Callable[[EffectRequest], EffectOutcome | None] | None = None
    multus: bool = False
    check_determinism: bool = True

    def feed(self, trigger: Trigger, world: World | None = None, execute: bool = True) -> Decision:
        """Decide on `world` (default: the current one); `execute=False` models a stale
        decision whose patches fail their resourceVersion precondition."""
        world = world or self.sim.world()
        decision = self.decider.decide(self.state, Input(KEY, world, trigger), self.now)
        if self.check_determinism:
            again = self.decider.decide(self.state, Input(KEY, world, trigger), self.now)
            assert again == decision, "decide is not deterministic"
        check_invariants(world, decision, self.multus)
        self.log.append((trigger, decision))
        for e in decision.events:
            self.position += 1
            recorded = RecordedEvent(
                e.stream, KEY, self.position, self.position, e.type, e.schema_version,
                e.payload, Cause("observation", "sim"), self.now, self.now,
            )  # fmt: skip
            self.state = self.decider.evolve(self.state, recorded)
        if self.check_determinism and decision != Decision():
            # what a decision leaves is settled: the same world at the same time asks
            # nothing more of the state it made (the decider's `settled` memo)
            fresh = type(self.decider)(self.decider.config)
            plain = VMState(self.state.key, dict(self.state.ops))
            cause = Observed(Cause("observation", "again"))
            again = fresh.decide(plain, Input(KEY, world, cause), self.now)
            assert again == Decision(), f"not settled after {trigger}: {again}"
        for t in decision.timers:
            self.timers[(t.stream, t.name)] = t.deadline
        for c in decision.cancel_timers:
            self.timers.pop((c.stream, c.name), None)
        outcomes: list[EffectOutcome] = []
        for request in decision.effects if execute else ():
            self.effects.append(request)
            outcome = self.answer(request) if self.answer else None
            if outcome is None:
                self.sim.execute(request)
            else:
                outcomes.append(outcome)
        for outcome in outcomes:
            self.feed(outcome)
        return decision

    def observe(self) -> Decision:
        return self.feed(Observed(Cause("observation", f"sim@{self.now}")))

    def fire_due(self) -> None:
        for (stream, name), deadline in sorted(self.timers.items(), key=lambda kv: kv[1]):
            if deadline <= self.now and self.timers.get((stream, name)) == deadline:
                del self.timers[(stream, name)]
                self.feed(TimerFired(stream, name, deadline))

    def run(self, steps: int = 30, dt: float = 1.0) -> None:
        for _ in range(steps):
            self.observe()
            self.sim.settle()
            self.now += dt
            self.fire_due()

    def failures(self) -> list[tuple[str, str]]:
        """(stream, reason) of every operation that failed so far, in order."""
        return [
            (e.stream, str(e.payload["reason"]))
            for _, decision in self.log
            for e in decision.events
            if e.type == "Transitioned" and e.payload["to"] == "Failed"
        ]

    def states(self) -> dict[tuple[str, str], str]:
        return {slot: op.state for slot, op in self.state.ops.items()}

    def op(self, network: str, direction: str) -> Any:
        return self.state.ops[(network, direction)]
