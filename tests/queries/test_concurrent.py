"""The queries work while a writer appends to the same journal (WAL): each answer is
whole, and a separate process can read the journal the controller holds open."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from nicplug.adapters.queries import dossier, open_for_queries, operations
from tests.queries.journal_worlds import MAIN, standard_failures, standard_sims, start, stop

ROOT = Path(__file__).resolve().parents[2]


async def test_queries_while_the_runtime_writes(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    cluster = await start(path, standard_sims(), standard_failures())
    reader = await open_for_queries(path)
    done = asyncio.Event()
    try:
        async def write() -> None:
            await cluster.run(12)
            cluster.sims["ns/unplugged"].networks = (MAIN,)
            await cluster.run(8)
            done.set()

        async def read() -> int:
            checked = 0
            while not done.is_set():
                for op in await operations(reader):
                    found = await dossier(reader, op.id, now=cluster.clock.now())
                    assert found is not None
                    line = found.timeline
                    # the view and the events were read in one snapshot: they agree
                    walked = [s.to for s in line.steps if s.type == "Transitioned"]
                    assert line.operation.history == ["Requested", *walked]
                    assert found.explain.operation == line.operation
                    checked += 1
                await asyncio.sleep(0)
            return checked

        _, checked = await asyncio.gather(write(), read())
        assert checked > 20
        written = await cluster.journal.census()
        assert await reader.census() == written
        assert len(await operations(reader)) == 11
    finally:
        await reader.close()
        await stop(cluster)


@pytest.mark.slow
async def test_another_process_reads_while_the_controller_writes(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    cluster = await start(path, standard_sims(), standard_failures())
    try:
        await cluster.run(3)
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "nicplug.adapters.cli", "status", "--journal", str(path),
            "--json",
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        reading = asyncio.ensure_future(process.communicate())
        ticks = 0
        while not reading.done() and ticks < 500:  # keep writing meanwhile
            await cluster.tick()
            ticks += 1
            await asyncio.sleep(0)
        out, err = await reading
        assert process.returncode == 0, err.decode()
        seen = json.loads(out)["operations"]
        assert {op["vm"] for op in seen} >= {"ns/plugged", "ns/staged", "ns/silent"}
        assert ticks > 0  # the writer appended while the other process read
    finally:
        await stop(cluster)
