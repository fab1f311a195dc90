"""The requests of leader election on a coordination.k8s.io/v1 Lease, each bounded.

Every request carries a total timeout shorter than the renew deadline: a call that
hangs (a partition that drops packets, a frozen API server) fails in time for the
next try, instead of holding the renew loop past the moment its term ends.
Acquiring follows client-go's rules: a Lease held by another is free only after its
record has not changed for `leaseDurationSeconds` *as this candidate observed it*
(clocks of other nodes are never trusted); a replace carries the `resourceVersion`
read, so of two candidates racing for a free Lease one gets a conflict. A holder renews
from the Lease as its last write returned it, one request per renewal (client-go's
optimistic renewal): the replace carries that resourceVersion, so if anyone wrote the
Lease since, it fails with a conflict and the holder reads it again and decides from
what it finds. This module decides nothing about terms; `lease` does.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import aiohttp
from kubernetes_asyncio.client.api.coordination_v1_api import CoordinationV1Api

from nicplug.adapters.kube.calls import JSON_PATCH, compare_and_swap
from nicplug.adapters.kube.client import ApiConnection
from nicplug.adapters.kube.errors import AlreadyExists, Conflict, KubeError, NotFound
from nicplug.adapters.kube.wire import JsonObject, fetch_object

_Record = tuple[object, ...]


def _micro_time(at: datetime.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseCalls:
    """Reads and writes one Lease as `identity`, on a connection of its own.

    `now` is the monotonic clock the expiry of another's lease is measured with;
    `wall` stamps `acquireTime` / `renewTime` for people reading the Lease.
    """

    def __init__(
        self,
        connection: ApiConnection,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: int,
        call_timeout: float,
        now: Callable[[], float],
        wall: Callable[[], datetime.datetime] | None = None,
    ) -> None:
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self._duration = lease_duration
        self._api = CoordinationV1Api(connection.client)
        self._timeout = aiohttp.ClientTimeout(total=call_timeout)
        self._now = now
        self._wall = wall or (lambda: datetime.datetime.now(datetime.UTC))
        self._observed: _Record | None = None
        self._observed_at = 0.0
        self._written: JsonObject | None = None
        """The Lease as this candidate's last write returned it, while it holds it."""
        self.holder = ""
        """The holder the last read found ("" when none, or not read yet)."""

    def _options(self, **extra: Any) -> dict[str, Any]:
        return {"_preload_content": False, "_request_timeout": self._timeout, **extra}

    async def _read(self) -> JsonObject | None:
        try:
            return await fetch_object(
                self._api.read_namespaced_lease(self.name, self.namespace, **self._options()))
        except NotFound:
            return None

    async def acquire_or_renew(self) -> bool:
        """One try to hold the Lease: True when this candidate holds it now.

        False when another holds it unexpired or won a race; a transport or server
        failure (a timeout included) raises `KubeError`.
        """
        holding = self._written is not None and self.holder == self.identity
        if holding and self._written is not None and await self._renew(self._written):
            return True
        lease = await self._read()
        stamp = _micro_time(self._wall())
        if lease is None:
            self.holder = ""
            body: Any = {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self._duration,
                         "acquireTime": stamp, "renewTime": stamp, "leaseTransitions": 0},
            }
            try:
                self._wrote(await fetch_object(self._api.create_namespaced_lease(
                    self.namespace, body, **self._options())))
            except AlreadyExists:
                return False
            return True
        spec: dict[str, Any] = dict(lease.get("spec") or {})
        holder = str(spec.get("holderIdentity") or "")
        self.holder = holder
        self._observe(spec)
        if holder and holder != self.identity:
            duration = spec.get("leaseDurationSeconds")
            duration = duration if isinstance(duration, int) and duration > 0 else self._duration
            if self._now() < self._observed_at + duration:
                return False
        if holder != self.identity:
            spec["acquireTime"] = stamp
            transitions = spec.get("leaseTransitions")
            spec["leaseTransitions"] = (transitions if isinstance(transitions, int) else 0) + 1
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=self._duration,
                    renewTime=stamp)
        replacement: Any = {**lease, "spec": spec}
        try:
            self._wrote(await fetch_object(self._api.replace_namespaced_lease(
                self.name, self.namespace, replacement, **self._options())))
        except Conflict:  # another candidate wrote it since the read
            return False
        return True

    async def _renew(self, written: JsonObject) -> bool:
        """Renew from the Lease as last written, without reading it first: True when
        renewed; False when it changed since (or is gone), so it must be read again."""
        spec: dict[str, Any] = dict(written.get("spec") or {})
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=self._duration,
                    renewTime=_micro_time(self._wall()))
        replacement: Any = {**written, "spec": spec}
        try:
            self._wrote(await fetch_object(self._api.replace_namespaced_lease(
                self.name, self.namespace, replacement, **self._options())))
        except (Conflict, NotFound):
            self._written = None
            return False
        return True

    def _wrote(self, lease: JsonObject) -> None:
        """This candidate's write went through: it holds the Lease as returned."""
        self.holder = self.identity
        self._written = lease
        self._observe(dict(lease.get("spec") or {}))

    def _observe(self, spec: dict[str, Any]) -> None:
        record: _Record = (str(spec.get("holderIdentity") or ""), spec.get("renewTime"),
                           spec.get("acquireTime"), spec.get("leaseTransitions"),
                           spec.get("leaseDurationSeconds"))
        if record != self._observed:
            self._observed, self._observed_at = record, self._now()

    async def release(self) -> bool:
        """Clear the holder if it is this candidate (a compare-and-swap, so it never
        clears another's); True when released."""
        self._written = None
        try:
            lease = await self._read()
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return False
            await fetch_object(self._api.patch_namespaced_lease(
                self.name, self.namespace,
                compare_and_swap("/spec/holderIdentity", self.identity, ""),
                **self._options(_content_type=JSON_PATCH)))
        except (Conflict, NotFound):
            return False
        except KubeError as exc:
            if exc.status == 422:  # the test op failed: someone else holds it now
                return False
            raise
        return True
