"""The sample tapes replay to their golden outputs, to the outcomes the demo expects,
the same way every time, and with the effects the recording controller issued."""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from nicplug.adapters.cli import app
from tests.tapes.goldens import SAMPLES, SampleTape, replay_output

IDS = [s.name for s in SAMPLES]


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_replay_matches_its_golden_output(sample: SampleTape) -> None:
    code, output = replay_output(sample)
    assert code == 0
    assert output == sample.golden.read_bytes()


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_replay_reaches_the_outcomes_of_the_live_run(sample: SampleTape) -> None:
    _, output = replay_output(sample)
    operations = orjson.loads(output)["operations"]
    for outcome in sample.outcomes:
        assert any(
            op["vm"] == outcome.vm and op["network"] == outcome.network
            and op["direction"] == outcome.direction and op["state"] == outcome.state
            and (outcome.reason is None or op["reason"] == outcome.reason)
            for op in operations
        ), (outcome, operations)


@pytest.mark.parametrize(
    "sample", [s for s in SAMPLES if s.tape.suffix == ".jsonl"], ids=lambda s: s.name
)
def test_recorded_effects_agree_with_the_replay(sample: SampleTape) -> None:
    """The replay decides every kind of write the recording controller issued, on the
    same objects, and never more often. A live write can be issued more often than
    replayed: one built from a cache a moment behind the server is refused (a 422 to
    its `test` op, a 409) and issued again from the next world, and the tape records
    issued effects, not their answers; a replay's writes are never refused. Events
    likewise: one where operations end up, each on a VM the recording evented too."""
    code, output = replay_output(sample)
    assert code == 0
    taped: Counter[tuple[str, str]] = Counter()
    for line in sample.tape.read_bytes().splitlines():
        item = orjson.loads(line)
        if item.get("type") == "EFFECT":
            taped[item["object"]["type"], item["object"]["target"]] += 1
    replayed = Counter((e["type"], e["target"]) for e in orjson.loads(output)["effects"])
    assert set(replayed) == set(taped)
    for key, n in replayed.items():
        assert 1 <= n <= taped[key], (key, n, taped[key])


def test_an_effect_difference_is_reported_and_fails(tmp_path: Path) -> None:
    """A tape whose controller created one migration fewer than the replay decides."""
    multus = "kubevirt-no-dynamic-networks-an-opted-in-vm-is-migrated"
    sample = next(s for s in SAMPLES if s.name == multus)
    lines = sample.tape.read_bytes().splitlines(keepends=True)
    dropped = next(i for i, line in enumerate(lines)
                   if b'"EFFECT"' in line and b'"CreateMigration"' in line)
    tampered = tmp_path / "tampered.tape.jsonl"
    tampered.write_bytes(b"".join(lines[:dropped] + lines[dropped + 1:]))
    result = CliRunner().invoke(
        app, ["replay", str(tampered), "--compare-effects", *sample.args]
    )
    assert result.exit_code == 1
    assert re.search(r"effects differ: CreateMigration default/nicplug-vm-00000-[0-9a-f]{8}: "
                     r"0 on the tape, 1 in the replay", result.stderr)


def _journal_rows(path: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every table's rows without the wall-clock columns."""
    with sqlite3.connect(path) as db:
        tables = [r[0] for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        rows = {}
        for table in tables:
            columns = [r[1] for r in db.execute(f"PRAGMA table_info({table})")
                       if "wall" not in r[1]]
            order = ", ".join(str(n) for n in range(1, len(columns) + 1))
            rows[table] = db.execute(
                f"SELECT {', '.join(columns)} FROM {table} ORDER BY {order}").fetchall()
    return rows


@pytest.mark.parametrize("sample", [SAMPLES[2], SAMPLES[-2]], ids=lambda s: s.name)
def test_the_same_tape_gives_the_same_bytes_and_the_same_journal(
    sample: SampleTape, tmp_path: Path
) -> None:
    first = replay_output(sample, "--journal", str(tmp_path / "a.db"))
    second = replay_output(sample, "--journal", str(tmp_path / "b.db"))
    assert first == second
    a, b = _journal_rows(tmp_path / "a.db"), _journal_rows(tmp_path / "b.db")
    assert a["events"], "the replay journaled nothing"
    assert a == b


def test_a_changed_effect_line_is_reported_and_fails(tmp_path: Path) -> None:
    sample = SAMPLES[0]
    lines = sample.tape.read_bytes().splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if b'"EFFECT"' in line)
    del lines[first]
    tape = tmp_path / "edited.tape.jsonl"
    tape.write_bytes(b"".join(lines))
    edited = SampleTape("edited", tape, sample.args, sample.outcomes)
    code, _ = replay_output(edited, "--compare-effects")
    assert code == 1
