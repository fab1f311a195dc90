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
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from pydantic import ValidationError

from nicplug.adapters.cli.app import app
from nicplug.engine.errors import JournalError

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _env(name: str) -> str:
    return "NICPLUG_" + name.upper().replace("-", "_")


def _seconds(value: str, option: str) -> float:
    from nicplug.adapters.queries import duration

    try:
        return duration(value)
    except ValueError as exc:
        raise typer.BadParameter(f"{option}: {exc}") from None


def _namespaces(value: str | None) -> tuple[str, ...]:
    """The scope's namespaces; not given: every one. A value given but naming none (an
    empty environment variable, `,,,`) or with an empty name in it is refused: a typo
    must not widen the controller's reach to the whole cluster."""
    if value is None:
        if os.environ.get(_env("namespaces")) != "":  # click reads an empty one as unset
            return ()
        value = ""
    names = tuple(n.strip() for n in value.split(","))
    if not any(names):
        usage_error(f"--namespaces: {value!r} names no namespace; leave the option out to "
                    "manage every namespace")
    if not all(names):
        usage_error(f"--namespaces: an empty name in {value!r}")
    return names


def _opt(name: str, help_: str) -> Any:
    return typer.Option(f"--{name}", envvar=_env(name), help=help_, show_default=True)


@app.command()
def run(
    kubeconfig: Annotated[
        Path | None, _opt("kubeconfig", "Kubeconfig file; default: in-cluster, then $KUBECONFIG")
    ] = None,
    journal: Annotated[Path, _opt("journal", "SQLite journal file")] = Path("nicplug-journal.db"),
    flavour: Annotated[str | None, _opt(
        "flavour", "deckhouse | kubevirt (upstream KubeVirt with multus)  [default: deckhouse]"
    )] = None,
    dialect: Annotated[str | None, _opt(
        "dialect", "Deprecated: deckhouse | multus (= --flavour kubevirt)")] = None,
    kubevirt_api: Annotated[str | None, _opt(
        "kubevirt-api", "KubeVirt API: upstream | deckhouse (default: the dialect's)"
    )] = None,
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
    namespace: Annotated[
        str | None, _opt("namespace", "Watch only this namespace (default: all)")
    ] = None,
    namespaces: Annotated[
        str | None, _opt("namespaces", "Manage VMs only in these namespaces, comma-separated "
                         "(default: all)")
    ] = None,
    vm_selector: Annotated[
        str, _opt("vm-selector", "Manage only VMs whose labels match this label selector "
                  "(default: all)")
    ] = "",
    metrics_addr: Annotated[
        str, _opt("metrics-addr", "HOST:PORT of /metrics, /healthz, /readyz")
    ] = "127.0.0.1:8080",
    sdn_ready_timeout: Annotated[
        float, _opt("sdn-ready-timeout", "Seconds to wait for the SDN per step")
    ] = 120.0,
    attach_timeout: Annotated[
        float, _opt("attach-timeout", "Seconds to wait for the guest to attach")
    ] = 120.0,
    detach_timeout: Annotated[
        float, _opt("detach-timeout", "Seconds to wait per unplug step")
    ] = 120.0,
    migration_timeout: Annotated[
        float, _opt("migration-timeout", "Seconds a migration may take")
    ] = 600.0,
    dynamic_networks_grace: Annotated[
        float, _opt("dynamic-networks-grace", "Changes nothing; accepted for old settings")
    ] = 15.0,
    effect_reissue_after: Annotated[
        float, _opt("effect-reissue-after", "Re-issue an effect when the world did not move")
    ] = 30.0,
    backoff_base: Annotated[float, _opt("backoff-base", "First retry delay of a failed op")] = 5.0,
    backoff_max: Annotated[float, _opt("backoff-max", "Longest retry delay")] = 300.0,
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
        float, _opt("renew-deadline", "Seconds the leader keeps trying to renew before it stops")
    ] = 10.0,
    retry_period: Annotated[
        float, _opt("retry-period", "Seconds between tries to acquire or renew the Lease")
    ] = 2.0,
    request_timeout: Annotated[
        float, _opt("request-timeout", "Client read timeout per API request, seconds")
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
    log_level: Annotated[str, _opt("log-level", "DEBUG | INFO | WARNING | ERROR")] = "INFO",
) -> None:
    """Run the controller: watch VMs and hot-plug/unplug their interfaces."""
    from nicplug.adapters.cli.flavours import dialect_of
    from nicplug.adapters.settings import Settings

    dialect = dialect_of(flavour, dialect)
    try:
        settings = Settings(
            kubeconfig=kubeconfig, journal=journal, dialect=dialect,
            kubevirt_api=kubevirt_api, gating=gating,
            migrations=migrations, max_migrations=max_migrations, namespace=namespace,
            metrics_addr=metrics_addr,
            namespaces=_namespaces(namespaces),
            vm_selector=vm_selector,
            sdn_ready_timeout=sdn_ready_timeout, attach_timeout=attach_timeout,
            detach_timeout=detach_timeout, migration_timeout=migration_timeout,
            dynamic_networks_grace=dynamic_networks_grace,
            effect_reissue_after=effect_reissue_after, backoff_base=backoff_base,
            backoff_max=backoff_max, cluster_network_namespace=cluster_network_namespace,
            lease_name=lease_name, lease_namespace=lease_namespace, identity=identity,
            lease_duration=lease_duration, renew_deadline=renew_deadline,
            retry_period=retry_period, request_timeout=request_timeout, synchronous=synchronous,
            record_tape=record_tape, retention=_seconds(retention, "--retention"),
            archive_dir=archive_dir,
        )
    except ValidationError as exc:
        usage_error(_explain(exc))
    level = logging.getLevelName(log_level.upper())
    if not isinstance(level, int):
        usage_error(f"--log-level: unknown level {log_level!r}")
    configure_logging(level)

    from nicplug.adapters.controller import run_controller
    from nicplug.adapters.journal_verdict import refused_at_start
    from nicplug.adapters.kube.client import ClientConfigError
    from nicplug.adapters.observability import MetricsAddressError
    from nicplug.adapters.tapes.writer import TapeUnwritable

    try:
        if settings.journal.is_file():  # before anything connects: verify's verdict
            refused = asyncio.run(refused_at_start(settings.journal))
            if refused is not None:
                raise refused
        asyncio.run(until_signalled(run_controller(settings)))
    except (JournalError, ClientConfigError, MetricsAddressError, TapeUnwritable) as exc:
        typer.echo(f"nicplug: {exc}", err=True)
        raise typer.Exit(1) from None


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


def configure_logging(level: int) -> None:
    """One line per record: time, level, logger, message (which names vm= and op=)."""
    logging.basicConfig(
        level=level,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
