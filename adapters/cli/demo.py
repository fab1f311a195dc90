"""`nicplug demo`: the main job — simulated clusters, real controllers, known scenarios."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from nicplug.adapters.cli.app import app


@app.command()
def demo(
    directory: Annotated[
        Path | None,
        typer.Option("--dir", help="Keep journals and logs here (default: a temporary dir)"),
    ] = None,
    budget: Annotated[
        float, typer.Option(min=10, help="Seconds the scenarios may take in all")
    ] = 150.0,
    mode: Annotated[str, typer.Option(
        help="observe: the live world's Deckhouse hot-plugs by itself and nicplug follows "
             "it; drive: a release without native hotplug, nicplug writes the hotplug")
    ] = "observe",
) -> None:
    """Start simulated clusters and controllers, play hotplug scenarios, check outcomes."""
    from nicplug.adapters.cli.console import make_console
    from nicplug.adapters.demo.play import play

    console = make_console()
    if mode not in ("observe", "drive"):
        typer.echo(f"nicplug: --mode: {mode!r} is neither observe nor drive", err=True)
        raise typer.Exit(2)
    if directory is None:
        directory = Path(tempfile.mkdtemp(prefix="nicplug-demo-"))
    if directory.exists() and not directory.is_dir():
        typer.echo(f"nicplug: --dir {directory} exists and is not a directory", err=True)
        raise typer.Exit(2)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        typer.echo(f"nicplug: --dir {directory}: cannot create it "
                   f"({error.strerror or error})", err=True)
        raise typer.Exit(2) from None
    code = asyncio.run(play(directory.resolve(), console, budget=budget, mode=mode))
    raise typer.Exit(code)
