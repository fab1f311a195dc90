"""The executor: one effect in, the request its handler makes, the outcome out.

`KubeExecutor` is the engine's `EffectExecutor` port for Kubernetes. It decodes an
effect's payload (one that does not decode is dropped and its VM decided again), hands
a pod or KVVM patch to the order book first (`order_book.py`: an older patch of an
object is never sent after a newer one started), looks the handler up by the effect's
type in one table, times it, and translates what the API server answered into the
engine's errors, once for every handler: a conflict or a vanished object is
`RetryAfterObservation` (decide again from the next world), 429/5xx and timeouts
`TemporaryError` (with `Retry-After`), a refusal (RBAC, admission: 403/422) and every
other rejection `PermanentError`. It decides nothing about *what* to do.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from nicplug.adapters.core.executor.cluster import Cached, Cluster, Result
from nicplug.adapters.core.executor.conditions import Conditions
from nicplug.adapters.core.executor.events import VMEvents
from nicplug.adapters.core.executor.kvvm import KVVMPatches
from nicplug.adapters.core.executor.migrations import Migrations
from nicplug.adapters.core.executor.order_book import OrderBook
from nicplug.adapters.core.executor.pods import PodPatches
from nicplug.adapters.core.executor.restarts import Restarts
from nicplug.adapters.core.observability import Metrics
from nicplug.adapters.kube import errors as kube_errors
from nicplug.adapters.kube.calls import KubeCalls
from nicplug.adapters.kube.flavour import Flavour
from nicplug.adapters.sdn import Dialect
from nicplug.engine.errors import (
    EffectUndecodable,
    PermanentError,
    RetryAfterObservation,
    TemporaryError,
)
from nicplug.engine.journal import PendingEffect
from nicplug.machines.effects import (
    CreateMigration,
    EmitEvent,
    PatchPodNetworks,
    PatchVirtualMachine,
    RemoveVMCondition,
    RestartVM,
    SetVMCondition,
    effect_from_payload,
)

Handler = Callable[[Any, PendingEffect], Awaitable[Result]]
"""Does one decoded effect (of the type it is registered for) and says what it did."""


class KubeExecutor:
    """Executes effects against the API server through `KubeCalls`."""

    def __init__(
        self,
        calls: KubeCalls,
        dialect: Dialect,
        *,
        flavour: Flavour,
        metrics: Metrics | None = None,
        now: Callable[[], datetime.datetime] | None = None,
        max_migrations: int = 5,
        cached: Cached | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wait_for_earlier: float = 30.0,
        reporting_instance: str = "",
    ) -> None:
        self._calls = calls
        self._metrics = metrics
        cluster = Cluster(calls, dialect, flavour=flavour, cached=cached)
        self._book = OrderBook(cluster, wait_for_earlier=wait_for_earlier)
        conditions = Conditions(
            cluster, now=now or (lambda: datetime.datetime.now(datetime.UTC)))
        self._handlers: Mapping[type, Handler] = {
            PatchPodNetworks: PodPatches(cluster, self._book),
            PatchVirtualMachine: KVVMPatches(cluster, self._book),
            SetVMCondition: conditions.set,
            RemoveVMCondition: conditions.remove,
            RestartVM: Restarts(cluster),
            CreateMigration: Migrations(cluster, max_migrations=max_migrations),
            EmitEvent: VMEvents(cluster, monotonic=monotonic, instance=reporting_instance),
        }

    async def execute(self, effect: PendingEffect) -> Result:
        started = time.perf_counter()
        outcome = "error"
        try:
            result = await self._execute(effect)
            outcome = "ok"
            return result
        finally:
            if self._metrics is not None:
                self._metrics.effect_timed(effect.type, outcome, time.perf_counter() - started)

    async def _execute(self, effect: PendingEffect) -> Result:
        try:
            decoded = effect_from_payload(effect.type, effect.payload)
        except (KeyError, TypeError, ValueError) as exc:
            raise EffectUndecodable(
                f"effect {effect.id} ({effect.type}, schema {effect.schema_version}) has a "
                f"payload this nicplug cannot read ({exc!r}); dropped, the VM is decided again"
            ) from exc
        if isinstance(decoded, PatchPodNetworks | PatchVirtualMachine) and not (
                self._book.start(effect, decoded.target)):
            return {"superseded": True}
        handler = self._handlers.get(type(decoded))
        if handler is None:
            raise PermanentError(f"effect type {effect.type!r} has no executor")
        try:
            return await handler(decoded, effect)
        except kube_errors.KubeError as exc:
            raise self._translated(exc, effect.type) from exc

    def _translated(self, exc: kube_errors.KubeError, type_: str) -> Exception:
        if self._metrics is not None and exc.status:
            self._metrics.api_errors.labels(str(exc.status)).inc()
        if isinstance(exc, kube_errors.PatchRejected) and exc.status in (403, 422):
            # a refusal (RBAC, an admission policy): the same request is refused again,
            # so the effect ends now with the server's words (`explain`, a Warning Event)
            if self._metrics is not None:
                self._metrics.refused.labels(type_, str(exc.status)).inc()
            return PermanentError(f"refused by the API server: {exc}")
        if isinstance(exc, kube_errors.Conflict):
            return RetryAfterObservation(str(exc))
        if isinstance(exc, kube_errors.Temporary):
            return TemporaryError(str(exc), delay=exc.delay)
        if isinstance(exc, kube_errors.NotFound):
            # The object is gone (a launcher pod of a stopping VM, a migration's source):
            # the request cannot succeed as decided, and the next observation shows the
            # world without it, so the machine decides again from that.
            return RetryAfterObservation(str(exc))
        return PermanentError(str(exc))
