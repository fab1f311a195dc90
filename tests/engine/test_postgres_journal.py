"""What the PostgreSQL journal does beyond the shared contract: terms that fence every
write and every claim, a reader beside the writer, reopening, closing, refusals."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from nicplug.engine.errors import (
    Deposed,
    JournalClosed,
    JournalError,
    JournalRefused,
    Superseded,
)
from nicplug.engine.journal import EffectUpdate, EnqueuedEffect
from nicplug.engine.model import EffectRequest, StreamId, TimerRequest
from nicplug.engine.postgres_journal import PostgresJournal
from nicplug.engine.postgres_opening import WRITER_LOCK, shown
from nicplug.engine.upcasting import Upcasters
from tests.engine.journal_support import commit

S1 = StreamId("op-1")


async def test_a_deposed_leader_writes_nothing_and_claims_nothing(postgres_dsn: str) -> None:
    old = await PostgresJournal.open(postgres_dsn)
    new = await PostgresJournal.open(postgres_dsn)
    try:
        assert await old.lead("replica-a") == 1
        patch = EffectRequest(S1, "PatchPodNetworks", {"add": ["n"]}, "op-1/patch/1")
        (effect,) = (await old.append(commit("op-1", 0, "Requested", effects=(patch,)))).effects
        assert await old.claim(effect.id)
        assert await new.lead("replica-b") == 2
        # every write of the old term is refused, in the transaction that finds out
        with pytest.raises(Superseded) as refused:
            await old.append(commit("op-1", 1, "AnnotationPatched"))
        assert (refused.value.term, refused.value.latest) == (1, 2)
        assert isinstance(refused.value, JournalError) and isinstance(refused.value, Deposed)
        with pytest.raises(Superseded):
            await old.append(commit("op-2", 0, "Requested"))
        with pytest.raises(Superseded):
            await old.claim(effect.id)  # its effect cannot be sent any more
        assert [e.type for e in await new.history(stream=S1)] == ["Requested"]
        # the new term writes and claims what the old one left
        assert await new.claim(effect.id)
        await new.append(commit("op-1", 1, "AnnotationPatched"))
        assert [e.version for e in await new.history(stream=S1)] == [1, 2]
    finally:
        await old.close()
        await new.close()


async def test_a_new_term_waits_for_the_write_in_flight_and_refuses_every_later_one(
    postgres_dsn: str,
) -> None:
    """Racing appends of the old term against the new term's start: each is either
    committed before the new term (a lower position) or refused; none after it."""
    halfway = asyncio.Event()

    def committed(_units: int, _seconds: float) -> None:
        if old.stats.units >= 60:
            halfway.set()

    old = await PostgresJournal.open(postgres_dsn, on_group=committed)
    new = await PostgresJournal.open(postgres_dsn)
    try:
        await old.lead("a")

        async def appender(n: int) -> list[bool]:
            written = []
            for version in range(20):
                try:
                    await old.append(commit(f"op-{n}", version, "Step"))
                    written.append(True)
                except JournalError:
                    # Superseded; or, on a slow machine, the old writer held the lock
                    # past `evict_after` and the new term ended its session: rolled back
                    written.append(False)
                    break
            return written

        racing = [asyncio.create_task(appender(n)) for n in range(10)]
        await halfway.wait()  # of 200 appends, 60 or more are committed
        await new.lead("b")
        outcomes = await asyncio.gather(*racing)
        assert any(not all(o) for o in outcomes), "the new term began after every append"
        conn = await asyncpg.connect(postgres_dsn)
        try:
            started = await conn.fetchval("SELECT MAX(position) FROM events")
            acknowledged = sum(sum(o) for o in outcomes)
            assert started == acknowledged  # every acknowledged unit (one event) is kept
        finally:
            await conn.close()
        after = await new.append(commit("op-x", 0, "Step"))
        assert after.events[0].position == acknowledged + 1
    finally:
        await old.close()
        await new.close()


async def test_a_reader_beside_the_writer_sees_commits_and_writes_nothing(
    postgres_dsn: str,
) -> None:
    writer = await PostgresJournal.open(postgres_dsn)
    reader = await PostgresJournal.open(postgres_dsn, read_only=True)
    try:
        await writer.append(commit("op-1", 0, "Requested", view="Requested"))
        assert len(await reader.history(stream=S1)) == 1
        await writer.append(commit("op-1", 1, "Patched"))
        assert len(await reader.read_all()) == 2
        with pytest.raises(JournalRefused, match="read-only"):
            await reader.append(commit("op-2", 0, "Requested"))
        with pytest.raises(JournalRefused, match="read-only"):
            await reader.lead("reader")
    finally:
        await reader.close()
        await writer.close()


async def test_old_payloads_are_upcast_when_read(postgres_dsn: str) -> None:
    journal = await PostgresJournal.open(postgres_dsn)
    await journal.append(commit("op-1", 0, "Requested", payload={"net": "user-net"}))
    await journal.close()
    upcasters = Upcasters()
    upcasters.register("Requested", 1, lambda p: {"network": p["net"]})
    upcasters.register("Requested", 2, lambda p: {**p, "type": "Network"})
    journal = await PostgresJournal.open(postgres_dsn, upcasters=upcasters)
    try:
        (event,) = await journal.history(stream=S1)
    finally:
        await journal.close()
    assert (event.schema_version, event.payload) == (3, {"network": "user-net", "type": "Network"})


async def test_a_closed_journal_commits_what_was_queued_then_refuses(postgres_dsn: str) -> None:
    journal = await PostgresJournal.open(postgres_dsn)
    pending = asyncio.ensure_future(journal.append(commit("op-1", 0, "Requested")))
    await asyncio.sleep(0)
    await journal.close()
    assert (await pending).events[0].version == 1
    with pytest.raises(JournalClosed):
        await journal.append(commit("op-1", 1, "Patched"))


async def test_a_newer_schema_or_a_missing_database_is_refused(
    postgres_dsn: str,
) -> None:
    conn = await asyncpg.connect(postgres_dsn)
    try:
        await conn.execute("INSERT INTO nicplug_schema VALUES (99, '0099_future.sql', 0)")
    finally:
        await conn.close()
    with pytest.raises(JournalRefused, match="newer nicplug"):
        await PostgresJournal.open(postgres_dsn)
    missing = postgres_dsn.rsplit("/", 1)[0] + "/no_such_database"
    with pytest.raises(JournalRefused, match="no such database"):
        await PostgresJournal.open(missing)


def test_a_dsn_is_shown_without_its_password() -> None:
    assert shown("postgresql://nicplug:s3cret@db:5432/nicplug") == (
        "postgresql://nicplug:***@db:5432/nicplug")
    assert "s3cret" not in shown("postgres://u:s3cret@h/db?sslmode=require")


async def test_a_writer_paused_inside_its_transaction_is_evicted_by_the_new_term(
    postgres_dsn: str,
) -> None:
    """A leader paused (SIGSTOP, a long GC) in the middle of a group commit holds the
    writers' lock: the new term ends its session instead of waiting for it forever,
    and its transaction rolls back unacknowledged."""
    paused = await asyncpg.connect(postgres_dsn)
    new = await PostgresJournal.open(postgres_dsn)
    try:
        transaction = paused.transaction()
        await transaction.start()
        await paused.execute("SELECT pg_advisory_xact_lock($1)", WRITER_LOCK)
        await paused.execute(
            "INSERT INTO events (position, stream, key, version, type, schema_version,"
            " payload, cause_kind, cause_ref, wall_time, logical_time)"
            " VALUES (1, 'op-1', 'ns/vm', 1, 'Requested', 1, '{}', 'observation', 'x', 0, 0)")
        assert await asyncio.wait_for(new.lead("b", evict_after=0.2), 10) == 1
        with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, OSError)):
            await paused.execute("COMMIT")
        assert await new.read_all() == []
    finally:
        await paused.close()
        await new.close()


async def test_two_units_of_one_stream_in_one_group_are_written_in_order(
    postgres_dsn: str,
) -> None:
    journal = await PostgresJournal.open(postgres_dsn)
    try:
        first, second = await asyncio.gather(
            journal.append(commit("op-1", 0, "Requested", "Patched", view="Patched")),
            journal.append(commit("op-1", 2, "SDNReady")),
        )
        assert journal.stats.groups == 1
        assert [e.version for e in (*first.events, *second.events)] == [1, 2, 3]
        (stored,) = await journal.views()
        assert (stored.version, stored.through) == (3, 2)  # folded through its own unit
    finally:
        await journal.close()


async def test_a_group_enqueues_every_units_effects_and_timers_together(
    postgres_dsn: str,
) -> None:
    journal = await PostgresJournal.open(postgres_dsn)
    try:
        first = EffectRequest(StreamId("op-0"), "Patch", {"n": 0}, "patch-0")
        (pending,) = (await journal.append(commit("op-0", 0, "A", key="ns/vm-0",
                                                  effects=(first,)))).effects
        groups = journal.stats.groups
        results = await asyncio.gather(*(
            journal.append(commit(
                f"op-{n}", 1 if n == 0 else 0, "B", key=f"ns/vm-{n}",
                effects=(EffectRequest(StreamId(f"op-{n}"), "Patch", {"n": n}, f"patch-{n}"),),
                timers=(TimerRequest(StreamId(f"op-{n}"), "deadline", 10.0 + n),),
                effect_updates=(EffectUpdate(pending.id, "issued", 1, 5.0, "503"),)
                if n == 1 else (),
            )) for n in range(20)))
        assert journal.stats.groups == groups + 1
        # op-0's effect was pending already: the same row, not a new one
        assert results[0].effects == (EnqueuedEffect(pending.id, new=False),)
        ids = [r.effects[0].id for r in results[1:]]
        assert all(r.effects[0].new for r in results[1:]) and len(set(ids)) == 19
        outbox = {e.idempotency_key: e for e in await journal.outbox()}
        assert {k: e.id for k, e in outbox.items() if k != "patch-0"} == {
            f"patch-{n}": i for n, i in zip(range(1, 20), ids, strict=True)}
        assert (outbox["patch-0"].attempts, outbox["patch-0"].last_error) == (1, "503")
        assert [t.deadline for t in await journal.timers()] == [10.0 + n for n in range(20)]
    finally:
        await journal.close()
