"""The kubevirt flavour is journaled as `kubevirt`; journals that recorded it as
`multus` (`Opened` 1, snapshots up to 3) read as `kubevirt` through the upcasters of
`machines/versions.py`: the queries, the explanation, recovery and a rebuild all see
the flavour's current name."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

from nicplug.adapters.core.replaying import Replay
from nicplug.adapters.core.settings import Settings
from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.engine.upcasting import SNAPSHOT
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.operation import OPENED, SNAPSHOT_SCHEMA
from nicplug.machines.policy import MachineConfig
from nicplug.machines.versions import EVENT_SCHEMAS, schemas
from tests.queries.test_cli import as_json, nicplug

TAPES = Path(__file__).parents[1] / "tapes"
TAPE = TAPES / "kubevirt-stage-hotplug-under-stage-applied-live-the-bypass-reported.tape.jsonl"


def test_an_opened_event_and_a_snapshot_of_the_older_format_read_as_kubevirt() -> None:
    s = schemas()
    old_opened = {"vm": "ns/vm", "vm_uid": "u", "network": "Network/x", "if_name": "veth_n1",
                  "direction": "plug", "attempt": 1, "target": "", "at": 1.0,
                  "flavour": "multus"}
    version, payload = s.events.upcast(OPENED, 1, old_opened)
    assert (version, payload) == (EVENT_SCHEMAS[OPENED], {**old_opened, "flavour": "kubevirt"})
    deckhouse = {k: v for k, v in old_opened.items() if k != "flavour"}
    assert s.events.upcast(OPENED, 1, deckhouse) == (2, deckhouse)  # (absent: deckhouse)
    version, snapshot = s.snapshots.upcast(SNAPSHOT, 3, {"flavour": "multus", "credit": 0.0})
    assert (version, snapshot["flavour"]) == (SNAPSHOT_SCHEMA, "kubevirt")
    version, snapshot = s.snapshots.upcast(SNAPSHOT, 2, {"flavour": "multus"})
    assert (version, snapshot["flavour"], snapshot["paused_at"]) == (4, "kubevirt", None)


async def _kubevirt_journal(path: Path) -> None:
    result = await Replay(Settings(dialect="multus"), journal=path).run(
        TAPE.read_bytes().splitlines())
    assert result.errors == [] and result.operations


def _as_older_nicplug_wrote_it(path: Path) -> None:
    """Every `Opened` back to schema 1 saying `multus`, every row's snapshot to 3."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT position, payload FROM events WHERE type = ?", (OPENED,))
        for position, payload in rows.fetchall():
            old = {**json.loads(payload), "flavour": "multus"}
            conn.execute("UPDATE events SET payload = ?, schema_version = 1 WHERE position = ?",
                         (json.dumps(old), position))
        for stream, snapshot in conn.execute("SELECT stream, snapshot FROM streams").fetchall():
            old = {**json.loads(snapshot), "flavour": "multus"}
            conn.execute("UPDATE streams SET snapshot = ?, snapshot_schema = 3 WHERE stream = ?",
                         (json.dumps(old), stream))


def test_a_journal_of_the_older_format_answers_kubevirt(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    asyncio.run(_kubevirt_journal(path))
    fresh = as_json("status", "--journal", str(path))
    assert {o["flavour"] for o in fresh["operations"]} == {"kubevirt"}
    with sqlite3.connect(path) as conn:
        (written,) = conn.execute("SELECT payload FROM events WHERE type = ? LIMIT 1", (OPENED,))
    assert json.loads(written[0])["flavour"] == "kubevirt"  # recorded under its name now

    _as_older_nicplug_wrote_it(path)
    status = as_json("status", "--journal", str(path))
    assert [o["flavour"] for o in status["operations"]] == ["kubevirt"] * len(
        fresh["operations"])
    op = status["operations"][0]
    explained = nicplug("explain", op["id"], "--journal", str(path), "--json")
    assert explained.exit_code == 0, explained.output
    assert json.loads(explained.stdout)["operation"]["flavour"] == "kubevirt"
    history = as_json("history", op["vm"], "--journal", str(path))
    assert history  # the timeline folds the old events

    asyncio.run(_folds_as_kubevirt(path))
    rebuilt = nicplug("journal", "rebuild", "--journal", str(path))
    assert rebuilt.exit_code == 0, rebuilt.output
    verified = nicplug("journal", "verify", "--journal", str(path), "--json")
    assert verified.exit_code == 0 and json.loads(verified.stdout)["mismatches"] == []
    assert {o["flavour"] for o in as_json("status", "--journal", str(path))["operations"]} == {
        "kubevirt"}


async def _folds_as_kubevirt(path: Path) -> None:
    """Recovery does not trust an older snapshot: it folds the events, upcast."""
    journal = await SQLiteJournal.open(path, schemas=schemas())
    try:
        views = await journal.views()
        assert {v.view.snapshot["flavour"] for v in views} == {"kubevirt"}
        decider = HotplugDecider(MachineConfig(dialect_kind="multus"))
        events = await journal.read_all()
        for view in views:
            state = decider.initial(view.view.key)
            for event in events:
                if event.key == view.view.key:
                    state = decider.evolve(state, event)
            assert {o.flavour for o in state.ops.values()} == {"kubevirt"}
    finally:
        await journal.close()
