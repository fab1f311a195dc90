"""Which world nicplug is in, read from the cluster (`--mode auto`), and a refusal by
Deckhouse's admission policy shown at once as what it is, not retried as a lost race."""

from __future__ import annotations

import aiohttp

from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.identity import service_account
from nicplug.simulator.knobs import Knobs
from tests.integration.conftest import QUICK, eventually

VM = "default/vm-00000"
NICPLUG = service_account("nicplug-system", "nicplug")


async def _readyz(url: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(url + "/readyz") as response:
        return await response.text()


async def test_auto_observes_a_release_that_hot_plugs(start_cluster, start_controller) -> None:
    cluster = await start_cluster(Knobs(dialect="deckhouse", native_hotplug=True, delays=QUICK))
    ctl = await start_controller(cluster, mode="auto")
    assert ctl.controller.mode is not None
    assert (ctl.controller.mode.mode, ctl.controller.mode.source) == ("observe", "clusterrole")
    assert await ctl.metric("nicplug_mode_info", mode="observe", flavour="deckhouse",
                            source="clusterrole") == 1
    assert "ready: observe mode (clusterrole:" in await _readyz(ctl.metrics_url)
    reads = [r for r in cluster.requests if r.resource == "clusterroles"]
    assert [(r.verb, r.name) for r in reads] == [
        ("get", "d8:virtualization:virtualization-controller")]


async def test_auto_drives_a_release_without_native_hotplug(start_cluster, start_controller):
    cluster = await start_cluster(Knobs(dialect="deckhouse", native_hotplug=False, delays=QUICK))
    ctl = await start_controller(cluster, mode="auto")
    assert ctl.controller.mode is not None
    assert ctl.controller.mode.mode == "drive"
    assert "lacks" in ctl.controller.mode.why
    assert await ctl.metric("nicplug_mode_info", mode="drive", flavour="deckhouse",
                            source="clusterrole") == 1


async def test_the_kubevirt_flavour_observes_without_asking(start_cluster, start_controller):
    cluster = await start_cluster(Knobs(dialect="multus", delays=QUICK))
    ctl = await start_controller(cluster, mode="auto")
    assert ctl.controller.mode is not None
    assert (ctl.controller.mode.mode, ctl.controller.mode.source) == ("observe", "flavour")
    assert not [r for r in cluster.requests if r.resource == "clusterroles"]


async def test_a_refused_kvvm_write_is_a_permanent_error_not_a_retry_loop(
    start_cluster, start_controller, user_of, tmp_path
) -> None:
    # an older release (nicplug drives), nicplug deployed as `nicplug-system:nicplug`,
    # which Deckhouse's admission policy does not admit to the internal groups
    cluster = await start_cluster(Knobs(dialect="deckhouse", native_hotplug=False,
                                        delays=QUICK), Fixtures(vms=1))
    config = cluster.write_kubeconfig(tmp_path / "nicplug.kubeconfig", user=NICPLUG)
    ctl = await start_controller(cluster, kubeconfig=config, mode="drive", backoff_base=300.0)

    await user_of(cluster).add_network(VM, "Network", "user-net")
    op = await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})

    assert (op.state, op.reason) == ("Failed", "PatchRejected")
    assert "Operation forbidden for this user." in op.message
    assert "virtualization-restricted-access-policy" in op.message
    kvvm_writes = [r for r in cluster.requests
                   if r.username == NICPLUG and r.verb == "patch"
                   and r.resource == "internalvirtualizationvirtualmachines"]
    assert len(kvvm_writes) == 1  # refused once, not retried as a lost compare-and-swap
    explained = await ctl.journal.explain(op.stream)
    assert "PatchRejected" in explained and "Operation forbidden for this user." in explained
    await eventually(lambda: any(
        e.get("type") == "Warning" and "Operation forbidden" in str(e.get("message"))
        for e in cluster.events(reason="PlugFailed")), what="the Warning Event")
    assert await ctl.metric("nicplug_effects_refused_total", type="PatchVirtualMachine",
                            code="422") == 1


async def test_drive_restarts_an_always_on_vm_with_a_restart_operation(
    start_cluster, start_controller, user_of
) -> None:
    # Deckhouse refuses to Stop a runPolicy AlwaysOn VM but runs a Restart
    # (vmop/powerstate/internal/service/restart.go against stop.go)
    from nicplug.simulator.resources import VMOPS, VMS

    cluster = await start_cluster(Knobs(dialect="deckhouse", native_hotplug=False,
                                        delays=QUICK), Fixtures(vms=1, rollout_strategy="Stage"))
    ctl = await start_controller(cluster, mode="drive")
    user = user_of(cluster)
    await user.patch_vm(VM, {"spec": {"runPolicy": "AlwaysOn"}})
    await user.set_approval(VM, "Automatic")
    await user.add_network(VM, "Network", "user-net")
    op = await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})

    assert (op.state, op.reason) == ("Attached", None)
    assert await ctl.journal.path_of(op.stream) == [
        "Requested", "RestartRequired", "VMIPatched", "Attached"]
    made, _ = cluster.store.list(VMOPS, "default")
    # Restarts only (a Stop would be refused), one per VMI at most: Deckhouse stops and
    # starts at once, and a new VMI up before the change was written is restarted again
    assert made and {o["spec"]["type"] for o in made} == {"Restart"}
    restarted = [o["metadata"]["annotations"]["nicplug.io/restart-of-vmi"] for o in made]
    assert len(set(restarted)) == len(restarted)
    assert cluster.store.get(VMS, "default", "vm-00000")["spec"]["runPolicy"] == "AlwaysOn"


async def test_drive_as_the_overlays_identity_is_admitted(
    start_cluster, start_controller, user_of
) -> None:
    # the scenario suite runs a Deckhouse world's nicplug as this identity
    # (conftest.DRIVE_IDENTITY); here it is checked that the policy judged its writes
    from tests.integration.conftest import DRIVE_IDENTITY

    cluster = await start_cluster(Knobs(dialect="deckhouse", native_hotplug=False,
                                        delays=QUICK), Fixtures(vms=1))
    ctl = await start_controller(cluster, mode="auto")
    await user_of(cluster).add_network(VM, "Network", "user-net")
    op = await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached", "Failed"})

    assert (op.state, op.reason) == ("Attached", None)
    kvvm_writes = [r for r in cluster.requests if r.verb == "patch"
                   and r.resource == "internalvirtualizationvirtualmachines"]
    assert kvvm_writes and {r.username for r in kvvm_writes} == {DRIVE_IDENTITY}
