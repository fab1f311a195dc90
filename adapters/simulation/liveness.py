"""The end of a simulated run: is every journal whole, and has every operation come to
rest?

Judged after the faults stopped and `run.QUIET` virtual seconds passed, from the journal
file itself (opened on the loop's thread, as the controller opened it):

* `journal-damaged` — SQLite's integrity check fails, or a stream's versions have a
  gap, or a transition leaves a state its predecessor did not enter (what
  `nicplug journal verify` and the process tests check);
* `operation-stuck` — a live operation waits with no timer armed: nothing will ever
  move it unless the world happens to change (excepted: a `RestartRequired` that waits
  for a user's restart under `Manual` approval or where nicplug says on the VM that it
  leaves the restart to the user or that it waits for a `VirtualMachineOperation`
  Deckhouse has not finished, and a plug written for the next boot,
  `VMIPatched`, or waiting in `MigrationRequired`, of a VM the user stopped: its
  deadline is paused until the VM is live again) (the issue's liveness: terminal, or
  waiting in a state whose deadline is armed); judged on the journal of the replica
  that leads at the end (every journal when none does): a standby's journal is judged
  as a record only;
* `failed-without-reason` — a `Failed` operation with no reason;
* `failed-yet-done` — the latest attempt of a plug is `Failed` although the running
  guest has the interface and the user still asks for it (the goal is reached: the
  operation should have completed);
* `sdn-error-lost` — the latest attempt of an operation failed on a timeout while the
  SDN reports an error for its interface, and the failure does not carry what the SDN
  says (an earlier attempt, or the latest one, may have failed before the error began:
  only a failure once the SDN reported it is judged) (a `False`
  condition is "not yet" to Deckhouse, which reports it as `NetworkReady=False` and
  waits: the wait ends in the timeout, whose message must hold the SDN's);
* `not-converged` — a running VM whose guest interfaces differ from what the user asks,
  with no live operation on the difference (nor a failed one whose next attempt is
  armed, nor one that gave up after `--migration-attempts` failed migrations, nor a
  plug that timed out on an SDN error the SDN still reports, quoted in its failure);
* `effects-unbounded` — an operation issued more effects of a type than
  `bounds.EFFECTS_PER_OPERATION` allows (per object it writes for the types of
  `bounds.PER_OBJECT`: a pod patch per launcher pod; different requests for those of
  `bounds.REISSUED_ALIKE`, whose repeats of one request are held to the blind
  re-issues' spacing instead), or an effect was tried more than
  `bounds.ATTEMPTS_PER_EFFECT` times; `attempts-unbounded` — more operations on one
  interface and direction than `bounds.ATTEMPTS_PER_INTERFACE`; `effect-livelock` — an
  effect that failed and is still being retried after the quiet period (its faults
  gone that long, and the longest backoff shorter): a timer is armed, nothing rests.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from nicplug.adapters.simulation import bounds
from nicplug.adapters.simulation.journal import CommitFaults, FaultyConnection
from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.machines.graph import STRANDED_REASONS

Problem = tuple[str, str]


async def _open(path: Path) -> SQLiteJournal:
    import sqlite3

    async def connect(target: str, **kwargs: Any) -> Any:
        return FaultyConnection(sqlite3.connect(target, **kwargs), CommitFaults())

    return await SQLiteJournal.open(path, read_only=True, integrity="none", connect=connect)


async def at_rest(path: Path, world: dict[str, dict[str, Any]], *,
                  manual_restarts: bool, acting: bool = True,
                  clock_ahead: float = 0.0) -> list[Problem]:
    """The problems of one journal at the end of a run; `manual_restarts`: a
    `RestartRequired` operation waits for the user, who never comes, which is no fault.
    `clock_ahead`: the furthest the replicas' clock ran ahead of the loop's (a step):
    the journal's times are the replica's, the watchman's the loop's.
    `acting`: the replica leads, or none does. A standby's journal is judged as a
    record only (whole, every transition from where the last one left, every failure
    with a reason): what it says stopped when its term ended, and it acts on none of
    it until it leads again, when it adopts the operations from the world."""
    journal = await _open(path)
    problems: list[Problem] = []
    try:
        integrity = await journal.integrity()
        if integrity != ["ok"]:
            problems.append(("journal-damaged", f"integrity check: {integrity[:3]}"))
        versions: dict[str, list[int]] = defaultdict(list)
        entered: dict[str, str] = {}
        after = 0
        while True:
            batch = await journal.read_all(after=after, limit=5000)
            if not batch:
                break
            for event in batch:
                after = event.position
                versions[str(event.stream)].append(event.version)
                if event.type == "Transitioned":
                    source = str(event.payload.get("from"))
                    last = entered.get(str(event.stream))
                    if last is not None and last != source:
                        problems.append(("journal-damaged",
                                         f"{event.stream}: leaves {source} after entering {last}"))
                    entered[str(event.stream)] = str(event.payload.get("to"))
        for stream, seen in versions.items():
            if seen != list(range(1, len(seen) + 1)):
                problems.append(("journal-damaged", f"{stream}: versions {seen[:8]}…"))
        armed = {str(t.stream) for t in await journal.timers()}
        views = await journal.views()
        latest: dict[tuple[str, str, str], Any] = {}
        failed_at: dict[str, float] = {}  # stream -> when it last changed
        for stored in views:
            failed_at[str(stored.view.stream)] = stored.updated_logical
            view = stored.view
            snap = view.snapshot
            slot = (str(view.key), str(snap.get("network")), str(snap.get("direction")))
            if slot not in latest or int(snap.get("attempt", 0)) > int(
                    latest[slot].snapshot.get("attempt", 0)):
                latest[slot] = view
            its_vm = world.get(str(view.key))
            waits_for_user = (view.state == "RestartRequired" and (
                manual_restarts or (its_vm is not None and (
                    its_vm["restart_left_to_user"]
                    # waits, as it says on the VM, for a VirtualMachineOperation
                    # Deckhouse has not finished: Deckhouse runs one at a time, so a
                    # Stop of nicplug's would fail until then, and nicplug restarts
                    # only a running VM; the operation's end is a change of the world
                    # (a `Start` ends once the VM runs, which one whose SDN fails an
                    # interface at boot never does: start.go `IsComplete`)
                    or its_vm["restart_waits_for_operation"] is not None)))) or (
                # written for the next boot of a VM the user stopped (or waiting for a
                # migration it can no longer have; the boot brings the new pod and the
                # interface): waits for a start, its deadline paused while not live
                view.state in ("VMIPatched", "MigrationRequired") and its_vm is not None
                and not its_vm["wants_running"])
            if (acting and not view.terminal and str(view.stream) not in armed
                    and not waits_for_user):
                problems.append(("operation-stuck",
                                 f"{view.stream} waits in {view.state} with no timer armed"))
            if view.state == "Failed" and not snap.get("reason"):
                problems.append(("failed-without-reason", f"{view.stream} failed, no reason"))
        if not acting:
            return problems
        # only the latest attempt of each interface: an earlier one may have failed
        # before the SDN began to report the error, and could not say it
        for view in latest.values():
            lost = _sdn_error_lost(view, failed_at[str(view.stream)] - clock_ahead,
                                   world.get(str(view.key)))
            if lost is not None:
                problems.append(lost)
        for (key, network, direction), view in latest.items():
            seen_vm = world.get(key)
            if seen_vm is None or seen_vm["malformed"] or not seen_vm["running"]:
                continue
            if view.state != "Failed" or direction != "plug":
                continue
            if_name = str(view.snapshot.get("if_name"))
            if network in seen_vm["desired"] and if_name in seen_vm["attached"]:
                problems.append((
                    "failed-yet-done",
                    f"{view.stream} is Failed ({view.snapshot.get('reason')}) but the running "
                    f"guest has {if_name} as asked"))
        problems += _converged(views, world, armed)
    finally:
        await journal.close()
    return problems + (_unbounded(path) if acting else [])


def _reissued_alike(conn: Any) -> list[Problem]:
    """The bounds of the effects whose same request repeated does nothing twice
    (`bounds.REISSUED_ALIKE`): different requests against `EFFECTS_PER_OPERATION`, the
    re-issues of one request against their spacing."""
    problems: list[Problem] = []
    distinct: dict[tuple[str, str], int] = defaultdict(int)
    kinds = sorted(bounds.REISSUED_ALIKE)
    marks = ", ".join("?" for _ in kinds)
    for stream, type_, payload, count, first, last in conn.execute(
            "SELECT stream, type, payload, count(*), min(created_wall), max(created_wall)"
            f" FROM effects WHERE type IN ({marks}) GROUP BY stream, type, payload", kinds):
        if type_ not in bounds.PER_OBJECT:  # (those count their requests per object)
            distinct[(str(stream), str(type_))] += 1
        allowed = bounds.REISSUES_AT_ONCE + (float(last) - float(first)) / bounds.REISSUE_PERIOD
        if count - 1 > allowed:
            problems.append(("effects-unbounded",
                             f"{stream} issued one {type_} {count} times in "
                             f"{float(last) - float(first):.0f}s: {payload}"))
    for (stream, type_), count in sorted(distinct.items()):
        if count > bounds.EFFECTS_PER_OPERATION.get(type_, 0):
            problems.append(("effects-unbounded", f"{stream} issued {count} {type_}"))
    return problems


def _unbounded(path: Path) -> list[Problem]:
    """The bounds of `bounds.py`, read from the journal's effects and streams."""
    import sqlite3

    problems: list[Problem] = []
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        for stream, type_, count in conn.execute(
                "SELECT stream, type, count(*) FROM effects GROUP BY stream, type"):
            if type_ in bounds.PER_OBJECT or type_ in bounds.REISSUED_ALIKE:
                continue
            if count > bounds.EFFECTS_PER_OPERATION.get(str(type_), 0):
                problems.append(("effects-unbounded", f"{stream} issued {count} {type_}"))
        for type_, field in bounds.PER_OBJECT.items():
            for stream, target, count in conn.execute(
                    "SELECT stream, json_extract(payload, ?), count(DISTINCT payload)"
                    " FROM effects WHERE type = ? GROUP BY stream, 2", (f"$.{field}", type_)):
                if count > bounds.EFFECTS_PER_OPERATION.get(type_, 0):
                    problems.append(("effects-unbounded",
                                     f"{stream} issued {count} {type_} for {target}"))
        problems += _reissued_alike(conn)
        for stream, type_, attempts, status in conn.execute(
                "SELECT stream, type, attempts, status FROM effects WHERE attempts > ?"
                " OR (status = 'issued' AND attempts > 1)", (bounds.ATTEMPTS_PER_EFFECT,)):
            if attempts > bounds.ATTEMPTS_PER_EFFECT:
                problems.append(("effects-unbounded",
                                 f"{stream}: {type_} tried {attempts} times"))
            elif status == "issued":
                problems.append(("effect-livelock", f"{stream}: {type_} failed {attempts} "
                                 "times and is retried still, the faults long gone"))
        slots: dict[str, int] = defaultdict(int)
        for (stream,) in conn.execute("SELECT stream FROM streams"):
            slot, _, attempt = str(stream).rpartition("/")
            if attempt.isdigit():
                slots[slot] += 1
        problems += [("attempts-unbounded", f"{slot}: {n} operations")
                     for slot, n in slots.items() if n > bounds.ATTEMPTS_PER_INTERFACE]
    finally:
        conn.close()
    return problems


def _sdn_error_lost(view: Any, changed_at: float,
                    seen_vm: dict[str, Any] | None) -> Problem | None:
    """`sdn-error-lost` of one operation's latest attempt, whose view last changed (it
    failed) at `changed_at`: judged only if the SDN was reporting the error by then."""
    if seen_vm is None or view.state != "Failed" or view.snapshot.get("reason") not in (
            "AttachTimeout", "SDNTimeout"):
        return None
    if_name = str(view.snapshot.get("if_name"))
    said = seen_vm["sdn_errors"].get(if_name)
    if not said or changed_at < seen_vm.get("sdn_error_since", {}).get(if_name, 0.0):
        return None
    if any(m in str(view.snapshot.get("message") or "") for m in said):
        return None
    return ("sdn-error-lost", f"{view.stream} failed {view.snapshot.get('reason')} while the "
                              f"SDN reports an error for {if_name}: its message is lost")


def _gave_up(view: Any) -> bool:
    """An operation whose migrations failed as often as `--migration-attempts` allows,
    or an unplug the platform will not finish (`STRANDED_REASONS`: the guest keeps the
    NIC, a pod keeps the link), rests `Failed` by design: it said why, and waits for
    the user or the operator."""
    snap = view.snapshot
    if getattr(view, "state", "") != "Failed" or snap.get("retry_at") is not None:
        return False
    return (snap.get("reason") in STRANDED_REASONS
            or (snap.get("reason") == "MigrationFailed" and bool(snap.get("migrations_failed"))))


def _rests_on_sdn_error(view: Any, seen_vm: dict[str, Any] | None) -> bool:
    """A plug that timed out waiting for the SDN, which still reports the error the
    failure quotes, rests `Failed` by design (`machines/opening.py`): a new attempt
    would wait for the same SDN again, and Deckhouse reads the error as "not yet" and
    waits for ever (extractNetworkStatusFromPods, pkg/controller/vm/internal/
    network.go). It said why, and is tried again once the SDN says something else."""
    snap = view.snapshot
    if (seen_vm is None or getattr(view, "state", "") != "Failed"
            or snap.get("direction") != "plug"
            or snap.get("reason") not in ("SDNTimeout", "AttachTimeout")):
        return False
    said = seen_vm["sdn_errors"].get(str(snap.get("if_name")))
    message = str(snap.get("message") or "")
    return bool(said) and all(m in message for m in said)


def _converged(views: Any, world: dict[str, dict[str, Any]],
               armed: set[str]) -> list[Problem]:
    """A difference between the guest and the user's ask is worked on by a live
    operation, or by a failed one whose next attempt is armed (`retry`: the failure,
    with its reason, is where it rests until then)."""
    problems: list[Problem] = []
    working = [v for v in views if not v.view.terminal or str(v.view.stream) in armed
               or _gave_up(v.view) or _rests_on_sdn_error(v.view, world.get(str(v.view.key)))]
    live = {(str(v.view.key), str(v.view.snapshot.get("network"))) for v in working}
    # an interface the guest keeps is no longer desired, so only its ifName names it
    live |= {(str(v.view.key), str(v.view.snapshot.get("if_name"))) for v in working}
    for key, seen in world.items():
        if seen["malformed"] or not seen["running"]:
            continue
        names: dict[str, str] = seen["names"]  # a network with no MAC yet has no name
        wanted = {names.get(i, i) for i in seen["desired"]}
        have = {n for n in seen["attached"] if n != "default"}
        for if_name in wanted ^ have:
            identity = next((i for i in seen["desired"] if names.get(i, i) == if_name),
                            if_name)
            if (key, identity) not in live:
                problems.append(("not-converged",
                                 f"{key}: the guest {'lacks' if if_name in wanted else 'keeps'} "
                                 f"{identity} and no operation is on it"))
    return problems

