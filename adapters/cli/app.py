"""The root `typer` application; each command lives in a module of its own."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="nicplug",
    help="Hot-plug and hot-unplug network interfaces of running KubeVirt VMs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.command()
def version() -> None:
    """Print nicplug's version."""
    from nicplug.adapters import __version__

    typer.echo(__version__)
