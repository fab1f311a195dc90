"""Tapes as they come from the field: objects without metadata, time going backwards,
lines too long to hold, CRLF with a byte order mark, and time that passes in
bookmarks or after the last line (`--until`)."""

from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import sys
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from nicplug.adapters.cli import app
from nicplug.adapters.tapes.framing import MAX_VALUE_BYTES, Overlong, lines_of
from nicplug.adapters.tapes.lines import Bookmark, Malformed, WatchEvent
from nicplug.adapters.tapes.reader import TapeReader

HERE = Path(__file__).parent
PLUG = HERE / "live-hotplug-a-network.tape.jsonl"
PLUG_GOLDEN = HERE / "live-hotplug-a-network.golden.json"


def _lines_of_plug() -> list[dict[str, Any]]:
    return [json.loads(line) for line in PLUG.read_bytes().splitlines() if line]


def _requested() -> int:
    """How many lines of the plug tape lead up to the pod patch, seen on the pod: the
    plug waits for the SDN from there."""
    entries = _lines_of_plug()
    patched = next(i for i, e in enumerate(entries)
                   if e["type"] == "EFFECT" and e["object"]["type"] == "PatchPodNetworks")
    return next(i for i, e in enumerate(entries) if i > patched and e["type"] == "MODIFIED"
                and e["object"]["kind"] == "Pod") + 1


def _at(line: int, later: float = 0.0) -> str:
    """The time of the plug tape's `line` (1-based), `later` seconds on, RFC 3339."""
    at = datetime.fromisoformat(_lines_of_plug()[line - 1]["at"].replace("Z", "+00:00"))
    return (at + timedelta(seconds=later)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


PLUG_REQUESTED = _requested()


def replay(tape: Path, *args: str) -> Result:
    return CliRunner().invoke(app, ["replay", str(tape), *args])


def operations(result: Result) -> list[dict[str, Any]]:
    assert result.exit_code == 0, result.output
    rows: list[dict[str, Any]] = json.loads(result.stdout)["operations"]
    return rows


def _write(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"".join(line.rstrip(b"\n") + b"\n" for line in lines))
    return path


def _plug_lines() -> list[bytes]:
    return PLUG.read_bytes().splitlines(keepends=True)


# -- item 7: objects without usable metadata ---------------------------------------

KVVM_NO_META: list[Any] = [None, "default/vm-00000", 7, {}, {"namespace": "default"},
                           {"name": "", "namespace": "default"}, {"name": "vm-00000"}]


@pytest.mark.parametrize("meta", KVVM_NO_META, ids=repr)
def test_an_event_without_usable_metadata_is_malformed_with_its_line(meta: Any) -> None:
    obj: dict[str, Any] = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine"}
    if meta != {}:
        obj["metadata"] = meta
    line = json.dumps({"type": "MODIFIED", "object": obj}).encode()
    ok = json.dumps({"type": "ADDED", "object": {**obj, "metadata": {
        "name": "a", "namespace": "ns"}}}).encode()
    reader = TapeReader([ok + b"\n", line + b"\n"])
    items = list(reader)
    assert [type(i) for i in items] == [WatchEvent, Malformed]
    assert isinstance(items[1], Malformed)
    assert items[1].line == 2 and "metadata" in items[1].problem
    assert reader.stats.malformed == 1 and reader.stats.events == 1


def test_a_cluster_scoped_object_needs_no_namespace() -> None:
    line = json.dumps({"type": "ADDED", "object": {
        "apiVersion": "network.deckhouse.io/v1alpha1", "kind": "ClusterNetwork",
        "metadata": {"name": "storage"}}}).encode()
    assert [type(i) for i in TapeReader([line])] == [WatchEvent]


def test_a_pod_with_metadata_but_not_of_a_vm_is_still_only_unselected() -> None:
    line = json.dumps({"type": "ADDED", "object": {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": "n"}}})
    reader = TapeReader([line.encode()])
    assert list(reader) == [] and reader.stats.unselected == 1


def test_strict_replay_refuses_a_tape_of_objects_without_metadata(tmp_path: Path) -> None:
    lines = [json.dumps({"type": "ADDED", "object": {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": meta}}).encode()
        for meta in (None, "x")]
    tape = _write(tmp_path / "nometa.jsonl", lines)
    loose = replay(tape, "--json")
    assert loose.exit_code == 0
    assert "line 1:" in loose.stderr and "line 2:" in loose.stderr
    strict = replay(tape, "--strict", "--json")
    assert strict.exit_code == 1 and strict.stdout == ""
    assert strict.stderr.startswith("nicplug: ") and "line 1:" in strict.stderr
    assert "metadata" in strict.stderr


# -- item 8: time going backwards ---------------------------------------------------

def test_time_going_backwards_is_reported_per_line(tmp_path: Path) -> None:
    reversed_tape = _write(tmp_path / "reversed.jsonl", _plug_lines()[::-1])
    result = replay(reversed_tape, "--json")
    assert result.exit_code == 0
    went_back = [line for line in result.stderr.splitlines() if "time goes backwards" in line]
    assert len(went_back) == len(_plug_lines()) - 1  # every line after the first
    assert went_back[0].startswith(f"nicplug: {reversed_tape}: line 2: time goes backwards")


def test_strict_replay_refuses_time_going_backwards(tmp_path: Path) -> None:
    lines = _plug_lines()
    lines[13], lines[14] = lines[14], lines[13]  # an EFFECT line before its event
    tape = _write(tmp_path / "swapped.jsonl", lines)
    strict = replay(tape, "--strict", "--json")
    assert strict.exit_code == 1 and strict.stdout == ""
    assert strict.stderr.count("\n") == 1
    assert "line 15: time goes backwards" in strict.stderr


def test_the_report_names_the_lines_whose_time_goes_backwards(tmp_path: Path) -> None:
    lines = _plug_lines()
    lines[13], lines[14] = lines[14], lines[13]
    tape = _write(tmp_path / "swapped.jsonl", lines)
    result = replay(tape)
    assert result.exit_code == 0
    assert "line 15: time goes backwards" in result.stdout


# -- item 9: memory bounded by the value cap ----------------------------------------

def test_an_overlong_line_is_skipped_without_being_held() -> None:
    limit = 1000
    stream = io.BytesIO(b"{\"a\": 1}\n" + b"x" * 5000 + b"\n{\"b\": 2}\n" + b"y" * 3000)
    assert list(lines_of(stream, limit=limit, chunk=64)) == [
        b"{\"a\": 1}\n", Overlong(5000), b"{\"b\": 2}\n", Overlong(3000)]


def test_lines_cut_across_chunks_come_back_whole() -> None:
    text = b"".join(b"%d %s\n" % (i, b"z" * (i % 97)) for i in range(500))
    assert b"".join(
        line for line in lines_of(io.BytesIO(text), chunk=7) if isinstance(line, bytes)
    ) == text


def test_an_overlong_value_spanning_lines_is_reported_at_its_first_line() -> None:
    lines: list[bytes | Overlong] = [b"{\n", b'  "type": "ADDED",\n', Overlong(MAX_VALUE_BYTES + 1)]
    items = list(TapeReader(lines))
    assert items == [Malformed(1, f"a JSON value longer than {MAX_VALUE_BYTES} bytes")]


def _replay_piped(
    head: bytes, filler: int, *, data_limit: int | None, tail: bytes = b""
) -> tuple[int, int, str]:
    """`nicplug replay -` fed `head`, `filler` MiB of one value, then `tail`, under a
    data-size limit; (exit code, peak RSS in KiB, stderr)."""

    def limited() -> None:
        if data_limit is not None:
            resource.setrlimit(resource.RLIMIT_DATA, (data_limit, data_limit))

    env = {**os.environ, "MALLOC_ARENA_MAX": "2"}
    child = subprocess.Popen(
        [sys.executable, "-m", "nicplug.adapters.cli", "replay", "-", "--json"], env=env,
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        preexec_fn=limited,
    )
    assert child.stdin is not None and child.stderr is not None
    errors: list[bytes] = []
    drain = threading.Thread(target=lambda: errors.append(child.stderr.read()))  # type: ignore[union-attr]
    drain.start()
    try:
        child.stdin.write(head)
        block = b"a" * (1 << 20)
        for _ in range(filler):
            child.stdin.write(block)
        child.stdin.write(tail)
        child.stdin.close()
    except BrokenPipeError:
        pass
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    drain.join()
    return child.returncode, usage.ru_maxrss, errors[0].decode()


def test_a_300_mb_line_that_never_ends_costs_no_more_than_the_cap() -> None:
    head = b'{"type": "ADDED", "object": {"kind": "Pod", "x": "'
    code, baseline, _ = _replay_piped(head, 0, data_limit=None)
    assert code == 0
    code, peak, stderr = _replay_piped(head, 300, data_limit=baseline * 1024 + 96 * 2**20)
    assert "Traceback" not in stderr and "MemoryError" not in stderr, stderr[-2000:]
    assert code == 0
    assert stderr.count("\n") == 1 and "line 1: a line of" in stderr
    assert (peak - baseline) * 1024 < 2 * MAX_VALUE_BYTES


def test_a_line_under_the_cap_whose_string_never_closes_costs_about_its_length() -> None:
    head = b'{"type": "ADDED", "object": {"kind": "Pod", "x": "'
    code, baseline, _ = _replay_piped(head, 0, data_limit=None)
    next_line = json.dumps({"type": "ADDED", "object": {"kind": "Pod"}}).encode()
    code, peak, stderr = _replay_piped(
        head, 12, data_limit=baseline * 1024 + 128 * 2**20, tail=b"\n" + next_line + b"\n")
    assert "Traceback" not in stderr and "MemoryError" not in stderr, stderr[-2000:]
    assert code == 0
    assert "line 1: a JSON object that never closes" in stderr
    assert (peak - baseline) * 1024 < 5 * MAX_VALUE_BYTES


# -- item 10: CRLF and a byte order mark ----------------------------------------------

def test_crlf_with_a_byte_order_mark_replays_as_its_lf_twin(tmp_path: Path) -> None:
    text = PLUG.read_bytes()
    tape = tmp_path / "windows.jsonl"
    tape.write_bytes(b"\xef\xbb\xbf" + text.replace(b"\n", b"\r\n"))
    result = replay(tape, "--json", "--strict")
    assert result.exit_code == 0, result.output
    assert result.stdout_bytes == PLUG_GOLDEN.read_bytes()


def test_a_pretty_printed_crlf_tape_reads_whole() -> None:
    pretty = json.dumps({"type": "ADDED", "object": {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "a", "namespace": "n"}}}, indent=2)
    stream = io.BytesIO(b"\xef\xbb\xbf" + (pretty + "\n" + pretty + "\n").replace(
        "\n", "\r\n").encode())
    assert [type(i) for i in TapeReader(stream)] == [WatchEvent, WatchEvent]


def test_a_bom_alone_or_split_across_reads_is_dropped() -> None:
    assert list(lines_of(io.BytesIO(b"\xef\xbb\xbf"))) == []
    assert list(lines_of(io.BytesIO(b"\xef\xbb\xbf{}\r\n"), chunk=1)) == [b"{}\n"]


# -- issue 12, item 9: bookmarks and --until move the replay clock ------------------

def _bookmark(at: str) -> bytes:
    return json.dumps({"type": "BOOKMARK", "at": at, "object": {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"resourceVersion": "99"}}}).encode()


def test_bookmarks_move_the_clock_so_a_quiet_period_fires_its_timers(tmp_path: Path) -> None:
    waiting = _plug_lines()[:PLUG_REQUESTED]
    quiet = _write(tmp_path / "quiet.jsonl", [
        *waiting, _bookmark(_at(PLUG_REQUESTED, 60)), _bookmark(_at(PLUG_REQUESTED, 180))])
    row, *_ = operations(replay(quiet, "--json"))
    assert (row["state"], row["reason"]) == ("Failed", "SDNTimeout")
    items = list(TapeReader(quiet.open("rb")))
    assert isinstance(items[-1], Bookmark) and items[-1].line == PLUG_REQUESTED + 2


def test_until_lets_time_pass_after_the_last_line(tmp_path: Path) -> None:
    waiting = _write(tmp_path / "waiting.jsonl", _plug_lines()[:PLUG_REQUESTED])
    still, *_ = operations(replay(waiting, "--json"))
    assert still["state"] != "Failed"
    late, *_ = operations(replay(waiting, "--json", "--until", "+3m"))
    assert (late["state"], late["reason"]) == ("Failed", "SDNTimeout")
    at_time, *_ = operations(replay(waiting, "--json", "--until", _at(PLUG_REQUESTED, 150)))
    assert (at_time["state"], at_time["reason"]) == ("Failed", "SDNTimeout")


def test_until_a_time_within_the_tape_stops_feeding_there() -> None:
    entries = _lines_of_plug()
    first_change = next(i for i, e in enumerate(entries) if e["type"] == "MODIFIED") + 1
    listed = sum(1 for e in entries[:first_change - 1] if e["type"] == "ADDED")
    gap = (datetime.fromisoformat(_at(first_change).replace("Z", "+00:00"))
           - datetime.fromisoformat(_at(first_change - 1).replace("Z", "+00:00")))
    before_the_edit = _at(first_change - 1, gap.total_seconds() / 2)
    result = replay(PLUG, "--until", before_the_edit)
    assert result.exit_code == 0
    assert f"stopped at line {first_change}" in result.stdout
    assert f"replay: {listed} events" in result.stdout and "0 effects" in result.stdout


@pytest.mark.parametrize("bad", ["+", "+soon", "+10x", "tomorrow", "2026-12-02T14:18:05"])
def test_a_bad_until_is_one_line_and_exit_2(bad: str) -> None:
    result = replay(PLUG, "--until", bad)
    assert result.exit_code == 2
    assert "--until" in result.output and "Traceback" not in result.output
