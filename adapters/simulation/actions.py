"""The hands of a simulated run: what the user, the platform and the faults do at a step.

The user's and the platform's acts are ordinary writes to the simulated store (the
store's semantics apply: generations, resourceVersions, watch events), faults go
through the simulator's `Faults` (HTTP layer) and the replicas (crash, partition, a
journal that cannot commit). `heal()` ends every fault at once, for the liveness phase.
Nothing here decides anything the controller should decide.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from nicplug.adapters.kube import hotplug_edits as edits
from nicplug.adapters.simulation.invariants import (
    USER_MIGRATION,
    USER_OPERATION,
    Spoiled,
    Watchman,
    sdn_said,
)
from nicplug.adapters.simulation.replicas import Replica
from nicplug.adapters.simulation.schedule import NETWORKS, Setup, Step
from nicplug.machines.targets import WAITS_FOR_OPERATION
from nicplug.machines.world import VMOP_FINISHED, if_name_of
from nicplug.simulator import networking as nw
from nicplug.simulator import objects as ob
from nicplug.simulator.actors.deckhouse_macs import mac_pool
from nicplug.simulator.admission import admit
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.errors import ApiError
from nicplug.simulator.resources import (
    KUBEVIRTS,
    KVVMS,
    PODS,
    VMIMS,
    VMIS,
    VMMACS,
    VMOPS,
    VMS,
    Resource,
)
from nicplug.simulator.watching import Change

Json = dict[str, Any]
MERGE = "application/merge-patch+json"
_IDS = {f"{t}/{n}": i for t, n, i in NETWORKS}


class Hands:
    def __init__(self, cluster: SimulatedCluster, replicas: list[Replica], watchman: Watchman,
                 setup: Setup) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.replicas = replicas
        self.watchman = watchman
        self.setup = setup
        self._previous: dict[str, list[str]] = {}
        self._spoiled: dict[tuple[Resource, str, str], Json] = {}
        self._later: list[asyncio.Task[None]] = []
        self.clock_debt = 0.0  # the furthest any wall clock ran ahead
        self._migrations = 0
        self._operations = 0
        # the user's intents armed for nicplug's next restart of a VM: (ns, name) ->
        # (when: "stopping" | "stopped", [[operation type, seconds after the one before]])
        self._intents: dict[tuple[str, str], list[tuple[str, list[list[Any]]]]] = {}
        self._users: list[asyncio.Task[None]] = []  # the user's acts: no fault, never healed

    # -- time ----------------------------------------------------------------------------

    async def wait(self, seconds: float) -> None:
        left = seconds
        while left > 0 and not self.watchman.violations:
            chunk = min(left, 30.0)
            await asyncio.sleep(chunk)
            left -= chunk
        await asyncio.sleep(0)

    async def until_ready(self) -> None:
        for _ in range(600):
            if any(r.ready for r in self.replicas):
                return
            await asyncio.sleep(0.5)
        raise RuntimeError("no replica became ready within 300 virtual seconds")

    def _later_do(self, seconds: float, job: Any) -> None:
        async def run() -> None:
            await asyncio.sleep(seconds)
            job()
        self._later.append(asyncio.ensure_future(run()))

    # -- looking -------------------------------------------------------------------------

    def vm(self, index: int) -> tuple[str, str]:
        return self.cluster.vms[index % len(self.cluster.vms)]

    @property
    def _edits_template(self) -> bool:
        """Upstream KubeVirt: the user's desired state is the KubeVirt VM's template."""
        return self.setup.dialect == "multus"

    def _desired(self, ns: str, name: str) -> list[str]:
        if self._edits_template:
            kvvm = self.store.peek(KVVMS, ns, name) or {}
            return edits.desired(kvvm, cluster_nad_namespace=self._nad_namespace)
        vm = self.store.peek(VMS, ns, name) or {}
        return [f"{n['type']}/{n['name']}" for n in ob.dig(vm, "spec", "networks") or []
                if isinstance(n, dict) and n.get("type") != "Main"]

    @property
    def _nad_namespace(self) -> str:
        return self.cluster.knobs.cluster_network_nad_namespace

    def _names(self, ns: str, name: str) -> dict[str, str]:
        """identity → interface name of each desired network: deckhouse names it after the
        MAC the simulated Deckhouse gives it (none yet: no name); upstream KubeVirt names
        it as the user's template does."""
        desired = self._desired(ns, name)
        if self.setup.dialect != "deckhouse":
            kvvm = self.store.peek(KVVMS, ns, name) or {}
            return {i: edits.interface_of(kvvm, i, cluster_nad_namespace=self._nad_namespace)
                    or nw.if_name(*i.split("/", 1)) for i in desired}
        vm = self.store.peek(VMS, ns, name) or {}
        uid = ob.dig(vm, "metadata", "uid")
        vmmacs, _ = self.store.list(VMMACS, ns)
        mine = [m for m in vmmacs if (ob.dig(m, "metadata", "labels") or {}).get(
            ob.VM_UID_LABEL) == uid]
        pool = mac_pool(vm, mine)
        return {f"{t}/{n}": nw.mac_if_name(t, mac) for (t, n), mac in pool.items()}

    def _leader(self) -> Replica:
        for replica in self.replicas:
            if replica.leading:
                return replica
        return self.replicas[0]

    def world(self) -> dict[str, Json]:
        """Per VM: what the user asks and what the guest has, for the liveness check."""
        seen: dict[str, Json] = {}
        for ns, name in self.cluster.vms:
            vmi = self.store.peek(VMIS, ns, name)
            kvvm = self.store.peek(KVVMS, ns, name) or {}
            attached = {str(i.get("name")) for i in ob.dig(vmi, "status", "interfaces") or []
                        if "domain" in str(i.get("infoSource", ""))}
            errors: dict[str, set[str]] = {}  # ifName -> what the SDN says of it
            since: dict[str, float] = {}  # ifName -> when the SDN began to say it
            for pod in self._pods_of(ns, name):
                uid = str(pod["metadata"].get("uid"))
                for if_name, said in sdn_said(pod).items():
                    errors.setdefault(if_name, set()).update(said)
                    began = self.watchman.sdn_error_since.get((uid, if_name), 0.0)
                    since[if_name] = min(since.get(if_name, began), began)
            seen[f"{ns}/{name}"] = {
                "sdn_errors": errors,
                "sdn_error_since": since,
                "desired": self._desired(ns, name),
                "names": self._names(ns, name),
                "running": vmi is not None and ob.dig(vmi, "status", "phase") == "Running",
                "wants_running": _wants_running(kvvm, vmi),
                "restart_left_to_user": _restart_left_to_user(self.store.peek(VMS, ns, name)),
                "restart_waits_for_operation": self._restart_waits_for_operation(ns, name),
                "attached": attached,
                "malformed": (ns, name) in self.watchman.malformed,
            }
        return seen

    def _restart_waits_for_operation(self, ns: str, name: str) -> str | None:
        """The VirtualMachineOperation nicplug says on the VM its pending restart waits
        for, when Deckhouse has indeed not finished it (None otherwise): Deckhouse runs a
        VM's operations one at a time, and a `Start` is complete only once the VM runs
        (`IsComplete`, pkg/controller/vmop/powerstate/internal/service/start.go), which
        a VM whose SDN fails an interface never does."""
        condition = ob.condition(self.store.peek(VMS, ns, name), "NetworkHotplugRestartRequired")
        message = str((condition or {}).get("message", ""))
        said = message.partition(WAITS_FOR_OPERATION)[2].split(" ", 1)[0]
        if not said:
            return None
        operation = self.store.peek(VMOPS, ns, said)
        phase = ob.dig(operation, "status", "phase")
        if operation is None or phase in VMOP_FINISHED:
            return None
        return said

    def actor_errors(self) -> list[str]:
        return list(self.cluster.actor_errors)

    # -- acting --------------------------------------------------------------------------

    async def act(self, step: Step) -> None:
        ns, name = self.vm(step.vm)
        handler = getattr(self, f"_do_{step.action}", None)
        if handler is None:
            raise ValueError(f"unknown action {step.action!r}")
        with contextlib.suppress(ApiError):  # the object is gone or changed under the user
            handler(ns, name, step.arg)
        await asyncio.sleep(0)

    def _set_networks(self, ns: str, name: str, identities: list[str]) -> None:
        key = f"{ns}/{name}"
        current = self._desired(ns, name)
        self._previous[key] = current
        if self._edits_template:  # as the KubeVirt user guide does it
            kvvm = self.store.peek(KVVMS, ns, name)
            wanted = sorted(set(identities), key=lambda i: _IDS.get(i, 99))
            patch = None if kvvm is None else edits.set_networks(
                kvvm, wanted, cluster_nad_namespace=self._nad_namespace,
                name_of=lambda t, n: if_name_of(t, n))  # type: ignore[arg-type]
            if patch is not None:
                self.store.patch(KVVMS, ns, name, patch, content_type=MERGE)
                self.watchman.changes[key] += 1
            return
        entries: list[Json] = [{"type": "Main", "id": 1}]
        for identity in sorted(set(identities), key=lambda i: _IDS.get(i, 99)):
            type_, _, net = identity.partition("/")
            entries.append({"type": type_, "name": net, "id": _IDS.get(identity, 9)})
        self.store.patch(VMS, ns, name, {"spec": {"networks": entries}}, content_type=MERGE)
        self.watchman.changes[key] += 1

    def _do_networks(self, ns: str, name: str, arg: list[str]) -> None:
        self._set_networks(ns, name, list(arg))

    def _identity(self, net: str) -> str:
        return next(f"{t}/{n}" for t, n, _ in NETWORKS if n == net)

    def _do_add(self, ns: str, name: str, arg: str) -> None:
        self._set_networks(ns, name, [*self._desired(ns, name), self._identity(arg)])

    def _do_remove(self, ns: str, name: str, arg: str) -> None:
        gone = self._identity(arg)
        self._set_networks(ns, name, [i for i in self._desired(ns, name) if i != gone])

    def _do_revert(self, ns: str, name: str, _arg: Any) -> None:
        self._set_networks(ns, name, self._previous.get(f"{ns}/{name}", []))

    def _run_strategy(self, ns: str, name: str, strategy: str) -> None:
        self.store.patch(KVVMS, ns, name, {"spec": {"runStrategy": strategy, "running": None}},
                         content_type=MERGE)

    def _operate(self, ns: str, name: str, type_: str) -> None:
        """A user's `d8 v stop|start|restart`: on Deckhouse the KVVM's run strategy is the
        platform's (Manual), so the user asks through a VirtualMachineOperation."""
        self._operations += 1
        self.store.create(VMOPS, {
            "apiVersion": VMOPS.api_version, "kind": VMOPS.kind,
            "metadata": {"name": f"{USER_OPERATION}{self._operations}", "namespace": ns},
            "spec": {"type": type_, "virtualMachineName": name},
        })

    def _do_stop(self, ns: str, name: str, _arg: Any) -> None:
        if self.setup.dialect == "deckhouse":
            self._operate(ns, name, "Stop")
        else:
            self._run_strategy(ns, name, "Halted")

    def _do_start(self, ns: str, name: str, _arg: Any) -> None:
        if self.setup.dialect == "deckhouse":
            self._operate(ns, name, "Start")
        else:
            self._run_strategy(ns, name, "Always")

    def _do_restart(self, ns: str, name: str, _arg: Any) -> None:
        if self.setup.dialect == "deckhouse":
            self._operate(ns, name, "Restart")
        else:
            self.store.delete(VMIS, ns, name)

    def _do_intend(self, ns: str, name: str, arg: Json) -> None:
        """The user will start, stop or restart the VM themselves once nicplug's next
        restart of it is under way (`schedule._intent`): its `Stop` created
        (`stopping`) or completed (`stopped`)."""
        self._intents.setdefault((ns, name), []).append((str(arg["when"]), list(arg["acts"])))

    def on_change(self, change: Change) -> None:
        """Every change the store commits: the moment an intent waits for."""
        if change.resource is not VMOPS or not self._intents:
            return
        operation = change.obj
        if (operation["metadata"]["name"].startswith(USER_OPERATION)
                or ob.dig(operation, "spec", "type") != "Stop"):
            return
        completed = ob.dig(operation, "status", "phase") == "Completed" and (
            change.prev is None or ob.dig(change.prev, "status", "phase") != "Completed")
        moment = "stopping" if change.type == "ADDED" else "stopped" if completed else None
        key = (operation["metadata"].get("namespace", ""),
               str(ob.dig(operation, "spec", "virtualMachineName")))
        armed = self._intents.get(key, [])
        for intent in [i for i in armed if i[0] == moment]:
            armed.remove(intent)
            self._users.append(asyncio.ensure_future(self._play(key, intent[1])))

    async def _play(self, key: tuple[str, str], acts: list[list[Any]]) -> None:
        await asyncio.sleep(0)  # not inside the store's commit that woke it
        for type_, seconds in acts:
            await asyncio.sleep(float(seconds))
            with contextlib.suppress(ApiError):
                self._operate(*key, str(type_))

    def _do_replace_pod(self, ns: str, name: str, _arg: Any) -> None:
        """The launcher pod dies (node lost, evicted): the VMI fails, KubeVirt recreates."""
        vmi = self.store.peek(VMIS, ns, name)
        if vmi is None:
            return
        for pod in self._pods_of(ns, name):
            self.store.delete(PODS, ns, pod["metadata"]["name"])
        self.store.patch(VMIS, ns, name, {"status": {"phase": "Failed"}}, content_type=MERGE,
                         subresource="status")

    def _pods_of(self, ns: str, name: str) -> list[Json]:
        pods, _ = self.store.list_shared(PODS, ns, label_selector=f"{nw.VM_NAME_LABEL}={name}")
        return list(pods)

    def _do_migrate(self, ns: str, name: str, _arg: Any) -> None:
        self._migrations += 1
        migration = {
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": f"{USER_MIGRATION}{self._migrations}", "namespace": ns},
            "spec": {"vmiName": name},
        }
        admit(self.store, VMIMS, migration)  # the user's goes through KubeVirt's webhook too
        self.store.create(VMIMS, migration)

    def _do_fail_migration(self, ns: str, name: str, _arg: Any) -> None:
        migrations, _ = self.store.list_shared(VMIMS, ns)
        for migration in migrations:
            if ob.dig(migration, "spec", "vmiName") != name:
                continue
            if ob.dig(migration, "status", "phase") in ("Succeeded", "Failed"):
                continue
            uid = migration["metadata"]["uid"]
            for pod in self._pods_of(ns, name):
                if (pod["metadata"].get("labels") or {}).get(nw.MIGRATION_LABEL) == uid:
                    self.store.delete(PODS, ns, pod["metadata"]["name"])
            self.store.patch(VMIMS, ns, migration["metadata"]["name"],
                             {"status": {"phase": "Failed"}}, content_type=MERGE,
                             subresource="status")

    # -- faults --------------------------------------------------------------------------

    def _do_http_fault(self, _ns: str, _name: str, arg: Json) -> None:
        self.cluster.faults.fail_requests(int(arg["code"]), times=int(arg["times"]),
                                          verb=arg.get("verb"),
                                          retry_after=int(arg.get("retry_after", 1)))

    def _do_slow(self, _ns: str, _name: str, seconds: float) -> None:
        faults = self.cluster.faults
        faults.add_latency(float(seconds))
        self._later_do(20.0, faults.clear_latency)

    def _do_drop_watches(self, _ns: str, _name: str, _arg: Any) -> None:
        self.cluster.faults.drop_watches(after_events=0, times=3)

    def _do_expire_watches(self, _ns: str, _name: str, _arg: Any) -> None:
        self.cluster.faults.expire_resumptions(times=3)
        self.cluster.faults.drop_watches(after_events=0, times=3)

    def _do_stall_watches(self, _ns: str, _name: str, _arg: Any) -> None:
        self.cluster.faults.stall_watches()

    def _do_resume_watches(self, _ns: str, _name: str, _arg: Any) -> None:
        self.cluster.faults.resume_watches()

    def _do_kill(self, _ns: str, _name: str, restart_after: float) -> None:
        victim = self._leader()

        async def crash() -> None:
            await victim.kill()
            await asyncio.sleep(float(restart_after))
            if not victim.alive:
                victim.start()

        self._later.append(asyncio.ensure_future(crash()))

    def _do_journal_full(self, _ns: str, _name: str, commits: int) -> None:
        self._leader().commit_faults.failing += int(commits)

    def _do_partition(self, _ns: str, _name: str, seconds: float) -> None:
        victim = self._leader()
        victim.reachable = False

        def rejoin() -> None:
            victim.reachable = True

        self._later_do(float(seconds), rejoin)

    def _do_malform(self, ns: str, name: str, kind: str) -> None:
        if kind == "kubevirt":
            items, _ = self.store.list_shared(KUBEVIRTS)
            if not items:
                return
            cr = items[0]
            key = (KUBEVIRTS, cr["metadata"].get("namespace", ""), cr["metadata"]["name"])
            # Not "held still": one unreadable KubeVirt CR must not hold every VM (issue 12,
            # defect 7); the decisions it feeds are the controller's to make.
            self._spoil(key, {"spec": {"configuration": "not-an-object"}})
            return
        patches: dict[str, tuple[Resource, str, Json]] = {
            "vm": (VMS, name, {"spec": {"disruptions": "not-an-object"}}),
            "kvvm": (KVVMS, name, {"spec": {"template": {"spec": {"networks": "bad"}}}}),
            "vmi": (VMIS, name, {"status": {"interfaces": "bad"}}),
        }
        if kind == "pod":
            pods = self._pods_of(ns, name)
            if not pods:
                return
            # An unreadable SDN annotation does not hold the VM: the controller decides
            # from the rest of its world and never writes over what it could not read
            # (only writes to that pod are the watchman's business).
            pod = pods[0]["metadata"]["name"]
            key = (PODS, ns, pod)
            if key not in self._spoiled:
                self._spoil(key, {"metadata": {"annotations": {
                    ob.request_annotation(self.setup.dialect): "{not json"}}})
                self.watchman.malformed_pods.add((ns, pod))
            return
        res, obj_name, patch = patches[kind]
        if self.store.peek(res, ns, obj_name) is None:
            return
        spoiled = self._spoil((res, ns, obj_name), patch)
        if spoiled is not None:
            self.watchman.malformed.setdefault((ns, name), []).append(
                Spoiled(res, obj_name, int(spoiled["metadata"]["resourceVersion"])))

    def _spoil(self, key: tuple[Resource, str, str], patch: Json) -> Json | None:
        """Make the object unreadable (once until healed): the object as this call
        spoiled it, or None."""
        res, ns, name = key
        original = self.store.peek(res, ns or None, name)
        if original is None or key in self._spoiled:
            return None
        self._spoiled[key] = original
        return self.store.patch(res, ns or None, name, patch, content_type=MERGE,
                                subresource="status" if "status" in patch else None)

    def _do_heal(self, _ns: str, _name: str, _arg: Any) -> None:
        for (res, ns, name), original in list(self._spoiled.items()):
            current = self.store.peek(res, ns or None, name)
            if current is not None:
                body = dict(original)
                body["metadata"] = dict(original["metadata"],
                                        resourceVersion=current["metadata"]["resourceVersion"])
                try:
                    self.store.update(res, body)
                    if res.has_status and "status" in original:
                        fresh = self.store.get(res, ns or None, name)
                        self.store.update(res, fresh | {"status": original["status"]},
                                          subresource="status")
                except ApiError:
                    pass
        self._spoiled.clear()
        self.watchman.malformed.clear()
        self.watchman.malformed_pods.clear()

    def _do_sdn_error(self, ns: str, name: str, net: str) -> None:
        if self.setup.dialect != "deckhouse":
            return
        type_, _, network = self._identity(net).partition("/")
        for pod in self._pods_of(ns, name):
            raw = nw.annotations_of(pod).get(nw.DECKHOUSE_STATUS)
            entries = nw.parse_list(raw) or []
            changed = [nw.deckhouse_status(e, mac=str(e.get("mac", "")),
                                           error="simulated: the bridge went away")
                       if (e.get("type"), e.get("name")) == (type_, network) else e
                       for e in entries]
            if changed != entries:
                self.store.patch(PODS, ns, pod["metadata"]["name"], {"metadata": {"annotations": {
                    nw.DECKHOUSE_STATUS: nw.dump_list(changed)}}}, content_type=MERGE)

    # -- the end of faults ---------------------------------------------------------------

    def _do_clock_step(self, _ns: str, _name: str, seconds: float) -> None:
        """The controllers' wall clock stepped by `seconds` (NTP, an operator)."""
        for replica in self.replicas:
            replica.clock.step += seconds
            self.clock_debt = max(self.clock_debt, replica.clock.step)

    async def heal(self) -> None:
        """Every fault ends: HTTP, watches, network, journal; the dead restart; the wall
        clocks are set right (a deadline armed while one ran ahead lies that much
        further: `clock_debt` is added to the quiet period)."""
        for replica in self.replicas:
            replica.clock.step = 0.0
        for task in self._later:
            task.cancel()
        await asyncio.gather(*self._later, return_exceptions=True)
        self._later.clear()
        self.cluster.faults.clear()
        self._do_heal("", "", None)
        for replica in self.replicas:
            replica.reachable = True
            replica.commit_faults.failing = 0
            if not replica.alive:
                replica.start()


def _wants_running(kvvm: Json, vmi: Json | None) -> bool:
    """Whether the VM is meant to run: its run strategy says so, or under `Manual` (the
    platform's, Deckhouse) it runs a VMI that has not shut down or is asked to start."""
    if not kvvm:
        return False
    if ob.dig(kvvm, "spec", "runStrategy") != "Manual":
        return ob.wants_running(kvvm)
    requests = ob.dig(kvvm, "status", "stateChangeRequests") or []
    if requests and requests[-1].get("action") == "Start":
        return True
    return vmi is not None and ob.dig(vmi, "status", "phase") != "Succeeded"


def _restart_left_to_user(vm: Json | None) -> bool:
    """nicplug says on the VM that it leaves the pending restart to the user (a run
    policy Deckhouse will not stop, a Stop the platform refused)."""
    condition = ob.condition(vm, "NetworkHotplugRestartRequired")
    return condition is not None and "leaves the restart to you" in str(
        condition.get("message", ""))
