"""A hot standby's journal: the state this replica would lead with, kept current while
another replica leads.

The `Follower` reads every live key once, then, woken by each commit (`committed`:
LISTEN/NOTIFY where the journal has it, else its poll interval), the keys that events
after its position touched — rows and tails read together in one snapshot. At takeover
the new leader first takes its term (after which no write of the old term can commit),
catches up once more, and starts the runtime from `loaded()`: no history is read again.
Reads only; never writes, never decides.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from nicplug.engine.errors import JournalError
from nicplug.engine.journal import StoredView
from nicplug.engine.model import Key, RecordedEvent
from nicplug.engine.runtime import Loaded


@dataclass
class Changes:
    """The keys read at `position`: live ones with their rows and tails; `ended`, keys
    touched that have no live stream any more (a standby forgets them)."""

    position: int
    live: dict[Key, tuple[list[StoredView], list[RecordedEvent]]] = field(default_factory=dict)
    ended: set[Key] = field(default_factory=set)


class Followable(Protocol):
    async def changes(self, *, after: int | None) -> Changes:
        """Every live key (`after=None`), or the keys touched after position `after`."""
        ...

    async def committed(self, within: float) -> None:
        """Return at the next commit of any writer, or after `within` seconds."""
        ...


class Follower:
    def __init__(
        self, journal: Followable, *, poll: float = 1.0,
        on_error: Callable[[JournalError | None], None] = lambda _error: None,
    ) -> None:
        self._journal = journal
        self._poll = poll
        self._on_error = on_error
        self.position: int | None = None
        """The global position the state is current through (None: not read yet)."""
        self._state: dict[Key, tuple[list[StoredView], list[RecordedEvent]]] = {}

    async def catch_up(self) -> int:
        """Read what was committed since the last look; return the position now."""
        changes = await self._journal.changes(after=self.position)
        if self.position is None:
            self._state = dict(changes.live)
        else:
            self._state.update(changes.live)
            for key in changes.ended:
                self._state.pop(key, None)
        self.position = changes.position
        return changes.position

    async def run(self) -> None:
        """Follow until cancelled; a journal out of reach is reported and tried again."""
        while True:
            try:
                await self.catch_up()
                self._on_error(None)
                await self._journal.committed(self._poll)
            except JournalError as error:
                self._on_error(error)
                await asyncio.sleep(self._poll)

    @property
    def live_keys(self) -> int:
        return len(self._state)

    def loaded(self) -> Loaded:
        """The live keys as of `position`, for `Runtime.start(loaded=...)`."""
        return dict(self._state)
