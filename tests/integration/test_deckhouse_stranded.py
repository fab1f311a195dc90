"""On Deckhouse the guest keeps a bpfbridge NIC the VM no longer has (its KubeVirt does
not detach one from a running domain: `detaches_live` off): the unplug ends
`Failed(GuestKeepsInterface)` once, with no retry armed, says so in a Warning, and the
operator's restart lets the next attempt end `Detached` — nicplug driving the order
(an older release) and observing Deckhouse's own (a release that hot-plugs)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.identity import service_account
from nicplug.simulator.knobs import Knobs
from tests.integration.conftest import QUICK, eventually

VM = "default/vm-00000"
NICPLUG = service_account("nicplug-system", "nicplug")


def retry_at(journal: Path, stream: str) -> Any:
    conn = sqlite3.connect(f"file:{journal}?mode=ro", uri=True)
    try:
        (snapshot,) = conn.execute("SELECT snapshot FROM streams WHERE stream = ?",
                                   (stream,)).fetchone()
    finally:
        conn.close()
    return json.loads(snapshot).get("retry_at")


@pytest.mark.parametrize("mode", ["drive", "observe"])
async def test_a_nic_the_guest_keeps_ends_the_unplug_once_until_a_restart(
    mode, start_cluster, start_controller, user_of, tmp_path
):
    knobs = Knobs(dialect="deckhouse", native_hotplug=mode == "observe", delays=QUICK,
                  detaches_live=False)
    cluster = await start_cluster(knobs, Fixtures(vms=1))
    # observing, nicplug runs as itself; driving (an older release), as an identity
    # Deckhouse's admission policy lets write the KVVM
    identity = {"kubeconfig": cluster.write_kubeconfig(
        tmp_path / "nicplug.kubeconfig", user=NICPLUG)} if mode == "observe" else {}
    # a retry would open 0.2 s after the failure: none may
    ctl = await start_controller(cluster, mode=mode, detach_timeout=1.0, backoff_base=0.2,
                                 backoff_max=0.2, **identity)
    user = user_of(cluster)
    await user.add_network(VM, "Network", "user-net")
    await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached"})

    await user.remove_network(VM, "Network/user-net")
    op = await ctl.journal.wait_for(VM, "Network/user-net", "unplug", {"Detached", "Failed"})

    assert (op.state, op.reason, op.attempt) == ("Failed", "GuestKeepsInterface", 1)
    assert "VirtualMachineOperation Migrate" in op.message
    assert retry_at(ctl.settings.journal, op.stream) is None
    await eventually(lambda: any(
        e.get("type") == "Warning" and "guest still has it" in str(e.get("message"))
        for e in cluster.events(reason="UnplugFailed")), what="the Warning Event")
    explained = await ctl.journal.explain(op.stream)
    assert "a new attempt opens once the guest no longer has the interface" in " ".join(
        explained.split())

    await user.restart(VM)  # the operator's: a new domain, made without the NIC
    done = await ctl.journal.wait_for(VM, "Network/user-net", "unplug", {"Detached"},
                                      attempt=2)
    assert done.reason is None
    attempts = [o for o in await ctl.journal.of(VM, "Network/user-net")
                if o.direction == "unplug"]
    assert len(attempts) == 2
