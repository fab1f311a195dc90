"""The command line of a benchmark whose only option is `--quick`: `--help` prints the
module's docstring (what it measures and how) instead of running it."""

from __future__ import annotations

import argparse


def quick(argv: list[str], *, name: str, doc: str | None, smaller: str) -> bool:
    """Parse `argv` of `python -m bench NAME`; True when `--quick` was given. `smaller`
    says what `--quick` runs instead."""
    parser = argparse.ArgumentParser(
        prog=f"python -m bench {name}", description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"a smaller run: {smaller}")
    return bool(parser.parse_args(argv).quick)
