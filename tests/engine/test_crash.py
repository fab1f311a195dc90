"""Crash safety with real processes: SIGKILL an appending journal, then check it.

Every acknowledged append must be on disk, no batch may be half written, versions
have no gaps, and the file passes `PRAGMA integrity_check`. Kills land after a random
number of acknowledgements (sometimes none), so they hit every phase of the writer.
"""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KILLS = 50


def _run_and_kill(path: Path, seed: int, acks_before_kill: int) -> list[str]:
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.engine.crash_child", str(path), str(seed)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert child.stdout is not None
    lines = []
    try:
        while len(lines) <= acks_before_kill:
            line = child.stdout.readline()
            if not line:
                break
            lines.append(line)
    finally:
        child.send_signal(signal.SIGKILL)
        rest, errors = child.communicate()
    lines.extend(rest.splitlines(keepends=True))
    assert child.returncode == -signal.SIGKILL, errors
    complete = [line.strip() for line in lines if line.endswith("\n")]
    assert complete and complete[0] == "ready", errors
    return complete[1:]


@pytest.mark.slow
def test_killed_writer_loses_nothing_acknowledged(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    rng = random.Random(20240611)
    acknowledged: dict[str, tuple[str, int]] = {}  # batch -> (stream, its last version)
    for seed in range(KILLS):
        for ack in _run_and_kill(path, seed, rng.choice([0, *range(1, 400)])):
            stream, batch, version = ack.split()
            acknowledged[batch] = (stream, int(version))
    assert len(acknowledged) > KILLS * 20

    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        rows = conn.execute(
            "SELECT stream, version, json_extract(payload, '$.batch'),"
            " json_extract(payload, '$.size') FROM events ORDER BY stream, version"
        ).fetchall()
        stored = dict(conn.execute("SELECT stream, version FROM streams").fetchall())
    versions: dict[str, list[int]] = {}
    sizes: dict[str, int] = {}
    last: dict[str, tuple[str, int]] = {}
    for stream, version, batch, size in rows:
        versions.setdefault(stream, []).append(version)
        sizes[batch] = size
        last[batch] = (stream, version)
    lost = {batch for batch, where in acknowledged.items() if last.get(batch) != where}
    assert not lost, f"acknowledged batches lost: {sorted(lost)[:5]}"
    for stream, found in versions.items():
        assert found == list(range(1, len(found) + 1)), f"{stream} has gaps"
        assert stored[stream] == found[-1], f"read model of {stream} disagrees with events"
    counts = Counter(batch for _, _, batch, _ in rows)
    half = {batch: n for batch, n in counts.items() if n != sizes[batch]}
    assert not half, f"half-written batches: {half}"
