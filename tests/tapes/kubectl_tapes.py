"""Makes a tape with nothing but `kubectl get --watch --output-watch-events -o json`.

Against the simulated API server: a user adds `Network/user-net` to a VM while no
controller runs, and every watched kind is captured with kubectl (each watch ends
after its initial list); then a controller runs until the plug is done and the kinds
are captured again. The two captures, concatenated, are a tape without `at` times
(one second per event on replay) whose VM first asks for a network and later shows it
attached: a replay opens the plug and adopts the finished world.

    python -m tests.tapes.kubectl_tapes        # rewrite tests/tapes/kubectl-*.tape.json
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
TAPE = HERE / "kubectl-plug-with-snapshots.tape.json"
KUBEVIRT = "internal.virtualization.deckhouse.io"  # a Deckhouse cluster's renamed KubeVirt
RESOURCES = (
    f"internalvirtualizationkubevirts.{KUBEVIRT}", "networks.network.deckhouse.io",
    "clusternetworks.network.deckhouse.io", f"internalvirtualizationvirtualmachines.{KUBEVIRT}",
    f"internalvirtualizationvirtualmachineinstances.{KUBEVIRT}",
    f"internalvirtualizationvirtualmachineinstancemigrations.{KUBEVIRT}",
    "pods", "virtualmachinemacaddresses.virtualization.deckhouse.io",
    "virtualmachines.virtualization.deckhouse.io",
)
"""In the order a capture is concatenated: the VM last, so that when a replay first
decides about it, everything around it has been seen."""


def kubectl_available() -> bool:
    return shutil.which("kubectl") is not None


async def _nicplug(*args: str, log: Path) -> asyncio.subprocess.Process:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("wb") as out:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "nicplug.adapters.cli", *args, cwd=ROOT, env=env,
            stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT,
        )


async def _kubectl(kubeconfig: Path, *args: str) -> bytes:
    process = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", str(kubeconfig), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {err.decode().strip()}")
    return out


async def _capture(kubeconfig: Path) -> bytes:
    outputs = await asyncio.gather(*(
        _kubectl(kubeconfig, "get", resource, "--all-namespaces", "--watch",
                 "--output-watch-events", "-o", "json", "--request-timeout=1s")
        for resource in RESOURCES
    ))
    return b"".join(outputs)


async def _attached(kubeconfig: Path, deadline: float) -> None:
    loop = asyncio.get_running_loop()
    until = loop.time() + deadline
    while loop.time() < until:
        vmi = json.loads(await _kubectl(
            kubeconfig, "get", f"internalvirtualizationvirtualmachineinstances.{KUBEVIRT}",
            "vm-00000", "-o", "json"))
        interfaces = (vmi.get("status") or {}).get("interfaces") or []
        if any("domain" in (i.get("infoSource") or "") and i.get("name") != "default"
               for i in interfaces):
            return
        await asyncio.sleep(0.2)
    raise RuntimeError("the plug did not finish in time")


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        await process.wait()


async def make_tape(directory: Path) -> bytes:
    """The tape's bytes: a capture before the controller runs, and one after."""
    kubeconfig = directory / "kubeconfig"
    sim = await _nicplug("sim", "serve", "--vms", "1", "--sdn-delay", "0.2",
                         "--no-native-hotplug",  # the controller drives
                         "--kubeconfig", str(kubeconfig), log=directory / "sim.log")
    processes = [sim]
    try:
        for _ in range(200):
            if kubeconfig.exists() and kubeconfig.stat().st_size:
                break
            await asyncio.sleep(0.05)
        patch = {"spec": {"networks": [{"type": "Main", "id": 1},
                                       {"type": "Network", "name": "user-net", "id": 2}]}}
        await _kubectl(kubeconfig, "patch", "virtualmachines.virtualization.deckhouse.io",
                       "vm-00000", "--type", "merge", "-p", json.dumps(patch))
        before = await _capture(kubeconfig)
        controller = await _nicplug(
            "run", "--kubeconfig", str(kubeconfig), "--journal", str(directory / "j.db"),
            "--metrics-addr", "127.0.0.1:0", "--query-addr", "", "--mode", "drive",
            log=directory / "controller.log")
        processes.append(controller)
        await _attached(kubeconfig, 30.0)
        await _stop(controller)
        after = await _capture(kubeconfig)
    finally:
        for process in reversed(processes):
            await _stop(process)
    return before + after


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="nicplug-kubectl-") as tmp:
        TAPE.write_bytes(asyncio.run(make_tape(Path(tmp))))
