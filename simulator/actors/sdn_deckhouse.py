"""The simulated Deckhouse SDN agent: configures the links a launcher pod asks for.

On a running pod it reads `network.deckhouse.io/networks-spec` and, `delays.sdn_configure`
after an entry appears, reports it in `network.deckhouse.io/networks-status` with
`Configured` and `Negotiated` conditions — True, or False with a reason when the knobs
fail that network (by identity, or at the seeded rate), or the network does not exist or
is not `Ready` (nothing configures those). A reported-ready entry is a link
that exists: that is what virt-handler checks. An entry gone from the spec leaves the
status after the same delay; when nothing is requested the status annotation goes.

A malformed request annotation is ignored (the agent logs it in reality), never fixed.
It writes only the status annotation, with a merge patch that touches nothing else.
"""

from __future__ import annotations

import random

from nicplug.simulator import networking as nw
from nicplug.simulator import objects as ob
from nicplug.simulator.actors.reactor import Reactor, VMKey
from nicplug.simulator.networking import Json
from nicplug.simulator.resources import CLUSTER_NETWORKS, NETWORKS, PODS


class DeckhouseSDN(Reactor):
    watches = (PODS,)

    def reconcile(self, key: VMKey) -> None:
        for pod in self.members(PODS, key):
            if ob.dig(pod, "status", "phase") == "Running":
                self._configure(key, pod)

    def _configure(self, key: VMKey, pod: Json) -> None:
        annotations = nw.annotations_of(pod)
        requests = nw.parse_list(annotations.get(nw.DECKHOUSE_REQUEST))
        reported = nw.parse_list(annotations.get(nw.DECKHOUSE_STATUS))
        if requests is None:
            return
        uid = pod["metadata"]["uid"]
        delay = self.knobs.delays.sdn_configure
        current = {str(e.get("ifName")): e for e in reported or []}
        wanted = {str(r.get("ifName") or nw.if_name(str(r.get("type")), str(r.get("name")))): r
                  for r in requests}
        result: list[Json] = []
        done: list[tuple[str, str]] = []
        for if_name, request in wanted.items():
            entry = current.get(if_name)
            same = entry is not None and (entry.get("type"), entry.get("name")) == (
                request.get("type"), request.get("name"))
            if same and entry is not None:
                result.append(entry)
            elif self.due((uid, "configure", if_name), delay, key):
                result.append(nw.deckhouse_status(
                    request | {"ifName": if_name}, mac=self._mac(pod, if_name),
                    error=self._failure(pod, request)))
                done.append(("configure", if_name))
        for if_name, entry in current.items():
            if if_name in wanted:
                continue
            if self.due((uid, "release", if_name), delay, key):
                done.append(("release", if_name))
            else:
                result.append(entry)
        if not done:
            return
        value = nw.dump_list(result) if result or requests else None
        self.merge_patch(PODS, pod, {"metadata": {"annotations": {nw.DECKHOUSE_STATUS: value}}})
        for action, if_name in done:
            self.forget((uid, action, if_name))

    def _unusable(self, pod: Json, request: Json) -> str | None:
        """Why the SDN will not configure the entry's network: it does not exist, or it
        is not Ready (the agent configures only networks it has and has readied)."""
        kind, name = str(request.get("type")), str(request.get("name"))
        network = (self.store.peek(NETWORKS, pod["metadata"]["namespace"], name)
                   if kind == "Network" else self.store.peek(CLUSTER_NETWORKS, None, name))
        if network is None:
            return f"{kind} {name} not found"
        conditions = ob.dig(network, "status", "conditions") or []
        if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            return f"{kind} {name} is not ready"
        return None

    @staticmethod
    def _mac(pod: Json, if_name: str) -> str:
        """The MAC of the link the agent made: the one the VM's fixtures give it."""
        meta = pod["metadata"]
        vm = (meta.get("labels") or {}).get(nw.VM_NAME_LABEL, meta["name"])
        return nw.mac_for(meta["namespace"], str(vm), if_name)

    def _failure(self, pod: Json, request: Json) -> str | None:
        identity = f"{request.get('type')}/{request.get('name')}"
        missing = self._unusable(pod, request)
        if missing is not None:
            return missing
        failures = self.knobs.failures
        if identity in failures.sdn_networks:
            return f"the SDN cannot configure {identity} (configured to fail)"
        if failures.sdn_rate > 0:
            meta = pod["metadata"]
            draw = random.Random(f"{self.knobs.seed}|{meta['namespace']}/{meta['name']}|{identity}")
            if draw.random() < failures.sdn_rate:
                return f"the SDN failed to configure {identity} (simulated failure)"
        return None
