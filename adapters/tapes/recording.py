"""Recording a tape from a live API server: every watched kind, listed then watched.

The same informers as the controller's (list, then watch from the list's version, with
bookmarks, re-lists on 410 and an inactivity watchdog), each change written as one
line with the time it arrived: the lists as ADDED, then the watch events. Once every
kind is listed a BOOKMARK marks the end of the initial events. It only reads the
cluster and writes the tape; it decides nothing and changes nothing.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from nicplug.adapters.kube.client import ClientSettings, connect
from nicplug.adapters.kube.flavour import Flavour
from nicplug.adapters.kube.informer import Informer, WatchSettings, all_synced
from nicplug.adapters.kube.resources import Scope
from nicplug.adapters.tapes.writer import TapeWriter


async def record_cluster(
    tape: Path,
    *,
    flavour: Flavour,
    kubeconfig: Path | None,
    namespace: str | None = None,
    duration: float | None = None,
    request_timeout: float = 30.0,
    stop: asyncio.Event | None = None,
) -> int:
    """Record until `duration` seconds have passed or `stop` is set; return the lines
    written. An informer that fails before it has listed raises its error."""
    scope = Scope(namespace)
    stop = stop or asyncio.Event()
    with TapeWriter(tape, now=time.time) as writer:  # first: a tape it cannot write fails alone
        connection = await connect(
            ClientSettings(kubeconfig=kubeconfig, read_timeout=request_timeout))
        informers = [
            Informer(connection, kind, namespace=scope.namespace_for(kind),
                     on_change=writer.watch_event, settings=WatchSettings())
            # upstream KubeVirt is the kubevirt flavour: no Deckhouse kinds exist there;
            # Namespaces too, whose labels may opt VMs in to migrations
            for kind in flavour.watched_by(
                desired_in_template=flavour.name == "upstream", namespace_opt_in=True)
        ]
        tasks = [asyncio.create_task(i.run(), name=f"record {i.kind.name}") for i in informers]
        stopping = asyncio.create_task(stop.wait())
        try:
            synced: asyncio.Future[Any] = asyncio.ensure_future(all_synced(informers))
            await asyncio.wait([synced, stopping, *tasks], return_when=asyncio.FIRST_COMPLETED)
            _raise_failed(tasks)
            if synced.done():
                writer.initial_events_end()
            else:
                synced.cancel()
            await asyncio.wait([stopping, *tasks], timeout=duration,
                               return_when=asyncio.FIRST_COMPLETED)
            _raise_failed(tasks)
        finally:
            stopping.cancel()
            for task in tasks:
                task.cancel()
            await asyncio.gather(stopping, *tasks, return_exceptions=True)
            await connection.close()
        return writer.lines


def _raise_failed(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        if task.done() and not task.cancelled():
            task.result()
