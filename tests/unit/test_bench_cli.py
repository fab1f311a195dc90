"""Every benchmark answers `--help` with its options instead of running, and refuses an
option it does not know (a typo must not start a run of minutes)."""

from __future__ import annotations

import importlib

import pytest

from bench.__main__ import _available, run

NAMES = _available()


def test_every_benchmark_is_listed() -> None:
    assert {"dst", "e2e", "journal", "machines", "replay", "simulator"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_help_prints_the_options_and_runs_nothing(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        run([name, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m bench {name}")
    assert "--quick" in out


@pytest.mark.parametrize("name", NAMES)
def test_an_unknown_option_is_refused(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        importlib.import_module(f"bench.{name}").main(["--no-such-option"])
    assert exited.value.code == 2
    assert "unrecognized arguments: --no-such-option" in capsys.readouterr().err


def test_the_runner_lists_the_benchmarks(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in NAMES)
    assert run(["no-such-bench"]) == 2


def test_the_instruction_count_is_read_from_callgrind() -> None:
    machines = importlib.import_module("bench.machines")
    assert machines.collected("==41== \n==41== Collected : 1990332377\n==41==\n") == 1990332377
    with pytest.raises(RuntimeError, match="no count"):
        machines.collected("valgrind: command failed")
