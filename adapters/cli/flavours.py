"""`--flavour deckhouse|kubevirt`, and `--dialect`, the older way to say it.

The flavour says whose cluster nicplug serves: `deckhouse` (Deckhouse virtualization:
the Deckhouse VM is the desired state, nicplug drives the whole order) or `kubevirt`
(upstream KubeVirt with multus: the KubeVirt VM's template is the desired state,
KubeVirt does the plumbing). Each flavour has its SDN dialect; `--dialect multus` is
kept as a deprecated alias of `--flavour kubevirt`, and says so on stderr.
"""

from __future__ import annotations

from typing import NoReturn

import typer

DIALECT_OF = {"deckhouse": "deckhouse", "kubevirt": "multus"}
"""flavour → the SDN dialect the settings take."""


def usage_error(message: str) -> NoReturn:
    typer.echo(f"nicplug: {message}", err=True)
    raise typer.Exit(2)


def dialect_of(flavour: str | None, dialect: str | None) -> str:
    """The dialect `--flavour` / `--dialect` ask for; a usage error when unknown or
    when the two disagree."""
    if dialect == "multus":
        typer.echo("nicplug: --dialect multus is deprecated: say --flavour kubevirt "
                   "(upstream KubeVirt with multus)", err=True)
    if flavour is None:
        return dialect or "deckhouse"
    wanted = DIALECT_OF.get(flavour)
    if wanted is None:
        usage_error(f"--flavour: unknown flavour {flavour!r}: choose deckhouse or kubevirt")
    if dialect is not None and dialect != wanted:
        usage_error(f"--flavour {flavour} and --dialect {dialect} disagree: say --flavour only")
    return wanted
