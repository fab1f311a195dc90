"""Reading a PostgreSQL journal from outside while controllers write it, for the
process-level failover tests and their bench runner: operations, the clean-path check,
and what each term of leadership wrote. Reads only."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import asyncpg

from tests.integration.processes_support import JournalOp


async def _rows(dsn: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(dsn)
    try:
        if not await conn.fetchval("SELECT to_regclass('events') IS NOT NULL"):
            return []
        return [tuple(r) for r in await conn.fetch(sql, *args)]
    finally:
        await conn.close()


async def operations(dsn: str) -> list[JournalOp]:
    ops = []
    for stream, state, terminal, snapshot in await _rows(
        dsn, "SELECT stream, state, terminal, snapshot::text FROM streams"
             " WHERE state IS NOT NULL ORDER BY stream"):
        s = json.loads(snapshot)
        ops.append(JournalOp(stream, s["vm"], s["network"], s["direction"], state,
                             bool(terminal), tuple(s["history"])))
    return ops


async def check_journal(dsn: str) -> None:
    """Every stream is a clean path (versions 1..n, `Opened` once, each `Transitioned`
    leaving the state the previous one entered, none entered twice), the read model at
    its end, positions gapless: no transition lost, none written twice."""
    events: dict[str, list[tuple[int, str, dict[str, Any]]]] = {}
    positions = []
    for position, stream, version, type_, payload in await _rows(
        dsn, "SELECT position, stream, version, type, payload::text FROM events"
             " ORDER BY stream, version"):
        events.setdefault(stream, []).append((version, type_, json.loads(payload)))
        positions.append(position)
    assert sorted(positions) == list(range(1, len(positions) + 1)), "positions with gaps"
    views = {op.stream: op for op in await operations(dsn)}
    assert set(events) == set(views), "streams without events or events without a view"
    for stream, recorded in events.items():
        assert [v for v, _, _ in recorded] == list(range(1, len(recorded) + 1)), stream
        assert recorded[0][1] == "Opened", stream
        path = ["Requested"]
        for _, type_, payload in recorded:
            if type_ == "Transitioned":
                assert payload["from"] == path[-1], f"{stream}: {payload} after {path}"
                assert payload["to"] not in path, f"{stream}: {payload['to']} twice: {path}"
                path.append(payload["to"])
        assert tuple(path) == views[stream].history, stream
        assert path[-1] == views[stream].state, stream


async def terms(dsn: str) -> list[tuple[int, str]]:
    return [(int(n), str(h)) for n, h in await _rows(
        dsn, "SELECT number, holder FROM terms ORDER BY number")]


async def events_of_term(dsn: str, term: int) -> int:
    rows = await _rows(dsn, "SELECT COUNT(*) FROM events WHERE term = $1", term)
    return int(rows[0][0]) if rows else 0


async def effects_by_type(dsn: str, types: Sequence[str]) -> dict[str, int]:
    """Per key, how many outbox rows of `types` the journal holds (each one effect)."""
    counts: dict[str, int] = {}
    for key, n in await _rows(
        dsn, "SELECT key, COUNT(*) FROM effects WHERE type = ANY($1::text[]) GROUP BY key",
        list(types)):
        counts[str(key)] = int(n)
    return counts
