"""`migrations-per-operation`: the simulation fails a run in which more migrations a
replica created for one operation failed than `--migration-attempts` allows; the count
starts afresh after a user edit of the VM, and other migrations do not count."""

from __future__ import annotations

from typing import Any

from nicplug.adapters.kube.resources import OPERATION_ANNOTATION
from nicplug.adapters.simulation.invariants import Watchman
from nicplug.simulator.resources import VMIMS
from nicplug.simulator.store import Store
from nicplug.simulator.watching import Change

STREAM = "uid1/Network/user-net/plug"


def _migration(name: str, phase: str, stream: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns1", "uid": name}
    if stream is not None:
        meta["annotations"] = {OPERATION_ANNOTATION: stream}
    return {"metadata": meta, "spec": {"vmiName": "vm1"}, "status": {"phase": phase}}


def _fails(watchman: Watchman, name: str, stream: str | None) -> None:
    running = _migration(name, "Running", stream)
    watchman.on_change(Change(1, VMIMS, "MODIFIED", _migration(name, "Failed", stream), running))
    # seen again, Failed already: not counted twice
    failed = _migration(name, "Failed", stream)
    watchman.on_change(Change(2, VMIMS, "MODIFIED", failed, failed))


def found(watchman: Watchman) -> list[str]:
    return [v.detail for v in watchman.violations if v.invariant == "migrations-per-operation"]


def test_more_failed_migrations_of_one_operation_than_the_cap_is_a_violation() -> None:
    watchman = Watchman(Store(), "multus", ("nicplug-system", "nicplug"), lambda: 0.0)
    assert watchman.migration_count.cap == 3
    for attempt in (1, 2, 3):
        _fails(watchman, f"m{attempt}", f"{STREAM}/{attempt}")
    _fails(watchman, "user-migration-1", None)  # not the controller's
    _fails(watchman, "other", "uid1/Network/other-net/plug/1")
    assert found(watchman) == []
    _fails(watchman, "m4", f"{STREAM}/4")
    assert found(watchman) == [
        "ns1/vm1: 4 migrations of uid1/Network/user-net/plug failed, more than the 3 "
        "--migration-attempts allows"]


def test_a_user_edit_starts_the_count_again() -> None:
    watchman = Watchman(Store(), "multus", ("nicplug-system", "nicplug"), lambda: 0.0)
    for attempt in (1, 2, 3):
        _fails(watchman, f"m{attempt}", f"{STREAM}/{attempt}")
    watchman.changes["ns1/vm1"] += 1  # the user asked anew
    for attempt in (4, 5, 6):
        _fails(watchman, f"m{attempt}", f"{STREAM}/{attempt}")
    assert found(watchman) == []
