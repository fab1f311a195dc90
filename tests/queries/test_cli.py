"""The query commands through typer's runner: tables, `--json` shapes, filters, bad
input and journals that cannot be read (one line, non-zero exit, never a traceback)."""

from __future__ import annotations

import json
import os
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from nicplug.adapters.cli import app
from nicplug.adapters.core.settings import Settings
from nicplug.adapters.queries import DEFAULT_JOURNAL
from nicplug.engine.schema import latest_version

OPERATION_KEYS = {
    "id", "vm", "vm_uid", "network", "if_name", "direction", "flavour", "mode", "attempt", "state",
    "terminal", "reason", "message", "history", "opened_at", "entered_at", "retry_at",
    "bypassed_vmi", "waiting", "held", "updated_wall", "archived",
}
STEP_KEYS = {"version", "position", "type", "from", "to", "trigger", "reason", "message", "at",
             "wall", "cause"}
EFFECT_KEYS = {"id", "type", "target", "outcome", "attempts", "last_error", "next_attempt_at",
               "issued_at", "issued_wall", "updated_at", "updated_wall"}
EXPLAIN_KEYS = {"operation", "summary", "superseded_by", "in_state_for", "waits_for", "ends_if",
                "pending_effects", "timers", "next_timer", "last_observation"}


WIDE = {"COLUMNS": "200"}


def nicplug(*argv: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, list(argv), env=env)


def as_json(*argv: str) -> Any:
    result = nicplug(*argv, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def one_line_error(result: Result, code: int, *fragments: str) -> None:
    assert result.exit_code == code, result.output
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("nicplug: ")
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in result.stderr


def test_the_default_journal_is_the_one_run_writes() -> None:
    assert Settings().journal == DEFAULT_JOURNAL


def test_status_json_lists_every_operation(standard_journal: Path) -> None:
    data = as_json("status", "--journal", str(standard_journal))
    assert set(data) == {"operations"}
    assert len(data["operations"]) == 11
    assert all(set(op) == OPERATION_KEYS for op in data["operations"])
    plugged = next(op for op in data["operations"] if op["vm"] == "ns/plugged")
    assert plugged["state"] == "Attached" and plugged["history"][-1] == "Attached"


def test_status_filters(standard_journal: Path) -> None:
    j = str(standard_journal)
    failed = as_json("status", "--journal", j, "--state", "Failed")["operations"]
    assert {(op["vm"], op["attempt"]) for op in failed} == {
        ("ns/failing", 1), ("ns/failing", 2), ("ns/failing", 3), ("ns/rejected", 1)}
    mine = as_json("status", "--journal", j, "--vm", "ns/unplugged")["operations"]
    assert [op["direction"] for op in mine] == ["plug", "unplug"]
    cluster = as_json("status", "--journal", j, "--network", "ClusterNetwork/y")["operations"]
    assert [op["vm"] for op in cluster] == ["ns/silent"]
    assert as_json("status", "--journal", j, "--vm", "ns/nobody") == {"operations": []}


def test_status_reads_the_journal_from_the_environment(standard_journal: Path) -> None:
    result = nicplug("status", "--json", env={"NICPLUG_JOURNAL": str(standard_journal)})
    assert result.exit_code == 0
    assert len(json.loads(result.stdout)["operations"]) == 11


def test_status_table_for_people(standard_journal: Path) -> None:
    result = nicplug("status", "--journal", str(standard_journal), "--vm", "ns/staged")
    assert result.exit_code == 0
    assert "ns/staged" in result.stdout and "RestartRequired" in result.stdout
    assert "ns/plugged" not in result.stdout
    empty = nicplug("status", "--journal", str(standard_journal), "--state", "Migrating")
    assert empty.exit_code == 0 and "no operations match" in empty.stdout


@pytest.mark.parametrize(("argv", "fragment"), [
    (("status", "--vm", "plugged"), "--vm: a VM is NAMESPACE/NAME"),
    (("status", "--state", "Done"), "--state: unknown state 'Done'"),
    (("status", "--network", "x"), "--network: a network is Main"),
    (("history", "plugged"), "NS/NAME: a VM is NAMESPACE/NAME"),
    (("stuck", "--older-than", "five minutes"), "--older-than: a duration is like"),
    (("explain", "ns/plugged", "Network/x", "--direction", "up"), "a direction is plug"),
    (("explain", "uid-plugged/Network/x/plug/1", "--direction", "plug"), "--direction needs"),
])
def test_bad_input_is_one_line_and_exit_2(
    standard_journal: Path, argv: tuple[str, ...], fragment: str
) -> None:
    one_line_error(nicplug(*argv, "--journal", str(standard_journal)), 2, fragment)


def test_history_json_shape_and_network_filter(standard_journal: Path) -> None:
    data = as_json("history", "ns/plugged", "--journal", str(standard_journal))
    assert set(data) == {"vm", "operations"} and data["vm"] == "ns/plugged"
    (line,) = data["operations"]
    assert set(line) == {"operation", "steps", "effects"}
    assert set(line["operation"]) == OPERATION_KEYS
    assert all(set(step) == STEP_KEYS for step in line["steps"])
    assert all(set(step["cause"]) == {"kind", "ref"} for step in line["steps"])
    assert all(set(effect) == EFFECT_KEYS for effect in line["effects"])
    assert [s["to"] for s in line["steps"]][-1] == "Attached"
    none = as_json("history", "ns/plugged", "--network", "Main", "--journal",
                   str(standard_journal))
    assert none["operations"] == []


def test_history_table_shows_causes_and_outcomes(standard_journal: Path) -> None:
    result = nicplug("history", "ns/rejected", "--journal", str(standard_journal), env=WIDE)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Requested → Failed (PatchRejected): admission webhook denied it" in out
    assert "effect PatchPodNetworks ns/virt-launcher-rejected-1: failed" in out
    assert "last error: admission webhook denied it" in out
    assert "VirtualMachine/ns/rejected@" in out and "timer:retry@" in out


def test_stuck_json_lists_live_operations(standard_journal: Path) -> None:
    # the journal was written on a virtual clock near the epoch: every live one is old
    data = as_json("stuck", "--older-than", "1h", "--journal", str(standard_journal))
    assert set(data) == {"older_than", "now", "operations"} and data["older_than"] == 3600
    assert {op["vm"] for op in data["operations"]} == {"ns/staged", "ns/silent", "ns/flaky"}
    assert all(not op["terminal"] for op in data["operations"])


def test_explain_by_id_and_by_vm_and_network(standard_journal: Path) -> None:
    j = str(standard_journal)
    by_id = as_json("explain", "uid-silent/ClusterNetwork/y/plug/1", "--journal", j)
    assert set(by_id) == EXPLAIN_KEYS
    assert by_id["operation"]["state"] == "AnnotationPatched"
    assert by_id["next_timer"]["name"] == "deadline"
    by_name = as_json("explain", "ns/silent", "ClusterNetwork/y", "--journal", j)
    assert by_name == {**by_id, "in_state_for": by_name["in_state_for"],
                       "timers": by_name["timers"], "next_timer": by_name["next_timer"]}
    result = nicplug("explain", "ns/flaky", "Network/x", "--journal", j, env=WIDE)
    assert result.exit_code == 0
    assert "→ VMIPatched (patch_vm): the KVVM/VMI spec holds the interface" in result.stdout
    assert "effect not done: PatchVirtualMachine ns/flaky (retrying" in result.stdout
    assert "last error: 429 Too Many Requests" in result.stdout
    assert "timer reissue: overdue" in result.stdout


def test_explain_an_unknown_operation(standard_journal: Path) -> None:
    one_line_error(nicplug("explain", "ns/plugged", "Main", "--journal", str(standard_journal)),
                   1, "no operation ns/plugged Main")


def test_journal_verify(standard_journal: Path) -> None:
    data = as_json("journal", "verify", "--journal", str(standard_journal))
    assert data["ok"] is True and data["integrity"] == ["ok"]
    assert data["schema_version"] == data["schema_supported"] == latest_version()
    assert data["events"] == data["last_position"] > 0
    assert set(data["effects"]) == {"issued", "succeeded", "failed"}
    text = nicplug("journal", "verify", "--journal", str(standard_journal))
    assert data["mismatches"] == []
    assert text.exit_code == 0 and ": ok" in text.stdout
    assert f"schema {latest_version()}" in text.stdout


def test_journal_export_writes_every_event(standard_journal: Path, tmp_path: Path) -> None:
    events = as_json("journal", "verify", "--journal", str(standard_journal))["events"]
    result = nicplug("journal", "export", "--journal", str(standard_journal))
    assert result.exit_code == 0
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["position"] for e in lines] == list(range(1, events + 1))
    assert {"stream", "key", "version", "type", "payload", "cause", "wall_time",
            "logical_time"} <= set(lines[0])
    target = tmp_path / "events.jsonl"
    written = nicplug("journal", "export", "--journal", str(standard_journal), "-o", str(target))
    assert written.exit_code == 0 and f"wrote {events} events" in written.stderr
    assert target.read_text() == result.stdout


def test_export_never_writes_over_the_journal(standard_journal: Path) -> None:
    before = standard_journal.read_bytes()
    result = nicplug("journal", "export", "--journal", str(standard_journal), "-o",
                     str(standard_journal))
    one_line_error(result, 2, "is the journal itself")
    assert standard_journal.read_bytes() == before


QUERIES = [("status",), ("history", "ns/vm"), ("stuck",), ("explain", "ns/vm", "Main"),
           ("journal", "verify"), ("journal", "export")]


@pytest.mark.parametrize("argv", QUERIES)
def test_a_missing_journal(tmp_path: Path, argv: tuple[str, ...]) -> None:
    missing = tmp_path / "nowhere.db"
    one_line_error(nicplug(*argv, "--journal", str(missing)), 1, str(missing),
                   "no journal file here")
    assert not missing.exists()


def test_the_default_journal_is_looked_for_in_the_working_directory(tmp_path: Path) -> None:
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = nicplug("status", env={"NICPLUG_JOURNAL": ""})
    finally:
        os.chdir(here)
    one_line_error(result, 1, "nicplug-journal.db")


@pytest.mark.parametrize("argv", QUERIES)
def test_garbage_is_not_a_journal(tmp_path: Path, argv: tuple[str, ...]) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(os.urandom(16384))
    one_line_error(nicplug(*argv, "--journal", str(path)), 1, "corrupt or not an SQLite journal")


def _damaged(standard_journal: Path, tmp_path: Path, *, every: int = 1, span: int = 64) -> Path:
    path = tmp_path / "damaged.db"
    with sqlite3.connect(standard_journal) as source, sqlite3.connect(path) as copy:
        source.backup(copy)
        copy.execute("PRAGMA journal_mode = DELETE")
    data = bytearray(path.read_bytes())
    noise = random.Random(7)  # the same damage every run
    page = 4096
    for at in range(2 * page, len(data), every * page):  # scribble over b-tree pages
        data[at + 8 : at + 8 + span] = noise.randbytes(span)
    path.write_bytes(bytes(data))
    return path


def test_damaged_pages(standard_journal: Path, tmp_path: Path) -> None:
    path = _damaged(standard_journal, tmp_path)
    one_line_error(nicplug("status", "--journal", str(path)), 1, "corrupt")
    verify = nicplug("journal", "verify", "--journal", str(path), "--json")
    assert verify.exit_code == 1 and "Traceback" not in verify.output
    report = json.loads(verify.stdout)
    assert report["ok"] is False and report["integrity"] != ["ok"]
    text = nicplug("journal", "verify", "--journal", str(path))
    assert text.exit_code == 1 and "DAMAGED" in text.stdout


def test_verify_lists_what_the_integrity_check_found(
    standard_journal: Path, tmp_path: Path
) -> None:
    path = _damaged(standard_journal, tmp_path, every=3, span=8)
    verify = nicplug("journal", "verify", "--journal", str(path), "--json")
    assert verify.exit_code == 1, verify.output
    report = json.loads(verify.stdout)
    assert report["ok"] is False and report["integrity"] and report["integrity"] != ["ok"]


def test_a_newer_schema(standard_journal: Path, tmp_path: Path) -> None:
    path = tmp_path / "newer.db"
    with sqlite3.connect(standard_journal) as source, sqlite3.connect(path) as copy:
        source.backup(copy)
        copy.execute(f"PRAGMA user_version = {latest_version() + 1}")
    before = path.read_bytes()
    one_line_error(nicplug("status", "--journal", str(path)), 1, "newer nicplug")
    assert path.read_bytes() == before


def test_an_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    one_line_error(nicplug("status", "--journal", str(path)), 1, "not a nicplug journal")
    assert path.read_bytes() == b""


def test_the_commands_the_demo_prints_are_valid(standard_journal: Path, tmp_path: Path) -> None:
    from rich.console import Console

    from nicplug.adapters.demo.play import _print_queries

    console = Console(record=True, width=300)
    _print_queries(console, tmp_path)
    commands = [line.split() for line in console.export_text().splitlines()
                if line.strip().startswith("nicplug ")]
    assert {c[1] for c in commands} == {"status", "history", "explain", "stuck"}
    for command in commands:
        at = command.index("--journal")
        assert Path(command[at + 1]).parent == tmp_path
        command[at + 1] = str(standard_journal)
        result = nicplug(*command[1:])
        # the demo's VMs are not in this journal: "no operation" is fine, a usage error is not
        assert result.exit_code in (0, 1), (command, result.output)
        assert "Traceback" not in result.output


def test_explain_a_vm_alone_lists_its_operations(standard_journal: Path) -> None:
    j = str(standard_journal)
    listed = as_json("explain", "ns/silent", "--journal", j)
    assert listed["vm"] == "ns/silent"
    assert [op["id"] for op in listed["operations"]] == ["uid-silent/ClusterNetwork/y/plug/1"]
    shown = nicplug("explain", "ns/silent", "--journal", j, env=WIDE)
    assert shown.exit_code == 0, shown.output
    assert "nicplug explain ns/silent NETWORK" in shown.stdout
    assert "ClusterNetwork/y plug#1: AnnotationPatched" in shown.stdout
    one_line_error(nicplug("explain", "ns/nobody", "--journal", j), 1, "no operation of ns/nobody")


def test_stuck_says_the_unit_of_a_bare_number(standard_journal: Path) -> None:
    shown = nicplug("stuck", "--older-than", "5", "--journal", str(standard_journal), env=WIDE)
    assert shown.exit_code == 0, shown.output
    assert "still for more than 5s" in shown.stdout
    later = nicplug("stuck", "--older-than", "30d", "--journal", str(standard_journal), env=WIDE)
    assert "still for more than 30d" in later.stdout


def test_replay_help_cites_no_document_users_lack() -> None:
    helped = nicplug("replay", "--help", env=WIDE)
    assert helped.exit_code == 0
    assert "DESIGN" not in helped.stdout and "§" not in helped.stdout
