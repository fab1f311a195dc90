"""`python -m bench journal [--quick]`: nicplug's journal side by side with its ceiling
and with the `eventsourcing` library.

Appends of the same rows (about 200 bytes of JSON each, ten events a commit), all with
`synchronous=FULL` in WAL mode, on a fresh file each run:
(a) raw `sqlite3` `executemany`, 1000 rows a transaction, into the journal's own events
    table — the ceiling; (b) nicplug's journal with many concurrent appenders (group
    commit); (c) `eventsourcing`'s `SQLiteApplicationRecorder`, appenders on threads.
Then, on a journal of 1M events (100k with --quick, as printed), the history query of
one stream and recovery (open with the default checks + load every live key's views).
Medians of three interleaved rounds (ratios: median of the
per-round ratios). Prints a table, then one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sqlite3
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from eventsourcing.persistence import StoredEvent
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

from nicplug.engine.journal import Commit
from nicplug.engine.model import Cause, Key, NewEvent, StreamId
from nicplug.engine.schema import migrate
from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.engine.sqlite_writes import to_json

PAYLOAD = {"vm": "ns/vm-000001", "network": "Network/user-net", "pad": "x" * 140}
PAYLOAD_JSON = to_json(PAYLOAD)
PER_COMMIT = 10
APPENDERS = 100  # one append each in flight: groups of 1000 events, as (a)
THREADS = 8
RUNS = 3


@dataclass(frozen=True)
class Sizes:
    appends: int  # events appended by each contender per run
    journal: int  # events in the journal for the history and recovery figures
    live: int  # live streams among journal / 10 streams

    @staticmethod
    def of(quick: bool) -> Sizes:
        return Sizes(20_000, 100_000, 1_000) if quick else Sizes(200_000, 1_000_000, 10_000)


def _event_row(position: int, stream: str, version: int) -> tuple[object, ...]:
    return (position, stream, stream, version, "Step", 1, PAYLOAD_JSON, "observation",
            f"VirtualMachine/{stream}@{version}", None, 1.0, 2.0)


_INSERT = "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"


def _schema(path: str, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    migrate(conn, path=path)
    return conn


def ceiling(path: str, events: int) -> float:
    conn = _schema(path, "FULL")
    streams = events // PER_COMMIT
    rows = [_event_row(p + 1, f"s{p % streams}", p // streams + 1) for p in range(events)]
    started = time.perf_counter()
    for first in range(0, events, 1000):
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(_INSERT, rows[first : first + 1000])
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return events / elapsed


async def nicplug_appends(path: str, events: int) -> tuple[float, float]:
    """Events per second, and the mean number of appends per group commit."""
    journal = await SQLiteJournal.open(path)
    commits = events // PER_COMMIT

    async def appender(n: int) -> None:
        stream = StreamId(f"s{n}")
        # events are immutable data without a version: a machine may well reuse them
        events = tuple(NewEvent(stream, "Step", PAYLOAD) for _ in range(PER_COMMIT))
        for version in range(0, commits // APPENDERS * PER_COMMIT, PER_COMMIT):
            await journal.append(Commit(
                key=Key(stream), cause=Cause("observation", f"VirtualMachine/{stream}@{version}"),
                wall_time=1.0, logical_time=2.0, expected={stream: version}, events=events,
            ))

    started = time.perf_counter()
    await asyncio.gather(*(appender(n) for n in range(APPENDERS)))
    elapsed = time.perf_counter() - started
    stats = journal.stats
    await journal.close()
    return stats.events / elapsed, stats.units / stats.groups


def eventsourcing_appends(path: str, events: int) -> float:
    datastore = SQLiteDatastore(path, originator_id_type="text")
    recorder = SQLiteApplicationRecorder(datastore)
    recorder.create_table()
    state = PAYLOAD_JSON.encode()
    commits = events // PER_COMMIT

    def appender(n: int) -> None:
        for first in range(1, commits // THREADS * PER_COMMIT, PER_COMMIT):
            recorder.insert_events([
                StoredEvent(f"s{n}", first + i, "bench:Step", state) for i in range(PER_COMMIT)
            ])

    with datastore.transaction(commit=False) as cursor:
        cursor.execute("PRAGMA synchronous")
        synchronous = cursor.fetchone()[0]
    if synchronous != 2:
        raise RuntimeError(f"eventsourcing's connections run synchronous={synchronous}, not FULL")
    started = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(appender, range(THREADS)))
    elapsed = time.perf_counter() - started
    datastore.close()
    return commits // THREADS * THREADS * PER_COMMIT / elapsed


def build_journal(path: str, sizes: Sizes) -> None:
    """A journal of `sizes.journal` events in streams of ten, interleaved like a busy
    controller writes them; `sizes.live` streams are not terminal."""
    conn = _schema(path, "OFF")
    streams = sizes.journal // PER_COMMIT
    conn.execute("BEGIN")
    for version in range(1, PER_COMMIT + 1):
        first = (version - 1) * streams
        conn.executemany(_INSERT, (
            _event_row(first + s + 1, f"op-{s}", version) for s in range(streams)
        ))
    live = set(random.Random(1).sample(range(streams), sizes.live))
    snapshot = to_json({"network": "Network/user-net", "direction": "plug", "attempt": 1})
    conn.executemany(
        "INSERT INTO streams VALUES (?, ?, ?, ?, ?, ?, 1.0, 2.0)",
        ((f"op-{s}", f"op-{s}", PER_COMMIT, "SDNReady" if s in live else "Attached",
          int(s not in live), snapshot) for s in range(streams)),
    )
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


async def history_ms(path: str, sizes: Sizes) -> list[float]:
    journal = await SQLiteJournal.open(path, integrity="none")
    rng = random.Random(2)
    timings = []
    for _ in range(300):
        stream = StreamId(f"op-{rng.randrange(sizes.journal // PER_COMMIT)}")
        started = time.perf_counter()
        found = await journal.history(stream=stream)
        timings.append((time.perf_counter() - started) * 1000)
        if len(found) != PER_COMMIT:
            raise RuntimeError(f"{stream} has {len(found)} events")
    await journal.close()
    return timings


async def recovery(path: str, sizes: Sizes) -> tuple[float, float]:
    """Seconds to open (default checks: quick_check) and to load the live keys' views."""
    started = time.perf_counter()
    journal = await SQLiteJournal.open(path)
    opened = time.perf_counter()
    views = await journal.views(live=True)
    loaded = time.perf_counter()
    await journal.close()
    if len(views) != sizes.live:
        raise RuntimeError(f"loaded {len(views)} live views, expected {sizes.live}")
    return opened - started, loaded - opened


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    sizes = Sizes.of(quick)
    groups: list[float] = []
    with tempfile.TemporaryDirectory(prefix="nicplug-bench-") as directory:

        def ours(path: str) -> float:
            rate, group = asyncio.run(nicplug_appends(path, sizes.appends))
            groups.append(group)
            return rate

        rounds = []
        for n in range(RUNS):  # interleaved, so that a noisy disk hits every contender
            rounds.append((
                ceiling(os.path.join(directory, f"ceiling-{n}.db"), sizes.appends),
                ours(os.path.join(directory, f"nicplug-{n}.db")),
                eventsourcing_appends(os.path.join(directory, f"es-{n}.db"), sizes.appends),
            ))
        sqlite_rate = statistics.median(r[0] for r in rounds)
        nicplug_rate = statistics.median(r[1] for r in rounds)
        es_rate = statistics.median(r[2] for r in rounds)
        to_ceiling = statistics.median(r[1] / r[0] for r in rounds)
        to_es = statistics.median(r[1] / r[2] for r in rounds)
        big = os.path.join(directory, "big.db")
        started = time.perf_counter()
        build_journal(big, sizes)
        built = time.perf_counter() - started
        history = asyncio.run(history_ms(big, sizes))
        phases = [asyncio.run(recovery(big, sizes)) for _ in range(RUNS)]
        size_mb = os.path.getsize(big) / 1e6
    open_s = statistics.median(p[0] for p in phases)
    load_s = statistics.median(p[1] for p in phases)
    recovery_s = statistics.median(p[0] + p[1] for p in phases)
    p50 = statistics.median(history)
    p99 = sorted(history)[int(len(history) * 0.99) - 1]
    scale = "QUICK run: smaller sizes than the targets name" if quick else "full run"
    print(f"journal benchmark ({scale}); synchronous=FULL, WAL, {PER_COMMIT} events a commit,"
          f" ~{len(PAYLOAD_JSON)} B payload, medians of {RUNS} interleaved rounds")
    print(f"{'measure':<58} {'value':>14}")
    table = [
        (f"(a) raw sqlite3 executemany, 1000/txn ({sizes.appends} events)",
         f"{sqlite_rate:,.0f} ev/s"),
        (f"(b) nicplug journal, {APPENDERS} concurrent appenders", f"{nicplug_rate:,.0f} ev/s"),
        ("    appends per group commit (mean)", f"{statistics.median(groups):,.1f}"),
        (f"(c) eventsourcing SQLiteApplicationRecorder, {THREADS} threads",
         f"{es_rate:,.0f} ev/s"),
        ("    nicplug / sqlite ceiling (target >= 0.8)", f"{to_ceiling:.2f}"),
        ("    nicplug / eventsourcing (target >= 3)", f"{to_es:.2f}"),
        (f"journal for queries: {sizes.journal:,} events, {size_mb:,.0f} MB, built in",
         f"{built:.1f} s"),
        ("history of one stream, p50 (target < 1 ms)", f"{p50:.3f} ms"),
        ("history of one stream, p99", f"{p99:.3f} ms"),
        ("recovery: open incl. quick_check + migrations check", f"{open_s:.3f} s"),
        (f"recovery: load views of {sizes.live:,} live streams", f"{load_s:.3f} s"),
        ("recovery total (target < 2 s)", f"{recovery_s:.3f} s"),
    ]
    for name, value in table:
        print(f"{name:<58} {value:>14}")
    print(json.dumps({
        "events_per_s": round(nicplug_rate),
        "ratio_vs_sqlite_ceiling": round(to_ceiling, 3),
        "ratio_vs_eventsourcing": round(to_es, 3),
        "history_query_ms_p50": round(p50, 4),
        "recovery_s": round(recovery_s, 3),
        "sqlite_ceiling_events_per_s": round(sqlite_rate),
        "eventsourcing_events_per_s": round(es_rate),
        "journal_events": sizes.journal,
        "live_streams": sizes.live,
        "quick": quick,
    }))
    return 0
