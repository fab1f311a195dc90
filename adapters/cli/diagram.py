"""`nicplug diagram`: draw a machine graph with `transitions`' diagram support.

Mermaid text needs nothing beyond `transitions`; SVG and PNG go through the `graphviz`
package and the system's `dot`. The graph drawn is the one the decider runs on
(`nicplug.machines.graph`), so the picture cannot drift from the code. Never draws
anything but the registered graphs.
"""

from __future__ import annotations

import copy
import enum
from pathlib import Path
from typing import Annotated, Any

import typer
from transitions.extensions import GraphMachine

from nicplug.adapters.cli.app import app
from nicplug.machines.graph import graphs_of


class Format(enum.StrEnum):
    mermaid = "mermaid"
    svg = "svg"
    png = "png"


class MachineName(enum.StrEnum):
    plug = "plug"
    unplug = "unplug"
    update = "update"


class Flavour(enum.StrEnum):
    deckhouse = "deckhouse"
    kubevirt = "kubevirt"
    multus = "multus"  # the kubevirt flavour's older name


_GRAPHS_OF = {"deckhouse": "deckhouse", "kubevirt": "kubevirt", "multus": "kubevirt"}


class _Canvas:
    """The model `transitions` hangs `get_graph` on; only ever used for drawing."""


_STILL = "s_default"


class _StillMachine(GraphMachine):
    """A machine drawn as a map, not as an operation: its model sits in the initial
    state only because `transitions` needs one, so that state is drawn like any other
    (no state of a static diagram is active)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        styles: Any = copy.deepcopy(GraphMachine.style_attributes)
        styles["node"]["active"] = dict(styles["node"]["inactive"])
        styles["graph"]["active"] = dict(styles["graph"]["default"])
        self.style_attributes = styles
        super().__init__(*args, **kwargs)


def render(machine: str, fmt: str, flavour: str = "deckhouse", mode: str = "drive") -> bytes:
    """The diagram of the registered machine `machine` of `flavour` in `mode`, in `fmt`."""
    graph = graphs_of(flavour, mode)[machine]
    canvas = _Canvas()
    engine = "mermaid" if fmt == "mermaid" else "graphviz"
    graph.machine(
        _StillMachine,
        model=canvas,
        graph_engine=engine,
        show_conditions=True,
        title=(f"nicplug kubevirt {machine}" if flavour != "deckhouse"
               else f"nicplug {machine} (observed)" if mode == "observe"
               else f"nicplug {machine}"),
    )
    drawn = canvas.get_graph()  # type: ignore[attr-defined]
    if fmt == "mermaid":
        lines = str(drawn.source).splitlines()
        # mermaid's front matter is YAML and its class statement lower case;
        # transitions 0.9 writes a bare title and `Class`
        if len(lines) > 2 and lines[0] == lines[2] == "---":
            lines[1] = f"title: {lines[1]}"
        fixed = [
            line.replace("Class ", "class ", 1) if line.lstrip().startswith("Class ") else line
            for line in lines
        ]
        fixed = [line.replace(" s_active", f" {_STILL}") if line.lstrip().startswith("class ")
                 else line for line in fixed]
        return ("\n".join(fixed) + "\n").encode()
    data: bytes = drawn.pipe(format=fmt)
    return data


@app.command()
def diagram(
    format: Annotated[Format, typer.Option("--format", help="mermaid text, or a picture")] = (
        Format.mermaid
    ),
    machine: Annotated[MachineName, typer.Option("--machine", help="which graph")] = (
        MachineName.plug
    ),
    flavour: Annotated[
        Flavour, typer.Option(
            "--flavour", help="whose order: deckhouse, or kubevirt (KubeVirt's; also: multus)")
    ] = Flavour.deckhouse,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="write here instead of stdout")
    ] = None,
    mode: Annotated[str, typer.Option(
        "--mode", help="drive, or observe (deckhouse: the platform's own order)")] = "drive",
) -> None:
    """Draw the plug, unplug or update machine (states, triggers, guards)."""
    if mode not in ("drive", "observe"):
        typer.echo(f"nicplug: --mode: {mode!r} is neither drive nor observe", err=True)
        raise typer.Exit(2)
    try:
        data = render(machine.value, format.value, _GRAPHS_OF[flavour.value], mode)
    except Exception as error:  # graphviz missing its `dot` binary, mostly
        if type(error).__name__ == "ExecutableNotFound":
            typer.echo(
                "drawing svg/png needs graphviz's `dot` (e.g. apt-get install graphviz); "
                "--format mermaid needs nothing",
                err=True,
            )
            raise typer.Exit(2) from error
        raise
    if output is not None:
        output.write_bytes(data)
        typer.echo(f"wrote {output}", err=True)
    elif format is Format.mermaid:
        typer.echo(data.decode(), nl=False)
    else:
        typer.echo("refusing to write a binary picture to the terminal: use -o FILE", err=True)
        raise typer.Exit(2)
