"""A pod is stopped with SIGTERM: `nicplug run` must stop cleanly, not die mid-write.

Kubernetes sends SIGTERM on every rollout, drain and eviction, then SIGKILL after the
grace period. The controller must drain, close the journal (SQLite checkpoints its WAL
and removes the -wal and -shm files on a clean close) and exit 0 well within it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy import manifests

GRACE = int(manifests.one("Deployment")["spec"]["template"]["spec"]
            ["terminationGracePeriodSeconds"])


def _nicplug(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(manifests.ROOT)}
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "nicplug.adapters.cli", *args],
                                cwd=manifests.ROOT,
                                env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT)


def _wait_for(check: Path, text: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"exited with {process.returncode}: {check.read_text()}")
        if check.exists() and text in check.read_text():
            return
        time.sleep(0.05)  # waiting for another process, not for time to pass
    pytest.fail(f"{text!r} never appeared in {check.name}: {check.read_text()}")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Path]:
    kubeconfig = tmp_path / "kubeconfig"
    log = tmp_path / "cluster.log"
    process = _nicplug(["sim", "serve", "--vms", "20", "--kubeconfig", str(kubeconfig)], log)
    try:
        _kubeconfig(kubeconfig, process)
        yield kubeconfig
    finally:
        process.terminate()
        process.wait(10)


def _kubeconfig(path: Path, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while not (path.exists() and path.stat().st_size > 0):
        assert process.poll() is None, "the simulated cluster exited"
        assert time.monotonic() < deadline, "the simulated cluster did not start"
        time.sleep(0.05)


@pytest.mark.slow
def test_sigterm_drains_closes_the_journal_and_exits_0(cluster: Path, tmp_path: Path) -> None:
    journal = tmp_path / "journal.db"
    log = tmp_path / "controller.log"
    controller = _nicplug(["run", "--kubeconfig", str(cluster), "--journal", str(journal),
                           "--metrics-addr", "127.0.0.1:0", "--query-addr", ""], log)
    try:
        _wait_for(log, "ready:", controller)
        assert Path(f"{journal}-wal").exists()
        controller.send_signal(signal.SIGTERM)
        code = controller.wait(GRACE)
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
    assert code == 0, log.read_text()
    assert not Path(f"{journal}-wal").exists(), "the journal was not closed"
    assert "stopped by SIGTERM" in log.read_text()


@pytest.mark.slow
def test_sigterm_after_a_query_leaves_one_self_contained_journal_file(
    cluster: Path, tmp_path: Path
) -> None:
    """The query API's reader of the journal is closed before the writer: SQLite then
    checkpoints the WAL into the `.db`, which a copy or snapshot of that file alone
    holds whole."""
    journal = tmp_path / "journal.db"
    log = tmp_path / "controller.log"
    controller = _nicplug(["run", "--kubeconfig", str(cluster), "--journal", str(journal),
                           "--metrics-addr", "127.0.0.1:0", "--query-addr", "127.0.0.1:0"], log)
    try:
        _wait_for(log, "ready:", controller)
        served = re.search(r"operation queries on (http://[\d.]+:\d+)", log.read_text())
        assert served is not None, log.read_text()
        with urllib.request.urlopen(f"{served[1]}/operations", timeout=10) as answer:
            assert answer.status == 200
        controller.send_signal(signal.SIGTERM)
        code = controller.wait(GRACE)
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
    assert code == 0, log.read_text()
    wal = Path(f"{journal}-wal")
    assert not wal.exists() or wal.stat().st_size == 0, "the journal was left in its WAL"
    alone = tmp_path / "copy" / "journal.db"
    alone.parent.mkdir()
    shutil.copyfile(journal, alone)
    verified = subprocess.run(
        [sys.executable, "-m", "nicplug.adapters.cli", "journal", "verify", "--journal",
         str(alone)], cwd=manifests.ROOT, env={**os.environ, "PYTHONPATH": str(manifests.ROOT)},
        capture_output=True, text=True, timeout=60, check=False)
    assert verified.returncode == 0, verified.stdout + verified.stderr
