"""The command names a newcomer meets: no near twins, one word for the flavour, the
older spellings still accepted with a note."""

from __future__ import annotations

from typer.testing import CliRunner

from nicplug.adapters.cli import app

WIDE = {"COLUMNS": "200"}


def test_sim_and_dst_each_say_what_they_are() -> None:
    listed = CliRunner().invoke(app, ["--help"], env=WIDE).stdout
    lines = {line.split()[1]: line for line in listed.splitlines()
             if line.startswith("│ ") and len(line.split()) > 2}
    assert "simulate" not in lines  # the older name works, and is not offered
    assert "simulated Kubernetes API server" in lines["sim"]
    assert "Deterministic simulation testing" in lines["dst"]


def test_simulate_still_works_and_says_its_new_name() -> None:
    result = CliRunner().invoke(app, ["simulate", "--faults", "meteor"])
    assert result.exit_code == 2
    assert "`simulate` is deprecated: say `nicplug dst`" in result.stderr


def test_sim_serve_takes_the_flavour_as_run_does() -> None:
    helped = CliRunner().invoke(app, ["sim", "serve", "--help"], env=WIDE).stdout
    assert "--flavour" in helped and "--dialect" not in helped
    bad = CliRunner().invoke(app, ["sim", "serve", "--flavour", "openshift"])
    assert bad.exit_code == 2
    assert "choose deckhouse or kubevirt" in bad.stderr
