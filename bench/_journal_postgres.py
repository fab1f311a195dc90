"""`python -m bench journal --backend postgres [--quick]`: the PostgreSQL journal against
its driver's own ceiling, side by side in one run.

A throwaway server (`simulator/postgres_server.py`) with fsync and synchronous commit
ON; each contender appends into a fresh database that nicplug's migrations made, the
same events as the SQLite benchmark (about 200 B of JSON each, ten a commit, 100
streams), its input made before the clock starts:
(a) asyncpg, plain: exactly the rows (b) writes, one transaction per group of (b)
    (the events of 100 streams, ten each, and those streams' rows at their new
    versions), each table one statement over arrays — the ceiling;
(b) nicplug's `PostgresJournal` holding a term (so every group also takes the writers'
    lock, checks the term, reads versions and dedup keys), 100 concurrent appenders,
    one commit in flight each (group commit);
(c) psycopg 3, plain: the same rows and transactions through `executemany` in pipeline
    mode — the other driver's ceiling, for the choice of driver.
Medians of interleaved rounds, each in another order; ratios are medians of the
per-round ratios. Then takeover: a standby's `Follower` caught up on a journal of live
operations against a cold start (views and tails read, then `Runtime.start`).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Callable

import asyncpg
import psycopg

from bench.journal import APPENDERS, PAYLOAD, PAYLOAD_JSON, PER_COMMIT, _rounds
from nicplug.engine.clock import VirtualClock
from nicplug.engine.effects import RecordingExecutor
from nicplug.engine.journal import Commit
from nicplug.engine.model import Cause, Key, NewEvent, StreamId, StreamView
from nicplug.engine.postgres_journal import PostgresJournal
from nicplug.engine.postgres_writes import INSERT_EVENTS, TOUCH_STREAMS
from nicplug.engine.runtime import Runtime
from nicplug.engine.standby import Follower
from nicplug.simulator.postgres_server import LocalPostgres

_PLAIN_EVENT = (
    "INSERT INTO events (position, stream, key, version, type, schema_version, payload,"
    " cause_kind, cause_ref, dedup_key, wall_time, logical_time, term)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s, 1)"
)
_PLAIN_TOUCH = (
    "INSERT INTO streams (stream, key, version, updated_wall, updated_logical)"
    " VALUES (%s, %s, %s, 1.0, 2.0) ON CONFLICT (stream) DO UPDATE SET"
    " version = excluded.version, updated_wall = excluded.updated_wall,"
    " updated_logical = excluded.updated_logical"
)


class Databases:
    def __init__(self, server: LocalPostgres) -> None:
        self.server = server
        self.count = 0

    async def fresh(self) -> str:
        self.count += 1
        name = f"bench_{self.count}"
        admin = await asyncpg.connect(self.server.dsn())
        try:
            if self.count == 1:
                await admin.execute("CREATE DATABASE bench_template")
                await (await PostgresJournal.open(self.server.dsn("bench_template"))).close()
            await admin.execute(f"CREATE DATABASE {name} TEMPLATE bench_template")
        finally:
            await admin.close()
        return self.server.dsn(name)


def _groups(events: int) -> list[tuple[list[tuple[object, ...]], list[tuple[object, ...]]]]:
    """(event rows, stream rows) of each transaction (b) commits."""
    groups = []
    position = 0
    for first in _rounds(events):
        rows: list[tuple[object, ...]] = []
        for n in range(APPENDERS):
            stream = f"s{n}"
            for version in range(first + 1, first + PER_COMMIT + 1):
                position += 1
                rows.append((position, stream, stream, version, "Step", 1, PAYLOAD_JSON,
                             "observation", f"VirtualMachine/{stream}@{first}", None, 1.0, 2.0))
        streams: list[tuple[object, ...]] = [
            (f"s{n}", f"s{n}", first + PER_COMMIT) for n in range(APPENDERS)]
        groups.append((rows, streams))
    return groups


async def asyncpg_ceiling(dsn: str, events: int) -> float:
    groups = []
    for rows, streams in _groups(events):
        ev = [list(column) for column in zip(*rows, strict=True)]
        st = [list(column) for column in zip(*streams, strict=True)]
        st += [[1.0] * len(streams), [2.0] * len(streams)]
        groups.append((ev, st))
    conn = await asyncpg.connect(dsn)
    started = time.perf_counter()
    for ev, st in groups:
        async with conn.transaction():
            await conn.execute(INSERT_EVENTS, *ev, 1)
            await conn.execute(TOUCH_STREAMS, *st)
    elapsed = time.perf_counter() - started
    await conn.close()
    return len(groups) * APPENDERS * PER_COMMIT / elapsed


def psycopg_ceiling(dsn: str, events: int) -> float:
    groups = _groups(events)
    with psycopg.connect(dsn) as conn:
        started = time.perf_counter()
        for rows, streams in groups:
            with conn.transaction(), conn.pipeline(), conn.cursor() as cursor:
                cursor.executemany(_PLAIN_EVENT, rows)
                cursor.executemany(_PLAIN_TOUCH, streams)
        elapsed = time.perf_counter() - started
    return len(groups) * APPENDERS * PER_COMMIT / elapsed


async def nicplug_appends(dsn: str, events: int) -> tuple[float, float]:
    journal = await PostgresJournal.open(dsn)
    await journal.lead("bench")

    def commits(n: int) -> list[Commit]:
        stream = StreamId(f"s{n}")
        batch = tuple(NewEvent(stream, "Step", PAYLOAD) for _ in range(PER_COMMIT))
        return [Commit(
            key=Key(stream), cause=Cause("observation", f"VirtualMachine/{stream}@{first}"),
            wall_time=1.0, logical_time=2.0, expected={stream: first}, events=batch,
        ) for first in _rounds(events)]

    async def appender(mine: list[Commit]) -> None:
        for unit in mine:
            await journal.append(unit)

    prepared = [commits(n) for n in range(APPENDERS)]
    started = time.perf_counter()
    await asyncio.gather(*(appender(mine) for mine in prepared))
    elapsed = time.perf_counter() - started
    stats = journal.stats
    await journal.close()
    return stats.events / elapsed, stats.units / stats.groups


class _Tally:
    """A decider enough for recovery: each stream's view holds its event count."""

    snapshot_schema = 1

    def initial(self, key: Key) -> dict[str, int]:
        return {}

    def restore(self, key: Key, views: object) -> dict[str, int]:
        return {v.stream: int(v.snapshot["n"]) for v in views}  # type: ignore[attr-defined]

    def evolve(self, state: dict[str, int], event: object) -> dict[str, int]:
        stream = event.stream  # type: ignore[attr-defined]
        return {**state, stream: state.get(stream, 0) + 1}

    def decide(self, *_: object) -> object:
        raise AssertionError("not asked")

    def views(self, state: dict[str, int]) -> list[StreamView]:
        return []


async def takeover(dsn: str, live: int) -> tuple[float, float]:
    """Seconds to be ready to lead on a journal of `live` live operations (ten events
    each, snapshots two events behind): cold (read views and tails, start) against a
    standby's (catch up since its last look, start from what it followed)."""
    writer = await PostgresJournal.open(dsn)
    await writer.lead("old")
    units = []
    for s in range(live):
        stream, key = StreamId(f"op-{s}"), Key(f"ns/vm-{s}")
        view = StreamView(stream, key, "SDNReady", False, {"n": PER_COMMIT - 2})
        units.append(Commit(key=key, cause=Cause("observation", "x"), wall_time=1.0,
                            logical_time=2.0, expected={stream: 0}, views=(view,), events=tuple(
                                NewEvent(stream, "Step", PAYLOAD)
                                for _ in range(PER_COMMIT - 2))))
        units.append(Commit(key=key, cause=Cause("observation", "y"), wall_time=1.0,
                            logical_time=2.0, expected={stream: PER_COMMIT - 2}, events=tuple(
                                NewEvent(stream, "Step", PAYLOAD) for _ in range(2))))
    for first in range(0, len(units), 500):
        await asyncio.gather(*(writer.append(u) for u in units[first:first + 500]))
    standby = await PostgresJournal.open(dsn)
    follower = Follower(standby)
    await follower.catch_up()
    await writer.append(units[0].__class__(  # one more commit after the standby's look
        key=Key("ns/vm-0"), cause=Cause("observation", "z"), wall_time=1.0, logical_time=2.0,
        expected={StreamId("op-0"): PER_COMMIT}, events=(NewEvent(StreamId("op-0"), "Step",
                                                                  PAYLOAD),)))
    await writer.close()
    clock = VirtualClock()

    async def ready(loaded: bool) -> float:
        started = time.perf_counter()
        await standby.lead("new")
        runtime: Runtime[dict[str, int], None] = Runtime(
            _Tally(), standby, RecordingExecutor(clock), clock)  # type: ignore[arg-type]
        if loaded:
            await follower.catch_up()
            await runtime.start(loaded=follower.loaded())
        else:
            await runtime.start()
        took = time.perf_counter() - started
        if runtime.state_of(Key(f"ns/vm-{live - 1}")) != {f"op-{live - 1}": PER_COMMIT}:
            raise RuntimeError("recovered the wrong state")
        await runtime.stop(drain=False)
        return took

    cold = await ready(False)
    warm = await ready(True)
    await standby.close()
    return cold, warm


def main(quick: bool) -> int:
    events, rounds, live = (20_000, 3, 1_000) if quick else (50_000, 7, 10_000)
    server = LocalPostgres(durable=True).start()
    try:
        databases = Databases(server)
        groups: list[float] = []

        def ours(dsn: str) -> float:
            rate, group = asyncio.run(nicplug_appends(dsn, events))
            groups.append(group)
            return rate

        contenders: list[Callable[[str], float]] = [
            lambda dsn: asyncio.run(asyncpg_ceiling(dsn, events)),
            ours,
            lambda dsn: psycopg_ceiling(dsn, events),
        ]
        table = []
        for n in range(rounds):
            order = [(n + i) % len(contenders) for i in range(len(contenders))]
            rates = {i: contenders[i](asyncio.run(databases.fresh())) for i in order}
            table.append((rates[0], rates[1], rates[2]))
        cold, warm = asyncio.run(takeover(asyncio.run(databases.fresh()), live))
    finally:
        server.stop()
    ceiling = statistics.median(r[0] for r in table)
    nicplug = statistics.median(r[1] for r in table)
    psycopg_rate = statistics.median(r[2] for r in table)
    ratio = statistics.median(r[1] / r[0] for r in table)
    drivers = statistics.median(r[2] / r[0] for r in table)
    scale = "QUICK run" if quick else "full run"
    print(f"journal benchmark, PostgreSQL ({scale}): fsync and synchronous_commit on,"
          f" {PER_COMMIT} events a commit, {APPENDERS} streams, medians of {rounds} rounds")
    rows = [
        (f"(a) asyncpg plain inserts, (b)'s rows and transactions ({events})",
         f"{ceiling:,.0f} ev/s"),
        (f"(b) nicplug PostgresJournal, {APPENDERS} appenders, fenced",
         f"{nicplug:,.0f} ev/s"),
        ("    appends per group commit (mean)", f"{statistics.median(groups):,.1f}"),
        ("(c) psycopg 3 plain inserts, pipeline mode", f"{psycopg_rate:,.0f} ev/s"),
        ("    nicplug / asyncpg ceiling (target >= 0.8)", f"{ratio:.2f}"),
        ("    psycopg ceiling / asyncpg ceiling", f"{drivers:.2f}"),
        (f"takeover, {live:,} live operations: cold (read + start)", f"{cold:.3f} s"),
        ("takeover from a standby's followed state", f"{warm:.3f} s"),
    ]
    for name, value in rows:
        print(f"{name:<62} {value:>14}")
    print(json.dumps({
        "backend": "postgres", "events_per_s": round(nicplug), "ceiling_per_s": round(ceiling),
        "ratio_vs_driver_ceiling": round(ratio, 3), "psycopg_vs_asyncpg": round(drivers, 3),
        "takeover_cold_s": round(cold, 3), "takeover_standby_s": round(warm, 3),
        "live_operations": live, "quick": quick,
    }))
    return 0
