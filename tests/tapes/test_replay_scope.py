"""`nicplug replay` takes every option of `run` that changes a decision, the scope
(`--namespaces`, `--vm-selector`) included, and replays only the VMs in scope."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest
import typer.main
from typer.testing import CliRunner

from nicplug.adapters.cli import app
from nicplug.adapters.cli.replay import NOT_DECIDING

TAPES = Path(__file__).parent
SOURCE = TAPES / "kubevirt-no-dynamic-networks-an-opted-in-vm-is-migrated.tape.jsonl"
UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _options(command: str) -> set[str]:
    click = typer.main.get_command(app)
    params = click.commands[command].params  # type: ignore[attr-defined]
    return {str(o).removeprefix("--") for p in params for o in p.opts if str(o).startswith("--")}


def test_replay_takes_every_option_of_run_that_changes_a_decision() -> None:
    run, replay = _options("run"), _options("replay")
    assert run - NOT_DECIDING <= replay, sorted(run - NOT_DECIDING - replay)
    assert run >= NOT_DECIDING  # every exception names an option `run` has
    assert {"namespace", "vm-selector", "migration-attempts"} <= replay


def _labelled(obj: dict[str, object], team: str) -> None:
    if obj.get("kind") == "VirtualMachine":
        meta = obj["metadata"]
        assert isinstance(meta, dict)
        meta["labels"] = {**(meta.get("labels") or {}), "team": team}


def two_teams(tmp_path: Path) -> Path:
    """The tape twice over: its VM in `default` labelled `team=a`, and a copy of it (new
    uids) in `team-b` labelled `team=b`, line by line."""
    lines: list[bytes] = []
    for raw in SOURCE.read_bytes().splitlines():
        line = orjson.loads(raw)
        obj = line.get("object") or {}
        if obj.get("metadata", {}).get("namespace") == "default":
            _labelled(obj, "a")
            lines.append(orjson.dumps(line))
            copy = UUID.sub(lambda m: m.group(0)[:-4] + b"bbbb", raw)
            twin = orjson.loads(copy)
            twin["object"]["metadata"]["namespace"] = "team-b"
            _labelled(twin["object"], "b")
            lines.append(orjson.dumps(twin))
        elif obj.get("kind") == "Namespace":
            lines.append(raw)
            twin = orjson.loads(raw)
            twin["object"]["metadata"].update(name="team-b", uid="ns-team-b")
            lines.append(orjson.dumps(twin))
        else:
            lines.append(raw)
    tape = tmp_path / "two-teams.tape.jsonl"
    tape.write_bytes(b"\n".join(lines) + b"\n")
    return tape


@pytest.mark.parametrize(("scope", "vms"), [
    ([], {"default/vm-00000", "team-b/vm-00000"}),
    (["--namespace", "team-b"], {"team-b/vm-00000"}),
    (["-n", "default,team-b"], {"default/vm-00000", "team-b/vm-00000"}),
    (["--namespaces", "team-b"], {"team-b/vm-00000"}),  # the deprecated spelling
    (["--vm-selector", "team=a"], {"default/vm-00000"}),
    (["--namespace", "team-b", "--vm-selector", "team=b"], {"team-b/vm-00000"}),
    (["--namespace", "team-b", "--vm-selector", "team=a"], set()),
])
def test_replay_replays_only_the_vms_in_scope(
    tmp_path: Path, scope: list[str], vms: set[str]
) -> None:
    tape = two_teams(tmp_path)
    result = CliRunner().invoke(
        app, ["replay", str(tape), "--json", "--flavour", "kubevirt", "--migrations",
              "opt-in", *scope])
    assert result.exit_code == 0, result.output
    operations = orjson.loads(result.stdout)["operations"]
    assert {op["vm"] for op in operations} == vms
    assert all(op["state"] == "Attached" for op in operations)


def test_a_bad_selector_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["replay", str(SOURCE), "--vm-selector", "a in (b"])
    assert result.exit_code == 2
    assert "--vm-selector" in result.output
