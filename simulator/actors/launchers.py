"""Launcher pods as virt-controller creates them, and whether a VMI is migrating.

The simulated KubeVirt (`kubevirt.py`) and its two parts that create or move pods —
live migrations (`migrations.py`) and the workload updater (`workload_updater.py`) —
share these; they live below all three so that the parts need not import the actor
that owns them (which imports them): the actor hands each part its `Launchers`, and
the parts reach the store through the `Reactor` they are given.
"""

from __future__ import annotations

import random

from nicplug.simulator import objects as ob
from nicplug.simulator import pod_networks
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.networking import Json
from nicplug.simulator.resources import PODS, VMIS
from nicplug.simulator.store import Store

NODES = ("node-a", "node-b", "node-c")


class Launchers:
    """New launcher pods, drawn from the KubeVirt actor's seeded generator."""

    def __init__(self, store: Store, knobs: Knobs, rng: random.Random) -> None:
        self._store = store
        self._knobs = knobs
        self._rng = rng

    def new_pod(self, vmi: Json, request: str | None, *, avoid: str = "",
                migration_uid: str | None = None) -> Json:
        """Create a launcher pod for `vmi` on a node other than `avoid`. Its name is
        generated (`generateName`): a name already taken is drawn again, as KubeVirt
        creates the pod again when the API server answers AlreadyExists."""
        node = self._rng.choice([n for n in NODES if n != avoid])
        namespace, vm = vmi["metadata"]["namespace"], vmi["metadata"]["name"]
        name = ""
        while not name or self._store.peek(PODS, namespace, name) is not None:
            suffix = "".join(self._rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
            name = f"virt-launcher-{vm}-{suffix}"
        pod = ob.launcher_pod(
            vmi, VMIS, name=name, node=node,
            dialect=self._knobs.dialect, request=request, migration_uid=migration_uid,
        )
        return self._store.create(PODS, pod)

    def pod_request(self, kvvm: Json, vmi: Json, source: Json | None = None) -> str | None:
        """The request annotation of a new launcher pod: deckhouse's from the KVVM
        template; multus' generated from the VMI spec by virt-controller (a migration
        target of an ordinal `source` pod keeps the ordinal names)."""
        if self._knobs.dialect == "multus":
            try:
                generated = pod_networks.generate(
                    vmi.get("spec") or {}, vmi["metadata"]["namespace"],
                    bindings=self._knobs.network_bindings,
                    ordinal=pod_networks.ordinal_pod(source),
                )
            except KeyError:
                return None  # an unregistered binding plugin: KubeVirt writes nothing
            return generated or None
        annotations = ob.dig(kvvm, "spec", "template", "metadata", "annotations") or {}
        value = annotations.get(ob.request_annotation(self._knobs.dialect))
        return value if isinstance(value, str) else None


def migrating(vmi: Json) -> bool:
    """`migrations.IsMigrating`: a migration of the VMI started and has not ended."""
    state = ob.dig(vmi, "status", "migrationState")
    return (isinstance(state, dict) and bool(state.get("startTimestamp"))
            and not state.get("endTimestamp") and not state.get("completed"))
