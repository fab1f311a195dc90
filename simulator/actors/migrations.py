"""Live migrations as the simulated KubeVirt runs them (a part of the KubeVirt actor).

A `VirtualMachineInstanceMigration` (`spec.vmiName`) goes Pending → Scheduling (a target
launcher pod exists, created with the request annotation of the *current* KVVM template,
and listed in the VMI's `activePods` beside the source, as virt-controller lists every
pod the VMI controls) → Running (the SDN configured the target: at once in multus, where
networks are given at pod start; when the agent reports every entry ready in deckhouse)
→ Succeeded after `delays.migration`: the VMI's `activePods` and `nodeName` switch to
the target, every interface whose link exists there is attached, `MigrationRequired` is
cleared, the source pod goes. It ends Failed (the target pod deleted and dropped from
`activePods`) when the VMI is not running or not `LiveMigratable`, when the SDN fails the
target, when (deckhouse) an interface of the VMI spec has no link on the target (the
domain cannot start there), or when the knobs say migrations fail (the VMI's
`migrationState` then says `failed`, as it says `completed` on success). One migration
per VMI at a time: KubeVirt's webhook refuses a second one (`simulator/admission.py`).
"""

from __future__ import annotations

from nicplug.simulator import networking as nw
from nicplug.simulator import objects as ob
from nicplug.simulator.actors.launchers import Launchers
from nicplug.simulator.actors.reactor import Reactor, VMKey
from nicplug.simulator.networking import Json
from nicplug.simulator.resources import PODS, VMIMS, VMIS

FINISHED = ("Succeeded", "Failed")


class Migrations:
    def __init__(self, kubevirt: Reactor, launchers: Launchers) -> None:
        self.kv = kubevirt
        self.launchers = launchers

    def reconcile(self, key: VMKey, kvvm: Json, vmi: Json) -> None:
        migrations = self.kv.members(VMIMS, key)
        busy = any(ob.dig(m, "status", "phase") in ("Scheduling", "Running") for m in migrations)
        for migration in migrations:
            phase = ob.dig(migration, "status", "phase") or ""
            vmi = self.kv.find(VMIS, *key) or vmi
            if phase == "Failed":
                self._failed_on_vmi(migration, vmi)
            if phase in FINISHED:
                continue
            if phase in ("", "Pending"):
                if busy:
                    self._set(migration, {"phase": "Pending"})
                else:
                    busy = self._begin(migration, kvvm, vmi)
            elif phase == "Scheduling":
                self._await_target(key, migration)
            elif phase == "Running":
                self._complete(key, migration, vmi)

    def _set(self, migration: Json, status: Json) -> None:
        self.kv.edit(VMIMS, migration, lambda o: o.setdefault("status", {}).update(status),
                     status=True)

    def _fail(self, migration: Json, reason: str, target: Json | None = None) -> None:
        if target is not None:
            self.kv.delete(PODS, target)
            vmi = self.kv.find(VMIS, target["metadata"]["namespace"],
                               ob.dig(migration, "spec", "vmiName") or "")
            gone = target["metadata"]["uid"]
            if vmi is not None and gone in (ob.dig(vmi, "status", "activePods") or {}):
                def drop(obj: Json) -> None:
                    status = obj.setdefault("status", {})
                    active = status.get("activePods") or {}
                    status["activePods"] = {u: n for u, n in active.items() if u != gone}
                self.kv.edit(VMIS, vmi, drop, status=True)
        state = dict(ob.dig(migration, "status", "migrationState") or {})
        state.update({"failed": True, "completed": True, "failureReason": reason})
        self._set(migration, {"phase": "Failed", "migrationState": state})
        # the VMI's own record of the migration ends too, as virt-controller writes it
        vmi = self.kv.find(VMIS, migration["metadata"].get("namespace", ""),
                           ob.dig(migration, "spec", "vmiName") or "")
        if vmi is not None:
            self._failed_on_vmi(migration, vmi, reason)

    def _failed_on_vmi(self, migration: Json, vmi: Json,
                       reason: str = "Target pod is down") -> None:
        """A migration that ended Failed, by this actor or by anyone else (a target pod
        deleted, its phase written), ends on the VMI it moved: failed, completed, with
        an end time (`handleMarkMigrationFailedOnVMI`, run for every `Failed` migration
        the VMI's `migrationState` still names unfailed,
        `pkg/virt-controller/watch/migration/migration.go`). Without it the VMI reads
        as migrating for ever, and nothing that waits for the end of a migration (the
        migration evaluator, the VM's `Migrating`) moves again."""
        state = ob.dig(vmi, "status", "migrationState")
        if (not isinstance(state, dict) or state.get("failed")
                or state.get("migrationUid") != migration["metadata"]["uid"]):
            return

        def ended(obj: Json) -> None:
            status = obj.setdefault("status", {})
            record = dict(status.get("migrationState") or {})
            record.update({"failed": True, "completed": True})
            record.setdefault("endTimestamp", ob.wall_time())
            record["failureReason"] = record.get("failureReason") or reason
            status["migrationState"] = record

        self.kv.edit(VMIS, vmi, ended, status=True)

    def _begin(self, migration: Json, kvvm: Json, vmi: Json) -> bool:
        if ob.dig(vmi, "status", "phase") != "Running":
            self._fail(migration, "the VMI is not running")
            return False
        migratable = ob.condition(vmi, "LiveMigratable")
        if migratable is None or migratable.get("status") != "True":
            self._fail(migration, "the VMI is not live-migratable")
            return False
        if self.kv.knobs.failures.migrations:
            self._fail(migration, "the migration failed (simulated)")
            return False
        uid = migration["metadata"]["uid"]
        key = (vmi["metadata"]["namespace"], vmi["metadata"]["name"])
        pods = self.kv.members(PODS, key)
        source = ob.domain_pod(vmi, pods)
        target = next((p for p in pods if _labels(p).get(nw.MIGRATION_LABEL) == uid), None)
        if target is None:
            target = self.launchers.new_pod(
                vmi, self.launchers.pod_request(kvvm, vmi, source), migration_uid=uid,
                avoid=source["spec"]["nodeName"] if source else "",
            )
        state = {
            "sourcePod": source["metadata"]["name"] if source else None,
            "sourceNode": source["spec"]["nodeName"] if source else None,
            "targetPod": target["metadata"]["name"], "targetNode": target["spec"]["nodeName"],
            "startTimestamp": ob.wall_time(), "completed": False,
        }
        self._set(migration, {"phase": "Scheduling", "migrationState": state})

        def scheduling(obj: Json) -> None:
            status = obj.setdefault("status", {})
            status["migrationState"] = state | {"migrationUid": uid}
            # virt-controller lists every pod the VMI controls, the target too
            active = dict(status.get("activePods") or {})
            active[target["metadata"]["uid"]] = target["spec"]["nodeName"]
            status["activePods"] = active

        self.kv.edit(VMIS, vmi, scheduling, status=True)
        return True

    def _target(self, key: VMKey, migration: Json) -> Json | None:
        name = ob.dig(migration, "status", "migrationState", "targetPod")
        return self.kv.find(PODS, key[0], name) if isinstance(name, str) else None

    def _await_target(self, key: VMKey, migration: Json) -> None:
        target = self._target(key, migration)
        if target is None:
            self._fail(migration, "the target pod is gone")
            return
        if self.kv.knobs.dialect == "deckhouse":
            annotations = nw.annotations_of(target)
            requests = nw.parse_list(annotations.get(nw.DECKHOUSE_REQUEST)) or []
            reports = {str(e.get("ifName")): e
                       for e in nw.parse_list(annotations.get(nw.DECKHOUSE_STATUS)) or []}
            for request in requests:
                report = reports.get(str(request.get("ifName")))
                if report is None:
                    return  # the agent has not got to it yet
                if not nw.deckhouse_ready(report):
                    self._fail(migration, f"the SDN failed {request.get('ifName')} on the "
                               "target", target)
                    return
        self._set(migration, {"phase": "Running"})

    def _complete(self, key: VMKey, migration: Json, vmi: Json) -> None:
        uid = migration["metadata"]["uid"]
        if not self.kv.due((uid, "copy"), self.kv.knobs.delays.migration, key):
            return
        target = self._target(key, migration)
        if target is None or vmi["metadata"]["uid"] != _labels(target).get(nw.CREATED_BY_LABEL):
            self._fail(migration, "the target pod or the VMI is gone", target)
            return
        node = target["spec"]["nodeName"]
        spec = vmi.get("spec") or {}
        links = ob.links_in(target, spec, self.kv.knobs.dialect)
        missing = sorted(str(i.get("name")) for i in ob.interfaces_of(spec)
                         if i.get("state") != "absent" and i.get("name") not in links)
        if missing and self.kv.knobs.dialect == "deckhouse":
            # the target's network setup finds no tap for them: the domain cannot start
            # there, the migration fails and the guest stays on the source
            self._fail(migration, f"no link for {', '.join(missing)} on the target", target)
            return
        multus = self.kv.knobs.dialect == "multus"
        interfaces = [
            ob.attached_interface(str(i.get("name")), index, links[str(i.get("name"))],
                                  multus=multus and i.get("name") != nw.MAIN_IF_NAME)
            for index, i in enumerate(ob.interfaces_of(spec))
            if i.get("state") != "absent" and i.get("name") in links
        ]
        state = dict(ob.dig(migration, "status", "migrationState") or {})
        state.update({"completed": True, "endTimestamp": ob.wall_time()})

        def switch(obj: Json) -> None:
            status = obj.setdefault("status", {})
            status.update({"activePods": {target["metadata"]["uid"]: node}, "nodeName": node,
                           "interfaces": interfaces,
                           "migrationState": state | {"migrationUid": uid}})
            ob.drop_condition(status, "MigrationRequired")

        self.kv.edit(VMIS, vmi, switch, status=True)
        for pod in self.kv.members(PODS, key):
            if pod["metadata"]["uid"] != target["metadata"]["uid"]:
                self.kv.delete(PODS, pod)
        self._set(migration, {"phase": "Succeeded", "migrationState": state})
        self.kv.forget((uid, "copy"))


def _labels(obj: Json) -> dict[str, str]:
    return dict(obj["metadata"].get("labels") or {})
