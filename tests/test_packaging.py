"""The layout: the layers are root folders, their import names stay `nicplug.<layer>`.

setuptools maps each folder to its import name (`package-dir` in pyproject.toml). These
tests hold the mapping to the folders, and build the wheel from exactly the files the
container image's build stage copies, then import it in a fresh virtual environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
from pathlib import Path

import pytest

from nicplug.adapters import __version__
from tests.test_static import LAYERS, ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_root_lists_the_layers_and_no_folder_of_folders() -> None:
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}
    folders -= {"build", "dist"} | {p for p in folders if p.endswith(".egg-info")}
    assert folders == {*LAYERS, "tests", "deploy", "bench", "docs"}
    for name in folders:
        assert any(p.is_file() for p in (ROOT / name).iterdir()), name


def test_every_package_folder_is_mapped_and_listed() -> None:
    """A folder with an `__init__.py` that pyproject does not list would be missing from
    the wheel while the editable install still imports it."""
    setuptools = PYPROJECT["tool"]["setuptools"]
    assert setuptools["package-dir"] == {f"nicplug.{layer}": layer for layer in LAYERS}
    on_disk = {
        "nicplug." + ".".join(init.parent.relative_to(ROOT).parts)
        for layer in LAYERS for init in (ROOT / layer).rglob("__init__.py")
    }
    assert set(setuptools["packages"]) == on_disk


@pytest.mark.slow
def test_the_wheel_built_from_the_image_context_installs_and_runs(tmp_path: Path) -> None:
    context = tmp_path / "context"
    context.mkdir()
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        if line.startswith("!"):
            source = ROOT / line[1:].rstrip("/")
            copy = shutil.copytree if source.is_dir() else shutil.copy2
            copy(source, context / source.name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"),
         str(context)], capture_output=True, text=True, timeout=600, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp_path / "dist").glob("nicplug-*.whl")

    # A fresh environment that sees this one's dependencies (a path line in a .pth file
    # adds the folder without running its .pth files, so the editable hook stays out).
    fresh = tmp_path / "venv"
    venv.create(fresh, with_pip=False)
    python = fresh / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
         str(wheel)], capture_output=True, text=True, timeout=600, check=False)
    assert installed.returncode == 0, installed.stdout + installed.stderr

    probe = """
import asyncio, importlib.resources, pathlib, sys
import nicplug.engine, nicplug.machines, nicplug.adapters.cli, nicplug.simulator
for module in (nicplug.engine, nicplug.machines, nicplug.adapters, nicplug.simulator):
    assert pathlib.Path(module.__file__).is_relative_to(sys.prefix), module.__file__
sql = sorted(p.name for p in importlib.resources.files("nicplug.migrations").iterdir()
             if p.name.endswith(".sql"))
assert sql, "no SQL migrations in the wheel"
print(" ".join(sql))
"""
    probed = subprocess.run([str(python), "-c", probe], capture_output=True, text=True,
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": ""}, check=False)
    assert probed.returncode == 0, probed.stdout + probed.stderr
    assert "0001_initial.sql" in probed.stdout
    version = subprocess.run([str(fresh / "bin" / "nicplug"), "version"], capture_output=True,
                             text=True, cwd=tmp_path, check=False)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == __version__
