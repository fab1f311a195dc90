"""The journal queries over HTTP, on the controller's query address, apart from
`/metrics` and bound to loopback by default (`--query-addr`): `GET /operations`
(query parameters `vm`, `state`, `network`, `direction`) and `GET /operations/{id}`
(timeline and explanation), both JSON. They name every VM of every namespace and ask
for no credentials, so they are reached with `kubectl port-forward`, by whoever may
port-forward to the controller's pod; the metrics address is what scrapers and
probes reach.

The journal is opened read-only on the first request and kept open while a controller
holds it (a `shared` reader follows the writer); one nobody holds is read as a
snapshot for one request and closed, since an immutable snapshot would not see a
leader that starts writing later. While it does not exist yet (no leader has written
it) the views answer 503 and try again next time.
Bad parameters get a 400 naming them. Read-only: never writes, never blocks the
controller (SQLite runs on its own thread, WAL keeps readers off the writer's way).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from nicplug.adapters.queries.reading import dossier, open_for_queries, operations
from nicplug.adapters.queries.selection import Selection
from nicplug.engine.errors import JournalError
from nicplug.engine.sqlite_journal import SQLiteJournal

if TYPE_CHECKING:
    from nicplug.engine.postgres_journal import PostgresJournal

_PARAMETERS = frozenset({"vm", "state", "network", "direction"})


class JournalSource:
    """The read-only journal at `path`, opened on first use."""

    def __init__(self, path: Path | str) -> None:
        self.path = path
        self._journal: SQLiteJournal | PostgresJournal | None = None
        self._lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def journal(self) -> AsyncIterator[SQLiteJournal | PostgresJournal]:
        """The kept shared reader, or a snapshot for this request alone."""
        async with self._lock:
            if self._journal is None:
                opened = await open_for_queries(self.path, integrity="none")
                if opened.read_mode != "shared":
                    try:
                        yield opened
                    finally:
                        await opened.close()
                    return
                self._journal = opened
            kept = self._journal
        yield kept

    async def close(self) -> None:
        async with self._lock:
            await self._close()

    async def _close(self) -> None:
        if self._journal is not None:
            await self._journal.close()
            self._journal = None

    @contextlib.asynccontextmanager
    async def withheld(self) -> AsyncIterator[None]:
        """No reader open while the body runs (requests wait): the writer's close is
        then the last connection's, and SQLite checkpoints the WAL into the main file
        and removes it. A reader still open would leave the whole journal in the `-wal`
        file and the `.db` alone unreadable as a journal."""
        async with self._lock:
            await self._close()
            yield


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def make_query_app(journal: Path | str | JournalSource) -> web.Application:
    """The query address's application: the operation views of `journal`."""
    app = web.Application()
    add_operation_routes(app, journal)
    return app


def add_operation_routes(
    app: web.Application,
    journal: Path | str | JournalSource,
    *,
    now: Callable[[], float] = time.time,
) -> JournalSource:
    """Serve the operation views of the journal at `journal` from `app`; the source
    read, for its writer to withhold while it closes."""
    source = journal if isinstance(journal, JournalSource) else JournalSource(journal)

    async def list_view(request: web.Request) -> web.Response:
        unknown = sorted(set(request.query) - _PARAMETERS)
        if unknown:
            return _error(400, f"unknown parameters {unknown}; known: {sorted(_PARAMETERS)}")
        try:
            selection = Selection.checked(**{k: request.query[k] for k in request.query})
        except ValueError as error:
            return _error(400, str(error))
        try:
            async with source.journal() as journal:
                found = await operations(journal, selection)
        except JournalError as error:
            return _error(503, str(error))
        return web.json_response({"operations": [op.to_json() for op in found]})

    async def detail_view(request: web.Request) -> web.Response:
        operation = request.match_info["id"]
        try:
            async with source.journal() as journal:
                found = await dossier(journal, operation, now=now())
        except JournalError as error:
            return _error(503, str(error))
        if found is None:
            return _error(404, f"no operation {operation!r}")
        return web.json_response(found.to_json())

    async def closing(_: web.Application) -> None:
        await source.close()

    app.router.add_get("/operations", list_view)
    app.router.add_get("/operations/{id:.+}", detail_view)
    app.on_cleanup.append(closing)
    return source
