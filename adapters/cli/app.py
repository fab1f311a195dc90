"""The root `typer` application; each command lives in a module of its own."""

from __future__ import annotations

from typing import Annotated

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


def _print_version(asked: bool) -> None:
    if asked:
        version()
        raise typer.Exit()


@app.callback()
def _options(
    _version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True, help="Print nicplug's version.")
    ] = False,
) -> None:
    """Hot-plug and hot-unplug network interfaces of running KubeVirt VMs."""
