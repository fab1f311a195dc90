"""A migration nicplug asks for while the VMI migrates already.

KubeVirt's migration-create webhook refuses a second unfinished migration of a VMI
(400, "in-flight migration detected"), also for a migration of the same name that still
runs (admission answers before storage). The decision that asked for it read "no
migration running", which no longer holds: the effect is decided again, never a
rejection that fails the plug.
"""

from __future__ import annotations

import pytest

from nicplug.adapters.core.executor import KubeExecutor
from nicplug.adapters.kube.calls import KubeCalls
from nicplug.adapters.kube.client import ApiConnection
from nicplug.adapters.kube.flavour import UPSTREAM
from nicplug.adapters.sdn import dialect_for
from nicplug.engine.errors import PermanentError, RetryAfterObservation
from nicplug.machines.effects import CreateMigration
from nicplug.simulator.resources import NAMESPACES, VMIMS
from tests.kube.conftest import ApiServer
from tests.kube.test_executor_order import pending


def migration(name: str, phase: str | None = None) -> dict[str, object]:
    body: dict[str, object] = {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": name, "namespace": "ns1"}, "spec": {"vmiName": "vm"},
    }
    if phase is not None:
        body["status"] = {"phase": phase}
    return body


async def test_a_migration_refused_because_the_vmi_migrates_already_is_decided_again(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    api_server.store.create(NAMESPACES, {"metadata": {"name": "ns1"}})
    api_server.store.create(VMIMS, migration("users-own", "Running"))
    executor = KubeExecutor(KubeCalls(connection), dialect_for("multus"), flavour=UPSTREAM)

    with pytest.raises(RetryAfterObservation, match="in-flight migration detected") as raised:
        await executor.execute(pending(1, CreateMigration("ns1", "vm", "nicplug-vm-1")))
    assert not isinstance(raised.value, PermanentError)
    names = {m["metadata"]["name"] for m in api_server.store.list(VMIMS, "ns1")[0]}
    assert names == {"users-own"}


async def test_a_migration_is_created_once_the_others_have_finished(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    api_server.store.create(NAMESPACES, {"metadata": {"name": "ns1"}})
    api_server.store.create(VMIMS, migration("users-own", "Failed"))
    executor = KubeExecutor(KubeCalls(connection), dialect_for("multus"), flavour=UPSTREAM)

    result = await executor.execute(pending(1, CreateMigration("ns1", "vm", "nicplug-vm-1")))
    assert result == {"created": True}
