"""KubeVirt's workload updater, as far as it migrates VMIs (a part of the KubeVirt actor).

With `LiveMigrate` among the KubeVirt CR's `spec.workloadUpdateStrategy
.workloadUpdateMethods`, KubeVirt migrates by itself every running, migratable VMI whose
`MigrationRequired` is `True` and that no unfinished migration is for
(`pkg/virt-controller/watch/workload-updater/workload-updater.go`: `isHotplugInProgress`,
`doesRequireMigration`). Its migration is named `kubevirt-workload-update-<random>` and
carries the annotation `kubevirt.io/workloadUpdateMigration`. It creates no more than
`parallelMigrationsPerCluster` (5 unless the CR says otherwise) less the migrations
running cluster-wide, once per sync, and syncs at most every 5 s
(`defaultThrottleInterval`, `Delays.workload_update`): here a VMI waits that long once
it qualifies, then gets its migration if the cluster has room, else waits in line
until a migration ends. Never a second migration of a VMI. Launcher images never go out
of date here, so hotplug is all it migrates for.
"""

from __future__ import annotations

from nicplug.simulator import objects as ob
from nicplug.simulator.actors.launchers import migrating
from nicplug.simulator.actors.reactor import Reactor, VMKey
from nicplug.simulator.errors import AlreadyExists
from nicplug.simulator.networking import Json
from nicplug.simulator.resources import KUBEVIRTS, VMIMS

PARALLEL_DEFAULT = 5
"""`ParallelMigrationsPerClusterDefault` (`pkg/virt-config/virt-config.go`)."""
ANNOTATION = "kubevirt.io/workloadUpdateMigration"
GENERATE_NAME = "kubevirt-workload-update-"
FINISHED = ("Succeeded", "Failed")


def live_migrate(kubevirt: Json | None) -> bool:
    methods = ob.dig(kubevirt, "spec", "workloadUpdateStrategy", "workloadUpdateMethods")
    return isinstance(methods, list) and "LiveMigrate" in methods


def parallel(kubevirt: Json | None) -> int:
    found = ob.dig(kubevirt, "spec", "configuration", "migrations",
                   "parallelMigrationsPerCluster")
    return found if isinstance(found, int) and found > 0 else PARALLEL_DEFAULT


class WorkloadUpdater:
    def __init__(self, kubevirt: Reactor) -> None:
        self.kv = kubevirt
        self._counted: tuple[float, int] | None = None  # (when, migrations running then)
        self._waiting: dict[VMKey, None] = {}  # VMIs that qualify, in the order they did

    def _running(self) -> int:
        """The migrations running cluster-wide, counted at most every 0.1 s of the clock
        (every VMI's sync asks; a cluster of 1,000 would list them 1,000 times), as
        KubeVirt counts them from its informer's cache, once per sync."""
        now = self.kv.clock.now()
        if self._counted is None or now - self._counted[0] >= 0.1:
            everywhere, _ = self.kv.store.list_shared(VMIMS)
            running = sum(1 for m in everywhere
                          if ob.dig(m, "status", "phase") not in (*FINISHED, "", "Pending"))
            self._counted = (now, running)
        return self._counted[1]

    def _config(self) -> Json | None:
        found, _ = self.kv.store.list_shared(KUBEVIRTS)
        return found[0] if found else None

    def reconcile(self, key: VMKey, vmi: Json) -> None:
        if self.kv.knobs.dialect != "multus":
            return  # Deckhouse's networks are no multus networks: no MigrationRequired
        uid = vmi["metadata"]["uid"]
        token = (uid, "workload-update")
        required = ob.condition(vmi, "MigrationRequired")
        migratable = ob.condition(vmi, "LiveMigratable")
        kubevirt = self._config()
        cap = parallel(kubevirt)
        if (not live_migrate(kubevirt)
                or ob.dig(vmi, "status", "phase") != "Running"
                or migrating(vmi)
                or required is None or required.get("status") != "True"
                or migratable is None or migratable.get("status") != "True"
                or any(ob.dig(m, "status", "phase") not in FINISHED
                       for m in self.kv.members(VMIMS, key))):
            self.kv.forget(token)
            self._waiting.pop(key, None)
            self._admit(cap)  # (a migration of this VM may just have ended)
            return
        throttle = self.kv.knobs.delays.workload_update
        if not self.kv.due(token, throttle, key):
            return
        running = self._running()
        if running >= cap:
            self._waiting[key] = None  # woken when a migration ends (`_admit`)
            self._admit(cap)
            return
        self.kv.forget(token)
        self._waiting.pop(key, None)
        try:
            self.kv.store.create(VMIMS, {
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                "metadata": {"generateName": GENERATE_NAME, "namespace": key[0],
                             "annotations": {ANNOTATION: ""}},
                "spec": {"vmiName": key[1]},
            })
        except AlreadyExists:  # the random suffix was taken: KubeVirt tries again next sync
            self.kv.due(token, throttle, key)
            return
        self._counted = (self.kv.clock.now(), running + 1)  # it runs at once, or soon

    def _admit(self, cap: int) -> None:
        """Wake as many VMIs waiting for room as there is room: KubeVirt's one sync
        loop takes the next ones when running migrations end."""
        if not self._waiting:
            return
        room = cap - self._running()
        now = self.kv.clock.now()
        if room <= 0:  # look again a sync later, through the first in line
            first = next(iter(self._waiting))
            self.kv._wake(first, now + self.kv.knobs.delays.workload_update)
            return
        for key in list(self._waiting)[:room]:
            del self._waiting[key]
            self.kv._wake(key, now)
