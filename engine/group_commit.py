"""The queue both journal backends commit from: appends wait in it, one writer task takes
as many as a group allows and commits them in one transaction (`_commit`, the backend's
own), each caller acknowledged only after its unit committed or failed.

A base class, not a helper: the queue, its wake-up and the closing flags are state of
the journal itself, which `close()` and the backends' `_commit` read as well.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections import deque

from nicplug.engine.errors import JournalClosed, JournalRefused
from nicplug.engine.journal import Appended, Commit

Queued = tuple[Commit, "asyncio.Future[Appended]"]


class GroupCommit(ABC):
    """`append` queues a commit and waits for its outcome; `_write_loop`, the writer
    task, hands the backend's `_commit` up to `_max_group` queued units at a time."""

    path: str
    read_only: bool

    def _start_queue(self, max_group: int) -> None:
        self._max_group = max_group
        self._queue: deque[Queued] = deque()
        self._wake: asyncio.Future[None] | None = None
        self._closing = False
        self._closed = False

    async def append(self, commit: Commit) -> Appended:
        if self._closed or self._closing:
            raise JournalClosed(f"journal {self.path} is closed")
        if self.read_only:
            raise JournalRefused(self.path, "is open read-only", "open it for writing to append")
        future: asyncio.Future[Appended] = asyncio.get_running_loop().create_future()
        self._queue.append((commit, future))
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)
        return await future

    async def _write_loop(self) -> None:
        queue = self._queue
        while True:
            if not queue:
                if self._closing:
                    return
                self._wake = asyncio.get_running_loop().create_future()
                await self._wake
                self._wake = None
                continue
            count = min(len(queue), self._max_group)
            await self._commit([queue.popleft() for _ in range(count)])

    @abstractmethod
    async def _commit(self, batch: list[Queued]) -> None:
        """Write `batch` in one transaction of the backend's and settle each future."""
