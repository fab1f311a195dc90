"""The simulated multus dynamic-networks controller, for clusters that deploy one.

When `k8s.v1.cni.cncf.io/networks` of a running pod changes, it rewrites
`k8s.v1.cni.cncf.io/network-status` (the default network first, then one entry
`<ns>/<nad>` per requested network on its pod-side interface) after
`delays.sdn_configure`; an unplugged network leaves the status the same way. The real
controller rebuilds the status through a Go map, so the order of the attachments is
not kept: here they come in a seeded shuffle, and only a change of the set rewrites. Without it
(the knob off, the actor not started) the status only shows the networks the pod was
created with. A malformed request annotation is ignored. A request whose
NetworkAttachmentDefinition does not exist is never configured (multus fails to
attach it): it stays out of the status. It writes only the status annotation.
"""

from __future__ import annotations

import random

from nicplug.simulator import networking as nw
from nicplug.simulator import objects as ob
from nicplug.simulator.actors.reactor import Reactor, VMKey
from nicplug.simulator.networking import Json
from nicplug.simulator.resources import NADS, PODS


class DynamicNetworksController(Reactor):
    watches = (PODS,)

    def reconcile(self, key: VMKey) -> None:
        for pod in self.members(PODS, key):
            if ob.dig(pod, "status", "phase") == "Running":
                self._sync(key, pod)

    def _sync(self, key: VMKey, pod: Json) -> None:
        annotations = nw.annotations_of(pod)
        requests = nw.parse_list(annotations.get(nw.MULTUS_REQUEST))
        if requests is None:
            return
        requests = [r for r in requests if self._nad_exists(r)]
        meta = pod["metadata"]
        vm = key[1]
        current = nw.parse_list(annotations.get(nw.MULTUS_STATUS)) or []
        known = {str(e.get("interface")): str(e.get("mac")) for e in current if e.get("mac")}
        macs = {str(r.get("interface")): known.get(str(r.get("interface")))
                or nw.mac_for(meta["namespace"], vm, str(r.get("interface"))) for r in requests}
        wanted = nw.multus_network_status(requests, macs)
        token = (meta["uid"], "network-status")
        if _as_set(wanted) == _as_set(current):
            self.forget(token)
            return
        attachments = wanted[1:]
        random.Random(f"{self.knobs.seed}/{meta['uid']}/{len(current)}").shuffle(attachments)
        wanted = wanted[:1] + attachments
        if not self.due(token, self.knobs.delays.sdn_configure, key):
            return
        self.merge_patch(PODS, pod, {"metadata": {"annotations": {
            nw.MULTUS_STATUS: nw.dump_list(wanted)}}})
        self.forget(token)


    def _nad_exists(self, request: Json) -> bool:
        namespace, name = request.get("namespace"), request.get("name")
        return (isinstance(namespace, str) and isinstance(name, str)
                and self.store.peek(NADS, namespace, name) is not None)


def _as_set(entries: list[Json]) -> set[str]:
    return {nw.dump_list([e]) for e in entries}
