"""Pod patches: the SDN request annotation of a running VM's launcher pod.

Where nicplug writes the pods (the deckhouse dialect, a `WritingDialect`), a
`PatchPodNetworks` carries the whole list of entries the pod should request and the
list its decision read. The patch is sent only if the pod, as the informers hold it,
still requests what the decision read, and only through the order book: after the
VM's KVVM patches it must follow, and never releasing an entry the KubeVirt VM or its
VMI still carries (`OrderBook.check_let_go`). The patch pins the pod's uid and the
annotation it replaces (or the pod's resourceVersion when it had none), so a cache
behind the server makes the server refuse it instead of writing over a newer list. A
404 on the patch of a pod the read has just found is retried with backoff, not decided
again (`_send`), and so is a 409, which is not its `test` failing (`cluster.tested`).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from nicplug.adapters.core.executor.cluster import (
    JSON_PATCH,
    Cluster,
    Result,
    annotation_ops,
    just_read,
    tested,
)
from nicplug.adapters.core.executor.order_book import OrderBook, Write
from nicplug.adapters.kube.calls import pointer
from nicplug.adapters.sdn import MalformedAnnotation
from nicplug.engine.errors import RetryAfterObservation
from nicplug.engine.journal import PendingEffect
from nicplug.machines.effects import PatchPodNetworks


class PodPatches:
    """Writes a `PatchPodNetworks` in its VM's order."""

    def __init__(self, cluster: Cluster, book: OrderBook) -> None:
        self._cluster = cluster
        self._book = book

    async def __call__(self, e: PatchPodNetworks, effect: PendingEffect) -> Result:
        requested = frozenset(r.if_name for r in e.entries)
        result = await self._book.ordered(
            effect, requested, partial(self._patch_pod, e, effect), pod=True, target=e.target)
        if not result.get("superseded"):
            self._book.pod_written(str(effect.key), e.pod_uid, e.pod)
        return result

    async def _patch_pod(self, e: PatchPodNetworks, effect: PendingEffect,
                         mine: Write) -> Result:
        cluster = self._cluster
        writer = cluster.writing()
        value = writer.render_requests(requests=e.entries, namespace=e.namespace)
        if value is None:
            value = writer.empty_pod_requests
        pod = await cluster.read(cluster.kinds.launcher_pods, e.namespace, e.pod)
        key = cluster.dialect.request_annotation
        mine.pin(cluster.kinds.launcher_pods, e.namespace, e.pod, pod, annotation=key)
        self._book.check_fresh(effect, mine)
        current = ((pod.get("metadata") or {}).get("annotations") or {}).get(key)
        if e.observed is not None:
            try:
                requested = cluster.dialect.parse_requests(value=current, namespace=e.namespace)
            except MalformedAnnotation as exc:
                raise RetryAfterObservation(f"pod {e.target}: {exc}") from exc
            if requested != e.observed:
                raise RetryAfterObservation(f"pod {e.target}: its SDN requests changed")
            released = {r.if_name for r in e.observed} - {r.if_name for r in e.entries}
            if released:
                self._book.check_let_go(str(effect.key), frozenset(released))
        ops = annotation_ops(pod, "/metadata", key, value)
        if not ops:
            return {"unchanged": True}
        patch: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": e.pod_uid}]
        if isinstance(current, str):
            patch.append({"op": "test", "path": "/metadata" + pointer("annotations", key),
                          "value": current})
        else:  # nothing to pin but the whole pod: the annotation may have come since
            patch.append({"op": "test", "path": "/metadata/resourceVersion",
                          "value": (pod.get("metadata") or {}).get("resourceVersion")})
        patch += ops
        if self._book.superseded(effect, e.target):
            return {"superseded": True}
        await self._send(e, patch)
        return {"annotation": value}

    async def _send(self, e: PatchPodNetworks, patch: list[dict[str, Any]]) -> None:
        """The patch of a launcher pod the read has just found (`just_read`: one pod
        request four times in 32 s, twice in the same instant, while the server answered
        404, seed 56874); a 409 too, which is not its `test` failing (`tested`)."""
        with just_read("the pod"), tested("the pod"):
            await self._cluster.calls.patch_pod(
                e.namespace, e.pod, patch, content_type=JSON_PATCH)
