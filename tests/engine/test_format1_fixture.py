"""A journal nicplug wrote before its payloads were versioned opens, recovers and
finishes with today's code.

`fixtures/format1-mid-unplug.sqlite` was written by the code of that time
(`fixtures/make_format1_journal.py`), stopped in the middle of the `live-hot-unplug`
sample tape of that time (kept beside it): a finished plug, a live unplug, two effects
pending in the outbox. Today
`EffectsIssued` names its digests `digests` (it said `keys`), snapshots carry a schema
and the stream version they are folded through. A controller restarted on it lists the
world as it stands (the tape up to the cut, as an initial list) and then follows the
rest of the tape.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from typer.testing import CliRunner

from nicplug.adapters.cli import app
from nicplug.adapters.core.replaying import Replay
from nicplug.adapters.core.settings import Settings
from nicplug.engine.schema import latest_version
from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.machines.operation import EFFECTS_ISSUED, SNAPSHOT_SCHEMA
from nicplug.machines.versions import schemas

HERE = Path(__file__).parent
FIXTURE = HERE / "fixtures" / "format1-mid-unplug.sqlite"
TAPE = HERE / "fixtures" / "format1-live-hot-unplug.tape.jsonl"
GOLDEN = HERE / "fixtures" / "format1-live-hot-unplug.golden.json"
"""The `live-hot-unplug` sample tape (and its replay) as they were when the fixture was
written: the journal belongs with the world it saw (interfaces named after their
network, before Deckhouse's VirtualMachineMACAddresses were simulated)."""
CUT = 29  # the fixture's journal saw the tape's first 29 lines


def restarted_tape() -> list[bytes]:
    """The world at the cut as a fresh list, then the rest of the tape."""
    lines = TAPE.read_bytes().splitlines()
    latest: dict[tuple[str, str, str | None, str], object] = {}
    at = None
    for line in lines[:CUT]:
        item = json.loads(line)
        if item["type"] in ("EFFECT", "BOOKMARK"):
            continue
        obj, meta = item["object"], item["object"]["metadata"]
        latest[(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])] = obj
        at = item["at"]
    listing = [json.dumps({"type": "ADDED", "at": at, "object": o}).encode()
               for o in latest.values()]
    end = {"metadata": {"annotations": {"k8s.io/initial-events-end": "true"}}}
    listing.append(json.dumps({"type": "BOOKMARK", "at": at, "object": end}).encode())
    return listing + lines[CUT:]


def test_the_fixture_is_of_the_first_format() -> None:
    with sqlite3.connect(f"file:{FIXTURE}?mode=ro", uri=True) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (1,)
        payloads = [json.loads(p) for (p,) in conn.execute(
            "SELECT payload FROM events WHERE type = ?", (EFFECTS_ISSUED,))]
        pending = conn.execute("SELECT COUNT(*) FROM effects WHERE status = 'issued'")
        assert pending.fetchone() == (2,)
    assert payloads and all("keys" in p and "digests" not in p for p in payloads)


async def test_the_first_format_is_opened_recovered_and_finished(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    shutil.copy(FIXTURE, path)
    result = await Replay(Settings(), journal=path).run(restarted_tape())
    assert result.errors == []
    golden = json.loads(GOLDEN.read_text())["operations"]
    got = [{"direction": o.direction, "state": o.state, "history": list(o.history)}
           for o in result.operations]
    assert got == [{"direction": o["direction"], "state": o["state"], "history": o["history"]}
                   for o in golden]
    journal = await SQLiteJournal.open(path, read_only=True, schemas=schemas())
    try:
        census = await journal.census()
        issued = [e for e in await journal.read_all() if e.type == EFFECTS_ISSUED]
        views = await journal.views()
        pending = await journal.outbox()
    finally:
        await journal.close()
    assert census.schema_version == latest_version()
    assert issued and all(e.schema_version == 2 and "digests" in e.payload for e in issued)
    unplug = next(v for v in views if "/unplug/" in v.view.stream)
    assert (unplug.stored_schema, unplug.through) == (SNAPSHOT_SCHEMA, unplug.version)
    # the two the old code left pending (effects of schema 1, read as they were written)
    # ran once their backoff passed: every line's `at` moves the replay clock, the
    # tape's EFFECT lines included, and the tape runs past the backoff
    assert pending == []


def test_the_first_format_is_rebuilt_offline_and_then_verifies(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    shutil.copy(FIXTURE, path)
    runner = CliRunner()
    refused = runner.invoke(app, ["journal", "verify", "--journal", str(path)])
    assert refused.exit_code == 1 and "open it once with a writing nicplug" in refused.stderr
    rebuilt = runner.invoke(app, ["journal", "rebuild", "--journal", str(path)])
    assert rebuilt.exit_code == 0
    assert "2 read-model rows rebuilt from 12 events (2 differed" in rebuilt.stdout
    verified = runner.invoke(app, ["journal", "verify", "--journal", str(path), "--json"])
    assert verified.exit_code == 0 and json.loads(verified.stdout)["mismatches"] == []
