"""The static checks are part of the test command: ruff, mypy --strict, import-linter."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[dev]'")
    return found


def test_ruff() -> None:
    result = _run(_tool("ruff"), "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


LAYERS = ("engine", "machines", "adapters", "simulator", "migrations")


def typecheck_tree() -> Path:
    """A folder where the layers sit under `nicplug/`, as links, for mypy.

    The layers are root folders mapped to `nicplug.<layer>` by setuptools' `package-dir`;
    an editable install serves that mapping through an import hook, which a type checker
    does not run. mypy reads the same files through these links, under their import
    names. The links live in mypy's own cache folder, so its incremental cache holds."""
    tree = ROOT / ".mypy_cache" / "tree"
    package = tree / "nicplug"
    package.mkdir(parents=True, exist_ok=True)
    for layer in LAYERS:
        link = package / layer
        if not link.is_symlink():
            link.symlink_to(ROOT / layer, target_is_directory=True)
    return tree


def test_mypy_strict() -> None:
    tree = typecheck_tree()
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "-p", "nicplug", "-p", "bench"], cwd=ROOT,
        env={**os.environ, "MYPYPATH": f"{tree}{os.pathsep}{ROOT}"},
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_layers() -> None:
    result = _run(_tool("lint-imports"))
    assert result.returncode == 0, result.stdout + result.stderr
