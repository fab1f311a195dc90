"""Runs every row of the bad-input table (`table.py`) as a real `nicplug` process, and
keeps the docs' copy of the table the same as the rows."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.badinput.table import ROWS, BadInput, Scratch, markdown

DOCS = Path(__file__).parents[2] / "docs" / "operations.md"
NICPLUG = (sys.executable, "-m", "nicplug.adapters.cli")
_PR_CAPBSET_DROP = 24
_DAC_CAPABILITIES = (1, 2, 3)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER


@pytest.fixture
def scratch() -> Iterator[Scratch]:
    # not under pytest's tmp_path: its parents are private, and one row runs as nobody
    root = Path(tempfile.mkdtemp(prefix="nicplug-bad-input-"))
    root.chmod(0o755)
    made = Scratch(root)
    try:
        yield made
    finally:
        made.close()
        shutil.rmtree(root)


def _without_root() -> None:
    """In the child, before exec: root without the power to ignore file modes, so a
    read-only directory is read-only for it too (a non-root user needs nothing)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in _DAC_CAPABILITIES:
        if libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "cannot drop a capability")


def _beside(paths: list[str], scratch: Scratch) -> set[Path]:
    """Every file in the scratch directories of the given paths (what a run left)."""
    found: set[Path] = set()
    for given in paths:
        folder = Path(given).parent
        if folder.is_relative_to(scratch.root) and folder.is_dir():
            found.update(folder.iterdir())
    return found


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.kind}: {r.given}")
def test_bad_input(row: BadInput, scratch: Scratch) -> None:
    argv = row.argv(scratch)
    before = _beside(argv, scratch)
    if row.as_nobody and os.geteuid() == 0:
        scratch.root.chmod(0o755)
    done = subprocess.run(
        [*NICPLUG, *argv], capture_output=True, timeout=120,
        stdin=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "200", **dict(row.env)},
        preexec_fn=_without_root if row.as_nobody and os.geteuid() == 0 else None,
    )
    stderr = done.stderr.decode(errors="replace")
    assert "Traceback" not in stderr, stderr[-3000:]
    assert done.returncode == row.code, stderr[-3000:]
    if row.says:
        last = stderr.splitlines()[-1]
        assert last.startswith("nicplug: ") and row.says in last, stderr[-3000:]
    else:
        assert not stderr.strip(), stderr[-3000:]
    if row.kind in ("journal", "files"):
        assert _beside(argv, scratch) == before  # no -wal/-shm, no half-written output


def test_the_read_only_journal_is_answered_as_a_snapshot(scratch: Scratch) -> None:
    path = scratch.read_only_journal()
    done = subprocess.run(
        [*NICPLUG, "status", "--journal", path], capture_output=True, timeout=120,
        env={**os.environ, "COLUMNS": "200"},
        preexec_fn=_without_root if os.geteuid() == 0 else None,
    )
    assert done.returncode == 0, done.stderr
    assert b"read as a snapshot: no controller holds it" in done.stdout
    assert b"ns/plugged" in done.stdout


def test_a_crashed_journal_in_a_read_only_place_is_read_with_its_wal(
    scratch: Scratch,
) -> None:
    path = scratch.read_only_crashed_journal()
    done = subprocess.run(
        [*NICPLUG, "status", "--json", "--vm", "ns/staged", "--journal", path],
        capture_output=True, timeout=120,
        preexec_fn=_without_root if os.geteuid() == 0 else None,
    )
    assert done.returncode == 0, done.stderr
    assert {o["state"] for o in json.loads(done.stdout)["operations"]} == {"Cancelled"}


def test_the_docs_show_the_same_table() -> None:
    text = DOCS.read_text()
    assert markdown() in text, "docs/operations.md: run `python -m tests.badinput.table`"
