"""The tape reader: layouts, times, what it skips and counts, malformed lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nicplug.adapters.cli import app
from nicplug.adapters.kube import resources as kinds
from nicplug.adapters.kube.flavour import UPSTREAM
from nicplug.adapters.tapes.lines import Malformed, TapedEffect, WatchEvent
from nicplug.adapters.tapes.reader import TapeReader
from nicplug.adapters.tapes.times import format_at

POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "virt-launcher-a", "namespace": "ns",
                    "labels": {"kubevirt.io/created-by": "vmi-uid-a"}}}
VM = {"apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": "VirtualMachine",
      "metadata": {"name": "a", "namespace": "ns"}}
KVVM = {**VM, "apiVersion": "kubevirt.io/v1"}


def _read(text: str) -> tuple[list[object], TapeReader]:
    reader = TapeReader(text.encode().splitlines(keepends=True))
    return list(reader), reader


def _line(type_: str, obj: object, **extra: object) -> str:
    return json.dumps({"type": type_, "object": obj, **extra})


def test_one_event_per_line_with_and_without_times() -> None:
    items, reader = _read(
        _line("ADDED", VM, at="2026-01-02T03:04:05.5Z") + "\n" + _line("MODIFIED", POD) + "\n"
    )
    assert items == [
        WatchEvent(1, "ADDED", kinds.VIRTUAL_MACHINES, VM, 1767323045.5),
        WatchEvent(2, "MODIFIED", UPSTREAM.launcher_pods, POD, None),
    ]
    assert reader.stats.events == 2


def test_the_two_virtualmachine_kinds_are_told_apart_by_group() -> None:
    items, _ = _read(_line("ADDED", VM) + "\n" + _line("ADDED", KVVM))
    assert [i.kind for i in items if isinstance(i, WatchEvent)] == [
        kinds.VIRTUAL_MACHINES, UPSTREAM.kvvms]


def test_pretty_printed_and_concatenated_objects() -> None:
    pretty = json.dumps({"type": "ADDED", "object": VM}, indent=4)
    concatenated = _line("ADDED", KVVM) + " " + _line("DELETED", KVVM)
    items, reader = _read(pretty + "\n" + pretty + "\n" + concatenated + "\n")
    events = [i for i in items if isinstance(i, WatchEvent)]
    assert [(e.line, e.type) for e in events] == [
        (1, "ADDED"), (1 + pretty.count("\n") + 1, "ADDED"),
        (2 * (pretty.count("\n") + 1) + 1, "ADDED"), (2 * (pretty.count("\n") + 1) + 1, "DELETED"),
    ]
    assert reader.stats.malformed == 0


def test_effects_are_collected_bookmarks_errors_and_unknown_kinds_counted() -> None:
    text = "\n".join([
        _line("EFFECT", {"type": "PatchPodNetworks", "target": "ns/p"}, at=format_at(10.0)),
        _line("BOOKMARK", {"kind": "Pod", "apiVersion": "v1",
                           "metadata": {"resourceVersion": "9"}}),
        _line("ERROR", {"kind": "Status", "code": 410}),
        _line("ADDED", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
        _line("ADDED", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "lonely"}}),
    ])
    items, reader = _read(text)
    assert items == [TapedEffect(1, "PatchPodNetworks", "ns/p", 10.0)]
    stats = reader.stats
    assert (stats.effects, stats.bookmarks, stats.errors, stats.unselected) == (1, 1, 1, 1)
    assert dict(stats.unknown_kinds) == {"v1/ConfigMap": 1}


def test_malformed_lines_are_reported_with_their_numbers_and_skipped() -> None:
    text = "\n".join([
        _line("ADDED", VM),
        '{"type": "ADDED", "object": {"kind": ',           # 2: never closes on its line
        _line("ADDED", KVVM),                               # 3: read again from here
        "not json at all",                                  # 4
        _line("UPDATED", VM),                               # 5: no such type
        _line("ADDED", VM, at="yesterday"),                 # 6: not a time
        '{"type": "ADDED", "object": {"a": 1}} trailing',   # 7
        _line("EFFECT", {"target": "ns/x"}),                # 8: an effect without a type
        _line("ADDED", POD),                                # 9
    ])
    items, reader = _read(text)
    malformed = [i for i in items if isinstance(i, Malformed)]
    assert [m.line for m in malformed] == [2, 4, 5, 6, 7, 8]
    assert [i.line for i in items if isinstance(i, WatchEvent)] == [1, 3, 9]
    assert reader.stats.malformed == 6
    assert "type" in malformed[2].problem and "at" in malformed[3].problem


def test_an_unterminated_object_at_the_end_is_reported() -> None:
    items, _ = _read(_line("ADDED", VM) + "\n{\n  \"type\": \"ADDED\",\n")
    assert isinstance(items[-1], Malformed) and items[-1].line == 2


@pytest.fixture
def broken_tape(tmp_path: Path) -> Path:
    good = Path(__file__).parent / "live-hotplug-a-network.tape.jsonl"
    lines = good.read_bytes().splitlines(keepends=True)
    lines.insert(3, b"{ this is not a watch event\n")
    tape = tmp_path / "broken.tape.jsonl"
    tape.write_bytes(b"".join(lines))
    return tape


def test_replay_goes_on_past_a_malformed_line_and_names_it(broken_tape: Path) -> None:
    result = CliRunner().invoke(app, ["replay", str(broken_tape), "--backoff-base", "300"])
    assert result.exit_code == 0
    assert "malformed line 4" in result.stdout
    assert "Attached" in result.stdout


def test_strict_replay_stops_at_a_malformed_line(broken_tape: Path) -> None:
    result = CliRunner().invoke(app, ["replay", str(broken_tape), "--strict", "--json"])
    assert result.exit_code == 1
    assert "line 4" in result.stderr
    assert result.stdout == ""


def test_a_missing_tape_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["replay", str(tmp_path / "nope.jsonl")])
    assert result.exit_code == 2
    assert "cannot read the tape" in result.stderr
