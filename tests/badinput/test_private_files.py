"""Tapes and demo logs hold whole objects: written 0600, like the journal (issue item 13)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from nicplug.adapters.demo.worlds import _spawn
from nicplug.adapters.kube.flavour import UPSTREAM
from nicplug.adapters.tapes.writer import TapeWriter


@pytest.fixture(autouse=True)
def open_umask() -> Iterator[None]:
    """The usual umask (0022): files would be 0644 unless asked otherwise."""
    before = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(before)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_recorded_tape_is_written_0600(tmp_path: Path) -> None:
    tape = tmp_path / "cluster.tape.jsonl"
    with TapeWriter(tape, now=lambda: 0.0) as writer:
        writer.watch_event(UPSTREAM.kvvms, "ADDED", {"metadata": {"name": "a", "namespace": "n"}})
    assert _mode(tape) == 0o600
    assert b'"name":"a"' in tape.read_bytes()


def test_a_tape_written_over_an_open_file_becomes_0600(tmp_path: Path) -> None:
    tape = tmp_path / "old.tape.jsonl"
    tape.write_bytes(b"old lines\n")
    tape.chmod(0o644)
    with TapeWriter(tape, now=lambda: 0.0) as writer:
        writer.effect("EmitEvent", "n/a")
    assert _mode(tape) == 0o600
    assert b"old lines" not in tape.read_bytes()


async def test_a_demo_log_is_written_0600(tmp_path: Path) -> None:
    log = tmp_path / "world-controller.log"
    child = await _spawn(["version"], log)
    assert await child.wait() == 0
    assert _mode(log) == 0o600
    assert log.read_bytes().strip()
