"""Events: what nicplug tells a VM's users, as Kubernetes Events about the VM they edit.

`kubectl describe` shows an Event under the object whose uid it names, so the VM's uid
is taken from the informers' copy when they hold one. The recorder (`kube/events.py`)
counts an Event repeated within its window on the recorded one instead of creating
another. Events are written in every flavour, also where KubeVirt owns the pods, the
template and the VM's conditions.
"""

from __future__ import annotations

from collections.abc import Callable

from nicplug.adapters.core.executor.cluster import Cluster, Result
from nicplug.adapters.kube.calls import EventNote
from nicplug.adapters.kube.events import EventRecorder
from nicplug.engine.journal import PendingEffect
from nicplug.machines.effects import EmitEvent


class VMEvents:
    """Records an `EmitEvent` as an Event about the VM."""

    def __init__(self, cluster: Cluster, *, monotonic: Callable[[], float],
                 instance: str) -> None:
        self._cluster = cluster
        self._events = EventRecorder(cluster.calls, monotonic=monotonic, instance=instance)

    async def __call__(self, e: EmitEvent, effect: PendingEffect) -> Result:
        kind, cached = self._cluster.vm_kind, self._cluster.cached
        vm = cached(kind, e.namespace, e.name) if cached is not None else None
        uid = ((vm or {}).get("metadata") or {}).get("uid")  # `kubectl describe` matches it
        involved = {
            "apiVersion": kind.api_version,
            "kind": kind.kind,
            "metadata": {"namespace": e.namespace, "name": e.name,
                         **({"uid": uid} if uid else {})},
        }
        # A 404 on the Event's create is decided again, not retried: the API server
        # answers it when the namespace is gone, and the VM with it (the series patch of
        # an Event that expired is a 404 the recorder answers with a new Event).
        return await self._events.record(
            EventNote(involved=involved, reason=e.reason, message=e.message, type=e.type)
        )
