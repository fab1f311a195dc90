"""KubeVirt's admission of a new migration, as the simulated API server applies it.

KubeVirt's `migration-create-validator` webhook (virt-api, `MigrationCreateAdmitter`)
refuses a `VirtualMachineInstanceMigration` while another migration of the same VMI
has not finished (`EnsureNoMigrationConflict`: any migration of that VMI not
`Succeeded` or `Failed`), with a 400 whose message begins as the API server words a
webhook's denial. Admission runs before storage, so asking again for a migration that
exists and still runs is refused this way too, not answered `AlreadyExists`.
Never decides anything else about migrations (the actor runs them).
"""

from __future__ import annotations

from typing import Any

from nicplug.simulator import objects as ob
from nicplug.simulator.errors import BadRequest
from nicplug.simulator.resources import VMIMS, Resource
from nicplug.simulator.store import Store

WEBHOOK = "migration-create-validator.kubevirt.io"
FINISHED = ("Succeeded", "Failed")


def admit(store: Store, res: Resource, body: dict[str, Any]) -> None:
    """Raise `BadRequest` when KubeVirt's webhook would deny creating `body`."""
    if res is not VMIMS:
        return
    namespace = (body.get("metadata") or {}).get("namespace")
    vmi = ob.dig(body, "spec", "vmiName")
    migrations, _ = store.list_shared(VMIMS, namespace)
    for other in migrations:
        if ob.dig(other, "spec", "vmiName") != vmi:
            continue
        if ob.dig(other, "status", "phase") in FINISHED:
            continue
        raise BadRequest(
            f'admission webhook "{WEBHOOK}" denied the request: in-flight migration detected. '
            f"Active migration job ({other['metadata']['uid']}) is currently already in "
            f"progress for VMI {vmi}.")
