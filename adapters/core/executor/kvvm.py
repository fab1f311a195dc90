"""KVVM patches: the interfaces and networks of a KubeVirt VM's template.

Where nicplug writes the KVVM (the deckhouse dialect), a `PatchVirtualMachine` carries
the whole list of interfaces and networks the template should hold, and what its
decision read of the template (`observed`), of the VMI's launcher pods (`pods`) and,
for a VM that is stopped, that no VMI ran. Each is checked against the objects as the
informers hold them (a template that moved, a VMI on other pods, a VM started since:
decide again), and the patch goes through the order book: after the pod patches of
its VM it must follow, and attaching nothing a launcher pod no longer requests
(`OrderBook.check_requested`). The patch pins the KVVM's resourceVersion. A 404 on
the patch of a KVVM the read has just found is retried with backoff, not decided again
(`cluster.just_read`), and so is a 409, which is not its `test` failing (`cluster.tested`).
"""

from __future__ import annotations

from collections.abc import Mapping
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
from nicplug.adapters.core.executor.order_book import OrderBook, Write, attached
from nicplug.adapters.kube import errors as kube_errors
from nicplug.adapters.kube.translate import records
from nicplug.adapters.kube.translate.objects import KVVMObject, MalformedObject, read
from nicplug.engine.errors import RetryAfterObservation
from nicplug.engine.journal import PendingEffect
from nicplug.machines.effects import PatchVirtualMachine
from nicplug.machines.world import MAIN_IF_NAME, SDNRequest


class KVVMPatches:
    """Writes a `PatchVirtualMachine` in its VM's order."""

    def __init__(self, cluster: Cluster, book: OrderBook) -> None:
        self._cluster = cluster
        self._book = book

    async def __call__(self, e: PatchVirtualMachine, effect: PendingEffect) -> Result:
        return await self._book.ordered(
            effect, attached(e), partial(self._patch_kvvm, e, effect), pod=False,
            target=e.target)

    async def _patch_kvvm(self, e: PatchVirtualMachine, effect: PendingEffect,
                          mine: Write) -> Result:
        cluster = self._cluster
        writer = cluster.writing()
        kvvm = await cluster.read(cluster.kinds.kvvms, e.namespace, e.name)
        mine.pin(cluster.kinds.kvvms, e.namespace, e.name, kvvm)
        self._book.check_fresh(effect, mine)
        self._check_template(e, kvvm)
        if e.stopped:
            await self._check_stopped(e)
        if e.pods:
            vmi = await cluster.read(cluster.kinds.vmis, e.namespace, e.name)
            serving = (vmi.get("status") or {}).get("activePods") or {}
            if not isinstance(serving, dict) or set(serving) != set(e.pods):
                raise RetryAfterObservation(
                    f"VMI {e.target} moved to other launcher pods since the decision")
            self._book.check_requested(e, str(effect.key))
        template = (kvvm.get("spec") or {}).get("template") or {}
        tspec = template.get("spec") or {}
        old_ifaces = {
            i.get("name"): i
            for i in ((tspec.get("domain") or {}).get("devices") or {}).get("interfaces") or ()
        }
        old_nets = {n.get("name"): n for n in tspec.get("networks") or ()}
        interfaces: list[dict[str, Any]] = []
        networks: list[dict[str, Any]] = []
        wanted = {r.if_name: r for r in e.template_requests}
        for entry in e.networks:
            current = old_ifaces.get(entry.if_name)
            if entry.identity in ("", "Main") or entry.if_name == MAIN_IF_NAME or (
                    entry.absent and current):
                iface = dict(current or {"name": entry.if_name, "bridge": {}})
            else:
                request = wanted.get(entry.if_name) or SDNRequest(entry.identity, entry.if_name)
                iface = writer.kubevirt_interface(request=request, current=current)
            if entry.absent:
                iface["state"] = "absent"
            else:
                iface.pop("state", None)
            interfaces.append(iface)
            if entry.identity == "" and entry.if_name in old_nets:
                networks.append(old_nets[entry.if_name])
            elif entry.identity == "Main" or entry.if_name == MAIN_IF_NAME:
                networks.append(old_nets.get(entry.if_name) or {"name": MAIN_IF_NAME, "pod": {}})
            else:
                request = SDNRequest(entry.identity, entry.if_name)
                networks.append(writer.kubevirt_network(request=request, namespace=e.namespace))
        annotation = writer.render_requests(requests=e.template_requests, namespace=e.namespace)
        version = (kvvm.get("metadata") or {}).get("resourceVersion")
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": version},
            # `add` replaces a member that exists and creates one that does not.
            {"op": "add", "path": "/spec/template/spec/domain/devices/interfaces",
             "value": interfaces},
            {"op": "add", "path": "/spec/template/spec/networks", "value": networks},
        ]
        ops += annotation_ops(
            template, "/spec/template/metadata", writer.request_annotation, annotation)
        if self._book.superseded(effect, e.target):
            return {"superseded": True}
        # its 404 and a 409 are retried, not decided again (`just_read`, `tested`)
        with just_read("the KVVM"), tested("the KVVM"):
            await cluster.calls.patch(
                cluster.kinds.kvvms, e.namespace, e.name, ops, content_type=JSON_PATCH)
        return {"interfaces": [i["name"] for i in interfaces]}

    async def _check_stopped(self, e: PatchVirtualMachine) -> None:
        """The decision wrote for the next boot: the VM must still have no live VMI,
        neither as the informers hold it nor as the server answers (either may be
        behind, or wrong: a live VMI either shows refuses the write). Read after the
        KVVM, whose resourceVersion the patch pins: a VMI KubeVirt creates later
        changes the KVVM's status (`created`), so the patch fails."""
        cluster = self._cluster
        if cluster.cached is not None and _live(cluster.cached(cluster.kinds.vmis, e.namespace,
                                                               e.name)):
            raise RetryAfterObservation(
                f"VM {e.target} started since the decision wrote for its next boot "
                f"(its VMI is in the cache)")
        try:
            vmi = await cluster.calls.get(cluster.kinds.vmis, e.namespace, e.name)
        except kube_errors.NotFound:
            return
        if _live(vmi):
            raise RetryAfterObservation(
                f"VM {e.target} started since the decision wrote for its next boot")

    def _check_template(self, e: PatchVirtualMachine, kvvm: Mapping[str, Any]) -> None:
        """The KVVM template still reads as the decision saw it (when its
        resourceVersion moved: status churn alone is no reason to decide again)."""
        seen = e.observed
        if seen is None or (kvvm.get("metadata") or {}).get("resourceVersion") == seen.version:
            return
        try:
            now, _ = records.kvvm(
                read(KVVMObject, kvvm, kind="KubeVirt VirtualMachine"),
                dialect=self._cluster.dialect, vmi_exists=True,
            )
        except MalformedObject as exc:
            raise RetryAfterObservation(str(exc)) from exc
        if not seen.same_template(now.interfaces, now.networks, now.template_requests):
            raise RetryAfterObservation(f"KVVM {e.target}: its template changed")


def _live(vmi: Mapping[str, Any] | None) -> bool:
    """A VMI that exists and has not finished."""
    return vmi is not None and (vmi.get("status") or {}).get("phase") not in (
        "Succeeded", "Failed")
