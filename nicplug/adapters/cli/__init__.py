"""The `nicplug` command line. Importing a command module registers its command."""

from __future__ import annotations

from nicplug.adapters.cli import diagram as _diagram  # noqa: F401  (registers the command)
from nicplug.adapters.cli.app import app


def main() -> None:
    app()


__all__ = ["app", "main"]
