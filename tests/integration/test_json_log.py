"""`nicplug run --log-format json`: every line of a real controller's log is one JSON
object, and an operation's lines carry its VM, operation, network and state as keys."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.conftest import eventually
from tests.integration.processes_support import Launcher, operations

VM = "default/vm-00000"


async def test_a_plug_logged_as_json_lines(tmp_path: Path, start_cluster, user_of) -> None:
    cluster = await start_cluster()
    launcher = Launcher(tmp_path)
    try:
        controller = await launcher.start(cluster, "json-log", "--log-format", "json")
        await eventually(controller.ready, within=30, what="the controller ready")
        await user_of(cluster).add_network(VM, "Network", "user-net")
        await eventually(lambda: any(op.state == "Attached"
                                     for op in operations(controller.journal)),
                         within=30, what="the plug attached")
        assert await controller.terminate() == 0
    finally:
        await launcher.close()

    lines = controller.log.read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line parses
    assert all({"time", "level", "logger", "message"} <= r.keys() for r in records)
    (opened,) = [r for r in records if r.get("state") == "Requested"]
    (attached,) = [r for r in records if r.get("state") == "Attached"]
    for record in (opened, attached):
        assert record["vm"] == VM and record["network"] == "Network/user-net"
        assert record["logger"] == "nicplug.operations" and record["level"] == "INFO"
    assert opened["operation"] == attached["operation"]
    assert attached["operation"].endswith("/Network/user-net/plug/1")
