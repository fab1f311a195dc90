"""`nicplug run`: the long-running controller.

Every option also comes from an environment variable `NICPLUG_<OPTION>` (upper case,
dashes as underscores), so a Deployment can configure it from a ConfigMap. Options are
validated before anything connects; a bad one is a one-line error and exit code 2.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from pydantic import ValidationError

from nicplug.adapters.cli.app import app
from nicplug.adapters.durations import parse_duration
from nicplug.adapters.log_lines import LOG_FORMATS, configure_logging
from nicplug.engine.errors import JournalError

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _env(name: str) -> str:
    return "NICPLUG_" + name.upper().replace("-", "_")


def duration_arg(value: str | float, option: str | None = None) -> float:
    """A duration option's value as typed (`durations.py`), or its default. Named
    (`option`), a value that is no duration is a usage error of one line."""
    if isinstance(value, int | float):
        return float(value)
    if option is None:
        return parse_duration(value)
    try:
        return parse_duration(value)
    except ValueError as exc:
        usage_error(f"--{option}: {exc}")


def _duration_of(option: str) -> Callable[[str | float], float]:
    return lambda value: duration_arg(value, option)


def _opt(name: str, help_: str) -> Any:
    return typer.Option(f"--{name}", envvar=_env(name), help=help_, show_default=True)


def _time(name: str, help_: str) -> Any:
    """An option that takes a duration: `30s`, `5m`, `1h30m`, or seconds."""
    return typer.Option(f"--{name}", envvar=_env(name), help=f"{help_} (30s, 5m, or seconds)",
                        show_default=True, parser=_duration_of(name), metavar="DURATION")


@app.command()
def run(
    kubeconfig: Annotated[
        Path | None, _opt("kubeconfig", "Kubeconfig file; default: in-cluster, then $KUBECONFIG")
    ] = None,
    journal: Annotated[str, _opt(
        "journal", "SQLite journal file, or a PostgreSQL DSN (postgresql://...)")
    ] = "nicplug-journal.db",
    journal_dsn: Annotated[str | None, _opt(
        "journal-dsn", "PostgreSQL journal DSN (from a Secret); replicas not leading follow it"
    )] = None,
    flavour: Annotated[str | None, _opt(
        "flavour", "deckhouse | kubevirt (upstream KubeVirt with multus)  [default: deckhouse]"
    )] = None,
    dialect: Annotated[str | None, _opt(
        "dialect", "Deprecated: deckhouse | multus (= --flavour kubevirt)")] = None,
    kubevirt_api: Annotated[str | None, _opt(
        "kubevirt-api", "KubeVirt API: upstream | deckhouse (default: the dialect's)"
    )] = None,
    mode: Annotated[str, _opt(
        "mode",
        "auto (ask the cluster whether the platform hot-plugs) | observe (follow the "
        "platform's hotplug, write only Events) | drive (write the pods and KVVMs: a "
        "Deckhouse release without native hotplug)",
    )] = "auto",
    gating: Annotated[
        str, _opt("gating", "rollout-strategy (obey vmRolloutStrategy) | always-live")
    ] = "rollout-strategy",
    migrations: Annotated[
        str, _opt(
            "migrations",
            "auto (create the migrations KubeVirt asks for) | opt-in (only for VMs labelled "
            "nicplug.io/migrations=true) | never (manual: the older spelling)",
        )
    ] = "auto",
    max_migrations: Annotated[
        int, _opt("max-migrations",
                  "At most this many of nicplug's migrations run at once, cluster-wide")
    ] = 5,
    migration_attempts: Annotated[
        int, _opt("migration-attempts",
                  "At most this many migrations of one network change fail (a backoff apart); "
                  "then it is Failed (MigrationFailed), not retried")
    ] = 3,
    namespace: Annotated[str | None, typer.Option(
        "--namespace", "-n", envvar=_env("namespace"), show_default=True,
        help="Manage VMs only in this namespace, or these (comma-separated); one namespace "
             "is also the only one watched (default: all)",
    )] = None,
    namespaces: Annotated[str | None, typer.Option(
        "--namespaces", envvar=_env("namespaces"), hidden=True,
        help="Deprecated: --namespace takes several, comma-separated")] = None,
    vm_selector: Annotated[
        str, _opt("vm-selector", "Manage only VMs whose labels match this label selector "
                  "(default: all)")
    ] = "",
    metrics_addr: Annotated[
        str, _opt("metrics-addr", "HOST:PORT of /metrics, /healthz, /readyz")
    ] = "127.0.0.1:8080",
    query_addr: Annotated[str, typer.Option(
        "--query-addr", "--query-address", envvar=_env("query-addr"), show_default=True,
        help="HOST:PORT of the read-only /operations views, apart from /metrics; loopback "
             "unless you mean every VM of every namespace to be readable there; '' for none",
    )] = "127.0.0.1:8081",
    sdn_ready_timeout: Annotated[
        float, _time(
            "sdn-ready-timeout", "How long to wait for the SDN per step")
    ] = 120.0,
    attach_timeout: Annotated[
        float, _time(
            "attach-timeout", "How long to wait for the guest to attach")
    ] = 120.0,
    detach_timeout: Annotated[
        float, _time(
            "detach-timeout", "How long to wait per unplug step")
    ] = 120.0,
    migration_timeout: Annotated[
        float, _time(
            "migration-timeout", "How long a migration may take")
    ] = 600.0,
    dynamic_networks_grace: Annotated[
        float, _time(
            "dynamic-networks-grace", "Changes nothing; accepted for old settings")
    ] = 15.0,
    effect_reissue_after: Annotated[
        float, _time(
            "effect-reissue-after", "Re-issue an effect when the world did not move")
    ] = 30.0,
    backoff_base: Annotated[float, _time(
            "backoff-base", "First retry delay of a failed op")] = 5.0,
    backoff_max: Annotated[float, _time(
            "backoff-max", "Longest retry delay")] = 300.0,
    cluster_network_namespace: Annotated[
        str, _opt("cluster-network-namespace", "multus: namespace of ClusterNetwork NADs")
    ] = "default",
    lease_name: Annotated[str, _opt("lease-name", "Leader-election Lease name")] = "nicplug",
    lease_namespace: Annotated[
        str, _opt("lease-namespace", "Leader-election Lease namespace")
    ] = "default",
    identity: Annotated[
        str | None, _opt("identity", "This replica's name in the Lease (default host-pid)")
    ] = None,
    lease_duration: Annotated[
        int, _opt("lease-duration", "Seconds a Lease lasts unrenewed; a standby waits it out")
    ] = 15,
    renew_deadline: Annotated[
        float, _time(
            "renew-deadline", "How long the leader keeps trying to renew before it stops")
    ] = 10.0,
    retry_period: Annotated[
        float, _time(
            "retry-period", "How often to try to acquire or renew the Lease")
    ] = 2.0,
    request_timeout: Annotated[
        float, _time(
            "request-timeout", "Client read timeout per API request")
    ] = 30.0,
    synchronous: Annotated[
        str, _opt("synchronous", "SQLite durability: FULL | NORMAL")
    ] = "FULL",
    record_tape: Annotated[
        Path | None, _opt("record-tape", "Record every watch event and effect to this tape")
    ] = None,
    retention: Annotated[str, _opt(
        "retention", "Archive the events of operations finished longer ago (30d, 12h)"
    )] = "30d",
    archive_dir: Annotated[
        Path | None, _opt("archive-dir", "Directory for archives (default: the journal's)")
    ] = None,
    created_objects_retention: Annotated[float, _time(
        "created-objects-retention", "Delete the finished migrations and VM operations "
        "nicplug created longer ago, once no live operation reads them (default: a day)"
    )] = 86400.0,
    operation_objects: Annotated[str, _opt(
        "operation-objects", "on: show each operation as a NetworkInterfaceOperation object "
        "(kubectl get nicops) | off: write none"
    )] = "on",
    log_level: Annotated[str, _opt("log-level", "DEBUG | INFO | WARNING | ERROR")] = "INFO",
    log_format: Annotated[str, _opt(
        "log-format", "text | json (one JSON object a line, with vm, operation, network, "
        "state as keys)")] = "text",
) -> None:
    """Run the controller: watch VMs and hot-plug/unplug their interfaces."""
    from nicplug.adapters.cli.flavours import dialect_of
    from nicplug.adapters.core.settings import Settings
    from nicplug.engine.locations import is_dsn

    dialect = dialect_of(flavour, dialect)
    if is_dsn(journal):
        journal_dsn, journal = journal, "nicplug-journal.db"
    if operation_objects not in ("on", "off"):
        usage_error(f"--operation-objects: on or off, not {operation_objects!r}")
    scope = namespace_scope(namespace, namespaces)
    try:
        settings = Settings(
            kubeconfig=kubeconfig, journal=Path(journal), journal_dsn=journal_dsn,
            dialect=dialect,
            kubevirt_api=kubevirt_api, mode=mode, gating=gating,
            migrations=migrations, max_migrations=max_migrations,
            migration_attempts=migration_attempts,
            namespace=scope[0] if len(scope) == 1 else None,
            metrics_addr=metrics_addr, query_addr=query_addr,
            namespaces=scope,
            vm_selector=vm_selector,
            sdn_ready_timeout=sdn_ready_timeout, attach_timeout=attach_timeout,
            detach_timeout=detach_timeout, migration_timeout=migration_timeout,
            dynamic_networks_grace=dynamic_networks_grace,
            effect_reissue_after=effect_reissue_after, backoff_base=backoff_base,
            backoff_max=backoff_max, cluster_network_namespace=cluster_network_namespace,
            lease_name=lease_name, lease_namespace=lease_namespace, identity=identity,
            lease_duration=lease_duration, renew_deadline=renew_deadline,
            retry_period=retry_period, request_timeout=request_timeout, synchronous=synchronous,
            record_tape=record_tape, retention=duration_arg(retention, "retention"),
            archive_dir=archive_dir, operation_objects=operation_objects == "on",
            created_objects_retention=created_objects_retention,
        )
    except ValidationError as exc:
        usage_error(_explain(exc))
    level = logging.getLevelName(log_level.upper())
    if not isinstance(level, int):
        usage_error(f"--log-level: unknown level {log_level!r}")
    if log_format not in LOG_FORMATS:
        usage_error(f"--log-format: expected text or json, got {log_format!r}")
    configure_logging(level, log_format)

    from nicplug.adapters.core.controller import run_controller
    from nicplug.adapters.core.observability import MetricsAddressError
    from nicplug.adapters.journal_verdict import refused_at_start
    from nicplug.adapters.kube.client import ClientConfigError
    from nicplug.adapters.tapes.writer import TapeUnwritable

    try:
        if settings.journal_dsn is None and settings.journal.is_file():  # verify's verdict, first
            refused = asyncio.run(refused_at_start(settings.journal))
            if refused is not None:
                raise refused
        asyncio.run(until_signalled(run_controller(settings)))
    except (JournalError, ClientConfigError, MetricsAddressError, TapeUnwritable) as exc:
        typer.echo(f"nicplug: {exc}", err=True)
        raise typer.Exit(1) from None


def namespace_scope(namespace: str | None, namespaces: str | None) -> tuple[str, ...]:
    """The namespaces `-n` (and the deprecated `--namespaces`) name, each once, in order;
    neither given: every namespace. A value given but naming none (`,,,`, an empty
    environment variable) or with an empty name in it is refused: a typo must not widen
    the controller's reach to the whole cluster."""
    if namespaces is not None:
        typer.echo("nicplug: --namespaces is deprecated: say --namespace (-n), which takes "
                   "several, comma-separated", err=True)
    names: list[str] = []
    for option, value in (("namespace", namespace), ("namespaces", namespaces)):
        if value is None and os.environ.get(_env(option)) == "":
            value = ""  # click reads an empty environment variable as unset
        if value is None:
            continue
        given = [n.strip() for n in value.split(",")]
        if not any(given):
            usage_error(f"--{option}: {value!r} names no namespace; leave the option out to "
                        "manage every namespace")
        if not all(given):
            usage_error(f"--{option}: an empty name in {value!r}")
        names += given
    return tuple(dict.fromkeys(names))


async def until_signalled(work: Coroutine[Any, Any, None]) -> None:
    """Run `work` until SIGTERM (the kubelet stopping the pod) or SIGINT, then cancel
    it: a clean stop, in which the controller closes its journal and releases its
    Lease. Returns normally after a signal; any other end of `work` is its own."""
    task = asyncio.ensure_future(work)
    loop = asyncio.get_running_loop()
    signalled: list[signal.Signals] = []

    def stop(sig: signal.Signals) -> None:
        signalled.append(sig)
        task.cancel()

    for sig in _STOP_SIGNALS:
        loop.add_signal_handler(sig, stop, sig)
    try:
        await task
    except asyncio.CancelledError:
        if not signalled:
            raise
        logging.getLogger(__name__).info("stopped by %s", signalled[0].name)
    finally:
        for sig in _STOP_SIGNALS:
            loop.remove_signal_handler(sig)


def usage_error(message: str) -> NoReturn:
    """A bad option: one line on stderr and exit code 2 (not a box: logs keep it whole)."""
    typer.echo(f"nicplug: {message}", err=True)
    raise typer.Exit(2)


def _explain(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        message = error["msg"].removeprefix("Value error, ")
        if not error["loc"]:  # a check across options names them itself
            parts.append(message)
            continue
        where = "--" + "-".join(str(p) for p in error["loc"]).replace("_", "-")
        parts.append(f"{where}: {message}")
    return "; ".join(parts)

