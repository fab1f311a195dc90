"""One interface operation as a small immutable record, and how events fold into it.

An operation is `(VM uid, network identity, direction, attempt)`; its stream id spells
that out. `VMState` holds the latest attempt of every (network, direction) of one VM,
so it stays small however long the VM lives. The fold (`apply`) is the only way an
operation changes, used by `evolve` on recorded events and by `decide` on the events
it is about to return, so both always agree. Never decides anything.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from nicplug.engine.audit import Step
from nicplug.engine.model import Key, StreamId, StreamView
from nicplug.engine.records import quick_init
from nicplug.machines.comparator import Direction
from nicplug.machines.graph import ALLOWED, TERMINAL

OPENED = "Opened"
TRANSITIONED = "Transitioned"
INITIAL_STATE = "Requested"
EFFECTS_ISSUED = "EffectsIssued"
GRACE_EXPIRED = "GraceExpired"
ROLLOUT_BYPASSED = "RolloutBypassed"
"""KubeVirt applied the change to the running VMI although `vmRolloutStrategy` is
`Stage`: `{at, strategy, vmi}` (the VMI that got it live)."""
PAUSED = "Paused"
RESUMED = "Resumed"
WAITING = "Waiting"
"""What the platform says the operation waits for changed: `{at, message}` (the SDN's
"not yet" for its entry; `""` once it says nothing). Reset by every transition."""
MIGRATION_HELD = "MigrationHeld"
"""nicplug's cluster-wide cap on concurrent migrations held back the migration this
operation asked for: `{at, in_flight, cap}` (nicplug's migrations running cluster-wide
when it asked, and the cap, `--max-migrations`). Journaled when the count or the cap
differs from the last one recorded; reset by every transition. It is asked for again
with the operation's other effects (`effect_reissue_after`)."""
NAMED = "Named"
"""A plug learnt its network's interface name: `{at, if_name, mac}` (the platform
allocated the MAC the interface is named after; opened before, or the platform handed
it another MAC before any object held the first name)."""
AWAITING_MAC = (
    "its MAC address is not allocated yet (the platform's VirtualMachineMACAddress for"
    " it has no status.address), so the network has no interface name and nothing is"
    " written for it"
)
"""What a plug with no interface name yet waits for (`explain`, deadline messages)."""
EVENT_TYPES = (
    OPENED, TRANSITIONED, EFFECTS_ISSUED, GRACE_EXPIRED, ROLLOUT_BYPASSED, PAUSED, RESUMED,
    NAMED, WAITING, MIGRATION_HELD,
)
SNAPSHOT_SCHEMA = 4
"""The version of `Operation.snapshot()` (`versions` says what changed)."""

_intern = sys.intern


def stream_of(vm_uid: str, network: str, direction: str, attempt: int) -> StreamId:
    return StreamId(f"{vm_uid}/{network}/{direction}/{attempt}")


def key_digest(idempotency_key: str) -> int:
    """A compact stand-in for an issued effect's key (kept per operation)."""
    return zlib.crc32(idempotency_key.encode())


class Operation(NamedTuple):
    """The state of one operation: a few hundred bytes, no `transitions` model.

    `target` pins what an `update` asked for (`id=3;pos=2`); `issued` holds digests of
    the effects issued since `issued_at`; `waived` records that the multus grace
    period let the plug go on without `SDNReady` (no decision makes that move any
    more: kept so that journals holding `GraceExpired` still fold); `retry_at` when a
    failed operation may be tried again (None: not retried).

    Deadlines measure time the VM was live: `paused_at` is when the VM was seen
    stopped (None while it runs), `credit` the seconds it was stopped since the
    operation entered its state; both restart with every state (`deadline_base`).

    A named tuple rather than a frozen dataclass: every event folded builds one, and a
    tuple of these 26 fields is built in an eighth of the time (a rebuild folds a
    million events; recovery builds one per snapshot). Immutable all the same.
    """

    stream: StreamId
    vm: str
    vm_uid: str
    network: str
    if_name: str
    direction: Direction
    attempt: int
    target: str = ""
    state: str = INITIAL_STATE
    reason: str | None = None
    message: str = ""
    history: tuple[str, ...] = (INITIAL_STATE,)
    opened_at: float = 0.0
    entered_at: float = 0.0
    issued: tuple[int, ...] = ()
    issued_at: float = 0.0
    waived: bool = False
    migration: str | None = None
    retry_at: float | None = None
    flavour: str = "deckhouse"
    """Whose order the operation walks (`graph.FLAVOURS`); recorded when it opens."""
    bypassed_vmi: str | None = None
    """The VMI that got this change live although the rollout strategy is `Stage`."""
    paused_at: float | None = None
    credit: float = 0.0
    waiting: str = ""
    """What the platform last said the operation waits for in its state (the SDN's "not
    yet" with its reason and message); "" when it says nothing."""
    held: tuple[int, int] | None = None
    """(nicplug's migrations in flight cluster-wide, the cap) when the cap last held back
    this operation's migration in its state (`MigrationHeld`); None otherwise."""
    mode: str = "drive"
    """`observe` when the platform wrote this operation's steps and nicplug only followed
    them (`policy.Mode`); recorded when it opens, so `status` and `history` say it."""
    migrations_failed: int = 0
    """Migrations of this change that failed, over its attempts so far: carried from the
    failed attempt before (`Opened`), counted by the `Transitioned` to `Failed` that a
    failed migration ends (`MachineConfig.migration_attempts` caps it)."""
    after: str = ""
    """The stream of the newest operation of the other direction (plug or unplug) of the
    same network when this one opened ("" when there was none): which of the two is the
    newer, whatever the clocks of the replicas that opened them said."""

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def deadline_base(self) -> float:
        """Where a budget of the current state counts from: its entry, moved on by the
        time the VM was not live since."""
        return self.entered_at + self.credit

    def snapshot(self) -> dict[str, Any]:
        snapshot = {
            "vm": self.vm,
            "vm_uid": self.vm_uid,
            "network": self.network,
            "if_name": self.if_name,
            "direction": self.direction,
            "attempt": self.attempt,
            "target": self.target,
            "reason": self.reason,
            "message": self.message,
            "history": list(self.history),
            "opened_at": self.opened_at,
            "entered_at": self.entered_at,
            "digests": list(self.issued),
            "issued_at": self.issued_at,
            "waived": self.waived,
            "migration": self.migration,
            "retry_at": self.retry_at,
            "paused_at": self.paused_at,
            "credit": self.credit,
        }
        if self.flavour != "deckhouse":
            snapshot["flavour"] = self.flavour
        if self.bypassed_vmi is not None:
            snapshot["bypassed_vmi"] = self.bypassed_vmi
        if self.waiting:
            snapshot["waiting"] = self.waiting
        if self.held is not None:
            snapshot["held"] = list(self.held)
        if self.mode != "drive":
            snapshot["mode"] = self.mode
        if self.migrations_failed:
            snapshot["migrations_failed"] = self.migrations_failed
        if self.after:
            snapshot["after"] = self.after
        return snapshot

    @classmethod
    def from_snapshot(cls, stream: StreamId, state: str, s: Mapping[str, Any]) -> Operation:
        """The operation a current snapshot holds; a missing field raises `KeyError` (the
        snapshot is then not trusted and the events are folded instead), never a default."""
        return cls(
            stream=stream,
            vm=_intern(str(s["vm"])),
            vm_uid=_intern(str(s["vm_uid"])),
            network=_intern(str(s["network"])),
            if_name=_intern(str(s["if_name"])),
            direction=s["direction"],
            attempt=int(s["attempt"]),
            target=str(s["target"]),
            state=_intern(state),
            reason=s["reason"],
            message=str(s["message"]),
            history=tuple(map(_intern, s["history"])),
            opened_at=float(s["opened_at"]),
            entered_at=float(s["entered_at"]),
            issued=tuple(map(int, s["digests"])),
            issued_at=float(s["issued_at"]),
            waived=bool(s["waived"]),
            migration=s["migration"],
            retry_at=s["retry_at"],
            paused_at=s["paused_at"],
            credit=float(s["credit"]),
            # optional since snapshot 2: absent means the deckhouse flavour, no bypass
            flavour=_intern(str(s.get("flavour", "deckhouse"))),
            bypassed_vmi=s.get("bypassed_vmi"),
            waiting=str(s.get("waiting", "")),  # optional: absent means nothing said
            held=_held(s.get("held")),  # optional: absent means not held
            mode=_intern(str(s.get("mode", "drive"))),  # optional: absent means drive
            # optional: absent means no migration of the change failed
            migrations_failed=int(s.get("migrations_failed", 0)),
            after=str(s.get("after", "")),  # optional: absent means none before it
        )


def _held(value: Any) -> tuple[int, int] | None:
    if value is None:
        return None
    in_flight, cap = value
    return (int(in_flight), int(cap))


def fold_view(key: Key, stream: StreamId, events: Sequence[Step]) -> StreamView | None:
    """The row of one stream from its own events: what `VMState.fold` and `views` give
    for it, without the VM around it (a rebuild folds every stream of a journal).

    The machine's quicker fold: `apply`'s rules on local variables, one `Operation`
    built per stream instead of one per event (a rebuild folds a million events). It
    reads the payloads in `apply`'s order, so a bad event raises what `apply` raises;
    a property test holds it to the decider's fold."""
    op: Operation | None = None
    # what `apply` changes, for the operation opened last (set when it opens)
    state, reason, message, history = INITIAL_STATE, None, "", [INITIAL_STATE]
    entered_at, issued_at, waived = 0.0, 0.0, False
    issued: tuple[int, ...] = ()
    migration: str | None = None
    retry_at: float | None = None
    bypassed: str | None = None
    paused_at: float | None = None
    credit, direction, if_name, waiting = 0.0, "plug", "", ""
    held: tuple[int, int] | None = None
    failed = 0
    for _, _, _, _, type_, _, p in events:
        if type_ == OPENED:
            if op is not None:
                op = _folded(op, if_name, state, reason, message, history, entered_at,
                             issued, issued_at, waived, migration, retry_at, bypassed,
                             paused_at, credit, waiting, held, failed)
            op = opened(stream, p)
            (if_name, state, reason, message, history, entered_at, issued, issued_at, waived,
             migration, retry_at, bypassed, paused_at, credit, waiting, held, failed) = (
                op.if_name, op.state, op.reason, op.message, [*op.history], op.entered_at,
                op.issued, op.issued_at, op.waived, op.migration, op.retry_at, op.bypassed_vmi,
                op.paused_at, op.credit, op.waiting, op.held, op.migrations_failed)
            direction = op.direction
        elif op is None:
            continue
        elif type_ == EFFECTS_ISSUED:
            issued, issued_at = tuple(map(int, p["digests"])), float(p["at"])
        elif type_ == TRANSITIONED:
            source, dest = str(p["from"]), _intern(str(p["to"]))
            if (direction, source, dest) not in ALLOWED or source != state:
                raise IllegalTransition(f"{stream}: {state} cannot go {source} → {dest}")
            at = float(p["at"])
            state, reason, message = dest, p.get("reason"), str(p.get("message", ""))
            history.append(dest)
            entered_at, issued = at, ()
            migration, retry_at = p.get("migration", migration), p.get("retry_at")
            paused_at = at if paused_at is not None else None
            credit, waiting, held = 0.0, "", None
            failed = int(p.get("migrations_failed", failed))
        elif type_ == GRACE_EXPIRED:
            waived = True
        elif type_ == WAITING:
            waiting = str(p["message"])
        elif type_ == MIGRATION_HELD:
            held = (int(p["in_flight"]), int(p["cap"]))
        elif type_ == NAMED:
            if_name = _intern(str(p["if_name"]))
        elif type_ == ROLLOUT_BYPASSED:
            bypassed = str(p["vmi"])
        elif type_ == PAUSED:
            paused_at = float(p["at"])
        elif type_ == RESUMED:
            since = max(paused_at if paused_at is not None else entered_at, entered_at)
            paused_at, credit = None, credit + max(0.0, float(p["at"]) - since)
        else:
            raise ValueError(f"unknown event type {type_!r}")
    if op is None:
        return None
    op = _folded(op, if_name, state, reason, message, history, entered_at, issued, issued_at,
                 waived, migration, retry_at, bypassed, paused_at, credit, waiting, held, failed)
    return StreamView(stream, key, op.state, op.terminal, op.snapshot(), SNAPSHOT_SCHEMA)


def _folded(
    op: Operation, if_name: str, state: str, reason: str | None, message: str,
    history: list[str], entered_at: float, issued: tuple[int, ...], issued_at: float,
    waived: bool, migration: str | None, retry_at: float | None, bypassed: str | None,
    paused_at: float | None, credit: float, waiting: str, held: tuple[int, int] | None,
    migrations_failed: int = 0,
) -> Operation:
    """`op` as opened, with what `fold_view` folded onto it."""
    return Operation(
        op.stream, op.vm, op.vm_uid, op.network, if_name, op.direction, op.attempt,
        op.target, state, reason, message, tuple(history), op.opened_at, entered_at, issued,
        issued_at, waived, migration, retry_at, op.flavour, bypassed, paused_at, credit,
        waiting, held, op.mode, migrations_failed, op.after,
    )  # fmt: skip


def summaries_to_keep(views: Sequence[StreamView]) -> set[StreamId]:
    """Of a VM's rows, the newest attempt of each (network, direction): what an archive
    keeps as a summary, so the next attempt is numbered on and `status` still shows
    the last outcome. Older attempts leave the read model with their events."""
    newest: dict[tuple[str, str, str], tuple[int, StreamId]] = {}
    for view in views:
        s = view.snapshot
        slot = (view.key, str(s["network"]), str(s["direction"]))
        attempt = int(s["attempt"])
        if slot not in newest or newest[slot][0] < attempt:
            newest[slot] = (attempt, view.stream)
    return {stream for _, stream in newest.values()}


def retrying(view: StreamView) -> bool:
    """Whether a finished operation's row says it will be tried again (its `retry`
    timer stays armed)."""
    return view.snapshot.get("retry_at") is not None


def opened(stream: StreamId, p: Mapping[str, Any]) -> Operation:
    at = float(p["at"])
    return Operation(
        stream=stream,
        vm=_intern(str(p["vm"])),
        vm_uid=_intern(str(p["vm_uid"])),
        network=_intern(str(p["network"])),
        if_name=_intern(str(p["if_name"])),
        direction=p["direction"],
        attempt=int(p["attempt"]),
        target=str(p.get("target", "")),
        opened_at=at,
        entered_at=at,
        flavour=_intern(str(p.get("flavour", "deckhouse"))),
        mode=_intern(str(p.get("mode", "drive"))),
        migrations_failed=int(p.get("migrations_failed", 0)),
        after=str(p.get("after") or ""),  # optional: absent in journals of before it
    )


class IllegalTransition(ValueError):
    """An event moves an operation along an edge its machine does not have."""


_new_op = tuple.__new__
"""`Operation`'s fields in order, as one: a transition and an issue are the events most
folded, and the named tuple's own constructor binds its 28 arguments first (twice the
cost). A test holds both builds of `apply` to the keyword one."""


def apply(op: Operation, type_: str, p: Mapping[str, Any]) -> Operation:
    """Fold one event of the operation's stream (not `Opened`) into it."""
    if type_ == TRANSITIONED:
        source, dest = str(p["from"]), _intern(str(p["to"]))
        if (op.direction, source, dest) not in ALLOWED or source != op.state:
            raise IllegalTransition(f"{op.stream}: {op.state} cannot go {source} → {dest}")
        at = float(p["at"])
        return _new_op(Operation, (
            op.stream, op.vm, op.vm_uid, op.network, op.if_name, op.direction, op.attempt,
            op.target, dest, p.get("reason"), str(p.get("message", "")), (*op.history, dest),
            op.opened_at, at, (), op.issued_at, op.waived,
            p.get("migration", op.migration), p.get("retry_at"), op.flavour, op.bypassed_vmi,
            at if op.paused_at is not None else None, 0.0, "", None, op.mode,
            int(p.get("migrations_failed", op.migrations_failed)), op.after,
        ))  # fmt: skip
    if type_ == EFFECTS_ISSUED:
        return _new_op(Operation, (
            op.stream, op.vm, op.vm_uid, op.network, op.if_name, op.direction, op.attempt,
            op.target, op.state, op.reason, op.message, op.history, op.opened_at,
            op.entered_at, tuple(map(int, p["digests"])), float(p["at"]), op.waived,
            op.migration, op.retry_at, op.flavour, op.bypassed_vmi, op.paused_at, op.credit,
            op.waiting, op.held, op.mode, op.migrations_failed, op.after,
        ))  # fmt: skip
    if type_ == GRACE_EXPIRED:
        return op._replace(waived=True)
    if type_ == WAITING:
        return op._replace(waiting=str(p["message"]))
    if type_ == MIGRATION_HELD:
        return op._replace(held=(int(p["in_flight"]), int(p["cap"])))
    if type_ == NAMED:
        return op._replace(if_name=_intern(str(p["if_name"])))
    if type_ == ROLLOUT_BYPASSED:
        return op._replace(bypassed_vmi=str(p["vmi"]))
    if type_ == PAUSED:
        return op._replace(paused_at=float(p["at"]))
    if type_ == RESUMED:
        since = max(op.paused_at if op.paused_at is not None else op.entered_at, op.entered_at)
        return op._replace(paused_at=None, credit=op.credit + max(0.0, float(p["at"]) - since))
    raise ValueError(f"unknown event type {type_!r}")


@quick_init
@dataclass(frozen=True, slots=True)
class VMState:
    """Every operation of one VM that still matters: the latest attempt per
    (network identity, direction).

    `retired` keeps the attempt each new one superseded, so that a decision which ends
    one attempt and opens the next still writes the ended attempt's read-model row (the
    runtime writes only the views that changed). One per slot: bounded.
    """

    key: Key
    ops: Mapping[tuple[str, str], Operation]
    retired: Mapping[tuple[str, str], Operation] = field(default_factory=dict)
    quiet: Any = field(default=None, init=False, repr=False, compare=False, hash=False)
    """The decider's memo of an observed world this state had nothing to do for
    (`decider.py`); never part of the state's value."""

    def by_stream(self, stream: StreamId) -> Operation | None:
        for op in self.ops.values():
            if op.stream == stream:
                return op
        return None

    def fold(self, stream: StreamId, type_: str, payload: Mapping[str, Any]) -> VMState:
        return self.fold_to(stream, type_, payload)[0]

    def fold_to(
        self, stream: StreamId, type_: str, payload: Mapping[str, Any]
    ) -> tuple[VMState, Operation | None]:
        """`fold`, and the operation the event left (None: a superseded attempt's)."""
        if type_ == OPENED:
            op = opened(stream, payload)
        else:
            current = self.by_stream(stream)
            if current is None:
                return self, None  # an event of an attempt superseded since: nothing to keep
            op = apply(current, type_, payload)
        slot = (op.network, op.direction)
        ops = dict(self.ops)
        retired = self.retired
        previous = ops.get(slot)
        if previous is not None and previous.stream != op.stream:
            retired = {**retired, slot: previous}
        ops[slot] = op
        return VMState(self.key, ops, retired), op

    def views(self) -> list[StreamView]:
        return [
            StreamView(op.stream, self.key, op.state, op.terminal, op.snapshot(), SNAPSHOT_SCHEMA)
            for op in sorted((*self.ops.values(), *self.retired.values()), key=lambda o: o.stream)
        ]

    @classmethod
    def restore(cls, key: Key, views: Sequence[StreamView]) -> VMState:
        ops: dict[tuple[str, str], Operation] = {}
        for view in views:
            op = Operation.from_snapshot(view.stream, view.state, view.snapshot)
            slot = (op.network, op.direction)
            if slot not in ops or ops[slot].attempt < op.attempt:
                ops[slot] = op
        return cls(key, ops)
