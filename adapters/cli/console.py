"""The `rich` console every command prints through.

On a terminal rich follows its width. Piped into a file or a CI log it would assume
80 columns and fold every table cell; there it gets at least 150.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

PIPED_WIDTH = 150


def make_console(**options: Any) -> Console:
    console = Console(**options)
    if not console.is_terminal:
        console = Console(width=max(console.width, PIPED_WIDTH), **options)
    return console
