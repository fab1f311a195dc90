"""The garbage collector, for the objects nicplug owns: a `NetworkInterfaceOperation`
goes when its VM does.

As kube-controller-manager's collector does for any object, an operation object whose
owners (`ownerReferences`, by uid: a VM made again under the same name is another
owner) all no longer exist is deleted, whether its owner went after it was made or
was gone already. Only these objects: the KubeVirt actor removes what KubeVirt owns.
"""

from __future__ import annotations

import contextlib

from nicplug.simulator import objects as ob
from nicplug.simulator.actors.reactor import Reactor, VMKey
from nicplug.simulator.errors import Conflict, NotFound
from nicplug.simulator.networking import Json
from nicplug.simulator.resources import KVVMS, OPERATIONS, VMS, Resource

_OWNERS: dict[tuple[str, str], Resource] = {
    (VMS.api_version, "VirtualMachine"): VMS,
    (KVVMS.api_version, "VirtualMachine"): KVVMS,
}


class GarbageCollector(Reactor):
    watches = (VMS, KVVMS, OPERATIONS)
    indexed = (OPERATIONS,)

    def reconcile(self, key: VMKey) -> None:
        for obj in self.members(OPERATIONS, key):
            if not any(self._exists(obj, owner) for owner in
                       ob.dig(obj, "metadata", "ownerReferences") or []):
                meta = obj["metadata"]
                with contextlib.suppress(NotFound, Conflict):  # gone, or made again meanwhile
                    self.store.delete(OPERATIONS, meta["namespace"], meta["name"],
                                      uid=meta["uid"])

    def _exists(self, obj: Json, owner: Json) -> bool:
        res = _OWNERS.get((str(owner.get("apiVersion")), str(owner.get("kind"))))
        if res is None:
            return True  # an owner of a kind not simulated here: left alone
        found = self.store.peek(res, obj["metadata"]["namespace"], str(owner.get("name")))
        return found is not None and found["metadata"].get("uid") == owner.get("uid")
