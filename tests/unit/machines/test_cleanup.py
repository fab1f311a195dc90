"""The rule that picks which of nicplug's created objects it deletes (`machines.cleanup`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from nicplug.engine.model import Key, StreamId, StreamView
from nicplug.machines.cleanup import CreatedObject, judge, live_readers, to_delete

DAY = 86400.0
NOW = 10 * DAY
STREAM = "uid-1/Network/user-net/plug/1"
MIGRATION = CreatedObject(kind="migration", namespace="ns", name="nicplug-vm-1a2b3c4d",
                          uid="m-1", vm="ns/vm", created=NOW - 2 * DAY, phase="Succeeded",
                          operation=STREAM)
STOP = CreatedObject(kind="vm-operation", namespace="ns", name="nicplug-vm-00000001-stop",
                     uid="o-1", vm="ns/vm", created=NOW - 3 * DAY, phase="Completed")
START = replace(STOP, name="nicplug-vm-00000001-start", uid="o-2", created=NOW - 3 * DAY + 60)


def _judge(*objects: CreatedObject, live_streams: tuple[str, ...] = (),
           live_vms: tuple[str, ...] = (), collects: tuple[str, ...] = ()) -> dict[str, str | None]:
    verdicts = judge(objects, live_streams=set(live_streams), live_vms=set(live_vms),
                     platform_collects=set(collects),  # type: ignore[arg-type]
                     retention=DAY, now=NOW)
    return {v.obj.name: v.kept for v in verdicts}


def test_finished_old_and_unread_objects_go() -> None:
    assert _judge(MIGRATION, STOP, START) == {MIGRATION.name: None, STOP.name: None,
                                              START.name: None}
    assert to_delete(judge([MIGRATION], live_streams=set(), live_vms=set(),
                           platform_collects=set(), retention=DAY, now=NOW)) == [MIGRATION]


def test_an_object_within_the_retention_stays() -> None:
    young = replace(MIGRATION, created=NOW - DAY + 1)
    kept = _judge(young)[young.name]
    assert kept is not None and "within the retention" in kept
    assert _judge(replace(MIGRATION, created=NOW - DAY))[MIGRATION.name] is None


def test_an_unfinished_object_stays_however_old() -> None:
    for obj in (replace(MIGRATION, phase="Running"), replace(MIGRATION, phase=""),
                replace(STOP, phase="InProgress"), replace(STOP, phase="Pending")):
        kept = _judge(obj)[obj.name]
        assert kept is not None and kept.startswith("not finished"), obj
    for phase in ("Failed",):
        assert _judge(replace(MIGRATION, phase=phase))[MIGRATION.name] is None
    for phase in ("Failed", "Superseded"):
        assert _judge(replace(STOP, phase=phase))[STOP.name] is None


def test_a_migration_stays_while_its_operation_is_live() -> None:
    kept = _judge(MIGRATION, live_streams=(STREAM,))[MIGRATION.name]
    assert kept == f"its operation {STREAM} is live"
    # another live operation of the same VM does not read it
    assert _judge(MIGRATION, live_streams=("uid-1/Network/other/plug/1",),
                  live_vms=("ns/vm",))[MIGRATION.name] is None


def test_a_migration_naming_no_operation_stays() -> None:
    assert _judge(replace(MIGRATION, operation=""))[MIGRATION.name] == (
        "names no operation of nicplug's")


def test_vm_operations_stay_while_their_vm_has_a_live_operation() -> None:
    verdicts = _judge(STOP, START, live_vms=("ns/vm",))
    assert verdicts == {STOP.name: "its VM ns/vm has a live operation",
                        START.name: "its VM ns/vm has a live operation"}
    assert _judge(STOP, START, live_vms=("ns/other",)) == {STOP.name: None, START.name: None}


def test_vm_operations_go_oldest_first() -> None:
    # a newer Stop kept (unfinished) does not hold back the older pair...
    newer = replace(STOP, name="nicplug-vm-00000002-stop", uid="o-3", created=NOW - 2 * DAY,
                    phase="InProgress")
    assert _judge(STOP, START, newer)[START.name] is None
    # ...but an older one kept holds back every newer one of its VM, never another VM's
    older = replace(STOP, name="nicplug-vm-00000000-stop", uid="o-0", created=NOW - 4 * DAY,
                    phase="Pending")
    other_vm = replace(STOP, name="nicplug-w-00000001-stop", uid="o-9", vm="ns/w")
    verdicts = _judge(START, STOP, older, other_vm)
    assert verdicts[older.name] == "not finished (phase 'Pending')"
    assert verdicts[STOP.name] == verdicts[START.name] == (
        f"an older VM operation of its VM ({older.name}) is kept, and they go oldest first")
    assert verdicts[other_vm.name] is None


def test_what_the_platform_collects_stays() -> None:
    verdicts = _judge(MIGRATION, STOP, collects=("migration",))
    assert verdicts == {MIGRATION.name: "the platform's own garbage collection deletes these",
                        STOP.name: None}


def test_live_readers_are_the_operations_not_ended_and_those_tried_again() -> None:
    def view(stream: str, key: str, *, terminal: bool, retry_at: float | None = None) -> Any:
        return StreamView(StreamId(stream), Key(key), "Failed" if terminal else "Requested",
                          terminal, {"retry_at": retry_at})

    streams, vms = live_readers([
        view("u1/Network/a/plug/1", "ns/vm", terminal=False),
        view("u2/Network/a/plug/1", "ns/w", terminal=True, retry_at=NOW + 60),
        view("u3/Network/a/plug/1", "ns/x", terminal=True),
    ])
    assert streams == {"u1/Network/a/plug/1", "u2/Network/a/plug/1"}
    assert vms == {"ns/vm", "ns/w"}


def test_an_object_of_a_vm_outside_the_scope_stays() -> None:
    verdicts = judge([MIGRATION, STOP], live_streams=set(), live_vms=set(),
                     platform_collects=set(), retention=DAY, now=NOW,
                     in_scope=lambda vm: vm != "ns/vm")
    assert [v.kept for v in verdicts] == ["its VM is outside this nicplug's scope"] * 2
