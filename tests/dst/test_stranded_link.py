"""Seed 1591: an unplug KubeVirt finished while a pod kept the link is not retried for
ever (`attempts-unbounded` before).

Upstream KubeVirt, no dynamic-networks controller: the user plugs second-net, a
migration starts at once (its target pod is made while the interface is asked for, so
multus gives that pod the link), and the user reverts 0.3 s later. KubeVirt drops the
interface, never attached, from the VMI and the template (`clearDetachedIfacesFromVMI`);
its migration evaluator reads only the VMI's interfaces, so it asks no migration, and
nothing releases the target pod's link. The unplug waited in `GuestDetached` for the
release, failed `DetachTimeout` and was retried every backoff for ever. Now it ends
`Failed(LinkStranded)`, saying what releases the link, and is not retried; once a
migration replaces the pod, its next attempt follows the world to `Detached`.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from nicplug.adapters.cli import app
from nicplug.adapters.simulation.run import simulate
from nicplug.adapters.simulation.schedule import Schedule, Step
from tests.dst.journal_rows import unplugs_of

HERE = Path(__file__).parent
SCHEDULE = Schedule.from_json(json.loads((HERE / "seed-1591-stranded-link.json").read_text()))


def test_the_stranded_link_ends_the_unplug_once_and_says_what_releases_it(
        tmp_path: Path) -> None:
    outcome = simulate(SCHEDULE, workdir=tmp_path)
    assert outcome.violation is None, outcome.violation.line()
    unplugs = unplugs_of(tmp_path / "a.db", "Network/second-net")
    assert [(state, reason) for state, reason, _ in unplugs] == [("Failed", "LinkStranded")]
    assert "migrate or restart the VM to release the link" in unplugs[0][2]
    explained = CliRunner().invoke(app, ["explain", "default/vm-00001", "Network/second-net",
                                         "--journal", str(tmp_path / "a.db")])
    assert explained.exit_code == 0, explained.output
    assert "a new attempt opens once no pod reports the link" in " ".join(
        explained.output.split())


def test_a_migration_that_releases_the_link_lets_the_next_attempt_end_detached(
        tmp_path: Path) -> None:
    later = SCHEDULE.with_steps((*SCHEDULE.steps, Step(200.0, "migrate", 1)))
    outcome = simulate(later, workdir=tmp_path)
    assert outcome.violation is None, outcome.violation.line()
    unplugs = unplugs_of(tmp_path / "a.db", "Network/second-net")
    assert [(state, reason) for state, reason, _ in unplugs] == [
        ("Failed", "LinkStranded"), ("Detached", None)]
