"""`nicplug sim serve`: the simulated cluster as a standalone server, for demos and
manual runs against `kubectl`.

It only translates options into the simulator's `Knobs` / `Fixtures` and runs
`SimulatedCluster` on the real clock until interrupted. The simulator is imported
lazily, inside the command, so the rest of the CLI never loads it.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from nicplug.adapters.cli.app import app

if TYPE_CHECKING:
    from nicplug.simulator.fixtures import Fixtures
    from nicplug.simulator.knobs import Knobs

sim_app = typer.Typer(
    name="sim", no_args_is_help=True,
    help="A simulated Kubernetes API server with KubeVirt and an SDN, to try nicplug and "
         "kubectl against (`nicplug dst` is the deterministic simulation testing).")
app.add_typer(sim_app, name="sim")

_DELAY = {"min": 0.0, "show_default": True}


@sim_app.command()
def serve(
    vms: Annotated[int, typer.Option(min=0, help="Running VMs to create.")] = 10,
    flavour: Annotated[str | None, typer.Option(
        help="Whose cluster: deckhouse, or kubevirt (upstream KubeVirt with multus), as "
             "`nicplug run --flavour`  [default: deckhouse]")] = None,
    dialect: Annotated[str | None, typer.Option(
        hidden=True, help="Deprecated: deckhouse | multus (= --flavour kubevirt).")] = None,
    kubevirt_api: Annotated[str | None, typer.Option(
        help="KubeVirt API served: upstream or deckhouse (default: the flavour's).")] = None,
    dynamic_networks: Annotated[bool, typer.Option(
        "--dynamic-networks/--no-dynamic-networks",
        help="Deploy the multus dynamic-networks controller (kubevirt only).")] = False,
    rollout_strategy: Annotated[str, typer.Option(
        help="vmRolloutStrategy of the KubeVirt CR: LiveUpdate or Stage.")] = "LiveUpdate",
    namespaces: Annotated[int, typer.Option(min=1, help="Namespaces ns-1..ns-N for the VMs "
                                            "(1 = 'default').")] = 1,
    port: Annotated[int, typer.Option(min=0, max=65535, help="0 picks a free port.")] = 0,
    kubeconfig: Annotated[Path | None, typer.Option(
        help="Where to write the kubeconfig (default: a temporary file).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of names and simulated failures.")] = 0,
    sdn_delay: Annotated[float, typer.Option(help="Seconds for the SDN to report.",
                                             **_DELAY)] = 0.5,
    sync_delay: Annotated[float, typer.Option(help="Seconds for KVVM→VMI sync.", **_DELAY)] = 0.0,
    attach_delay: Annotated[float, typer.Option(help="Seconds to attach/detach.", **_DELAY)] = 0.1,
    migration_duration: Annotated[float, typer.Option(help="Seconds per migration.",
                                                      **_DELAY)] = 2.0,
    restart_duration: Annotated[float, typer.Option(help="Seconds per restart.", **_DELAY)] = 1.0,
    mac_delay: Annotated[float, typer.Option(
        help="deckhouse: seconds before a VirtualMachineMACAddress gets its address.",
        **_DELAY)] = 0.2,
    migration_grace: Annotated[float, typer.Option(
        help="Seconds before MigrationRequired turns True.", **_DELAY)] = 15.0,
    fail_network: Annotated[list[str] | None, typer.Option(
        help="Network/<name> or ClusterNetwork/<name> the SDN always fails (repeatable).")
    ] = None,
    sdn_failure_rate: Annotated[float, typer.Option(
        min=0.0, max=1.0, help="Probability the SDN fails any other entry.")] = 0.0,
    fail_migrations: Annotated[bool, typer.Option(help="Every migration fails.")] = False,
    vm_network: Annotated[list[str] | None, typer.Option(
        help="Network/<name> or ClusterNetwork/<name> every VM starts with (repeatable).")
    ] = None,
    network: Annotated[list[str] | None, typer.Option(
        help="A Ready Network of this name in every namespace (repeatable; "
             "default: user-net).")
    ] = None,
    nad_namespace: Annotated[str, typer.Option(
        help="multus: the namespace of ClusterNetworks' NetworkAttachmentDefinitions.")
    ] = "default",
    native_hotplug: Annotated[bool | None, typer.Option(
        help="deckhouse: the virtualization controller hot-plugs networks itself (a "
             "release with it; the default) or not (an older one, for drive mode).")
    ] = None,
    kubeconfig_user: Annotated[str | None, typer.Option(
        help="The user the kubeconfig's requests are taken for, e.g. "
             "system:serviceaccount:nicplug-system:nicplug (deckhouse's admission policy "
             "judges it); default: a kube-system service account it admits.")
    ] = None,
) -> None:
    """Serve a simulated Kubernetes API with KubeVirt and SDN behaviour until Ctrl-C."""
    from nicplug.adapters.cli.flavours import dialect_of
    from nicplug.simulator.fixtures import Fixtures
    from nicplug.simulator.knobs import Delays, Failures, Knobs

    dialect = dialect_of(flavour, dialect)

    try:
        knobs = Knobs(
            dialect=dialect,  # type: ignore[arg-type]  # checked by Knobs
            dynamic_networks_controller=dynamic_networks,
            delays=Delays(sdn_configure=sdn_delay, kubevirt_sync=sync_delay,
                          attach=attach_delay, migration=migration_duration,
                          restart=restart_duration, mac_allocate=mac_delay),
            failures=Failures(sdn_networks=frozenset(fail_network or ()),
                              sdn_rate=sdn_failure_rate, migrations=fail_migrations),
            migration_required_grace=migration_grace,
            cluster_network_nad_namespace=nad_namespace,
            seed=seed,
            kubevirt_api=kubevirt_api,
            native_hotplug=native_hotplug,
        )
        names = ("default",) if namespaces == 1 else tuple(
            f"ns-{i}" for i in range(1, namespaces + 1))
        extra = tuple(_network_ref(ref) for ref in vm_network or ())
        fixtures = Fixtures(vms=vms, namespaces=names, vm_networks=extra,
                            networks=tuple(network or ("user-net",)),
                            rollout_strategy=rollout_strategy)  # type: ignore[arg-type]
    except ValueError as e:
        typer.echo(f"Error: {e}", err=True)
        raise typer.Exit(2) from e
    try:
        asyncio.run(_serve(knobs, fixtures, port, kubeconfig.resolve() if kubeconfig else None,
                           kubeconfig_user or None))
    except OSError as e:
        typer.echo(f"Error: cannot serve on 127.0.0.1:{port}: {e.strerror or e}", err=True)
        raise typer.Exit(1) from e


def _network_ref(ref: str) -> tuple[str, str]:
    type_, _, name = ref.partition("/")
    if type_ not in ("Network", "ClusterNetwork") or not name:
        raise ValueError(f"a VM network is Network/<name> or ClusterNetwork/<name>, not {ref!r}")
    return type_, name


async def _serve(knobs: Knobs, fixtures: Fixtures, port: int, kubeconfig: Path | None,
                 user: str | None = None) -> None:
    from nicplug.simulator.cluster import SimulatedCluster

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    cluster = SimulatedCluster(knobs, fixtures=fixtures, port=port,
                               kubeconfig_path=kubeconfig, kubeconfig_user=user)
    async with cluster:
        path = cluster.kubeconfig_path
        print(f"simulated cluster ({knobs.dialect}, {knobs.api} KubeVirt API, "
              f"{fixtures.vms} VMs) at {cluster.url}")
        print(f"kubeconfig: {path}")
        print(f"try: kubectl --kubeconfig {path} get pods -A")
        print("Ctrl-C to stop", flush=True)
        sys.stdout.flush()
        await stop.wait()
    print("stopped", flush=True)
