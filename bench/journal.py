"""`python -m bench journal [--quick]`: nicplug's journal side by side with its ceiling
and with the `eventsourcing` library.

Appends of the same events (about 200 bytes of JSON each, ten a commit), all with
`synchronous=FULL` in WAL mode, on a fresh file each run, each contender's input made
before the clock starts; (a) and (b) write into files nicplug's journal created, so
that both have the same tables, indexes and file settings (incremental auto-vacuum):
(a) raw `sqlite3` `executemany` of exactly the rows (b) writes, one transaction per
    group of (b): the events of 100 streams, ten each, and those streams' rows at their
    new versions — the ceiling; (b) nicplug's journal with 100 concurrent appenders,
    one commit in flight each (group commit: 100 commits, 1000 events a transaction);
    (c) `eventsourcing`'s `SQLiteApplicationRecorder`, appenders on threads.
Then, on a journal of 1M events of real plug operations (100k with --quick, as
printed), 10,000 of them live (1,000): the history query of one stream; recovery (open
with the default checks — the tables recovery reads whole, as after a crash; a
controller checks the whole file beside its work after start — + `Runtime.start`:
snapshots loaded, the events after them folded, a tenth of the live operations with a
tail of two events); the open after a clean close (nothing checked);
and a full `journal rebuild` as the command runs it (the same checks at open, every
stream folded from its events, the rows that differ from the fold rewritten: the tenth
behind on the first of the three runs). Last,
churn: 40 VMs plug and unplug a network for ten rounds through the real decider and
runtime (the tests' simulated VM worlds), retention archiving what finished after
each round: journal bytes per plug+unplug, and the file's growth from round 2 to 10.
Appends: medians of 9 interleaved rounds (5 with --quick), each in another order;
ratios are medians of the per-round ratios. The rest: medians of three runs. Prints a
table, then one JSON line.
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
from pathlib import Path

from eventsourcing.persistence import StoredEvent
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

from bench._args import quick as quick_run
from nicplug.adapters.cli.journal_upkeep import rebuild_read_model
from nicplug.adapters.core.retention import archive_finished
from nicplug.engine.clock import VirtualClock
from nicplug.engine.effects import RecordingExecutor
from nicplug.engine.journal import Commit
from nicplug.engine.model import Cause, Key, NewEvent, StreamId
from nicplug.engine.runtime import Runtime
from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.engine.sqlite_opening import Synchronous, configure
from nicplug.engine.sqlite_writes import to_json
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.operation import (
    EFFECTS_ISSUED,
    OPENED,
    SNAPSHOT_SCHEMA,
    TRANSITIONED,
    VMState,
)
from nicplug.machines.versions import EVENT_SCHEMAS, schemas
from nicplug.machines.world import World
from tests.queries.journal_worlds import X, start, stop
from tests.unit.machines.sim import MAIN, Sim

PAYLOAD = {"vm": "ns/vm-000001", "network": "Network/user-net", "pad": "x" * 140}
PAYLOAD_JSON = to_json(PAYLOAD)
PER_COMMIT = 10
APPENDERS = 100  # one append each in flight: groups of 1000 events, as (a)
THREADS = 8
RUNS = 3
CHURN_VMS = 40
CHURN_ROUNDS = 10


@dataclass(frozen=True)
class Sizes:
    appends: int  # events appended by each contender per round
    append_rounds: int  # rounds of appends, each contender once a round
    journal: int  # events in the journal for the history and recovery figures
    live: int  # live streams among journal / 10 streams

    @staticmethod
    def of(quick: bool) -> Sizes:
        if quick:
            return Sizes(20_000, 5, 100_000, 1_000)
        return Sizes(50_000, 9, 1_000_000, 10_000)


_INSERT = "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_TOUCH = (
    "INSERT INTO streams (stream, key, version, updated_wall, updated_logical)"
    " VALUES (?, ?, ?, 1.0, 2.0) ON CONFLICT (stream) DO UPDATE SET version = excluded.version,"
    " updated_wall = excluded.updated_wall, updated_logical = excluded.updated_logical"
)


def _schema(path: str, synchronous: Synchronous) -> sqlite3.Connection:
    """A raw connection to a new file made as nicplug's journal makes it at open: the
    same tables, indexes and file settings (WAL, incremental auto-vacuum)."""
    conn = sqlite3.connect(path, isolation_level=None)
    configure(conn, path=path, read_only=False, synchronous=synchronous, integrity="none",
              size_limit_bytes=None)
    return conn


def _rounds(events: int) -> range:
    """The versions each appender's stream starts its commits at."""
    return range(0, events // APPENDERS, PER_COMMIT)


def ceiling(path: str, events: int) -> float:
    """The rows (b) writes for the same appends, one transaction per group: the events
    of every appender's commit and each stream's row at its new version."""
    conn = _schema(path, "FULL")
    groups = []
    position = 0
    for first in _rounds(events):
        rows = []
        for n in range(APPENDERS):
            stream = f"s{n}"
            for version in range(first + 1, first + PER_COMMIT + 1):
                position += 1
                rows.append((position, stream, stream, version, "Step", 1, PAYLOAD_JSON,
                             "observation", f"VirtualMachine/{stream}@{first}", None, 1.0, 2.0))
        groups.append((rows, [(f"s{n}", f"s{n}", first + PER_COMMIT) for n in range(APPENDERS)]))
    started = time.perf_counter()
    for rows, streams in groups:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(_INSERT, rows)
        conn.executemany(_TOUCH, streams)
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return len(groups) * APPENDERS * PER_COMMIT / elapsed


async def nicplug_appends(path: str, events: int) -> tuple[float, float]:
    """Events per second, and the mean number of appends per group commit."""
    journal = await SQLiteJournal.open(path)

    def commits(n: int) -> list[Commit]:
        stream = StreamId(f"s{n}")
        # events are immutable data without a version: a machine may well reuse them
        batch = tuple(NewEvent(stream, "Step", PAYLOAD) for _ in range(PER_COMMIT))
        return [Commit(
            key=Key(stream), cause=Cause("observation", f"VirtualMachine/{stream}@{first}"),
            wall_time=1.0, logical_time=2.0, expected={stream: first}, events=batch,
        ) for first in _rounds(events)]

    async def appender(mine: list[Commit]) -> None:
        for commit in mine:
            await journal.append(commit)

    prepared = [commits(n) for n in range(APPENDERS)]  # made beforehand, like (a)'s rows
    started = time.perf_counter()
    await asyncio.gather(*(appender(mine) for mine in prepared))
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

    def batches(n: int) -> list[list[StoredEvent]]:
        return [[StoredEvent(f"s{n}", first + i, "bench:Step", state) for i in range(PER_COMMIT)]
                for first in range(1, commits // THREADS * PER_COMMIT, PER_COMMIT)]

    def appender(mine: list[list[StoredEvent]]) -> None:
        for batch in mine:
            recorder.insert_events(batch)

    with datastore.transaction(commit=False) as cursor:
        cursor.execute("PRAGMA synchronous")
        synchronous = cursor.fetchone()[0]
    if synchronous != 2:
        raise RuntimeError(f"eventsourcing's connections run synchronous={synchronous}, not FULL")
    prepared = [batches(n) for n in range(THREADS)]  # made beforehand, like (a)'s rows
    started = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(appender, prepared))
    elapsed = time.perf_counter() - started
    datastore.close()
    return sum(len(batch) for mine in prepared for batch in mine) / elapsed


def _operation_events(s: int, live: bool) -> list[tuple[str, dict[str, object]]]:
    """The ten events of one plug as the decider writes them: opened, four effects
    issued and three (live) or four (finished) transitions."""
    at = 1_000.0 + s
    vm = s // 2
    events: list[tuple[str, dict[str, object]]] = [(OPENED, {
        "vm": f"ns/vm-{vm:06d}", "vm_uid": f"uid-{vm:06d}", "network": f"Network/net-{s % 2}",
        "if_name": f"veth_n{s % 2:08x}", "direction": "plug", "attempt": 1, "target": "",
        "at": at,
    })]
    path = ["Requested", "AnnotationPatched", "SDNReady", "VMIPatched", "Attached"]
    for step in range(1, 5):
        events.append((EFFECTS_ISSUED, {"digests": [s * 8 + step, s * 8 + step + 4],
                                        "at": at + step}))
        if step < 4 or not live:
            events.append((TRANSITIONED, {"from": path[step - 1], "to": path[step],
                                          "at": at + step + 0.5, "reason": None,
                                          "message": ""}))
    while len(events) < PER_COMMIT:
        events.append((EFFECTS_ISSUED, {"digests": [s], "at": at + len(events)}))
    return events


def _stream_of(s: int) -> str:
    return f"uid-{s // 2:06d}/Network/net-{s % 2}/plug/1"


def build_journal(path: str, sizes: Sizes) -> None:
    """A journal of `sizes.journal` events of real plug operations (ten events each, two
    per VM), interleaved like a busy controller writes them; `sizes.live` of them are
    still going, and a tenth of those have a snapshot two events behind (a tail)."""
    conn = _schema(path, "OFF")
    streams = sizes.journal // PER_COMMIT
    live = set(random.Random(1).sample(range(streams), sizes.live))
    behind = set(sorted(live)[:: 10])
    histories = [_operation_events(s, s in live) for s in range(streams)]
    conn.execute("BEGIN")
    for version in range(1, PER_COMMIT + 1):
        first = (version - 1) * streams
        rows = []
        for s in range(streams):
            type_, payload = histories[s][version - 1]
            rows.append((first + s + 1, _stream_of(s), f"ns/vm-{s // 2:06d}", version, type_,
                         EVENT_SCHEMAS[type_], to_json(payload), "observation",
                         f"VirtualMachine/ns/vm-{s // 2:06d}@{version}", None, 1.0, 2.0))
        conn.executemany(_INSERT, rows)
    views = []
    for s in range(streams):
        stream, key = StreamId(_stream_of(s)), Key(f"ns/vm-{s // 2:06d}")
        through = PER_COMMIT - 2 if s in behind else PER_COMMIT
        state = VMState(key, {})
        for type_, payload in histories[s][:through]:
            state = state.fold(stream, type_, payload)
        op = state.by_stream(stream)
        assert op is not None
        views.append((stream, key, PER_COMMIT, op.state, int(op.terminal),
                      to_json(op.snapshot()), SNAPSHOT_SCHEMA, through))
    conn.executemany(
        "INSERT INTO streams (stream, key, version, state, terminal, snapshot, snapshot_schema,"
        " snapshot_through, updated_wall, updated_logical) VALUES (?, ?, ?, ?, ?, ?, ?, ?,"
        " 1.0, 2.0)", views)
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


async def history_ms(path: str, sizes: Sizes) -> list[float]:
    journal = await SQLiteJournal.open(path, integrity="none")
    rng = random.Random(2)
    timings = []
    for _ in range(300):
        stream = StreamId(_stream_of(rng.randrange(sizes.journal // PER_COMMIT)))
        started = time.perf_counter()
        found = await journal.history(stream=stream)
        timings.append((time.perf_counter() - started) * 1000)
        if len(found) != PER_COMMIT:
            raise RuntimeError(f"{stream} has {len(found)} events")
    await journal.close()
    return timings


async def recovery(path: str, sizes: Sizes) -> tuple[float, float]:
    """Seconds to open (default checks: `quick_check` of every table but the events) and
    to start the runtime: every live VM's snapshots loaded and the events after them
    folded (`Runtime.start`)."""
    started = time.perf_counter()
    journal = await SQLiteJournal.open(path, schemas=schemas())
    opened = time.perf_counter()
    clock = VirtualClock()
    runtime: Runtime[VMState, World] = Runtime(
        HotplugDecider(), journal, RecordingExecutor(clock), clock)
    await runtime.start()
    loaded = time.perf_counter()
    live = sum(
        1 for key in {f"ns/vm-{s // 2:06d}" for s in range(sizes.journal // PER_COMMIT)}
        if (state := runtime.state_of(Key(key))) is not None
        for op in state.ops.values() if not op.terminal
    )
    await runtime.stop(drain=False)
    await journal.close()
    if live != sizes.live:
        raise RuntimeError(f"recovered {live} live operations, expected {sizes.live}")
    return opened - started, loaded - opened


async def clean_open(path: str) -> float:
    """Seconds to open (default checks) a journal whose last writer closed it cleanly
    after its whole file passed the check: nothing moved since, nothing is checked."""
    journal = await SQLiteJournal.open(path, integrity="none")
    problems = await journal.check_file()
    await journal.close()
    if problems != ["ok"]:
        raise RuntimeError(f"the journal's check found {problems[:3]}")
    started = time.perf_counter()
    journal = await SQLiteJournal.open(path, schemas=schemas())
    opened = time.perf_counter() - started
    await journal.close()
    return opened


async def rebuild_rate(path: str, sizes: Sizes, first: bool) -> float:
    """Events per second of `nicplug journal rebuild`: open alone (its checks: the
    default), fold every stream from its events, rewrite the rows that differ."""
    started = time.perf_counter()
    journal = await SQLiteJournal.open(path, schemas=schemas(), exclusive=True)
    try:
        rows, events, differed = await rebuild_read_model(journal)
    finally:
        await journal.close()
    elapsed = time.perf_counter() - started
    behind = len(range(0, sizes.live, 10)) if first else 0  # the first run catches them up
    if (rows, events, differed) != (sizes.journal // PER_COMMIT, sizes.journal, behind):
        raise RuntimeError(f"rebuilt {rows} rows from {events} events, {differed} differed")
    return events / elapsed


def _size(path: Path) -> int:
    return os.path.getsize(path)


async def churn(directory: str, vms: int, rounds: int) -> tuple[float, list[int]]:
    """Rounds of plug then unplug of one network on `vms` VMs through the real decider,
    runtime and journal, retention archiving everything finished after each round.
    Returns the journal bytes one plug+unplug took in round 1 (before retention) and the
    file's size after each round."""
    path = Path(directory) / "churn.db"
    archives = Path(directory) / "archives"
    archives.mkdir()
    sims = {f"ns/vm-{n}": Sim(networks=(MAIN,)) for n in range(vms)}
    cluster = await start(path, sims)
    await cluster.journal.checkpoint()
    empty = _size(path)
    sizes = []
    try:
        for round_ in range(rounds):
            for sim in sims.values():
                sim.networks = (MAIN, X)
            await cluster.run(8)
            for sim in sims.values():
                sim.networks = (MAIN,)
            await cluster.run(8)
            await cluster.journal.checkpoint()
            if round_ == 0:
                per_operation = (_size(path) - empty) / vms
            await archive_finished(
                cluster.journal, window=0.0, into=archives, now=cluster.clock.wall() + 1)
            await cluster.journal.checkpoint()
            sizes.append(_size(path))
    finally:
        await stop(cluster)
    return per_operation, sizes


def main(argv: list[str]) -> int:
    if "--backend" in argv:  # `--backend sqlite` (this module) or `postgres`
        at = argv.index("--backend")
        backend = argv[at + 1] if at + 1 < len(argv) else ""
        argv = argv[:at] + argv[at + 2:]
        if backend == "postgres":
            from bench import _journal_postgres

            return _journal_postgres.main(quick_run(
                argv, name="journal --backend postgres", doc=_journal_postgres.__doc__,
                smaller="20k events a round, 3 rounds, 1,000 live operations"))
        if backend != "sqlite":
            print("--backend: sqlite or postgres")
            return 2
    quick = quick_run(argv, name="journal", doc=__doc__,
                      smaller="a journal of 100k events, 1,000 live")
    sizes = Sizes.of(quick)
    groups: list[float] = []
    with tempfile.TemporaryDirectory(prefix="nicplug-bench-") as directory:

        def ours(path: str) -> float:
            rate, group = asyncio.run(nicplug_appends(path, sizes.appends))
            groups.append(group)
            return rate

        contenders = [
            lambda n: ceiling(os.path.join(directory, f"ceiling-{n}.db"), sizes.appends),
            lambda n: ours(os.path.join(directory, f"nicplug-{n}.db")),
            lambda n: eventsourcing_appends(os.path.join(directory, f"es-{n}.db"),
                                            sizes.appends),
        ]
        rounds = []
        for n in range(sizes.append_rounds):
            # interleaved, each round in another order, so that a disk or a CPU others
            # keep busy for a while hits every contender alike
            order = [(n + i) % len(contenders) for i in range(len(contenders))]
            rates = {i: contenders[i](n) for i in order}
            rounds.append((rates[0], rates[1], rates[2]))
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
        clean_opens = [asyncio.run(clean_open(big)) for _ in range(RUNS)]
        size_mb = os.path.getsize(big) / 1e6
        rebuilds = [asyncio.run(rebuild_rate(big, sizes, n == 0)) for n in range(RUNS)]
        per_operation, churned = asyncio.run(churn(directory, CHURN_VMS, CHURN_ROUNDS))
    open_s = statistics.median(p[0] for p in phases)
    load_s = statistics.median(p[1] for p in phases)
    recovery_s = statistics.median(p[0] + p[1] for p in phases)
    clean_open_s = statistics.median(clean_opens)
    rebuild_s = statistics.median(rebuilds)
    growth = churned[-1] / churned[1]
    p50 = statistics.median(history)
    p99 = sorted(history)[int(len(history) * 0.99) - 1]
    scale = "QUICK run: smaller sizes than the targets name" if quick else "full run"
    print(f"journal benchmark ({scale}); synchronous=FULL, WAL, {PER_COMMIT} events a commit,"
          f" ~{len(PAYLOAD_JSON)} B payload, medians of {sizes.append_rounds} interleaved"
          f" rounds of appends and of {RUNS} of the rest")
    print(f"{'measure':<58} {'value':>14}")
    table = [
        (f"(a) raw sqlite3 executemany, (b)'s rows, 1000 events/txn ({sizes.appends})",
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
        ("recovery: open incl. read-model checks + migrations check", f"{open_s:.3f} s"),
        ("open after a clean close (nothing moved: no check)", f"{clean_open_s:.3f} s"),
        (f"recovery: runtime start, {sizes.live:,} live operations (snapshot + tail)",
         f"{load_s:.3f} s"),
        ("recovery total (target <= 2 s)", f"{recovery_s:.3f} s"),
        (f"rebuild from events, {sizes.journal:,} events (target >= 100k)",
         f"{rebuild_s:,.0f} ev/s"),
        ("journal bytes per plug+unplug (round 1, before retention)",
         f"{per_operation:,.0f} B"),
        (f"churn: {CHURN_VMS} VMs x {CHURN_ROUNDS} rounds, file after round 2 / 10",
         f"{churned[1]:,} / {churned[-1]:,} B"),
        ("churn growth, round 10 / round 2 (target <= 1.10)", f"{growth:.3f}"),
        ("churn: file after rounds 2 to 10, smallest / largest",
         f"{min(churned[1:]):,} / {max(churned[1:]):,} B"),
    ]
    for name, value in table:
        print(f"{name:<58} {value:>14}")
    print(json.dumps({
        "events_per_s": round(nicplug_rate),
        "ratio_vs_sqlite_ceiling": round(to_ceiling, 3),
        "ratio_vs_eventsourcing": round(to_es, 3),
        "history_query_ms_p50": round(p50, 4),
        "recovery_s": round(recovery_s, 3),
        "open_s": round(open_s, 3),
        "open_after_clean_close_s": round(clean_open_s, 4),
        "rebuild_events_per_s": round(rebuild_s),
        "bytes_per_operation": round(per_operation),
        "churn_growth_ratio": round(growth, 3),
        "sqlite_ceiling_events_per_s": round(sqlite_rate),
        "eventsourcing_events_per_s": round(es_rate),
        "journal_events": sizes.journal,
        "live_streams": sizes.live,
        "quick": quick,
    }))
    return 0
