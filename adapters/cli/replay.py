"""`nicplug replay TAPE`: feed a recorded tape to the controller's decision code.

Takes the options of `nicplug run` that change decisions (flavour, mode, gating,
migrations, timeouts, the scope: `--namespace`, `--vm-selector`; `NOT_DECIDING` lists the
others, and a test holds the two lists to `run`'s), runs on a virtual clock, executes no
effect against any server, and prints a report, or the same report as JSON (`--json`).
`--until TIME|+DURATION` ends the replay at a time (later lines are not fed) or lets
time pass after the last line, so the timers of a tape's quiet end fire. Exit codes: 0
done; 1
`--compare-effects` found a difference, or a `--strict` replay met a malformed line or
time going backwards, or the journal failed; 2 bad options or no tape.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError

from nicplug.adapters.cli.app import app
from nicplug.adapters.cli.run import _explain, duration_arg, namespace_scope, usage_error

if TYPE_CHECKING:
    from nicplug.adapters.core.replaying import Until


NOT_DECIDING = frozenset({
    # where and how the controller runs, not what it decides
    "kubeconfig", "journal", "journal-dsn", "metrics-addr", "lease-name", "lease-namespace",
    "identity",
    "lease-duration", "renew-deadline", "retry-period", "request-timeout", "synchronous",
    "record-tape", "retention", "archive-dir", "log-level", "log-format", "query-addr",
    "query-address", "operation-objects", "created-objects-retention",
    # the executor's cap on migrations in flight: a replay executes no effect
    "max-migrations",
})
"""The options of `nicplug run` that `replay` does not take, and why."""

_TIME = typer.Option(parser=duration_arg, metavar="DURATION")


@app.command()
def replay(
    tape: Annotated[Path, typer.Argument(help="The tape file ('-': standard input)")],
    json_output: Annotated[bool, typer.Option(
        "--json", help="Print the report as JSON: the operations, their paths and effects"
    )] = False,
    journal: Annotated[
        Path | None, typer.Option(help="Keep the replay's journal in this SQLite file")
    ] = None,
    compare_effects: Annotated[bool, typer.Option(
        "--compare-effects", help="Exit 1 when the effects differ from the tape's EFFECT lines"
    )] = False,
    strict: Annotated[bool, typer.Option(
        help="Stop at the first malformed line or line whose time goes backwards"
    )] = False,
    until: Annotated[str | None, typer.Option(
        help="End at this RFC 3339 time, or +DURATION (90s, 10m, 1h30m) after the last line"
    )] = None,
    flavour: Annotated[str | None, typer.Option(
        help="deckhouse | kubevirt (upstream KubeVirt with multus)  [default: deckhouse]"
    )] = None,
    dialect: Annotated[str | None, typer.Option(
        help="Deprecated: deckhouse | multus (= --flavour kubevirt)")] = None,
    kubevirt_api: Annotated[str | None, typer.Option(
        help="KubeVirt API: upstream | deckhouse (default: as the tape's objects name it)"
    )] = None,
    mode: Annotated[str, typer.Option(
        help="observe (the platform wrote the tape's hotplug) | drive | auto (a tape holds "
             "no RBAC to ask: drive, as tapes were recorded before modes; kubevirt: observe)"
    )] = "auto",
    gating: Annotated[
        str, typer.Option(help="rollout-strategy | always-live")
    ] = "rollout-strategy",
    migrations: Annotated[str, typer.Option(help="auto | opt-in | never | manual")] = "auto",
    migration_attempts: Annotated[int, typer.Option(
        help="At most this many migrations of one change fail, then Failed")] = 3,
    namespace: Annotated[str | None, typer.Option(
        "--namespace", "-n",
        help="Replay only the VMs in this namespace, or these (comma-separated), as "
             "`run --namespace` manages them (default: all)")] = None,
    namespaces: Annotated[str | None, typer.Option(
        hidden=True, help="Deprecated: --namespace takes several, comma-separated")] = None,
    vm_selector: Annotated[str, typer.Option(
        help="Replay only the VMs whose labels match this label selector (default: all)")] = "",
    sdn_ready_timeout: Annotated[float, _TIME] = 120.0,
    attach_timeout: Annotated[float, _TIME] = 120.0,
    detach_timeout: Annotated[float, _TIME] = 120.0,
    migration_timeout: Annotated[float, _TIME] = 600.0,
    dynamic_networks_grace: Annotated[float, _TIME] = 15.0,
    effect_reissue_after: Annotated[float, _TIME] = 30.0,
    backoff_base: Annotated[float, _TIME] = 5.0,
    backoff_max: Annotated[float, _TIME] = 300.0,
    cluster_network_namespace: Annotated[str, typer.Option()] = "default",
) -> None:  # the timeouts take durations as `nicplug run`'s do (30s, 5m, seconds)
    """Replay a tape on a virtual clock; no effect reaches any server."""
    from nicplug.adapters.cli.console import make_console
    from nicplug.adapters.cli.flavours import dialect_of
    from nicplug.adapters.cli.replay_report import compare_effects as compare
    from nicplug.adapters.cli.replay_report import print_report, replay_json
    from nicplug.adapters.core.replaying import Replay, TapeMalformed
    from nicplug.adapters.core.settings import Settings
    from nicplug.engine.errors import JournalError

    dialect = dialect_of(flavour, dialect)
    try:
        settings = Settings(
            dialect=dialect, kubevirt_api=kubevirt_api, mode=mode, gating=gating,
            migrations=migrations, migration_attempts=migration_attempts,
            namespaces=namespace_scope(namespace, namespaces),
            vm_selector=vm_selector,
            sdn_ready_timeout=sdn_ready_timeout, attach_timeout=attach_timeout,
            detach_timeout=detach_timeout, migration_timeout=migration_timeout,
            dynamic_networks_grace=dynamic_networks_grace,
            effect_reissue_after=effect_reissue_after, backoff_base=backoff_base,
            backoff_max=backoff_max, cluster_network_namespace=cluster_network_namespace,
        )
    except ValidationError as exc:
        usage_error(_explain(exc))
    try:
        end = _until(until)
    except ValueError as exc:
        usage_error(f"--until: {exc}")
    if journal is not None and journal.exists():
        typer.echo(f"nicplug: {journal} exists; a replay writes a new journal", err=True)
        raise typer.Exit(2)
    try:
        source = sys.stdin.buffer if str(tape) == "-" else tape.open("rb")
    except OSError as exc:
        typer.echo(f"nicplug: cannot read the tape {tape}: {exc.strerror or exc}", err=True)
        raise typer.Exit(2) from None
    try:
        with source:
            result = asyncio.run(Replay(
                settings, journal=journal, strict=strict, until=end).run(source))
    except TapeMalformed as exc:
        typer.echo(f"nicplug: {tape}: {exc}", err=True)
        raise typer.Exit(1) from None
    except JournalError as exc:
        typer.echo(f"nicplug: {exc}", err=True)
        raise typer.Exit(1) from None
    if json_output:
        sys.stdout.buffer.write(replay_json(result))
        sys.stdout.buffer.flush()
        for m in [*result.malformed, *result.backwards]:
            typer.echo(f"nicplug: {tape}: line {m.line}: {m.problem}", err=True)
    else:
        console = make_console()
        print_report(result, console)
    if compare_effects:
        differences = compare(result)
        for d in differences:
            typer.echo(f"effects differ: {d.describe()}", err=True)
        if differences:
            raise typer.Exit(1)
        typer.echo(f"effects agree with the tape's {len(result.taped)} EFFECT lines", err=True)


def _until(text: str | None) -> Until | None:
    from nicplug.adapters.core.replaying import Until
    from nicplug.adapters.tapes.times import parse_at, parse_duration

    if text is None:
        return None
    if text.startswith("+"):
        return Until(after=parse_duration(text[1:]))
    return Until(moment=parse_at(text))
