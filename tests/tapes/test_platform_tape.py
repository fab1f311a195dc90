"""The tape of the platform's own hotplug (Deckhouse's virtualization controller plugs
and unplugs a Network; no nicplug controller ran: `platform_tape.py` recorded it from
the simulated cluster with `nicplug record`), replayed in observe mode, yields the full
history of both operations and no effect but Events."""

from __future__ import annotations

import orjson
from typer.testing import CliRunner

from nicplug.adapters.cli import app
from tests.tapes.platform_tape import TAPE

PLUG = ["Requested", "AnnotationPatched", "SDNReady", "VMIPatched", "Attached"]
UNPLUG = ["Requested", "AnnotationPatched", "VMIPatched", "GuestDetached", "SDNReleased",
          "Detached"]


def replayed(*options: str) -> dict[str, list[dict[str, object]]]:
    result = CliRunner().invoke(app, ["replay", str(TAPE), "--json", *options])
    assert result.exit_code == 0, result.output
    return dict(orjson.loads(result.stdout_bytes))


def test_the_tape_holds_the_platforms_objects_and_no_effect_of_nicplugs() -> None:
    kinds = set()
    for line in TAPE.read_bytes().splitlines():
        entry = orjson.loads(line)
        assert entry["type"] != "EFFECT"
        kinds.add(entry["object"].get("kind"))
    assert {"Pod", "VirtualMachine", "InternalVirtualizationVirtualMachine",
            "InternalVirtualizationVirtualMachineInstance"} <= kinds


def test_observed_it_yields_the_full_history_and_only_events() -> None:
    out = replayed("--flavour", "deckhouse", "--mode", "observe")
    histories = {(op["network"], op["direction"]): (op["state"], op["history"])
                 for op in out["operations"]}
    assert histories == {
        ("Network/user-net", "plug"): ("Attached", PLUG),
        ("Network/user-net", "unplug"): ("Detached", UNPLUG),
    }
    assert out["effects"] and {e["type"] for e in out["effects"]} == {"EmitEvent"}
    assert replayed("--flavour", "deckhouse", "--mode", "observe") == out  # deterministic
