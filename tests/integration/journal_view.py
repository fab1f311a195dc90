"""The operations a controller journaled, read as `nicplug status` would: read-only,
beside the writer, from the read model and the event log.

The integration tests judge outcomes from here, never from the controller's memory.
It opens the journal lazily (the controller creates it when it starts leading) and
never writes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from nicplug.adapters.queries import reading
from nicplug.engine.errors import JournalError
from nicplug.engine.model import StreamId
from nicplug.engine.sqlite_journal import SQLiteJournal


@dataclass(frozen=True, slots=True)
class JournaledOperation:
    stream: str
    vm: str
    network: str
    direction: str
    attempt: int
    state: str
    reason: str | None
    message: str
    history: tuple[str, ...]

    def label(self) -> str:
        tail = f" ({self.reason})" if self.reason else ""
        return f"{self.vm} {self.direction} {self.network}#{self.attempt}: {self.state}{tail}"


class OutcomeNotReached(AssertionError):
    pass


class JournalView:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._journal: SQLiteJournal | None = None

    async def _opened(self) -> SQLiteJournal | None:
        if self._journal is None and self.path.exists():
            try:
                self._journal = await SQLiteJournal.open(
                    self.path, read_only=True, integrity="none"
                )
            except JournalError:
                return None  # being created by the controller: try again later
        return self._journal

    async def operations(self) -> list[JournaledOperation]:
        journal = await self._opened()
        if journal is None:
            return []
        rows = []
        for stored in await journal.views():
            view, s = stored.view, stored.view.snapshot
            rows.append(JournaledOperation(
                stream=str(view.stream), vm=str(s["vm"]), network=str(s["network"]),
                direction=str(s["direction"]), attempt=int(s["attempt"]), state=view.state,
                reason=s.get("reason"), message=str(s.get("message") or ""),
                history=tuple(str(h) for h in s.get("history") or ()),
            ))
        return sorted(rows, key=lambda r: (r.vm, r.network, r.direction, r.attempt))

    async def of(self, vm: str, network: str | None = None) -> list[JournaledOperation]:
        return [
            op for op in await self.operations()
            if op.vm == vm and (network is None or op.network == network)
        ]

    async def path_of(self, stream: str) -> list[str]:
        """The states an operation went through, from its `Transitioned` events."""
        journal = await self._opened()
        assert journal is not None, "no journal yet"
        events = await journal.history(stream=StreamId(stream))
        assert events and events[0].type == "Opened", f"{stream} does not start with Opened"
        return ["Requested"] + [str(e.payload["to"]) for e in events if e.type == "Transitioned"]

    async def wait_for(
        self,
        vm: str,
        network: str,
        direction: str,
        states: Collection[str],
        *,
        attempt: int | None = None,
        within: float = 15.0,
    ) -> JournaledOperation:
        """Poll until the operation is in one of `states`; fail after `within` seconds
        with what the journal shows instead."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        seen: list[JournaledOperation] = []
        while True:
            seen = [
                op for op in await self.of(vm, network)
                if op.direction == direction and (attempt is None or op.attempt == attempt)
            ]
            for op in seen:
                if op.state in states:
                    return op
            if loop.time() > deadline:
                shown = "; ".join(f"{o.label()} via {' → '.join(o.history)}" for o in seen)
                raise OutcomeNotReached(
                    f"{vm} {direction} {network} never reached {sorted(states)} within "
                    f"{within:.0f}s; journal shows: {shown or 'no operation'}"
                )
            await asyncio.sleep(0.02)

    async def opened(self, stream: str) -> dict[str, object]:
        """The payload of the operation's `Opened` event (what the journal recorded of
        it when it opened: its flavour and mode among them)."""
        journal = await self._opened()
        assert journal is not None, "no journal yet"
        events = await journal.history(stream=StreamId(stream))
        assert events and events[0].type == "Opened", f"{stream} does not start with Opened"
        return dict(events[0].payload)

    async def explain(self, stream: str) -> str:
        """What `nicplug explain` says of the operation (its summary)."""
        journal = await self._opened()
        assert journal is not None, "no journal yet"
        explained = await reading.explanation(journal, stream, now=time.time())
        assert explained is not None, f"no operation {stream}"
        return explained.summary

    async def close(self) -> None:
        if self._journal is not None:
            await self._journal.close()
            self._journal = None


PLUG_PATHS: dict[str, tuple[str, ...]] = {
    "deckhouse": ("Requested", "AnnotationPatched", "SDNReady", "VMIPatched", "Attached"),
    # KubeVirt's order: the KVVM, the VMI, virt-controller's pod annotation, multus, libvirt
    "multus": ("Requested", "VMIPatched", "AnnotationPatched", "SDNReady", "Attached"),
}
UNPLUG_PATHS: dict[str, tuple[str, ...]] = {
    "deckhouse": ("Requested", "VMIPatched", "GuestDetached", "AnnotationPatched",
                  "SDNReleased", "Detached"),
    "multus": ("Requested", "VMIPatched", "AnnotationPatched", "GuestDetached", "SDNReleased",
               "Detached"),
}
"""The path of an undisturbed plug and unplug in each flavour."""
