"""The simulated KubeVirt: VMs become VMIs and launcher pods; NIC hotplug and migrations.

What it imitates (and what a controller driving it must cope with):

* A running KVVM (`runStrategy` Always / RerunOnFailure / Once, or `running: true`) gets a
  VMI and a virt-launcher pod built from the current template, after `delays.restart`.
  Deckhouse: the pod carries the template's SDN request annotation. Multus: the pod's
  networks annotation is virt-controller's, generated from the VMI spec
  (`pod_networks.py`), and regenerated on the launcher pod (of a running VMI, or of
  one still `Scheduled`) whenever an interface is plugged or unplugged (`""` once
  none is left); a migration target takes the ordinal names of an ordinal source.
* Multus: `LiveMigratable` as KubeVirt computes it from the network: False
  (`InterfaceNotLiveMigratable`) when the pod network's interface is a bridge without
  the allow annotation (`pod_networks.network_migratable`).
* Multus: KubeVirt's network controller reports an interface the pod's network-status
  lists before virt-handler attaches it: a VMI status entry with `infoSource`
  `multus-status` alone (virt-handler attaches only those).
* Halting (`runStrategy: Halted`, `running: false`) deletes the VMI and its pods.
* `runStrategy: Manual` (what Deckhouse gives every VM): nothing starts or stops by
  itself; `status.stateChangeRequests` do (`Stop` deletes the VMI, `Start` makes one),
  and a VMI deleted or shut down stays so. A `Failed` VMI is replaced, as Deckhouse's
  VM controller restarts a failed guest (`sync_power_state.go`).
* Restart: deleting the VMI of a running KVVM (what `virtctl restart` does) brings a new
  VMI and a new pod from the current template; a `Failed` VMI is replaced the same way
  (except under `runStrategy: Once`).
* Bridge interfaces added to the template, and `state: absent`, are synced into the
  running VMI's spec (after `delays.kubevirt_sync`) whatever the rollout strategy says,
  as KubeVirt does for NICs; an absent interface virt-handler has detached is removed
  from the VMI spec and from the KVVM template.
* Multus, with a dynamic-networks controller or without: a VMI interface the pod's
  network-status does not list — or an unplugged one it still lists (reported
  `multus-status` without `domain`) — sets `MigrationRequired` False/
  `AutoMigrationPending`, then True/`AutoMigrationDueToLiveUpdate` after the grace
  (an SR-IOV interface: True at once), as KubeVirt's migration evaluator does; it is
  cleared when the pod matches (with a controller, usually within the grace).
* Migrations (`migrations.py`) run from here as well, and KubeVirt's workload updater
  (`workload_updater.py`) creates them where the KubeVirt CR says `LiveMigrate`. The
  VMI's `activePods` are the pods it owns: one deleted by anyone (a migration target
  failed by hand, an evicted pod) leaves them at the next sync.
* The VM's status conditions follow the VMI's at every sync of a VM that has a VMI, as
  KubeVirt's VM controller does (`syncConditions`, `pkg/virt-controller/watch/vm/vm.go`):
  each VMI condition is copied (updated in place when its status or reason differ), and
  every other condition is removed, except `Ready`, `Failure` and `RestartRequired`.
  Any write to the VM, its status included, is such a sync, so a condition someone else
  sets on a VM that has a VMI is gone at once; a VM without a VMI keeps its conditions.

Deckhouse: it never edits the SDN annotations of a pod it did not just create (that is
the SDN's and the controller's business). Multus: it writes only the networks
annotation, never network-status (multus' own).
"""

from __future__ import annotations

import copy
import random

from nicplug.simulator import networking as nw
from nicplug.simulator import objects as ob
from nicplug.simulator import pod_networks
from nicplug.simulator.actors.launchers import Launchers, migrating
from nicplug.simulator.actors.migrations import Migrations
from nicplug.simulator.actors.reactor import Reactor, VMKey
from nicplug.simulator.actors.workload_updater import WorkloadUpdater
from nicplug.simulator.clock import SimClock
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.networking import Json
from nicplug.simulator.resources import KVVMS, PODS, VMIMS, VMIS
from nicplug.simulator.store import Store


class KubeVirt(Reactor):
    watches = (KVVMS, VMIS, PODS, VMIMS)
    indexed = (PODS, VMIMS)

    def __init__(self, store: Store, knobs: Knobs, clock: SimClock) -> None:
        super().__init__(store, knobs, clock)
        self.rng = random.Random(knobs.seed)
        self.launchers = Launchers(store, knobs, self.rng)
        self.migrations = Migrations(self, self.launchers)
        self.workload_updater = WorkloadUpdater(self)
        # Deckhouse's KubeVirt also hot-plugs interfaces bound by its bpfbridge plugin; it
        # is the KubeVirt under Deckhouse's SDN whatever names it is served under (a
        # benchmark serves it under upstream names for a peer that speaks those)
        deckhouse = knobs.dialect == "deckhouse"
        self._bindings = frozenset({"bpfbridge"}) if deckhouse else frozenset()

    def reconcile(self, key: VMKey) -> None:
        namespace, name = key
        kvvm = self.find(KVVMS, namespace, name)
        vmi = self.find(VMIS, namespace, name)
        manual = kvvm is not None and ob.dig(kvvm, "spec", "runStrategy") == "Manual"
        starting = False
        if kvvm is not None and manual:
            kvvm, vmi, starting = self._state_change_requests(kvvm, vmi)
        if kvvm is None or not (manual or ob.wants_running(kvvm)) or (
                manual and vmi is None and not starting):
            if vmi is not None:
                self.delete(VMIS, vmi)
            for pod in self.members(PODS, key):
                self.delete(PODS, pod)
            if kvvm is not None:
                kvvm = self._clear_absent(kvvm)
                self._report(kvvm, None)
            return
        phase = ob.dig(vmi, "status", "phase")
        finished = phase in ("Failed", "Succeeded")
        if vmi is not None and finished and (
                ob.dig(kvvm, "spec", "runStrategy") == "Once"
                or (manual and phase == "Succeeded")):
            # run once, or a guest shut down under Manual: the VMI stays as it ended
            self._report(kvvm, vmi)
            return
        if vmi is not None and finished:
            if not self.due((vmi["metadata"]["uid"], "replace"), self.knobs.delays.restart, key):
                self._report(kvvm, vmi)
                return
            self.delete(VMIS, vmi)
            vmi = self._start(kvvm, key)
        elif vmi is None:
            for pod in self.members(PODS, key):
                self.delete(PODS, pod)  # the launcher of a deleted VMI goes with it
            if not self.due((kvvm["metadata"]["uid"], "start"), self.knobs.delays.restart, key):
                self._report(kvvm, None)
                return
            if manual:
                kvvm = self._drop_first_request(kvvm)  # the Start it makes now
            vmi = self._start(kvvm, key)
            self.forget((kvvm["metadata"]["uid"], "start"))
        self._collect_pods(key, vmi)
        vmi = self._active_pods(key, vmi)
        vmi = self._sync_spec(key, kvvm, vmi)
        self._annotate_pods(key, vmi)
        vmi = self._report_pod_networks(key, vmi)
        self._drop_detached(kvvm, vmi)
        self.migrations.reconcile(key, kvvm, vmi)
        vmi = self.find(VMIS, namespace, name) or vmi
        self._migration_required(key, vmi)
        self.workload_updater.reconcile(key, self.find(VMIS, namespace, name) or vmi)
        self._report(kvvm, vmi)

    # ------------------------------------------------------------- lifecycle

    def _state_change_requests(
        self, kvvm: Json, vmi: Json | None
    ) -> tuple[Json, Json | None, bool]:
        """Under `runStrategy: Manual` KubeVirt neither starts nor stops a VM by itself:
        it follows `status.stateChangeRequests` (what `virtctl start`/`stop`/`restart`
        and Deckhouse's controller write). A `Stop` (of the VMI its `uid` names, if any)
        deletes the VMI; a `Start` with no VMI left starts one (`starting`; the request
        is dropped once the VMI is made). Returns the KVVM and VMI as they are now."""
        requests = ob.dig(kvvm, "status", "stateChangeRequests") or []
        if requests and requests[0].get("action") == "Stop":
            wanted = requests[0].get("uid")
            if vmi is not None and (not wanted or wanted == vmi["metadata"]["uid"]):
                self.delete(VMIS, vmi)
                vmi = None
            kvvm = self._drop_first_request(kvvm)
            requests = ob.dig(kvvm, "status", "stateChangeRequests") or []
        elif requests and requests[0].get("action") == "Start" and vmi is not None \
                and ob.dig(vmi, "status", "phase") not in ("Failed", "Succeeded") \
                and not ob.dig(vmi, "metadata", "deletionTimestamp"):
            # a Start while a VMI runs is done already: KubeVirt trims it at its next
            # sync (`isTrimFirstChangeRequestNeeded`, `pkg/virt-controller/watch/vm/`),
            # so a second Start (two operations in one second) does not start the VM
            # again after a later Stop
            kvvm = self._drop_first_request(kvvm)
            requests = ob.dig(kvvm, "status", "stateChangeRequests") or []
        starting = vmi is None and bool(requests) and requests[0].get("action") == "Start"
        return kvvm, vmi, starting

    def _drop_first_request(self, kvvm: Json) -> Json:
        def drop(obj: Json) -> None:
            left = (obj.get("status") or {}).get("stateChangeRequests") or []
            obj["status"]["stateChangeRequests"] = left[1:]
            if not obj["status"]["stateChangeRequests"]:
                del obj["status"]["stateChangeRequests"]
        return self.edit(KVVMS, kvvm, drop, status=True)

    def _start(self, kvvm: Json, key: VMKey) -> Json:
        for pod in self.members(PODS, key):
            self.delete(PODS, pod)
        vmi = self.store.create(VMIS, ob.vmi_for(kvvm, KVVMS))
        pod = self.launchers.new_pod(vmi, self.launchers.pod_request(kvvm, vmi))
        node = pod["spec"]["nodeName"]

        def scheduled(obj: Json) -> None:
            status = obj.setdefault("status", {})
            status.update({"phase": "Scheduled", "nodeName": node,
                           "activePods": {pod["metadata"]["uid"]: node}, "interfaces": []})
            ob.set_migratable(status, obj, self.knobs.dialect)
            ob.set_condition(status, "Ready", "False", "Booting")

        return self.edit(VMIS, vmi, scheduled, status=True)

    def _collect_pods(self, key: VMKey, vmi: Json) -> None:
        """Launcher pods of an earlier VMI of this VM go with it."""
        uid = vmi["metadata"]["uid"]
        for pod in self.members(PODS, key):
            if (pod["metadata"].get("labels") or {}).get(nw.CREATED_BY_LABEL) != uid:
                self.delete(PODS, pod)

    def _active_pods(self, key: VMKey, vmi: Json) -> Json:
        """A pod gone (deleted by anyone: a migration target someone failed, an evicted
        pod) leaves the VMI's `activePods`: virt-controller sets them to the pods the
        VMI owns at every sync (`setActivePods`, `pkg/virt-controller/watch/vmi`)."""
        active = ob.dig(vmi, "status", "activePods") or {}
        present = {p["metadata"]["uid"] for p in self.members(PODS, key)}
        if not isinstance(active, dict) or set(active) <= present:
            return vmi
        # the index hears of a pod created this sync later: ask the store (rarely)
        pods, _ = self.store.list_shared(PODS, key[0],
                                         label_selector=f"{nw.VM_NAME_LABEL}={key[1]}")
        present |= {p["metadata"]["uid"] for p in pods}
        if set(active) <= present:
            return vmi

        def drop(obj: Json) -> None:
            status = obj.setdefault("status", {})
            status["activePods"] = {u: n for u, n in active.items() if u in present}

        return self.edit(VMIS, vmi, drop, status=True)

    def _report(self, kvvm: Json, vmi: Json | None) -> None:
        """The VM's status from its VMI. `Migrating` while the VMI's migration has
        started and not ended (`isVirtualMachineStatusMigrating`, evaluated before
        `Running`, and `migrations.IsMigrating`, `pkg/virt-controller/watch/vm/vm.go`):
        a migration's start and end each change the VM, so a patch pinned to the VM
        read before them fails."""
        phase = ob.dig(vmi, "status", "phase")
        printable = {"Running": "Running", "Failed": "CrashLoopBackOff"}.get(phase, "Starting")
        if vmi is None and not ob.wants_running(kvvm):
            printable = "Stopped"
        migration = ob.dig(vmi, "status", "migrationState") if vmi is not None else None
        if (isinstance(migration, dict) and migration.get("startTimestamp")
                and not migration.get("endTimestamp") and not migration.get("completed")):
            printable = "Migrating"

        def report(obj: Json) -> None:
            status = obj.setdefault("status", {})
            status["printableStatus"] = printable
            status["created"] = vmi is not None
            status["ready"] = phase == "Running"
            if vmi is not None:
                ob.sync_conditions(status, vmi)

        self.edit(KVVMS, kvvm, report, status=True)

    # ------------------------------------------------------------- hotplug

    def _clear_absent(self, kvvm: Json) -> Json:
        """With no VMI, every interface marked absent leaves the template, with its
        network (KubeVirt's network synchronizer: `clearDetachedInterfaces` against no
        interface status)."""
        template = ob.dig(kvvm, "spec", "template", "spec") or {}
        gone = {i.get("name") for i in ob.interfaces_of(template) if _unpluggable(i)}
        if not gone:
            return kvvm

        def clear(obj: Json) -> None:
            spec = obj["spec"]["template"]["spec"]
            ob.set_interfaces(spec, [i for i in ob.interfaces_of(spec)
                                     if i.get("name") not in gone])
            spec["networks"] = [n for n in ob.networks_of(spec) if n.get("name") not in gone]

        return self.edit(KVVMS, kvvm, clear)

    def _sync_spec(self, key: VMKey, kvvm: Json, vmi: Json) -> Json:
        template = ob.dig(kvvm, "spec", "template", "spec") or {}
        migratable = (ob.condition(vmi, "LiveMigratable") or {}).get("status") == "True"
        swaps = _nad_swaps(template, vmi.get("spec") or {}) if migratable else {}
        wanted = _hotplug_diff(template, vmi.get("spec") or {}, self._bindings) or swaps
        token = (vmi["metadata"]["uid"], "sync")
        if not wanted:
            self.forget(token)
            return vmi
        if not self.due(token, self.knobs.delays.kubevirt_sync, key):
            return vmi

        def sync(obj: Json) -> None:
            spec = obj.setdefault("spec", {})
            interfaces = ob.interfaces_of(spec)
            networks = ob.networks_of(spec)
            by_name = {i.get("name"): i for i in interfaces}
            t_networks = {n.get("name"): n for n in ob.networks_of(template)}
            for iface in ob.interfaces_of(template):
                mine = by_name.get(iface.get("name"))
                if _pluggable(iface, t_networks, self._bindings) and mine is None:
                    interfaces.append(copy.deepcopy(iface))
                    if all(n.get("name") != iface.get("name") for n in networks):
                        networks.append(copy.deepcopy(t_networks[iface.get("name")]))
                elif mine is not None and _unpluggable(iface):
                    mine["state"] = "absent"
            ob.set_interfaces(spec, interfaces)
            for network in networks:  # `syncNetworks`: a migratable VMI takes a new NAD
                if network.get("name") in swaps:
                    network["multus"] = {**network["multus"],
                                         "networkName": swaps[str(network.get("name"))]}
            spec["networks"] = networks

        vmi = self.edit(VMIS, vmi, sync)
        self.forget(token)
        return vmi

    def _annotate_pods(self, key: VMKey, vmi: Json) -> None:
        """Multus: virt-controller regenerates the running pods' networks annotation
        from the VMI spec while an interface is being plugged or unplugged. It does so
        for the ready launcher pod of a VMI still `Scheduled` as well: the VMI
        controller's sync patches any ready pod it finds, whatever the VMI's phase
        (`GenerateFromActivePod` under `controller.IsPodReady`, `sync`,
        pkg/virt-controller/watch/vmi/lifecycle.go), and the VM controller syncs the
        template's interfaces into a VMI that is not yet running (`Sync`,
        pkg/network/controllers/vm.go; kubevirt/kubevirt d923fdb815). Left to the
        running VMI alone, a NIC changed in the instant between the pod's creation
        and the boot kept the pod on the old networks, and the VMI waited for their
        links in `Scheduled` for ever."""
        if self.knobs.dialect != "multus" or ob.dig(vmi, "status", "phase") not in (
                "Scheduled", "Running"):
            return
        spec, status = vmi.get("spec") or {}, vmi.get("status") or {}
        if not pod_networks.change_required(spec, status):
            return
        active = status.get("activePods") or {}
        for pod in self.members(PODS, key):
            if pod["metadata"]["uid"] not in active:
                continue
            try:
                value = pod_networks.generate(
                    spec, vmi["metadata"]["namespace"], bindings=self.knobs.network_bindings,
                    ordinal=pod_networks.ordinal_pod(pod),
                )
            except KeyError:
                continue  # an unregistered binding plugin: KubeVirt leaves the pod alone
            if nw.annotations_of(pod).get(nw.MULTUS_REQUEST) != value:
                self.merge_patch(PODS, pod, {"metadata": {"annotations": {
                    nw.MULTUS_REQUEST: value}}})

    def _report_pod_networks(self, key: VMKey, vmi: Json) -> Json:
        """Multus: an interface of the spec that the active pod's network-status lists
        is reported before virt-handler attaches it (`infoSource: multus-status`), as
        KubeVirt's network controller does; virt-handler attaches only those."""
        status = vmi.get("status") or {}
        if self.knobs.dialect != "multus" or status.get("phase") != "Running":
            return vmi
        pod = ob.domain_pod(vmi, self.members(PODS, key))
        spec = vmi.get("spec") or {}
        links = ob.links_in(pod, spec, "multus")
        reported = {e.get("name") for e in status.get("interfaces") or []}
        new = [
            {"name": name, "podInterfaceName": nw.multus_pod_interface(name),
             "infoSource": "multus-status"}
            for name in (str(i.get("name")) for i in ob.interfaces_of(spec)
                         if i.get("state") != "absent")
            if name in links and name not in reported and name != nw.MAIN_IF_NAME
        ]
        if not new:
            return vmi

        def report(obj: Json) -> None:
            entries = obj.setdefault("status", {}).setdefault("interfaces", [])
            entries += new

        return self.edit(VMIS, vmi, report, status=True)

    def _drop_detached(self, kvvm: Json, vmi: Json) -> None:
        """Absent interfaces no longer in the VMI status leave the VMI and KVVM specs."""
        reported = {i.get("name") for i in ob.dig(vmi, "status", "interfaces") or []}
        gone = {i.get("name") for i in ob.interfaces_of(vmi.get("spec"))
                if i.get("state") == "absent" and i.get("name") not in reported}
        if not gone:
            return

        def drop(spec: Json, only_absent: bool) -> None:
            removed = {i.get("name") for i in ob.interfaces_of(spec) if i.get("name") in gone
                       and (i.get("state") == "absent" or not only_absent)}
            ob.set_interfaces(spec, [i for i in ob.interfaces_of(spec)
                                     if i.get("name") not in removed])
            spec["networks"] = [n for n in ob.networks_of(spec) if n.get("name") not in removed]

        self.edit(VMIS, vmi, lambda obj: drop(obj.setdefault("spec", {}), False))
        self.edit(KVVMS, kvvm, lambda obj: drop(
            obj.setdefault("spec", {}).setdefault("template", {}).setdefault("spec", {}), True))

    def _migration_required(self, key: VMKey, vmi: Json) -> None:
        """KubeVirt's migration evaluator (`pkg/network/migration/evaluator.go`, run by
        the VMI controller's `syncMigrationRequiredCondition`): with or without a
        dynamic-networks controller, a plugged interface the pod does not link yet (an
        unplugged one it still links) raises `False`/`AutoMigrationPending`; `True`
        after the grace, when no controller linked it meanwhile; an SR-IOV interface
        asks for it at once. Not evaluated while the VMI migrates; `True` stays."""
        if self.knobs.dialect != "multus":
            return
        if migrating(vmi):
            return
        status = vmi.get("status") or {}
        uid = vmi["metadata"]["uid"]
        token = (uid, "migration-required")
        pod = ob.domain_pod(vmi, self.members(PODS, key))
        active = [pod] if pod is not None else []
        spec = vmi.get("spec") or {}
        links = ob.links_in(pod, spec, "multus")
        reported = {e.get("name"): str(e.get("infoSource") or "")
                    for e in status.get("interfaces") or []}
        pending = sorted(
            str(i.get("name")) for i in ob.interfaces_of(spec)
            if (i.get("state") != "absent" and i.get("name") not in links)
            # unplugged from the guest, still plumbed in the pod: only a new pod drops it
            or (i.get("state") == "absent" and _pod_only(reported.get(i.get("name"))))
        )
        swapped = _pod_on_other_nad(pod, spec, vmi["metadata"]["namespace"])
        pending = sorted({*pending, *swapped})
        current = ob.condition(vmi, "MigrationRequired")
        if status.get("phase") != "Running" or not active or not pending:
            if current is not None:
                self.edit(VMIS, vmi, lambda o: ob.drop_condition(o["status"], "MigrationRequired"),
                          status=True)
            self.forget(token)
            return
        message = f"interfaces {', '.join(pending)} need a migration to be plugged or unplugged"
        sriov = any("sriov" in i and i.get("name") in pending for i in ob.interfaces_of(spec))
        sriov = sriov or bool(swapped)  # (a NAD swap too: `isNADNameEqual`, 7a3ae40143)
        if (current is not None and current.get("status") == "True") or sriov or self.due(
                token, self.knobs.migration_required_grace, key):
            state, reason = "True", "AutoMigrationDueToLiveUpdate"
        else:
            state, reason = "False", "AutoMigrationPending"
        self.edit(VMIS, vmi, lambda o: ob.set_condition(
            o.setdefault("status", {}), "MigrationRequired", state, reason, message), status=True)


def _nad_swaps(template: Json, spec: Json) -> dict[str, str]:
    """Interface name → the template's `networkName`, where the VMI spec names another
    NAD for the same multus network (`LiveUpdateNADRef`)."""
    wanted = {n.get("name"): (n.get("multus") or {}).get("networkName")
              for n in ob.networks_of(template) if "multus" in n}
    return {str(n.get("name")): str(wanted[n.get("name")]) for n in ob.networks_of(spec)
            if "multus" in n and wanted.get(n.get("name"))
            and wanted[n.get("name")] != (n.get("multus") or {}).get("networkName")}


def _pod_on_other_nad(pod: Json | None, spec: Json, namespace: str) -> list[str]:
    """The VMI's multus networks whose pod interface the pod's network-status lists on
    another NAD than the VMI spec names (the evaluator's `isNADNameEqual`)."""
    if pod is None:
        return []
    statuses = nw.parse_list(nw.annotations_of(pod).get(nw.MULTUS_STATUS)) or []
    listed = {str(s.get("interface")): str(s.get("name")) for s in statuses}
    found = []
    for net in ob.networks_of(spec):
        name = str(net.get("name"))
        wanted = str((net.get("multus") or {}).get("networkName") or "")
        there = listed.get(nw.multus_pod_interface(name)) if wanted else None
        if there is None:
            continue
        full = wanted if "/" in wanted else f"{namespace}/{wanted}"
        if there not in (wanted, full):
            found.append(name)
    return found


def _hotplug_diff(template: Json, spec: Json, bindings: frozenset[str]) -> bool:
    """Does the template add a bridge interface (with its network) or mark one absent
    that the VMI spec does not yet reflect?"""
    mine = {i.get("name"): i for i in ob.interfaces_of(spec)}
    t_networks = {n.get("name"): n for n in ob.networks_of(template)}
    for iface in ob.interfaces_of(template):
        current = mine.get(iface.get("name"))
        if current is None and _pluggable(iface, t_networks, bindings):
            return True
        if current is not None and _unpluggable(iface) and current.get("state") != "absent":
            return True
    return False


def _pod_only(info_source: str | None) -> bool:
    """Reported by the pod's network-status, no longer in the domain."""
    sources = {s.strip() for s in (info_source or "").split(",")}
    return "multus-status" in sources and "domain" not in sources


def _unpluggable(iface: Json) -> bool:
    """Marked absent, and not the default interface (KubeVirt refuses to unplug it)."""
    return iface.get("state") == "absent" and iface.get("name") != nw.MAIN_IF_NAME


def _pluggable(iface: Json, networks: dict[object, Json], bindings: frozenset[str]) -> bool:
    """A bridge or SR-IOV interface (or one bound by a plugin in `bindings`: KubeVirt
    hot-plugs no other, `pkg/network/controllers/vm.go`), not absent, whose
    network the template also declares."""
    binding = iface.get("binding")
    plugin = binding.get("name") if isinstance(binding, dict) else None
    return (iface.get("state") != "absent"
            and ("bridge" in iface or "sriov" in iface or plugin in bindings)
            and iface.get("name") in networks)
