"""A standby follows the PostgreSQL journal: it holds exactly what a recovery would
read (the live keys' rows and the events after their snapshots), woken by each commit."""

from __future__ import annotations

import asyncio

from nicplug.engine.model import Key, StreamId
from nicplug.engine.postgres_journal import PostgresJournal
from nicplug.engine.standby import Follower
from tests.engine.journal_support import commit


async def recovery_reads(journal: PostgresJournal) -> dict[Key, tuple[list[object], list[object]]]:
    """What `Runtime.start()` reads without a standby."""
    read: dict[Key, tuple[list[object], list[object]]] = {}
    for stored in await journal.views(live=True):
        read.setdefault(stored.view.key, ([], []))[0].append(stored)
    for event in await journal.tail(live=True):
        read[event.key][1].append(event)
    return read


async def test_the_follower_holds_what_recovery_would_read(postgres_dsn: str) -> None:
    writer = await PostgresJournal.open(postgres_dsn)
    standby = await PostgresJournal.open(postgres_dsn, read_only=True)
    caught_up = asyncio.Event()

    def looked(error: object) -> None:
        assert error is None
        caught_up.set()

    follower = Follower(standby, poll=30.0, on_error=looked)  # a poll never comes in time
    following = asyncio.create_task(follower.run())
    try:
        await writer.lead("leader")
        await writer.append(commit("a-1", 0, "Requested", view="Requested", key="ns/a"))
        await writer.append(commit("b-1", 0, "Requested", view="Requested", key="ns/b"))
        await writer.append(commit("a-1", 1, "Patched", key="ns/a"))  # tail: view unchanged
        for _ in range(50):
            caught_up.clear()
            if follower.position == 3:
                break
            await asyncio.wait_for(caught_up.wait(), 5)  # woken by NOTIFY, not the poll
        assert follower.position == 3
        assert follower.loaded() == await recovery_reads(writer)
        assert [e.type for e in follower.loaded()[Key("ns/a")][1]] == ["Patched"]

        await writer.append(commit("b-1", 1, "Attached", view="Attached", terminal=True,
                                   key="ns/b"))
        while follower.position != 4:
            caught_up.clear()
            await asyncio.wait_for(caught_up.wait(), 5)
        assert set(follower.loaded()) == {Key("ns/a")}  # ns/b finished: forgotten
        assert follower.loaded() == await recovery_reads(writer)
        assert follower.live_keys == 1
        history = await standby.history(stream=StreamId("a-1"))
        assert [e.version for e in history] == [1, 2]
    finally:
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)
        await standby.close()
        await writer.close()
