"""`nicplug run`'s leader-election options and its clean stop on a signal."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nicplug.adapters.cli import app
from nicplug.adapters.cli.run import namespace_scope, until_signalled
from nicplug.adapters.core.settings import Settings
from nicplug.adapters.kube.lease import LeaseTiming


def test_the_lease_timing_defaults_are_the_libraries() -> None:
    assert Settings().lease_timing() == LeaseTiming()


def test_the_lease_timing_comes_from_flags_and_environment() -> None:
    settings = Settings(lease_duration=2, renew_deadline=1.5, retry_period=0.25)
    assert settings.lease_timing() == LeaseTiming(2, 1.5, 0.25)


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["--lease-duration", "5"], {}, "the lease duration must exceed the renew deadline"),
        (["--renew-deadline", "2"], {}, "the renew deadline must exceed 1.2 × the retry period"),
        (["--retry-period", "0"], {}, "--retry-period: Input should be greater than 0"),
        (["--lease-duration", "0"], {}, "--lease-duration: Input should be greater than or"),
        ([], {"NICPLUG_LEASE_DURATION": "3"}, "--lease-duration 3, --renew-deadline 10.0"),
        (["--lease-duration", "1.5"], {}, "integer"),
    ],
)
def test_bad_lease_timing_is_refused_before_anything_starts(
    tmp_path: Path, args: list[str], env: dict[str, str], says: str
) -> None:
    journal = tmp_path / "journal.db"
    result = CliRunner().invoke(app, ["run", "--journal", str(journal), *args], env=env)
    assert result.exit_code == 2
    assert says in _unboxed(result.output)
    assert not journal.exists()


def _unboxed(output: str) -> str:
    """The error text without rich's box drawing and line wrapping."""
    return " ".join(output.translate({ord(c): " " for c in "│╭╮╰╯─"}).split())


async def test_a_signal_cancels_the_work_and_ends_quietly() -> None:
    stopped = asyncio.Event()

    async def work() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()

    running = asyncio.create_task(until_signalled(work()))
    await asyncio.sleep(0)
    os.kill(os.getpid(), signal.SIGTERM)
    await asyncio.wait_for(running, 5)
    assert stopped.is_set()


async def test_without_a_signal_the_work_ends_as_it_ends() -> None:
    async def work() -> None:
        raise RuntimeError("the API server is gone")

    with pytest.raises(RuntimeError, match="gone"):
        await until_signalled(work())
    # the handlers are gone with it: the default SIGTERM disposition is back
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_durations_are_read_the_same_way_in_every_option(tmp_path: Path) -> None:
    """`2m` is two minutes for a timeout as for `--retention`; a bad one names itself."""
    journal = tmp_path / "journal.db"
    invoke = CliRunner().invoke
    bad = invoke(app, ["run", "--journal", str(journal), "--attach-timeout", "2x"])
    assert bad.exit_code == 2
    assert "--attach-timeout" in _unboxed(bad.output)
    assert "a duration is like 30s, 5m" in _unboxed(bad.output)
    # a good one gets as far as the lease check, which reads the renew deadline parsed
    good = invoke(app, ["run", "--journal", str(journal), "--attach-timeout", "2m",
                        "--retention", "30d", "--renew-deadline", "1m", "--retry-period", "5s"])
    assert good.exit_code == 2
    assert "--lease-duration 15, --renew-deadline 60.0, --retry-period 5.0" in _unboxed(
        good.output)
    assert not journal.exists()


def test_version_and_the_short_namespace_option() -> None:
    from nicplug.adapters import __version__

    shown = CliRunner().invoke(app, ["--version"])
    assert (shown.exit_code, shown.output) == (0, f"{__version__}\n")
    helped = _unboxed(CliRunner().invoke(app, ["run", "--help"]).output)
    assert "--namespace -n" in helped
    assert "--namespaces" not in helped  # the deprecated spelling is accepted, not offered


@pytest.mark.parametrize(("namespace", "namespaces", "scope"), [
    ("ns1", None, ("ns1",)),
    ("ns1, ns2,ns1", None, ("ns1", "ns2")),
    (None, "ns1", ("ns1",)),
    (None, None, ()),
])
def test_one_namespace_option_for_the_scope(
    namespace: str | None, namespaces: str | None, scope: tuple[str, ...]
) -> None:
    assert namespace_scope(namespace, namespaces) == scope


def test_the_older_namespaces_option_still_works_and_says_so(tmp_path: Path) -> None:
    journal = tmp_path / "journal.db"  # a bad lease timing stops it before it connects
    result = CliRunner().invoke(app, ["run", "--journal", str(journal), "--namespaces", "a,b",
                                      "--lease-duration", "5"])
    assert result.exit_code == 2
    assert "--namespaces is deprecated: say --namespace (-n)" in _unboxed(result.output)
