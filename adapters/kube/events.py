"""Kubernetes Events as a person reads them: one per happening, a repeat counted on it.

nicplug records an Event where an operation ends up (attached, detached, failed with
its reason, cancelled, waiting for a restart or a migration), not one per step: the
steps are in the journal. When the same Event repeats — the same object, reason, type,
action and note, as client-go's `events.k8s.io` recorder tells them apart (a failure
that recurs attempt after attempt) — within `SERIES_WINDOW` of the last time, it is
not created again: the recorded one's `series` is patched (`count` in all,
`lastObservedTime`), as `events.k8s.io/v1` defines it. An Event gone meanwhile (they
expire) is created anew.

What this remembers is bounded by the window: an Event not repeated within it is
forgotten. Two identical Events recorded at the same instant may both be created.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Final

from nicplug.adapters.kube.calls import EventNote, KubeCalls
from nicplug.adapters.kube.errors import NotFound

SERIES_WINDOW: Final = 360.0
"""Seconds a repeat still joins the recorded Event's series (client-go: 6 minutes)."""

_Key = tuple[Any, ...]


@dataclass(slots=True)
class _Recorded:
    namespace: str
    name: str
    count: int
    last: float


class EventRecorder:
    """Creates an Event, or counts a repeat in the series of the one recorded."""

    def __init__(self, calls: KubeCalls, *, monotonic: Callable[[], float] = time.monotonic,
                 instance: str = ""):
        self._calls = calls
        self._monotonic = monotonic
        self._instance = instance  # `reportingInstance`: the pod's name, where it runs
        self._recent: OrderedDict[_Key, _Recorded] = OrderedDict()  # oldest first

    async def record(self, note: EventNote) -> dict[str, Any]:
        if self._instance and not note.instance:
            note = replace(note, instance=self._instance)
        now = self._monotonic()
        self._forget_before(now - SERIES_WINDOW)
        key = _isomorphic(note)
        seen = self._recent.get(key)
        if seen is not None:
            try:
                await self._calls.patch_event_series(seen.namespace, seen.name, seen.count + 1)
            except NotFound:
                del self._recent[key]
            else:
                seen.count, seen.last = seen.count + 1, now
                self._recent.move_to_end(key)
                return {"event": seen.name, "count": seen.count}
        created = await self._calls.create_event(note)
        meta = created.get("metadata") or {}
        name, namespace = str(meta.get("name")), str(meta.get("namespace"))
        self._recent[key] = _Recorded(namespace, name, 1, now)
        return {"event": name, "count": 1}

    def _forget_before(self, horizon: float) -> None:
        while self._recent:
            key, oldest = next(iter(self._recent.items()))
            if oldest.last >= horizon:
                return
            del self._recent[key]


def _isomorphic(note: EventNote) -> _Key:
    """What makes two Events the same one (client-go's `getKey`, less `related`)."""
    meta = note.involved.get("metadata") or {}
    regarding = (note.involved.get("apiVersion"), note.involved.get("kind"),
                 meta.get("namespace"), meta.get("name"), meta.get("uid"))
    return (regarding, note.reason, note.type, note.action, note.component, note.message)
