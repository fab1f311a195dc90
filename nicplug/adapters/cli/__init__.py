"""The `nicplug` command line. Importing a command module registers its command."""

from __future__ import annotations

from nicplug.adapters.cli import demo as _demo  # noqa: F401  (registers `demo`)
from nicplug.adapters.cli import diagram as _diagram  # noqa: F401  (registers the command)
from nicplug.adapters.cli import record as _record  # noqa: F401  (registers `record`)
from nicplug.adapters.cli import replay as _replay  # noqa: F401  (registers `replay`)
from nicplug.adapters.cli import run as _run  # noqa: F401  (registers `run`)
from nicplug.adapters.cli import sim as _sim  # noqa: F401  (registers `sim`)
from nicplug.adapters.cli.app import app


def main() -> None:
    app()


__all__ = ["app", "main"]
