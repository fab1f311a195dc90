"""All the informers of the controller, run together, ready together.

The controller is ready (`/readyz`) only once every watched kind has been listed:
deciding from a world with the pods listed but not the VMIs would look like
interfaces vanished. This module starts one `Informer` per kind and sets `synced`
when all of them are. It holds no objects itself and never decides anything.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable

from nicplug.adapters.kube.client import ApiConnection
from nicplug.adapters.kube.informer import (
    ChangeHandler,
    Clock,
    Informer,
    Sleep,
    WatchProgress,
    WatchSettings,
)
from nicplug.adapters.kube.resources import KindRef, Scope


class Informers:
    """One informer per kind in `kinds`, in `scope`."""

    def __init__(
        self,
        connection: ApiConnection,
        *,
        scope: Scope | None = None,
        kinds: Iterable[KindRef],
        on_change: ChangeHandler | None = None,
        on_progress: Callable[[KindRef, WatchProgress], None] | None = None,
        settings: WatchSettings | None = None,
        sleep: Sleep = asyncio.sleep,
        clock: Clock = time.monotonic,
    ) -> None:
        self.synced = asyncio.Event()
        scope = scope or Scope()
        settings = settings or WatchSettings()
        self.by_kind: dict[KindRef, Informer] = {
            kind: Informer(
                connection, kind, namespace=scope.namespace_for(kind), on_change=on_change,
                on_progress=on_progress, settings=settings, sleep=sleep, clock=clock,
            )
            for kind in kinds
        }

    def __getitem__(self, kind: KindRef) -> Informer:
        return self.by_kind[kind]

    async def run(self) -> None:
        """Run every informer until cancelled; one failing for good stops them all."""
        async with asyncio.TaskGroup() as group:
            for informer in self.by_kind.values():
                group.create_task(informer.run(), name=f"informer {informer.kind.name}")
            group.create_task(self._await_sync())

    async def _await_sync(self) -> None:
        await asyncio.gather(*(i.synced.wait() for i in self.by_kind.values()))
        self.synced.set()
