"""A restart through Deckhouse's VirtualMachineOperations, over HTTP against the
simulated API server serving Deckhouse's names: one `Stop` and one `Start` per VMI,
named so that a retry finds its own, never a VMI deleted or a KVVM's run strategy
touched by nicplug."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from nicplug.adapters.core.executor import KubeExecutor, vm_operation_name
from nicplug.adapters.kube.calls import KubeCalls
from nicplug.adapters.kube.client import ApiConnection, ClientSettings, connect
from nicplug.adapters.kube.flavour import DECKHOUSE, UPSTREAM
from nicplug.adapters.kube.resources import (
    VMOP_RESTART_AFTER_ANNOTATION,
    VMOP_RESTART_FOR_ANNOTATION,
    VMOP_RESTART_NUMBER_ANNOTATION,
    VMOP_VMI_UID_ANNOTATION,
)
from nicplug.adapters.kube.translate import records
from nicplug.adapters.kube.translate.objects import VMOPObject
from nicplug.adapters.sdn import dialect_for
from nicplug.engine.errors import PermanentError, RetryAfterObservation, TemporaryError
from nicplug.machines.effects import RestartVM
from nicplug.simulator.fixtures import kvvm_for
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.resources import KVVMS, NAMESPACES, VMIS, VMOPS
from tests.kube.conftest import ApiServer, ServerFactory
from tests.kube.test_executor_order import pending


@pytest.fixture
async def deckhouse_server(start_server: ServerFactory) -> ApiServer:
    server = await start_server(api="deckhouse")
    server.store.create(NAMESPACES, {"metadata": {"name": "ns1"}})
    server.store.create(KVVMS, kvvm_for(Knobs(dialect="deckhouse"), "ns1", "vm", ()))
    return server


@pytest.fixture
async def deckhouse_connection(deckhouse_server: ApiServer) -> AsyncIterator[ApiConnection]:
    conn = await connect(ClientSettings(kubeconfig=deckhouse_server.kubeconfig, read_timeout=5))
    yield conn
    await conn.close()


def executor(connection: ApiConnection) -> KubeExecutor:
    return KubeExecutor(KubeCalls(connection), dialect_for("deckhouse"), flavour=DECKHOUSE)


def stop(uid: str) -> RestartVM:
    return RestartVM("ns1", "vm", uid, "halt", by="operation")


def start(uid: str) -> RestartVM:
    return RestartVM("ns1", "vm", uid, "start", by="operation")


def operations(server: ApiServer) -> list[tuple[str, str, str, str]]:
    items, _ = server.store.list(VMOPS, "ns1")
    return [(o["metadata"]["name"], o["spec"]["type"], o["spec"]["virtualMachineName"],
             o["metadata"]["annotations"][VMOP_VMI_UID_ANNOTATION]) for o in items]


async def test_a_stop_is_one_operation_for_the_vmi_seen_and_a_retry_finds_it(
    deckhouse_server: ApiServer, deckhouse_connection: ApiConnection
) -> None:
    store = deckhouse_server.store
    vmi = store.create(VMIS, {"metadata": {"name": "vm", "namespace": "ns1"}})
    uid = vmi["metadata"]["uid"]
    run = executor(deckhouse_connection)

    assert (await run.execute(pending(1, stop("another-vmi"))))["stopped"] is False
    assert operations(deckhouse_server) == []

    assert (await run.execute(pending(2, stop(uid))))["created"] is True
    again = await run.execute(pending(3, stop(uid)))  # a retry, a new leader
    assert again["created"] is False
    name = vm_operation_name("vm", uid, "Stop")
    assert operations(deckhouse_server) == [(name, "Stop", "vm", uid)]
    made = store.get(VMOPS, "ns1", name)
    assert made["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "nicplug"}
    writes = [r for r in deckhouse_server.requests if r.verb not in ("get", "list", "watch")]
    assert {(r.verb, r.resource) for r in writes} == {("create", "virtualmachineoperations")}


async def test_an_operation_of_that_name_not_nicplugs_for_that_step_is_refused(
    deckhouse_server: ApiServer, deckhouse_connection: ApiConnection
) -> None:
    store = deckhouse_server.store
    vmi = store.create(VMIS, {"metadata": {"name": "vm", "namespace": "ns1"}})
    uid = vmi["metadata"]["uid"]
    store.create(VMOPS, {"apiVersion": VMOPS.api_version, "kind": VMOPS.kind,
                         "metadata": {"name": vm_operation_name("vm", uid, "Stop"),
                                      "namespace": "ns1"},
                         "spec": {"type": "Restart", "virtualMachineName": "vm"}})
    with pytest.raises(PermanentError, match="is not nicplug's Stop"):
        await executor(deckhouse_connection).execute(pending(1, stop(uid)))


async def test_a_start_only_while_no_vmi_runs(
    deckhouse_server: ApiServer, deckhouse_connection: ApiConnection
) -> None:
    store = deckhouse_server.store
    vmi = store.create(VMIS, {"metadata": {"name": "vm", "namespace": "ns1"}})
    uid = vmi["metadata"]["uid"]
    run = executor(deckhouse_connection)
    with pytest.raises(RetryAfterObservation, match="runs again"):
        await run.execute(pending(1, start(uid)))
    assert operations(deckhouse_server) == []

    store.delete(VMIS, "ns1", "vm")  # Deckhouse ran the Stop
    assert (await run.execute(pending(2, start(uid))))["created"] is True
    assert (await run.execute(pending(3, start(uid))))["created"] is False
    assert operations(deckhouse_server) == [
        (vm_operation_name("vm", uid, "Start"), "Start", "vm", uid)]
    kvvm = store.get(KVVMS, "ns1", "vm")
    assert kvvm["spec"]["runStrategy"] == "Manual"  # the platform's, untouched


async def test_an_api_without_vm_operations_cannot_restart_by_them(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    run = KubeExecutor(KubeCalls(connection), dialect_for("deckhouse"), flavour=UPSTREAM)
    with pytest.raises(PermanentError, match="no VirtualMachineOperations"):
        await run.execute(pending(1, stop("u")))


async def test_a_stop_names_the_operations_its_restart_is_for_and_reads_back_with_them(
    deckhouse_server: ApiServer, deckhouse_connection: ApiConnection
) -> None:
    """So that once the user takes the VM back from the restart, nicplug does not stop it
    again for the same change (`World.taken_back`)."""
    store = deckhouse_server.store
    uid = store.create(VMIS, {"metadata": {"name": "vm", "namespace": "ns1"}})["metadata"]["uid"]
    streams = ("vm-uid/ClusterNetwork/storage/plug/1", "vm-uid/Network/user-net/plug/1")
    halt = RestartVM("ns1", "vm", uid, "halt", by="operation", for_streams=streams, number=3,
                     after=("d8-restart-a", "d8-restart-b"))
    assert RestartVM.from_payload(halt.to_payload()) == halt
    assert "for" not in stop(uid).to_payload()  # not said: as payloads were before
    assert "number" not in stop(uid).to_payload() and "after" not in stop(uid).to_payload()
    await executor(deckhouse_connection).execute(pending(1, halt))
    made = store.get(VMOPS, "ns1", vm_operation_name("vm", uid, "Stop"))
    assert made["metadata"]["annotations"][VMOP_RESTART_FOR_ANNOTATION] == ",".join(streams)
    assert made["metadata"]["annotations"][VMOP_RESTART_NUMBER_ANNOTATION] == "3"
    assert made["metadata"]["annotations"][VMOP_RESTART_AFTER_ANNOTATION] == (
        "d8-restart-a,d8-restart-b")
    read = records.vm_operation(VMOPObject.model_validate(made))
    assert read is not None and read.for_streams == streams and read.number == 3
    assert read.after == ("d8-restart-a", "d8-restart-b")


async def test_a_stop_made_for_other_operations_names_those_that_join_it(
    deckhouse_server: ApiServer, deckhouse_connection: ApiConnection
) -> None:
    """A change replaced in the instant its restart was asked (storage reverted, user-net
    added): the second halt of the same VMI finds the first one's `Stop`, which stops the
    VM for user-net as well, and now says so (seed 28623: else a user's start took the
    VM back from a restart that was not user-net's, and nicplug stopped it again)."""
    store = deckhouse_server.store
    uid = store.create(VMIS, {"metadata": {"name": "vm", "namespace": "ns1"}})["metadata"]["uid"]
    storage, user = "vm-uid/ClusterNetwork/storage/plug/1", "vm-uid/Network/user-net/plug/1"
    run = executor(deckhouse_connection)
    halt = RestartVM("ns1", "vm", uid, "halt", by="operation", for_streams=(storage,), number=1)
    assert (await run.execute(pending(1, halt)))["created"] is True
    joining = RestartVM("ns1", "vm", uid, "halt", by="operation", for_streams=(user,), number=1)
    assert (await run.execute(pending(2, joining)))["created"] is False
    made = store.get(VMOPS, "ns1", vm_operation_name("vm", uid, "Stop"))
    assert made["metadata"]["annotations"][VMOP_RESTART_FOR_ANNOTATION] == f"{storage},{user}"
    version = made["metadata"]["resourceVersion"]
    assert (await run.execute(pending(3, joining)))["created"] is False  # a retry: unchanged
    assert store.get(VMOPS, "ns1", vm_operation_name("vm", uid, "Stop"))[
        "metadata"]["resourceVersion"] == version
    # a Stop that names no operation (made before restarts named them) is left as it is
    plain = store.create(VMIS, {"metadata": {"name": "vm2", "namespace": "ns1"}})
    other = plain["metadata"]["uid"]
    await run.execute(pending(4, RestartVM("ns1", "vm2", other, "halt", by="operation")))
    await run.execute(pending(5, RestartVM("ns1", "vm2", other, "halt", by="operation",
                                           for_streams=(user,))))
    assert VMOP_RESTART_FOR_ANNOTATION not in store.get(
        VMOPS, "ns1", vm_operation_name("vm2", other, "Stop"))["metadata"]["annotations"]


async def test_a_halt_decided_before_its_restarts_stop_was_seen_asks_none_again(
    deckhouse_server: ApiServer, deckhouse_connection: ApiConnection
) -> None:
    """The VMI replaced (its pod died) between the halt's decision and its `Stop`: that
    `Stop` stops the new VMI too. The new VMI's halt, decided from a world that had not
    seen that `Stop` (same number), asks none of its own, which would stop the VMI the
    user started since (seed 40374); it names its operations on the one made. One
    carrying a later number asks again."""
    store = deckhouse_server.store
    first = store.create(VMIS, {"metadata": {"name": "vm", "namespace": "ns1"}})["metadata"]["uid"]
    storage, user = "vm-uid/ClusterNetwork/storage/plug/1", "vm-uid/Network/user-net/plug/1"
    run = executor(deckhouse_connection)
    halt = RestartVM("ns1", "vm", first, "halt", by="operation", for_streams=(storage,), number=2)
    assert (await run.execute(pending(1, halt)))["created"] is True
    store.delete(VMIS, "ns1", "vm")
    second = store.create(VMIS, {"metadata": {"name": "vm", "namespace": "ns1"}})["metadata"]["uid"]
    stale = RestartVM("ns1", "vm", second, "halt", by="operation", for_streams=(user,), number=2)
    outcome = await run.execute(pending(2, stale))
    assert outcome["stopped"] is False
    assert vm_operation_name("vm", first, "Stop") in str(outcome["reason"])
    assert store.peek(VMOPS, "ns1", vm_operation_name("vm", second, "Stop")) is None
    made = store.get(VMOPS, "ns1", vm_operation_name("vm", first, "Stop"))
    assert made["metadata"]["annotations"][VMOP_RESTART_FOR_ANNOTATION] == f"{storage},{user}"
    later = RestartVM("ns1", "vm", second, "halt", by="operation", for_streams=(user,), number=3)
    assert (await run.execute(pending(3, later)))["created"] is True


async def test_a_404_on_naming_operations_on_a_stop_just_read_is_retried_not_decided_again(
    deckhouse_server: ApiServer, deckhouse_connection: ApiConnection
) -> None:
    """The server answers 404 to the patch that names the joining operations on the `Stop`
    it has just listed. Decided again, the next world still holds the `Stop` and asks for
    the same halt at once, as often as the VM's objects change (as seeds 21075 and 56874
    showed for a condition and a pod): the patch is retried with backoff instead (its
    retry reads the `Stop` afresh), and lands once the server answers."""
    store = deckhouse_server.store
    uid = store.create(VMIS, {"metadata": {"name": "vm", "namespace": "ns1"}})["metadata"]["uid"]
    storage, user = "vm-uid/ClusterNetwork/storage/plug/1", "vm-uid/Network/user-net/plug/1"
    run = executor(deckhouse_connection)
    halt = RestartVM("ns1", "vm", uid, "halt", by="operation", for_streams=(storage,), number=1)
    assert (await run.execute(pending(1, halt)))["created"] is True
    joining = RestartVM("ns1", "vm", uid, "halt", by="operation", for_streams=(user,), number=1)
    deckhouse_server.faults.fail_requests(404, verb="patch", resource="virtualmachineoperations")

    with pytest.raises(TemporaryError, match="404") as raised:
        await run.execute(pending(2, joining))
    assert not isinstance(raised.value, RetryAfterObservation)
    name = vm_operation_name("vm", uid, "Stop")
    assert store.get(VMOPS, "ns1", name)["metadata"]["annotations"][
        VMOP_RESTART_FOR_ANNOTATION] == storage
    assert (await run.execute(pending(2, joining)))["created"] is False
    assert store.get(VMOPS, "ns1", name)["metadata"]["annotations"][
        VMOP_RESTART_FOR_ANNOTATION] == f"{storage},{user}"


async def test_a_404_on_reading_back_a_stop_that_exists_is_retried_not_decided_again(
    deckhouse_server: ApiServer, deckhouse_connection: ApiConnection
) -> None:
    """The server refuses the `Stop`'s create as existing, then answers its read 404: the
    operation was there a moment ago (deleted since, or the server answering amiss), so
    the same effect is retried with backoff, not decided again from a world that still
    holds it (which asks for the same halt at once). The retry creates it if it is gone."""
    store = deckhouse_server.store
    uid = store.create(VMIS, {"metadata": {"name": "vm", "namespace": "ns1"}})["metadata"]["uid"]
    run = executor(deckhouse_connection)
    assert (await run.execute(pending(1, stop(uid))))["created"] is True
    deckhouse_server.faults.fail_requests(404, verb="get", resource="virtualmachineoperations")

    with pytest.raises(TemporaryError, match="404") as raised:
        await run.execute(pending(2, stop(uid)))
    assert not isinstance(raised.value, RetryAfterObservation)
    assert (await run.execute(pending(2, stop(uid))))["created"] is False
    store.delete(VMOPS, "ns1", vm_operation_name("vm", uid, "Stop"))
    assert (await run.execute(pending(3, stop(uid))))["created"] is True
    assert operations(deckhouse_server) == [
        (vm_operation_name("vm", uid, "Stop"), "Stop", "vm", uid)]
