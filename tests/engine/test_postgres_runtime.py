"""The runtime on a PostgreSQL journal whose terms fence it: once a later term began,
the deposed runtime's effects are not sent and its decisions are not written."""

from __future__ import annotations

from nicplug.engine.clock import VirtualClock
from nicplug.engine.errors import TemporaryError
from nicplug.engine.model import Cause
from nicplug.engine.postgres_journal import PostgresJournal
from nicplug.engine.standby import Follower
from tests.engine.test_runtime import A, ScriptedExecutor, make, stream, types_of


async def test_a_deposed_runtime_sends_nothing_and_writes_nothing(postgres_dsn: str) -> None:
    old = await PostgresJournal.open(postgres_dsn)
    new = await PostgresJournal.open(postgres_dsn)
    try:
        await old.lead("replica-a")
        clock = VirtualClock()
        executor = ScriptedExecutor(clock, old, script={1: [TemporaryError("503")]})  # type: ignore[arg-type]
        runtime = make(old, executor, clock, claim=old.claim)  # type: ignore[arg-type]
        await runtime.start()
        await runtime.observe(A, 1, Cause("observation", "target@1", "rv-1"))
        await runtime.drain()
        assert len(executor.calls) == 1  # sent once, failed for now: retried at 1.0
        await new.lead("replica-b")
        clock.advance(1.0)
        await runtime.drain()
        assert len(executor.calls) == 1, "the retry of a deposed term was sent"
        await runtime.observe(A, 2, Cause("observation", "target@2", "rv-2"))
        await runtime.drain()
        assert await types_of(old, A) == ["Requested"]  # the decision was refused
        await runtime.stop(drain=False)

        # the new term, a standby until now, starts from what it followed (no reads of
        # the streams again), recovers the effect without outcome and sends it
        follower = Follower(new)
        await follower.catch_up()
        successor = ScriptedExecutor(clock, new)  # type: ignore[arg-type]
        taking_over = make(new, successor, clock, claim=new.claim)  # type: ignore[arg-type]
        await taking_over.start(loaded=follower.loaded())
        await taking_over.drain()
        assert len(successor.calls) == 1
        rows = await new.outbox(stream=stream(A), pending_only=False)
        assert [r.status for r in rows] == ["succeeded"]
        await taking_over.stop()
    finally:
        await old.close()
        await new.close()
