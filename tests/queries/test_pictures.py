"""Pictures of operations: `explain --diagram` (the machine, the operation's path and
state highlighted) and `history --format mermaid` (a VM's operations in time)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from typer.testing import CliRunner, Result

from nicplug.adapters.cli import app
from nicplug.machines.graph import GRAPHS


def nicplug(*argv: str) -> Result:
    return CliRunner().invoke(app, list(argv), env={"COLUMNS": "200"})


def _classes(text: str) -> dict[str, str]:
    return dict(re.findall(r"^  class (\w+) (\w+)$", text, flags=re.MULTILINE))


def test_explain_draws_the_operations_path_and_state(standard_journal: Path) -> None:
    live = nicplug("explain", "ns/silent", "ClusterNetwork/y", "--diagram",
                   "--journal", str(standard_journal))
    assert live.exit_code == 0, live.output
    text = live.stdout
    assert text.startswith("---\ntitle: ns/silent ClusterNetwork/y plug#1: AnnotationPatched\n")
    assert "stateDiagram-v2" in text and "[*] --> Requested" in text
    classes = _classes(text)
    assert set(classes) == set(GRAPHS["plug"].states)
    assert classes["AnnotationPatched"] == "s_active"
    assert classes["Requested"] == "s_previous"
    assert {s for s, c in classes.items() if c == "s_default"} == (
        set(GRAPHS["plug"].states) - {"Requested", "AnnotationPatched"})

    done = nicplug("explain", "ns/plugged", "Network/x", "--diagram",
                   "--journal", str(standard_journal))
    classes = _classes(done.stdout)
    assert classes["Attached"] == "s_active" and classes["SDNReady"] == "s_previous"
    assert classes["Failed"] == classes["Cancelled"] == "s_default"


def test_history_draws_a_vms_operations_as_a_gantt(standard_journal: Path) -> None:
    result = nicplug("history", "ns/plugged", "--format", "mermaid",
                     "--journal", str(standard_journal))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[:4] == ["gantt", "  title nicplug operations of ns/plugged", "  dateFormat x",
                         "  axisFormat %H:%M:%S"]
    assert lines[4] == "  section Network/x plug#1"
    bars = [re.match(r"^  (\w+) :([\w, ]+), (op\d+), (\d+), (\d+)$", line) for line in lines[5:]]
    assert all(bars), lines[5:]
    states = [b.group(1) for b in bars if b]
    assert states == ["Requested", "AnnotationPatched", "SDNReady", "VMIPatched", "Attached"]
    assert [b.group(2) for b in bars if b][-1] == "milestone"  # terminal: a moment
    spans = [(int(b.group(4)), int(b.group(5))) for b in bars if b]
    assert all(start < end for start, end in spans[:-1])
    assert all(a[1] <= b[0] + 1 for a, b in itertools.pairwise(spans))  # in order

    failed = nicplug("history", "ns/rejected", "--format", "mermaid",
                     "--journal", str(standard_journal))
    assert "  Failed :crit, milestone," in failed.stdout
    bad = nicplug("history", "ns/plugged", "--format", "png", "--journal", str(standard_journal))
    assert bad.exit_code == 2 and "table or mermaid" in bad.output
