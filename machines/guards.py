"""The guards named in the machine graphs, as pure predicates over one decision.

Every guard name used in `graph.py` has a function here (a test checks it); a move
is taken when all its guards hold. Guards read the operation, the facts of the
observed world, the configuration, the clock value and the trigger; they never
change anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from nicplug.engine.model import EffectOutcome, Trigger
from nicplug.machines.comparator import renamed
from nicplug.machines.facts import FINISHED_PHASES, Facts
from nicplug.machines.operation import Operation
from nicplug.machines.policy import MachineConfig, hotplug_in_place
from nicplug.machines.targets import (
    asked_as,
    kubevirt_migrates,
    migration_blocked,
    own_failed_migration,
)
from nicplug.machines.world import KVVM, DesiredVM, LauncherPod, nad_identity

REJECTABLE = frozenset({"PatchPodNetworks", "PatchVirtualMachine", "RestartVM"})


@dataclass(slots=True)
class Context:
    """What a guard is asked about. Not frozen: one is built per step of every walk,
    and a frozen dataclass pays a call per field to build; no guard changes it."""

    op: Operation
    facts: Facts
    config: MachineConfig
    now: float
    trigger: Trigger


def restart_only(op: Operation) -> bool:
    """Adding/removing Main, an id change and a reorder apply only at boot."""
    return op.network == "Main" or op.direction == "update"


def budget(op: Operation, facts: Facts, config: MachineConfig) -> float | None:
    """How long the operation may stay in its state on a running VM (None: no limit)."""
    return budget_when(op, facts.live, config)


def budget_when(op: Operation, live: bool, config: MachineConfig) -> float | None:
    """`budget`, knowing only whether the VM runs (all it asks of the world)."""
    t = config.timeouts
    if op.state == "Migrating":
        return t.migration_timeout
    if not live:
        return None
    if op.state == "MigrationRequired":
        return t.migration_timeout
    if op.direction == "plug":
        if op.state in ("Requested", "AnnotationPatched"):
            return t.sdn_ready_timeout
        if op.state in ("SDNReady", "VMIPatched"):
            return t.attach_timeout
    if op.direction == "update" and op.flavour == "kubevirt" and op.state == "VMIPatched":
        return t.attach_timeout  # a NAD swap KubeVirt took, waiting for its new pod
    if op.direction == "unplug" and op.state in (
        "Requested",
        "VMIPatched",
        "GuestDetached",
        "AnnotationPatched",
        "SDNReleased",
    ):
        return t.detach_timeout
    return None


def _rejected(c: Context, types: frozenset[str]) -> bool:
    t = c.trigger
    return (
        isinstance(t, EffectOutcome)
        and t.stream == c.op.stream
        and not t.ok
        and t.permanent
        and t.type in types
    )


def vm_deleted(c: Context) -> bool:
    return c.facts.world.vm is None


def change_reverted(c: Context) -> bool:
    comparison = c.facts.comparison
    if comparison is None or comparison.invalid is not None:
        return False
    if c.op.direction == "plug":
        return c.op.network not in c.facts.desired_identities
    if c.op.direction == "unplug":
        return c.op.network in c.facts.desired_identities and not renamed_away(c)
    if is_swap(c.op):  # the interface no longer asks for the new NAD
        wanted = comparison.desired_entry(c.op.network)
        return wanted is None or wanted.if_name != c.op.if_name
    return comparison.signature(c.op.network) != asked_signature(c.op)


def spec_invalid(c: Context) -> bool:
    return c.facts.comparison is not None and c.facts.comparison.invalid is not None


def _in_place(c: Context) -> bool:
    if c.config.observes:
        # Deckhouse applies a change of its additional networks to the running VM at
        # once (`compareNetworks`: ActionApplyImmediate): nothing for nicplug to gate
        return True
    vm = c.facts.world.vm
    if vm is not None and vm.in_template:
        # the user edited the KubeVirt VM, and KubeVirt applies NIC changes to the running
        # VMI whatever its rollout strategy: nothing for nicplug to gate (the bypass of a
        # Stage strategy is reported instead)
        return True
    return hotplug_in_place(c.config.gating, c.facts.world.cluster.rollout_strategy)


def id_only(c: Context) -> bool:
    """The operation is an `update` of a network's id alone (no reorder, not Main): one
    Deckhouse applies to the running VM with no restart (`compareNetworks` in
    `vmchange/comparator_pod_placement.go`: only adding or removing Main restarts), so
    the deckhouse flavour writes it to the KVVM, where it takes effect at the next boot."""
    comparison = c.facts.comparison
    if c.config.flavour != "deckhouse" or c.op.direction != "update" or comparison is None:
        return False
    change = next((ch for ch in comparison.changes
                   if ch.identity == c.op.network and ch.direction == "update"), None)
    if change is None:
        return True  # written already: nothing is left that a restart would apply
    return c.op.network != "Main" and change.why.startswith("id ") and "reordered" not in change.why


def restart_needed(c: Context) -> bool:
    if id_only(c):
        return False
    if is_swap(c.op):
        # KubeVirt migrates a NAD swap into a migratable VMI; one that cannot migrate
        # gets `RestartRequired` (8737323d0e, `vmliveupdate/restart.go`)
        vmi = c.facts.world.vmi
        return c.facts.live and vmi is not None and not vmi.live_migratable
    return c.facts.live and (
        restart_only(c.op) or not _in_place(c) or not_hot_pluggable(c.op, c.facts) is not None)


SWAP = "swap:"
"""The `target` of an update that swaps an interface's NAD: `swap:<old identity>`."""


def is_swap(op: Operation) -> bool:
    return op.target.startswith(SWAP)


def vmi_names_new_nad(c: Context) -> bool:
    """The running VMI's spec gives the interface the new NAD (KubeVirt copied it from
    the template: a migratable VMI at once, any VMI at its boot)."""
    vmi = c.facts.world.vmi
    vm = c.facts.world.vm
    if vmi is None or vm is None or not c.facts.live:
        return False
    network = next((n for n in vmi.networks if n.name == c.op.if_name), None)
    if network is None or network.multus_network is None:
        return False
    found = nad_identity(network.multus_network, vm.namespace,
                         c.config.cluster_network_nad_namespace, c.op.if_name)
    return found == c.op.network


def pod_on_new_nad(c: Context) -> bool:
    """Every pod the VM runs in asks for the interface on the new NAD and multus reports
    it ready there (a migration's target pod, or the pod of a new boot)."""
    return c.facts.live and c.op.if_name in c.facts.attached and c.facts.sdn_ready(c.op.network)


def not_hot_pluggable(op: Operation, facts: Facts) -> str | None:
    """A plug of an upstream KubeVirt VM's interface that KubeVirt will not hot-plug:
    bound otherwise than as a bridge or SR-IOV (a binding plugin such as passt). Only a
    restart applies it (a migration does not: the target runs the VMI's spec, which
    KubeVirt never gave it). Its binding, or None."""
    vm, kvvm = facts.world.vm, facts.world.kvvm
    if op.direction != "plug" or vm is None or not vm.in_template or kvvm is None:
        return None
    if op.if_name in facts.vmi_anywhere:
        return None  # the running VMI has it (it booted with it)
    iface = next((i for i in kvvm.interfaces if i.name == op.if_name), None)
    return iface.binding if iface is not None and not iface.hot_pluggable else None


def hotplug_allowed(c: Context) -> bool:
    return c.facts.live and not restart_only(c.op) and _in_place(c)


def renamed_away(c: Context) -> bool:
    """An unplug of an interface whose network is still desired, under the name the
    MAC pool gives it now (`comparator.renamed`). The pods and the SDN know the network
    under that name too, so such an unplug judges them by its interface name."""
    return bool(renamed_to(c))


def renamed_to(c: Context) -> str:
    """The name an unplug's network is desired under now, where it is not the
    unplugged interface's (`renamed_away`); "" otherwise."""
    comparison = c.facts.comparison
    if c.op.direction != "unplug" or comparison is None:
        return ""
    spec = comparison.desired_entry(c.op.network)
    return spec.if_name if spec is not None and renamed(spec, c.op.if_name) else ""


def asked_as_named(c: Context) -> bool:
    """A plug of a network named after its MAC (Deckhouse): every pod asks the SDN for
    it under the operation's name (`targets.asked_as`)."""
    op, comparison = c.op, c.facts.comparison
    spec = comparison.desired_entry(op.network) if comparison is not None else None
    if op.direction != "plug" or not op.if_name or spec is None or not spec.named_by_mac:
        return True
    return asked_as(c.facts, op.network, op.if_name)


def _requested_as(c: Context, pods: Iterable[LauncherPod]) -> bool:
    """Does one of `pods` ask the SDN for the operation's interface name?"""
    return any(r.if_name == c.op.if_name for pod in pods for r in pod.requested)


def _reported_as(c: Context, pods: Iterable[LauncherPod]) -> bool:
    """Does the SDN report the operation's interface name on one of `pods`?"""
    return any(s.if_name == c.op.if_name for pod in pods for s in pod.reported)


def pod_holds_entry(c: Context) -> bool:
    return c.facts.pod_holds(c.op.network) and asked_as_named(c)


def sdn_reports_ready(c: Context) -> bool:
    return c.facts.sdn_ready(c.op.network) and asked_as_named(c)


def vm_spec_holds_interface(c: Context) -> bool:
    name = c.op.if_name
    return name in c.facts.kvvm_present


def vmi_spec_holds_interface(c: Context) -> bool:
    """KubeVirt synced the interface from the KVVM template into the running VMI."""
    return c.op.if_name in c.facts.vmi_present


def vmi_keeps_interface_absent(c: Context) -> bool:
    """The running VMI's spec holds the interface marked absent: KubeVirt unplugs it and
    never takes that back (`applyDynamicIfaceRequestOnVMI` changes no absent interface);
    it leaves the VMI once nothing reports it, and only then is plugged anew."""
    name = c.op.if_name
    return c.facts.live and name in c.facts.vmi_anywhere and name not in c.facts.vmi_present


def vmi_spec_lacks_interface(c: Context) -> bool:
    """The VMI's spec holds the interface only marked absent, or not at all."""
    return c.op.if_name not in c.facts.vmi_present


def pod_lacks_link(c: Context) -> bool:
    """No link for the interface is ready on the pod the VM runs in."""
    return not c.facts.sdn_ready(c.op.network)


def interface_released_in_spec(c: Context) -> bool:
    name = c.op.if_name
    return (name not in c.facts.kvvm_present and name not in c.facts.vmi_present
            ) or named_for_another(c)


def named_for_another(c: Context) -> bool:
    """The unplugged network's interface name is another wanted network's now: its MAC
    went back to Deckhouse's pool (`mac_pool.go` holds only `status.networks`, which
    drops a removed network once no VMI has its MAC) and was handed to that network,
    whose interface it is from now on, as Deckhouse's controller names it. A stopped VM
    only: its KVVM is written whole for the next boot. On a running one the MAC is
    handed on at once when the spec asks Main alone (`status.networks` emptied), and
    the interface is still the removed network's until its unplug, identified by the
    KVVM's SDN requests (`targets._identify`), marks it absent and takes it out.
    Not while the KVVM still carries the name for the unplugged network: until nicplug
    writes it for the next boot, a start (the user's, while nicplug restarts the VM)
    boots the removed network under that name."""
    comparison = c.facts.comparison
    return c.op.direction == "unplug" and not c.facts.live and comparison is not None and any(
        d.named_by_mac and d.if_name == c.op.if_name and d.identity != c.op.network
        for d in comparison.desired) and not any(
        held.if_name == c.op.if_name and held.identity == c.op.network
        for held in comparison.carried)


def change_written(c: Context) -> bool:
    """The change is in the KVVM, and in the VMI when one runs: a stopped VM was patched
    for its next boot (or the restart already applied it)."""
    f, name = c.facts, c.op.if_name
    if c.op.direction == "plug":
        return (name in f.kvvm_present and not carried_for_another(c.op.network, name, f)
                and (not f.live or name in f.vmi_present))
    if c.op.direction == "unplug":
        return interface_released_in_spec(c) and (not f.live or restart_only(c.op))
    comparison = f.comparison
    return (
        comparison is not None
        and name in f.kvvm_present
        and not any(ch.identity == c.op.network for ch in comparison.changes)
    )


def carried_for_another(network: str, if_name: str, facts: Facts) -> bool:
    """The KVVM carries a plug's interface name for another network: Deckhouse's MAC
    pool hands a MAC no longer reserved in `status.networks` to the next network that
    asks (`mac_pool.go`), so a network removed and another added in one edit share an
    interface name while the removal waits for a restart. The name in the KVVM is then
    the other network's, not this plug written (nor its goal shown)."""
    comparison = facts.comparison
    return comparison is not None and any(
        held.if_name == if_name and held.identity != network for held in comparison.carried)


OBSERVED_DONE = "observed-done"
"""The `target` of a plug or unplug opened for a change the platform had finished before
nicplug saw it in flight (`observed_done.py`): it goes straight to its end. Where the
network has an id, what it asks for follows: `observed-done:id=7;pos=1` (an `update`),
`observed-done:id=2` (a plug)."""

OBSERVED_DONE_ASKING = OBSERVED_DONE + ":"


def asked_signature(op: Operation) -> str:
    """What an `update` asks for (`Comparison.signature`), observed done or not."""
    return op.target.removeprefix(OBSERVED_DONE_ASKING)


def id_shown(network: str, facts: Facts) -> bool:
    """The KVVM carries `network` under the id the desired list gives it, and nothing of
    it differs: an `update` of its id is done."""
    comparison = facts.comparison
    if comparison is None or comparison.invalid is not None:
        return False
    wanted = comparison.desired_entry(network)
    held = next((h for h in comparison.carried if h.identity == network), None)
    return (wanted is not None and wanted.id is not None and held is not None
            and held.id == wanted.id
            and not any(ch.identity == network for ch in comparison.changes))


def goal_shown_for(direction: str, network: str, if_name: str, facts: Facts) -> bool:
    """The world shows a plug or unplug of `network` done: a plug's interface desired,
    in the KVVM and the running guest; an unplug's undesired and gone from everything."""
    desired = network in facts.desired_identities
    if direction == "plug":
        return desired and facts.live and if_name in facts.attached and (
            if_name in facts.kvvm_present) and not carried_for_another(network, if_name, facts)
    return (
        not desired
        and if_name not in facts.attached
        and if_name not in facts.kvvm_anywhere
        and if_name not in facts.vmi_anywhere
        and network not in facts.lingering
    )


def observed_done(c: Context) -> bool:
    """An operation opened for a change the platform had finished unseen, and the world
    still shows it done."""
    op = c.op
    if op.direction == "update":
        return op.target.startswith(OBSERVED_DONE_ASKING) and id_shown(op.network, c.facts)
    said = op.target == OBSERVED_DONE or op.target.startswith(OBSERVED_DONE_ASKING)
    return said and goal_shown_for(
        op.direction, op.network, op.if_name, c.facts)


def vm_stopped(c: Context) -> bool:
    return not c.facts.live


def guest_has_interface(c: Context) -> bool:
    return c.facts.live and c.op.if_name in c.facts.attached and not (
        c.op.direction == "plug" and carried_for_another(c.op.network, c.op.if_name, c.facts))


def guest_lost_interface(c: Context) -> bool:
    return c.op.if_name not in c.facts.attached


def pod_dropped_entry(c: Context) -> bool:
    if renamed_away(c):
        return not _requested_as(c, c.facts.pods)
    return not c.facts.pod_requests_any(c.op.network)


def sdn_released(c: Context) -> bool:
    if renamed_away(c):
        return not _reported_as(c, c.facts.pods)
    return not c.facts.sdn_reports_any(c.op.network)


def nothing_carries_it(c: Context) -> bool:
    f, name = c.facts, c.op.if_name
    if renamed_away(c):  # any pod not finished (as `Facts.lingering` counts them)
        pods = [p for p in f.world.pods if p.phase not in FINISHED_PHASES]
        lingering = _requested_as(c, pods) or _reported_as(c, pods)
    else:
        lingering = c.op.network in f.lingering
    return (
        name not in f.kvvm_anywhere
        and name not in f.vmi_anywhere
        and not lingering
    ) or named_for_another(c)


def link_stranded(c: Context) -> bool:
    """KubeVirt forgot the interface (no template, VMI spec or status holds it) while a
    launcher pod still reports its link, which no pod requests any more, and nothing
    will replace that pod: no migration is asked for (upstream KubeVirt's evaluator
    reads only the interfaces of the VMI's spec; Deckhouse asks none for a network)
    and none runs. Upstream, no dynamic-networks controller released the link (a
    migration's target pod was made while the interface was asked for, and the unplug
    came before the guest had it); on Deckhouse, the SDN agent kept the link after the
    networks-spec let it go. Upstream, a pod that still requests it counts the same when
    KubeVirt will not drop that request (`request_left_by_kubevirt`). It stays until the
    VM migrates or restarts, which is the operator's to decide."""
    f, name, network = c.facts, c.op.if_name, c.op.network
    return (
        f.live
        and network in f.lingering
        and (not any(r.identity == network for p in f.world.pods
                     if p.phase not in FINISHED_PHASES for r in p.requested)
             or request_left_by_kubevirt(c))
        and name not in f.kvvm_anywhere
        and name not in f.vmi_anywhere
        and name not in f.attached
        and not f.migration_required
        and f.running_migration() is None
    )


def request_left_by_kubevirt(c: Context) -> bool:
    """Upstream KubeVirt: an entry a launcher pod's networks annotation still holds is
    one virt-controller will not write away. It regenerates a running pod's annotation
    from the VMI's spec only while an interface of that spec waits to be plugged (not in
    the VMI's status) or unplugged (`absent`) (`ifacesAndNetsForMultusAnnotationUpdate`,
    `pkg/network/pod/annotations/generator.go`), and none does; an interface the VMI's
    status never reported leaves the VMI (`clearDetachedIfacesFromVMI`) whether or not
    the annotation was regenerated for it first, and an old annotation written back by
    someone else stays the same way. Only a new pod (a migration, a restart) drops it."""
    vmi = c.facts.world.vmi
    if c.op.flavour != "kubevirt" or vmi is None:
        return False
    reported = {s.name for s in vmi.status_interfaces}
    return all(not i.absent and i.name in reported for i in vmi.interfaces)


def guest_keeps_interface(c: Context) -> bool:
    """Deckhouse: the running VMI holds the interface absent, yet the guest still has
    it, and no migration is asked for or runs. Deckhouse's KubeVirt detaches from a
    running domain only a tap named by KubeVirt's hashed scheme (`interfacesToHotUnplug`,
    `hasDeviceWithHashedTapName` in virt-launcher's `nichotplug.go`), which a
    `bpfbridge` interface never matches, and keeps an absent interface in the VMI and
    the KVVM while the VMI's status reports it (`clearDetachedIfacesFromVMI`): the guest
    keeps the NIC until the VM migrates (the new domain is made from the VMI's spec,
    without it) or restarts, which is the operator's to decide."""
    f, name = c.facts, c.op.if_name
    return (
        f.live
        and name in f.attached
        and name in f.vmi_anywhere
        and name not in f.vmi_present
        and not f.migration_required
        and f.running_migration() is None
    )


def vmi_requires_migration(c: Context) -> bool:
    return c.facts.live and c.facts.migration_required


def vmi_requires_no_migration(c: Context) -> bool:
    return not vmi_requires_migration(c)


def migration_running(c: Context) -> bool:
    return c.facts.running_migration() is not None


def migration_succeeded(c: Context) -> bool:
    found = c.facts.migration(c.op.migration)
    return found is not None and found.phase == "Succeeded"


def migration_failed(c: Context) -> bool:
    found = c.facts.migration(c.op.migration)
    return found is not None and found.phase == "Failed"


def own_migration_failed(c: Context) -> bool:
    """The migration nicplug created for this attempt failed before it was seen to run
    (it would otherwise be created again under the next name at every observation)."""
    return own_failed_migration(c.facts, c.op) is not None


def migration_rejected(c: Context) -> bool:
    return _rejected(c, frozenset({"CreateMigration"}))


def sdn_reports_error(c: Context) -> bool:
    return c.op.network in c.facts.errors


def network_missing(c: Context) -> bool:
    """The cluster has no Network/ClusterNetwork of that name: nothing will configure it."""
    return c.op.network in c.facts.world.networks_missing


def network_not_ready(c: Context) -> bool:
    """The network exists but is not `Ready=True`: the SDN would not configure it."""
    return c.facts.world.networks_ready.get(c.op.network) is False


def network_problem(
    network: str, trigger: str, vm: DesiredVM | None, kvvm: KVVM | None = None
) -> str:
    """What a `NetworkNotFound` / `NetworkNotReady` failure says, for people: in the
    kubevirt flavour, which NetworkAttachmentDefinition the template names."""
    nad = _nad_of(network, vm, kvvm) if trigger == "NetworkNotFound" else None
    if nad is not None:
        nad_namespace, _, nad_name = nad.rpartition("/")
        return (f"NetworkAttachmentDefinition {nad_name} does not exist in namespace "
                f"{nad_namespace or (vm.namespace if vm else '')} (multus.networkName "
                f"{nad!r} of the VM's template): check the name (a new attempt follows "
                f"it once it exists)")
    kind, _, name = network.partition("/")
    where = f"in namespace {vm.namespace}" if kind == "Network" and vm else "in the cluster"
    if trigger == "NetworkNotFound":
        return (f"{kind} {name} does not exist {where}: check the name in the VM's "
                f"spec.networks (a new attempt follows it once it exists)")
    return f"{kind} {name} {where} is not Ready: the SDN would not configure it yet"


def _nad_of(network: str, vm: DesiredVM | None, kvvm: KVVM | None) -> str | None:
    """The `multus.networkName` the template gives the interface of `network`."""
    if vm is None or not vm.in_template or kvvm is None:
        return None
    interfaces = {n.if_name for n in vm.networks or () if n.identity == network}
    return next((n.multus_network for n in kvvm.networks
                 if n.name in interfaces and n.multus_network), None)


def deadline_passed(c: Context) -> bool:
    limit = budget(c.op, c.facts, c.config)
    if limit is None or c.now < c.op.deadline_base + limit:
        return False
    # a migration nicplug may not drive is waited for, with a condition saying why,
    # unless KubeVirt's own workload updater is to migrate it
    return (c.op.state != "MigrationRequired" or not migration_blocked(c.facts, c.config)
            or kubevirt_migrates(c.facts))


def effect_rejected(c: Context) -> bool:
    return _rejected(c, REJECTABLE)


GUARDS: Mapping[str, Callable[[Context], bool]] = {
    f.__name__: f
    for f in (
        vm_deleted,
        change_reverted,
        spec_invalid,
        restart_needed,
        hotplug_allowed,
        pod_holds_entry,
        sdn_reports_ready,
        vm_spec_holds_interface,
        vmi_spec_holds_interface,
        vmi_keeps_interface_absent,
        pod_lacks_link,
        vmi_spec_lacks_interface,
        interface_released_in_spec,
        change_written,
        vm_stopped,
        observed_done,
        guest_has_interface,
        guest_lost_interface,
        pod_dropped_entry,
        sdn_released,
        nothing_carries_it,
        link_stranded,
        guest_keeps_interface,
        vmi_requires_migration,
        vmi_requires_no_migration,
        migration_running,
        migration_succeeded,
        migration_failed,
        own_migration_failed,
        migration_rejected,
        vmi_names_new_nad,
        pod_on_new_nad,
        sdn_reports_error,
        network_missing,
        network_not_ready,
        deadline_passed,
        effect_rejected,
    )
}
