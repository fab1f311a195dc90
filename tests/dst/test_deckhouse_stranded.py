"""Deckhouse, nicplug driving: the guest keeps a NIC the VM no longer has, since
Deckhouse's KubeVirt does not detach a bpfbridge interface from a running domain
(`Setup.detaches_live` off). The unplug ended `DetachTimeout` and was retried every
backoff for ever (24 attempts in the hour of the schedule, and `effects-unbounded`);
now it ends once `Failed(GuestKeepsInterface)`, saying what removes the NIC, and the
user's restart lets the next attempt end `Detached`."""

from __future__ import annotations

import json
from pathlib import Path

from nicplug.adapters.simulation.run import simulate
from nicplug.adapters.simulation.schedule import Schedule, Step
from tests.dst.journal_rows import unplugs_of

HERE = Path(__file__).parent
SCHEDULE = Schedule.from_json(json.loads((HERE / "deckhouse-guest-keeps-nic.json").read_text()))


def test_a_nic_the_guest_keeps_ends_the_unplug_once(tmp_path: Path) -> None:
    outcome = simulate(SCHEDULE, workdir=tmp_path)
    assert outcome.violation is None, outcome.violation.line()
    unplugs = unplugs_of(tmp_path / "a.db", "Network/second-net")
    assert [(state, reason) for state, reason, _ in unplugs] == [
        ("Failed", "GuestKeepsInterface")]
    assert "restart the VM to remove the NIC" in unplugs[0][2]


def test_the_users_restart_lets_the_next_attempt_end_detached(tmp_path: Path) -> None:
    later = Schedule.from_json(
        SCHEDULE.to_json() | {"faults": [*SCHEDULE.faults, "vm"]}).with_steps(
        (*SCHEDULE.steps, Step(200.0, "restart", 0)))
    outcome = simulate(later, workdir=tmp_path)
    assert outcome.violation is None, outcome.violation.line()
    unplugs = unplugs_of(tmp_path / "a.db", "Network/second-net")
    assert [(state, reason) for state, reason, _ in unplugs] == [
        ("Failed", "GuestKeepsInterface"), ("Detached", None)]
