"""`python -m bench NAME [--quick]`: run one benchmark module `bench/NAME.py`
(`python -m bench NAME --help`: what it measures, and its options).

Each module has `main(argv) -> int`, prints a table and, last, one JSON line.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def _available() -> list[str]:
    here = Path(__file__).parent
    return sorted(m.name for m in pkgutil.iter_modules([str(here)]) if not m.name.startswith("_"))


def run(argv: list[str]) -> int:
    names = _available()
    usage = f"usage: python -m bench {{{'|'.join(names)}}} [--quick] (NAME --help: its options)"
    if argv[:1] in (["-h"], ["--help"]):
        print(usage)
        return 0
    if not argv or argv[0] not in names:
        print(usage, file=sys.stderr)
        return 2
    module = importlib.import_module(f"bench.{argv[0]}")
    result: int = module.main(argv[1:])
    return result


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
