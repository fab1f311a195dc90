"""`kubectl nicplug status|history|explain|stuck`: the query commands from a laptop.

Installed as the `kubectl-nicplug` console script, which kubectl runs as its plugin
`nicplug` (kubectl finds `kubectl-<name>` on PATH). It reads the
`NetworkInterfaceOperation` objects nicplug writes, through the API server, with the
user's kubeconfig and so under the user's RBAC (`get`/`list` on
`networkinterfaceoperations.nicplug.io`, which the aggregated `view` role grants); it
never opens a journal. It prints with the CLI's own renderers and `--json` shapes, so
the two agree; what an object cannot say (the effects' later outcomes: they stay in the
journal) is the difference, and `explain` recomputes every time relative to now.
Never writes.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from nicplug.adapters.cli.explain import (
    DiagramFlag,
    operation_list_json,
    show_explanation,
    show_operation_list,
)
from nicplug.adapters.cli.history import FormatOption, history_json, picture_format, show_timelines
from nicplug.adapters.cli.pictures import operation_diagram, timeline
from nicplug.adapters.cli.querying import print_json
from nicplug.adapters.cli.status import show_operations, status_json
from nicplug.adapters.cli.stuck import show_stuck, stuck_json
from nicplug.adapters.kube.calls import KubeCalls
from nicplug.adapters.kube.client import ClientConfigError, ClientSettings, connect
from nicplug.adapters.kube.errors import KubeError
from nicplug.adapters.kube.resources import OPERATIONS
from nicplug.adapters.queries.operation_object import (
    NotAnOperation,
    explanation_of,
    summary_of,
    timeline_of,
)
from nicplug.adapters.queries.reading import choose
from nicplug.adapters.queries.records import OperationSummary
from nicplug.adapters.queries.selection import (
    BadSelection,
    direction_ref,
    duration,
    network_ref,
    state_ref,
    vm_ref,
)

plugin = typer.Typer(
    name="kubectl nicplug",
    help="nicplug's operations as the API server holds them (NetworkInterfaceOperation "
    "objects), read with your kubeconfig and your RBAC.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
)

Json = dict[str, Any]

Kubeconfig = Annotated[Path | None, typer.Option(
    "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")]
Context = Annotated[str | None, typer.Option("--context", help="kubeconfig context")]
Namespace = Annotated[str | None, typer.Option(
    "--namespace", "-n", help="Only this namespace (default: every namespace you may read)")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON (stable keys) for scripts")]


def _fail(message: str, code: int) -> NoReturn:
    typer.echo(f"kubectl nicplug: {message}", err=True)
    raise typer.Exit(code)


def _checked(parse: Any, value: str | None, option: str) -> Any:
    if value is None:
        return None
    try:
        return parse(value)
    except ValueError as error:
        _fail(f"{option}: {error}", 2)


def _read(kubeconfig: Path | None, context: str | None, namespace: str | None) -> list[Json]:
    """Every operation object in `namespace` (None: cluster-wide), read as the user."""

    async def reading() -> list[Json]:
        connection = await connect(ClientSettings(kubeconfig=kubeconfig, context=context))
        try:
            return await KubeCalls(connection).list_objects(OPERATIONS, namespace)
        finally:
            await connection.close()

    try:
        return asyncio.run(reading())
    except ClientConfigError as error:
        _fail(str(error), 1)
    except KubeError as error:
        where = f"in namespace {namespace}" if namespace else "cluster-wide"
        _fail(f"cannot list {OPERATIONS.name} {where}: {error}", 1)


def _summaries(objects: list[Json]) -> list[OperationSummary]:
    try:
        found = [summary_of(o) for o in objects]
    except (NotAnOperation, ValueError) as error:
        _fail(str(error), 1)
    return sorted(found, key=lambda o: (o.vm, o.network, o.direction, o.attempt))


def _where(namespace: str | None) -> str:
    return f"namespace {namespace}" if namespace else "the cluster"


def _vm_namespace(vm: str) -> str:
    return vm.partition("/")[0]


@plugin.command()
def status(
    vm: Annotated[str | None, typer.Option("--vm", help="Only this VM (NS/NAME)")] = None,
    state: Annotated[str | None, typer.Option("--state", help="Only operations in state S")] = None,
    network: Annotated[
        str | None, typer.Option("--network", help="Only this network (Main, TYPE/NAME)")
    ] = None,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    json_: JsonFlag = False,
) -> None:
    """List interface operations and their states."""
    vm = _checked(vm_ref, vm, "--vm")
    state = _checked(state_ref, state, "--state")
    network = _checked(network_ref, network, "--network")
    namespace = namespace or (_vm_namespace(vm) if vm else None)
    found = [op for op in _summaries(_read(kubeconfig, context, namespace))
             if (vm is None or op.vm == vm) and (state is None or op.state == state)
             and (network is None or op.network == network)]
    if json_:
        print_json(status_json(found))
        return
    show_operations(found, where=_where(namespace), how=f"read from {OPERATIONS.name}")


@plugin.command()
def history(
    vm: Annotated[str, typer.Argument(help="The VM, NS/NAME")],
    network: Annotated[
        str | None, typer.Option("--network", help="Only this network (Main, TYPE/NAME)")
    ] = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    json_: JsonFlag = False,
    format_: FormatOption = "table",
) -> None:
    """Show each operation of a VM: its steps with their times and causes."""
    _checked(vm_ref, vm, "NS/NAME")
    format_ = _checked(picture_format, format_, "--format")
    network = _checked(network_ref, network, "--network")
    objects = [o for o in _read(kubeconfig, context, _vm_namespace(vm))
               if summary_of(o).vm == vm and (network is None or summary_of(o).network == network)]
    lines = sorted((timeline_of(o) for o in objects),
                   key=lambda t: (t.operation.network, t.operation.direction,
                                  t.operation.attempt))
    if json_:
        print_json(history_json(vm, lines))
        return
    if format_ == "mermaid":
        typer.echo(timeline(vm, lines, now=time.time()), nl=False)
        return
    show_timelines(lines, empty=f"no operations of {vm} in {_where(_vm_namespace(vm))}")


@plugin.command()
def explain(
    vm: Annotated[str, typer.Argument(help="The VM, NS/NAME")],
    network: Annotated[
        str | None, typer.Argument(help="The network (Main, TYPE/NAME); none: list the VM's "
                                        "operations")
    ] = None,
    direction: Annotated[
        str | None, typer.Option("--direction", help="plug | unplug | update")
    ] = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    json_: JsonFlag = False,
    diagram: DiagramFlag = False,
) -> None:
    """Explain an operation of a VM: its state, what it waits for, its timers."""
    _checked(vm_ref, vm, "NS/NAME")
    network = _checked(network_ref, network, "NETWORK")
    direction = _checked(direction_ref, direction, "--direction")
    now = time.time()
    objects = {summary_of(o).id: o for o in _read(kubeconfig, context, _vm_namespace(vm))}
    mine = [op for op in _summaries(list(objects.values())) if op.vm == vm
            and (direction is None or op.direction == direction)]
    if network is None:  # as `nicplug explain NS/NAME`: the operations to explain
        if diagram:
            _fail("--diagram draws one operation: give NS/NAME NETWORK", 2)
        if json_:
            print_json(operation_list_json(vm, mine))
            return
        if not mine:
            _fail(f"no operation of {vm} in {_where(_vm_namespace(vm))}", 1)
        show_operation_list(vm, mine, now, command="kubectl nicplug explain")
        return
    try:
        chosen = choose(vm, network, [op for op in mine if op.network == network])
    except BadSelection as error:
        _fail(str(error), 2)
    if chosen is None:
        _fail(f"no operation of {vm} {network} in {_where(_vm_namespace(vm))}", 1)
    explained = explanation_of(objects[chosen], now=now)
    if diagram:
        typer.echo(operation_diagram(explained.operation), nl=False)
        return
    if json_:
        print_json(explained.to_json())
        return
    show_explanation(explained)


@plugin.command()
def stuck(
    older_than: Annotated[
        str, typer.Option("--older-than", help="How long without moving: 30s, 5m, 1h, 1h30m")
    ] = "5m",
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    json_: JsonFlag = False,
) -> None:
    """List live operations whose last step is older than a duration."""
    seconds = _checked(duration, older_than, "--older-than")
    now = time.time()
    found = sorted((op for op in _summaries(_read(kubeconfig, context, namespace))
                    if not op.terminal and op.entered_at < now - seconds),
                   key=lambda o: (o.entered_at, o.vm, o.network, o.direction, o.attempt))
    if json_:
        print_json(stuck_json(found, seconds, now))
        return
    show_stuck(found, seconds, now, hint="see why with: kubectl nicplug explain NS/NAME")


def main() -> None:
    plugin()
