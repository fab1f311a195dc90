"""`nicplug diagram` draws the registered graphs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nicplug.adapters.cli import app
from nicplug.adapters.cli.diagram import render
from nicplug.machines.graph import FLAVOURS, GRAPHS


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_mermaid_shows_every_state_and_move(name: str) -> None:
    text = render(name, "mermaid").decode()
    assert "stateDiagram-v2" in text and "[*] --> Requested" in text
    for state in GRAPHS[name].states:
        assert f'state "{state}" as {state}' in text
    assert "\nClass " not in text and "class Requested" in text
    # a map of the machine, not an operation in it: no state is drawn as the current one
    classes = [line.split()[-1] for line in text.splitlines()
               if line.lstrip().startswith("class ")]
    assert set(classes) == {"s_default"}, classes


def test_cli_prints_mermaid_and_writes_files(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["diagram", "--machine", "unplug"])
    assert result.exit_code == 0, result.output
    assert "GuestDetached --> AnnotationPatched: drop_entry [pod_dropped_entry]" in result.output
    target = tmp_path / "plug.mmd"
    result = runner.invoke(app, ["diagram", "-o", str(target)])
    assert result.exit_code == 0 and "SDNReady" in target.read_text()


def test_cli_refuses_a_picture_on_the_terminal() -> None:
    result = CliRunner().invoke(app, ["diagram", "--format", "png"])
    assert result.exit_code == 2


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz's `dot` is not installed")
@pytest.mark.parametrize(("fmt", "magic"), [("svg", b"<?xml"), ("png", b"\x89PNG")])
def test_pictures(tmp_path: Path, fmt: str, magic: bytes) -> None:
    target = tmp_path / f"plug.{fmt}"
    result = CliRunner().invoke(app, ["diagram", "--format", fmt, "-o", str(target)])
    assert result.exit_code == 0, result.output
    assert target.read_bytes().startswith(magic)


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
@pytest.mark.parametrize("name", ["plug", "unplug"])
def test_the_readme_shows_the_current_graphs(name: str, flavour: str) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert f"```mermaid\n{render(name, 'mermaid', flavour).decode()}```" in readme


def test_the_multus_flavour_draws_kubevirts_order() -> None:
    result = CliRunner().invoke(app, ["diagram", "--flavour", "kubevirt"])
    assert result.exit_code == 0, result.output
    assert "title: nicplug kubevirt plug" in result.output
    older = CliRunner().invoke(app, ["diagram", "--flavour", "multus"])  # the older name
    assert older.exit_code == 0 and older.output == result.output
    assert "Requested --> VMIPatched: sync_vmi" in result.output
    assert "VMIPatched --> AnnotationPatched: annotate [pod_holds_entry]" in result.output


def test_the_observed_unplug_is_drawn_in_deckhouses_order() -> None:
    result = CliRunner().invoke(app, ["diagram", "--machine", "unplug", "--mode", "observe"])
    assert result.exit_code == 0, result.output
    assert "title: nicplug unplug (observed)" in result.output
    assert "Requested --> AnnotationPatched: drop_entry [pod_dropped_entry]" in result.output
    assert "GuestDetached --> SDNReleased: sdn_released [sdn_released]" in result.output
    assert CliRunner().invoke(app, ["diagram", "--mode", "sideways"]).exit_code == 2


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_a_picture_draws_no_state_as_active(name: str) -> None:
    """The graphviz source the pictures are made from styles the initial state as any
    other (checked without `dot`: the source is built by the `graphviz` package)."""
    from nicplug.adapters.cli.diagram import _Canvas, _StillMachine

    canvas = _Canvas()
    GRAPHS[name].machine(_StillMachine, model=canvas, graph_engine="graphviz")
    source = str(canvas.get_graph().source)  # type: ignore[attr-defined]
    assert "Requested" in source
    assert "darksalmon" not in source and "peripheries=2" not in source
