"""`nicplug record`: write a tape of every watched kind from a live API server.

Runs until `--duration` seconds have passed, or until interrupted (Ctrl-C / SIGTERM);
the tape keeps every line written either way. It only reads the cluster.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Annotated

import typer

from nicplug.adapters.cli.app import app
from nicplug.adapters.cli.run import duration_arg


@app.command()
def record(
    output: Annotated[Path, typer.Option("--output", "-o", help="The tape file to write")],
    kubeconfig: Annotated[
        Path | None, typer.Option(help="Kubeconfig file; default: in-cluster, then $KUBECONFIG")
    ] = None,
    duration: Annotated[
        float | None, typer.Option(
            parser=duration_arg, metavar="DURATION",
            help="How long to record: 30s, 5m, or seconds (default: until Ctrl-C)")
    ] = None,
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n",
                                 help="Record only this namespace (default: all)")
    ] = None,
    request_timeout: Annotated[
        float, typer.Option(min=0.1, help="Client read timeout per API request, seconds")
    ] = 30.0,
    kubevirt_api: Annotated[
        str, typer.Option(help="KubeVirt API the cluster serves: upstream | deckhouse")
    ] = "deckhouse",
) -> None:
    """Record every watched kind (lists, then watch events) to a tape."""
    from nicplug.adapters.kube.client import ClientConfigError
    from nicplug.adapters.kube.errors import KubeError
    from nicplug.adapters.kube.flavour import flavour_for
    from nicplug.adapters.tapes.recording import record_cluster

    try:
        flavour = flavour_for(kubevirt_api)
    except ValueError as exc:
        typer.echo(f"nicplug: --kubevirt-api: {exc}", err=True)
        raise typer.Exit(2) from None

    async def recording() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        return await record_cluster(
            output, flavour=flavour, kubeconfig=kubeconfig, namespace=namespace,
            duration=duration,
            request_timeout=request_timeout, stop=stop,
        )

    from nicplug.adapters.tapes.writer import TapeUnwritable

    try:
        lines = asyncio.run(recording())
    except TapeUnwritable as exc:
        typer.echo(f"nicplug: {exc}", err=True)
        raise typer.Exit(1) from None
    except OSError as exc:
        typer.echo(f"nicplug: cannot record to {output}: {exc.strerror or exc}", err=True)
        raise typer.Exit(1) from None
    except (ClientConfigError, KubeError) as exc:
        typer.echo(f"nicplug: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"recorded {lines} lines to {output}", err=True)
