"""Records the tape of the platform's own hotplug, with no nicplug controller running.

The simulated cluster plays today's Deckhouse (`native_hotplug`: its virtualization
controller hot-plugs as `sync_kvvm.go` does, its KubeVirt copy under
`internal.virtualization.deckhouse.io` attaches and detaches). `nicplug record` writes
every watched kind while a user adds `Network/user-net` to a VM with kubectl, waits
until the guest has it, then removes it and waits until it is gone. The tape holds the
objects exactly as they were served — the pod's `networks-spec` and `networks-status`,
the KVVM and KVVMI in Deckhouse's names, the VM with its status — cut down to that VM.

    python -m tests.tapes.platform_tape      # rewrite deckhouse-platform-hotplug.tape.jsonl
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from tests.tapes.kubectl_tapes import KUBEVIRT, _kubectl, _nicplug, _stop
from tests.tapes.recording import cut_to_vm

HERE = Path(__file__).parent
TAPE = HERE / "deckhouse-platform-hotplug.tape.jsonl"
VM = "default/vm-00000"
VMS = "virtualmachines.virtualization.deckhouse.io"


async def _wait(what: str, check: Callable[[], Awaitable[bool]], deadline: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    until = loop.time() + deadline
    while loop.time() < until:
        if await check():
            return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{what} did not happen in time")


async def _guest_has_it(kubeconfig: Path, present: bool) -> bool:
    vmi = json.loads(await _kubectl(
        kubeconfig, "get", f"internalvirtualizationvirtualmachineinstances.{KUBEVIRT}",
        "vm-00000", "-o", "json"))
    listed = any("domain" in (i.get("infoSource") or "") and i.get("name") != "default"
                 for i in (vmi.get("status") or {}).get("interfaces") or [])
    named = any(i.get("name") != "default"
                for i in vmi["spec"]["domain"]["devices"].get("interfaces") or [])
    return listed if present else not (listed or named)


async def _set_networks(kubeconfig: Path, networks: list[dict[str, object]]) -> None:
    patch = json.dumps({"spec": {"networks": networks}})
    await _kubectl(kubeconfig, "patch", VMS, "vm-00000", "--type", "merge", "-p", patch)


async def make_tape(directory: Path) -> list[bytes]:
    kubeconfig = directory / "kubeconfig"
    raw = directory / "raw.tape.jsonl"
    sim = await _nicplug("sim", "serve", "--vms", "1", "--sdn-delay", "0.3",
                         "--native-hotplug", "--kubeconfig", str(kubeconfig),
                         log=directory / "sim.log")
    processes = [sim]
    try:
        await _wait("the simulated cluster", lambda: asyncio.sleep(0, kubeconfig.exists()))
        recorder = await _nicplug("record", "--kubeconfig", str(kubeconfig), "-o", str(raw),
                                  log=directory / "record.log")
        processes.append(recorder)
        await _wait("the recording", lambda: asyncio.sleep(0, raw.exists()
                                                           and raw.stat().st_size > 0))
        await asyncio.sleep(1.0)
        main = {"type": "Main", "id": 1}
        await _set_networks(kubeconfig, [main, {"type": "Network", "name": "user-net", "id": 2}])
        await _wait("the platform's plug", lambda: _guest_has_it(kubeconfig, True))
        await asyncio.sleep(1.0)
        await _set_networks(kubeconfig, [main])
        await _wait("the platform's unplug", lambda: _guest_has_it(kubeconfig, False))
        await asyncio.sleep(1.5)
        recorder.send_signal(signal.SIGINT)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(recorder.wait(), 10.0)
    finally:
        for process in reversed(processes):
            await _stop(process)
    return list(cut_to_vm(raw, VM))


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        lines = asyncio.run(make_tape(Path(scratch)))
    TAPE.write_bytes(b"".join(lines))
    print(f"wrote {len(lines)} lines to {TAPE}")
