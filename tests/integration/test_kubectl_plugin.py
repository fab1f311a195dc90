"""`kubectl nicplug`: the query commands through the API server, with only a kubeconfig.

The plugin runs as a child process (as kubectl runs it), with no journal in reach; its
answers are held against the CLI's own over the journal of the same run.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.resources import OPERATIONS
from tests.integration.conftest import eventually

VM = "default/vm-00000"
BIN = Path(sys.executable).parent
KUBECTL = shutil.which("kubectl")


async def _run(*argv: str, env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        cwd=cwd)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def _only_a_kubeconfig(cluster: SimulatedCluster, home: Path) -> dict[str, str]:
    """A laptop's environment: a kubeconfig, the plugin on PATH, no journal anywhere."""
    assert cluster.kubeconfig_path is not None
    return {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "HOME": str(home),
            "KUBECONFIG": str(cluster.kubeconfig_path), "COLUMNS": "200"}


async def _attached(cluster: SimulatedCluster, start_controller: Any, user_of: Any) -> Any:
    ctl = await start_controller(cluster)
    await user_of(cluster).add_network(VM, "Network", "user-net")
    await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})
    await eventually(lambda: [o["status"]["state"] for o in cluster.store.list(OPERATIONS)[0]]
                     == ["Attached"], what="the object shows Attached")
    return ctl


async def test_the_plugin_answers_as_the_cli_does(start_cluster, start_controller, user_of,
                                                   tmp_path) -> None:
    cluster = await start_cluster()
    ctl = await _attached(cluster, start_controller, user_of)
    env = _only_a_kubeconfig(cluster, tmp_path)
    plugin = str(BIN / "kubectl-nicplug")

    code, out, err = await _run(plugin, "explain", VM, "Network/user-net", "--json",
                                env=env, cwd=tmp_path)
    assert code == 0, err
    remote = json.loads(out)
    code, out, err = await _run(str(BIN / "nicplug"), "explain", VM, "Network/user-net",
                                "--json", "--journal", str(ctl.settings.journal),
                                env=env, cwd=tmp_path)
    assert code == 0, err
    local = json.loads(out)
    for field in ("summary", "waits_for", "ends_if", "superseded_by"):
        assert remote[field] == local[field], field
    for field in ("id", "state", "history", "network", "if_name", "vm_uid"):
        assert remote["operation"][field] == local["operation"][field], field

    code, out, err = await _run(plugin, "status", "--json", env=env, cwd=tmp_path)
    assert code == 0, err
    assert [(o["vm"], o["network"], o["state"]) for o in json.loads(out)["operations"]] == [
        (VM, "Network/user-net", "Attached")]
    code, out, err = await _run(plugin, "history", VM, env=env, cwd=tmp_path)
    assert code == 0 and "SDNReady" in out and "Attached" in out, err
    code, out, err = await _run(plugin, "history", VM, "--format", "mermaid", env=env,
                                cwd=tmp_path)
    assert code == 0 and out.startswith("gantt\n") and "  Attached :milestone," in out, err
    code, out, err = await _run(plugin, "explain", VM, "Network/user-net", "--diagram",
                                env=env, cwd=tmp_path)
    assert code == 0 and "  class Attached s_active" in out, err
    code, out, err = await _run(plugin, "stuck", "--older-than", "1s", "--json",
                                env=env, cwd=tmp_path)
    assert code == 0 and json.loads(out)["operations"] == [], err
    code, _, err = await _run(plugin, "explain", "default/no-such-vm", env=env, cwd=tmp_path)
    assert code == 1 and "no operation of default/no-such-vm" in err
    code, _, err = await _run(plugin, "status", "--state", "Atached", env=env, cwd=tmp_path)
    assert code == 2 and "unknown state" in err


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is missing: not installed on PATH")
async def test_kubectl_runs_the_plugin_with_only_a_kubeconfig(start_cluster, start_controller,
                                                              user_of, tmp_path) -> None:
    cluster = await start_cluster()
    await _attached(cluster, start_controller, user_of)
    assert KUBECTL is not None
    env = _only_a_kubeconfig(cluster, tmp_path)
    code, out, err = await _run(KUBECTL, "nicplug", "explain", VM, env=env, cwd=tmp_path)
    assert code == 0, err  # as `nicplug explain NS/NAME`: the VM's operations
    assert "default/vm-00000: 1 operation" in out and "Network/user-net plug#1" in out
    code, out, err = await _run(KUBECTL, "nicplug", "explain", VM, "Network/user-net",
                                env=env, cwd=tmp_path)
    assert code == 0, err
    assert "default/vm-00000 Network/user-net plug#1" in out
    assert "state: Attached" in out and "done: Attached is terminal" in out
