"""`HotplugDecider`: the engine's `Decider` for the network interfaces of one VM.

Every input (an observation, a timer, an effect's outcome) is answered from the whole
observed world of the VM: each live operation walks its graph as far as the world
already allows (so an operation adopted at any point skips what is done), new
operations open where the comparator finds a change nobody handles, and the effects
needed to move the world on are computed for all operations together and issued once
(again after `effect_reissue_after` if the world did not move, at once when one was
refused because the world moved). Budgets count only the time the VM was live
(`Paused` / `Resumed`), and a failed operation whose goal the world shows since is
followed at once by an attempt that adopts it. Deterministic and pure: the same state,
input and `now` give the same decision.

Two memos make it cheaper without changing any answer. A decision leaves the state
settled for its world: deciding again from the state it made (the state it started
from, when it appended nothing), with that world, at that time, asks nothing more
(every walk went as far as the world allows, every effect it needs is issued, a
property the simulation tests check after every decision). So it leaves on that state
(`VMState.quiet`) the world and the value of every test of `now` it made; the next
input of that state, of a world equal in all a decision reads
(`facts.same_for_decisions`), whose tests of `now` come out the same, is answered
empty at once, unless the decision would read the input itself (an effect refused, a
migration the cap held back). One decision per change of the world, where each
effect's outcome and each observation of unchanged objects used to walk everything
again. And the states a decision folded its own events into are kept until `evolve`
is asked to fold those same events (the same payload objects) into the same state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from nicplug.engine.model import (
    Decider,
    Decision,
    EffectOutcome,
    EffectRequest,
    Input,
    Key,
    NewEvent,
    RecordedEvent,
    StreamId,
    StreamView,
    TimerCancel,
    TimerRequest,
    Trigger,
)
from nicplug.machines.candidates import Candidate, changes_needing_operations
from nicplug.machines.comparator import Comparison, Direction
from nicplug.machines.effects import AnyEffect, CreateMigration, EmitEvent
from nicplug.machines.facts import Facts, facts_of, same_for_decisions, sdn_messages
from nicplug.machines.graph import TERMINAL, Move, moves_of
from nicplug.machines.guards import (
    GUARDS,
    SWAP,
    Context,
    budget,
    budget_when,
    is_swap,
    network_problem,
    not_hot_pluggable,
    restart_only,
)
from nicplug.machines.operation import (
    AWAITING_MAC,
    EFFECTS_ISSUED,
    MIGRATION_HELD,
    NAMED,
    OPENED,
    PAUSED,
    RESUMED,
    ROLLOUT_BYPASSED,
    SNAPSHOT_SCHEMA,
    TRANSITIONED,
    WAITING,
    Operation,
    VMState,
    key_digest,
    stream_of,
)
from nicplug.machines.policy import MachineConfig
from nicplug.machines.targets import (
    GRACE_WAIT,
    MIGRATION_ADVICE,
    ROLLOUT_ADVICE,
    WORKLOAD_UPDATER,
    conditions,
    grace_wait,
    kubevirt_migrates,
    kubevirt_overrides,
    kvvm_patch,
    migration_blocked,
    migration_slot_wait,
    own_failed_migration,
    pod_patches,
    restarts_and_migrations,
)
from nicplug.machines.versions import EVENT_SCHEMAS
from nicplug.machines.world import World

DEADLINE, GRACE, REISSUE, RETRY = "deadline", "grace", "reissue", "retry"
APPLIED_LIVE = frozenset({"sync_vmi", "patch_vm", "mark_absent"})
"""The moves by which a running VMI took a NIC change (not at a boot)."""
KEEP_ISSUED = 6
NOT_HOT_PLUGGED = "KubeVirt hot-plugs only bridge and SR-IOV interfaces"
NEXT_BOOT = (
    "it is applied at the VM's next restart (a migration does not bring it: the target "
    "runs the VMI's spec, which KubeVirt never gave it)"
)
OUTCOMES = TERMINAL | {"RestartRequired", "MigrationRequired"}
"""States an operation's Event is emitted in: where it ended, or waits for someone (a
restart, a migration). The steps between are in the journal (`explain`), not Events;
operations of one decision reaching the same outcome share one Event."""
NOTHING = Decision()

Guard = Callable[[Context], bool]
CompiledMoves = Mapping[str, Mapping[str, tuple[tuple[Move, tuple[Guard, ...]], ...]]]


@dataclass(slots=True)
class _Fold:
    """`before.fold(stream, type, payload) is after`, as a decision computed it (one
    per event: not frozen, which is cheaper to build; never changed)."""

    before: VMState
    stream: StreamId
    type: str
    payload: Mapping[str, Any]
    after: VMState


@dataclass(slots=True)
class _Quiet:
    """A state settled for a world: by whom, of what (the latest world seen equal to
    it, so no older world is kept alive), whether the VM ran, and how every test of
    `now` came out."""

    decider: HotplugDecider
    world: World
    live: bool
    timing: tuple[bool, ...]


class _Session:
    """The decision being built: events are folded as they are appended."""

    def __init__(self, state: VMState, vm: str, vm_uid: str) -> None:
        self.state = state
        self.vm = vm
        self.vm_uid = vm_uid
        self.events: list[NewEvent] = []
        self.folds: list[_Fold] = []
        self.paths: dict[StreamId, list[str]] = {}

    def append(self, stream: StreamId, type_: str, payload: Mapping[str, Any]) -> Operation:
        self.events.append(NewEvent(stream, type_, payload, EVENT_SCHEMAS[type_]))
        before = self.state
        self.state = before.fold(stream, type_, payload)
        self.folds.append(_Fold(before, stream, type_, payload, self.state))
        op = self.state.by_stream(stream)
        assert op is not None, "an appended event always lands on a known stream"
        if type_ == TRANSITIONED:
            self.paths.setdefault(stream, [str(payload["from"])]).append(op.state)
        elif type_ in (OPENED, PAUSED, RESUMED):
            self.paths.setdefault(stream, [op.state])  # (its timers are looked at again)
        return op


class HotplugDecider:
    """Implements `nicplug.engine.model.Decider[VMState, World]`."""

    snapshot_schema = SNAPSHOT_SCHEMA

    def __init__(self, config: MachineConfig | None = None) -> None:
        self.config = config or MachineConfig()
        self._moves: CompiledMoves = {
            direction: {
                state: tuple((m, tuple(GUARDS[g] for g in m.guards)) for m in moves)
                for state, moves in by_state.items()
            }
            for direction, by_state in moves_of(self.config.flavour, self.config.mode).items()
        }
        self._folds: tuple[_Fold, ...] = ()

    # -- the Decider protocol -------------------------------------------------------------

    def initial(self, key: Key) -> VMState:
        return VMState(key, {})

    def evolve(self, state: VMState, event: RecordedEvent) -> VMState:
        for fold in self._folds:
            if (
                fold.before is state
                and fold.payload is event.payload
                and fold.stream == event.stream
                and fold.type == event.type
            ):
                return fold.after  # folded already by the decision that made the event
        return state.fold(event.stream, event.type, event.payload)

    def views(self, state: VMState) -> Sequence[StreamView]:
        return state.views()

    def restore(self, key: Key, views: Sequence[StreamView]) -> VMState:
        return VMState.restore(key, views)

    def decide(self, state: VMState, input: Input[World], now: float) -> Decision:
        world = input.world
        if world is None:
            return Decision()
        trigger = input.trigger
        quiet: _Quiet | None = state.quiet
        if (
            quiet is not None
            and not _read_by_decision(trigger)
            and quiet.decider is self
            and same_for_decisions(quiet.world, world)
            and quiet.timing == self._timing(state, quiet.live, now)
        ):
            quiet.world = world
            return NOTHING
        facts = facts_of(world)
        if world.vm is not None and facts.comparison is None:
            return Decision()  # the KVVM is not seen yet: nothing can be compared
        vm = world.vm
        session = _Session(state, f"{vm.namespace}/{vm.name}" if vm else "", vm.uid if vm else "")
        _forget_refused(session, trigger)
        if facts.live:
            _resume(session, now)
        asked: frozenset[tuple[str, str]] = frozenset()
        comparison = facts.comparison
        if comparison is not None and comparison.invalid is not None:
            asked = frozenset({(comparison.invalid_network, "update")})
            self._open_invalid(session, comparison, now)
            for op in list(session.state.ops.values()):
                if op.target.startswith("invalid:") and not op.terminal:
                    self._walk(session, op, facts, now, trigger)
        else:
            for slot in sorted(state.ops):
                op = session.state.ops[slot]
                if not op.terminal:
                    self._walk(session, op, facts, now, trigger)
            if comparison is not None:
                candidates = changes_needing_operations(
                    session.state, facts, comparison, self.config
                )
                asked = frozenset((c.network, c.direction) for c in candidates)
                for c in candidates:
                    opened = self._open(session, c, now)
                    if opened is not None:
                        self._walk(session, opened, facts, now, trigger)
        _note_held(session, trigger, now)
        if not facts.live:
            _pause(session, now)
        effects = self._effects(session, facts, asked, now)
        timers, cancels = self._timers(session, facts, now, effects)
        self._folds = tuple(session.folds)
        settled = session.state  # what this decision leaves: `state` if it appended nothing
        timing = self._timing(settled, facts.live, now)
        object.__setattr__(settled, "quiet", _Quiet(self, world, facts.live, timing))
        if not (session.events or effects or timers or cancels):
            return NOTHING
        return Decision(tuple(session.events), tuple(effects), timers, cancels)

    def _timing(self, state: VMState, live: bool, now: float) -> tuple[bool, ...]:
        """Every test of `now` an observation that appends nothing makes, in order:
        has the operation's deadline passed (`deadline_passed`), may a failed one be
        retried (`_open`), are its issued effects still recent (`_effects`)?"""
        horizon = now - self.config.timeouts.effect_reissue_after
        timing: list[bool] = []
        for op in state.ops.values():
            if op.terminal:
                timing.append(op.retry_at is not None and now < op.retry_at)
            else:
                limit = budget_when(op, live, self.config)
                timing.append(limit is not None and now >= op.deadline_base + limit)
            timing.append(bool(op.issued) and op.issued_at > horizon)
        return tuple(timing)

    # -- operations -----------------------------------------------------------------------

    def _walk(
        self, session: _Session, op: Operation, facts: Facts, now: float, trigger: Trigger
    ) -> None:
        by_state = self._moves[op.direction]
        if op.direction == "plug" and facts.comparison is not None:
            spec = facts.comparison.desired_entry(op.network)
            if spec is not None and spec.if_name and spec.if_name != op.if_name and (
                not op.if_name or not _written_anywhere(op.if_name, facts)
            ):  # its MAC is allocated (or another one is, before anything used the first)
                named = {"if_name": spec.if_name, "mac": spec.mac, "at": now}
                op = session.append(op.stream, NAMED, named)
        for _ in range(16):
            ctx = Context(op, facts, self.config, now, trigger)
            move = _first_move(by_state[op.state], ctx)
            if move is None:
                said = _not_yet(op, facts)
                if said != op.waiting:  # the SDN's "not yet", journaled as soon as it changes
                    session.append(op.stream, WAITING, {"message": said, "at": now})
                return
            payload: dict[str, Any] = {
                "from": op.state,
                "to": move.dest,
                "trigger": move.trigger,
                "at": now,
                "reason": None,
                "message": self._message(move, ctx),
            }
            if move.dest in ("Failed", "Cancelled"):
                payload["reason"] = move.trigger
            if move.dest == "Failed" and move.trigger != "InvalidSpec":
                payload["retry_at"] = now + self.config.timeouts.backoff(op.attempt)
            if move.trigger == "MigrationFailed":
                self._count_failed_migration(op, payload)
            if move.dest == "Migrating":
                running = facts.running_migration()
                payload["migration"] = running.name if running else None
            op = session.append(op.stream, TRANSITIONED, payload)
            vmi = facts.world.vmi
            if (
                move.trigger in APPLIED_LIVE
                and facts.live
                and vmi is not None
                and facts.world.cluster.rollout_strategy == "Stage"
            ):
                # KubeVirt applies NIC changes to the running VMI whatever the strategy
                bypass = {"at": now, "strategy": "Stage", "vmi": vmi.uid}
                op = session.append(op.stream, ROLLOUT_BYPASSED, bypass)
        raise RuntimeError(f"{op.stream}: the walk does not settle")  # a graph with a cycle

    def _count_failed_migration(self, op: Operation, payload: dict[str, Any]) -> None:
        """A migration of the change failed: counted, and at the cap the operation is
        not retried (`migration_attempts`), so no migration follows it."""
        failed = op.migrations_failed + 1
        cap = self.config.migration_attempts
        payload["migrations_failed"] = failed
        if failed >= cap:
            payload["retry_at"] = None
            payload["message"] = (
                f"{payload['message']}; {failed} of at most {cap} migrations failed, nicplug "
                f"gives up (--migration-attempts)"
            )

    def _message(self, move: Move, c: Context) -> str:
        said = self._said(move, c)
        if not is_swap(c.op) or move.dest in ("Failed", "Cancelled"):
            return said
        swapped = f"NAD swap of {c.op.if_name}: {c.op.target.removeprefix(SWAP)} → {c.op.network}"
        if move.dest == "RestartRequired":
            said = ("the VMI cannot migrate, so KubeVirt applies it at the next restart "
                    "(RestartRequired)")
        return f"{swapped}; {said}" if said else swapped

    def _said(self, move: Move, c: Context) -> str:
        op, facts = c.op, c.facts
        if move.dest == "RestartRequired":
            change = next(
                (
                    ch
                    for ch in (facts.comparison.changes if facts.comparison else ())
                    if ch.identity == op.network and ch.direction == op.direction
                ),
                None,
            )
            why = change.why if change else op.direction
            binding = not_hot_pluggable(op, facts)
            if binding is not None:
                return f"{NOT_HOT_PLUGGED}: {op.if_name} is bound by {binding}; {NEXT_BOOT}"
            if not restart_only(op):
                why += f", vmRolloutStrategy is {facts.world.cluster.rollout_strategy}"
            return why
        if move.dest == "MigrationRequired":
            if kubevirt_migrates(facts):
                return kubevirt_overrides(facts, self.config) or (
                    f"{WORKLOAD_UPDATER}: nicplug creates no migration and follows KubeVirt's")
            blocked = migration_blocked(facts, self.config)
            return f"nicplug will not migrate the VM: {blocked}" if blocked else ""
        if move.trigger == "SDNError":
            return facts.errors.get(op.network, "")
        if move.trigger in ("NetworkNotFound", "NetworkNotReady"):
            return network_problem(op.network, move.trigger, facts.world.vm)
        if move.trigger.endswith("Timeout"):
            limit = budget(op, facts, self.config) or 0.0
            reason = f"no progress in {op.state} within {limit:g}s"
            if not op.if_name and op.direction == "plug":
                reason += f"; {AWAITING_MAC}"
            # (an SDN error after the KVVM patch ends a plug's attach wait: say it too)
            said = sdn_messages(facts, op.network) if op.direction == "plug" else ""
            return f"{reason}; the SDN says: {said}" if said else reason
        if move.trigger in ("PatchRejected", "MigrationFailed") and isinstance(
            c.trigger, EffectOutcome
        ):
            return c.trigger.error or f"{c.trigger.type} was rejected"
        if move.trigger == "MigrationFailed":
            failed = own_failed_migration(facts, op) if op.state == "MigrationRequired" else (
                facts.migration(op.migration))
            name = failed.name if failed is not None else op.migration
            said = f": {failed.failure}" if failed is not None and failed.failure else ""
            return f"migration {name} failed{said}"
        if move.trigger == "InvalidSpec" and facts.comparison is not None:
            return facts.comparison.invalid or ""
        if move.trigger == "Reverted":
            return "the desired networks no longer ask for it"
        return ""

    def _open(self, session: _Session, c: Candidate, now: float) -> Operation | None:
        latest = session.state.ops.get((c.network, c.direction))
        if latest is not None:
            if not latest.terminal:
                return None
            if self._gave_up(session, latest) and not c.goal_shown:
                return None
            if (
                latest.state == "Failed"
                and latest.retry_at is not None
                and now < latest.retry_at
                and not c.goal_shown
            ):
                return None
        return self._append_opened(
            session, c.network, c.direction, c.if_name, c.target, latest, now
        )

    def _gave_up(self, session: _Session, latest: Operation) -> bool:
        """Did the change's migrations fail as often as nicplug allows? Then it is not
        tried again, until the user changes their mind (the opposite operation opened
        since) or the world shows it done (a restart applied it)."""
        if latest.state != "Failed" or latest.migrations_failed < self.config.migration_attempts:
            return False
        opposite = "unplug" if latest.direction == "plug" else "plug"
        other = session.state.ops.get((latest.network, opposite))
        return other is None or other.opened_at <= latest.entered_at

    def _open_invalid(self, session: _Session, comparison: Comparison, now: float) -> None:
        network = comparison.invalid_network
        target = f"invalid:{comparison.invalid}"
        latest = session.state.ops.get((network, "update"))
        if latest is not None and (not latest.terminal or latest.target == target):
            return
        spec = comparison.desired_entry(network)
        if_name = spec.if_name if spec else ""
        self._append_opened(session, network, "update", if_name, target, latest, now)

    def _append_opened(
        self,
        session: _Session,
        network: str,
        direction: Direction,
        if_name: str,
        target: str,
        latest: Operation | None,
        now: float,
    ) -> Operation:
        attempt = latest.attempt + 1 if latest else 1
        stream = stream_of(session.vm_uid, network, direction, attempt)
        payload = {
            "vm": session.vm,
            "vm_uid": session.vm_uid,
            "network": network,
            "if_name": if_name,
            "direction": direction,
            "attempt": attempt,
            "target": target,
            "at": now,
        }
        if self.config.flavour != "deckhouse":
            payload["flavour"] = self.config.flavour
        if self.config.observes:
            payload["mode"] = "observe"
        if latest is not None and latest.state == "Failed" and latest.migrations_failed:
            payload["migrations_failed"] = latest.migrations_failed  # the change's, so far
        return session.append(stream, OPENED, payload)

    # -- effects and timers ---------------------------------------------------------------

    def _effects(
        self,
        session: _Session,
        facts: Facts,
        asked: frozenset[tuple[str, str]],
        now: float,
    ) -> list[EffectRequest]:
        vm = facts.world.vm
        if vm is None:
            return []
        ops = session.state.ops
        comparison = facts.comparison
        needed = []
        if not self.config.observes:  # (observing, the platform writes: nicplug only tells)
            if comparison is not None and comparison.invalid is None:
                needed += pod_patches(facts, ops, vm, comparison)
                needed += kvvm_patch(facts, ops, vm, comparison)
                needed += restarts_and_migrations(facts, ops, vm, self.config)
            needed += conditions(facts, ops, vm, self.config, asked)
        requests = self._issued(session, needed, now) if needed else []
        ended: dict[str, list[Operation]] = {}  # Event reason -> operations, in order
        for stream, path in session.paths.items():
            op = session.state.by_stream(stream)
            if op is None or len(path) < 2:
                continue
            if op.state in OUTCOMES:
                ended.setdefault(f"{op.direction.capitalize()}{op.state}", []).append(op)
            if any(e.stream == stream and e.type == ROLLOUT_BYPASSED for e in session.events):
                bypassed = EmitEvent(
                    vm.namespace, vm.name, "RolloutBypassed",
                    f"{change_in_words(op)} was applied to the running VM although "
                    f"vmRolloutStrategy is Stage (KubeVirt applies NIC changes live); "
                    f"{ROLLOUT_ADVICE}",
                    "Warning", str(stream), len(op.history),
                )  # fmt: skip
                requests.append(bypassed.request(stream))
        for reason, together in ended.items():
            event = self._outcome_event(facts, reason, together)
            requests.append(event.request(together[0].stream))
        for event_ in session.events:
            op = session.state.by_stream(event_.stream)
            told = _waits_for(event_.type, op) if op is not None else None
            if op is None or told is None:
                continue
            reason, detail = told
            warning = EmitEvent(
                vm.namespace, vm.name, f"{op.direction.capitalize()}{reason}",
                f"{change_in_words(op)} is waiting: {detail}",
                "Warning", str(op.stream), len(op.history),
            )  # fmt: skip
            requests.append(warning.request(op.stream))
        return requests

    def _outcome_event(self, facts: Facts, reason: str, ops: list[Operation]) -> EmitEvent:
        """One Event for the operations of this decision that ended up in the same
        outcome (`OUTCOMES`; one user edit asking for two networks gets one Event when
        both attach together), each with the path it took: Warning when they failed or
        wait for a migration."""
        vm = facts.world.vm
        assert vm is not None
        state = ops[0].state
        overridden = (
            kubevirt_overrides(facts, self.config) if state == "MigrationRequired" else None)
        kind: Literal["Normal", "Warning"] = (
            "Warning" if state == "Failed" or overridden or any(
                o.message.startswith(NOT_HOT_PLUGGED) for o in ops) or (
                state == "MigrationRequired" and not kubevirt_migrates(facts)) else "Normal"
        )
        parts = []
        for op in ops:
            part = outcome_in_words(op)
            if op.message:
                part += f": {op.message}"
            parts.append(part + (f" ({op.reason})" if op.reason else ""))
        message = "; ".join(parts)
        blocked = migration_blocked(facts, self.config) if state == "MigrationRequired" else None
        said = [op.message for op in ops if op.message]
        if overridden:
            if not any(overridden in m for m in said):
                message += f"; {overridden}"
        elif state == "MigrationRequired" and kubevirt_migrates(facts):
            if not any(WORKLOAD_UPDATER in m for m in said):
                message += f"; {WORKLOAD_UPDATER}: nicplug follows it"
        elif blocked:
            if not any(blocked in m for m in said):
                message += f"; nicplug will not migrate the VM: {blocked}"
            message += f". {MIGRATION_ADVICE}"
        message += f". Every step: nicplug explain {vm.namespace}/{vm.name}"
        first = ops[0]
        return EmitEvent(vm.namespace, vm.name, reason, message, kind, str(first.stream),
                         len(first.history))

    def _issued(
        self, session: _Session, needed: list[tuple[Operation, AnyEffect]], now: float
    ) -> list[EffectRequest]:
        """The requests of the needed effects not issued recently; journals them."""
        # an effect counts as issued for `effect_reissue_after`; then it is asked for again
        # if the world still needs it (the `reissue` timer makes sure someone looks)
        ops = session.state.ops
        horizon = now - self.config.timeouts.effect_reissue_after
        recent = {op.stream for op in ops.values() if op.issued and op.issued_at > horizon}
        issued = {d for op in ops.values() if op.stream in recent for d in op.issued}
        requests: list[EffectRequest] = []
        fresh: dict[StreamId, list[int]] = {}
        owners: dict[StreamId, Operation] = {}
        for owner, effect in needed:
            request = effect.request(owner.stream)
            digest = key_digest(request.idempotency_key)
            if digest in issued:
                continue
            issued.add(digest)
            requests.append(request)
            fresh.setdefault(owner.stream, []).append(digest)
            owners[owner.stream] = owner
        for stream, digests in fresh.items():
            previous = ops[_slot(owners[stream])].issued if stream in recent else ()
            keys = [*previous, *digests][-KEEP_ISSUED:]
            session.append(stream, EFFECTS_ISSUED, {"digests": keys, "at": now})
        return requests

    def _timers(
        self, session: _Session, facts: Facts, now: float, effects: list[EffectRequest]
    ) -> tuple[tuple[TimerRequest, ...], tuple[TimerCancel, ...]]:
        t = self.config.timeouts
        arm: list[TimerRequest] = []
        cancel: list[TimerCancel] = []
        for stream in session.paths:
            op = session.state.by_stream(stream)
            if op is None:
                continue
            if op.terminal:
                cancel += [TimerCancel(stream, n) for n in (DEADLINE, GRACE, REISSUE)]
                if op.retry_at is not None:
                    arm.append(TimerRequest(stream, RETRY, op.retry_at))
                continue
            limit = budget(op, facts, self.config)
            if limit is None:
                cancel.append(TimerCancel(stream, DEADLINE))
            else:
                arm.append(TimerRequest(stream, DEADLINE, op.deadline_base + limit))
        reissued = {e.stream for e in effects if e.type != EmitEvent.TYPE}
        for stream in sorted(reissued):
            op = session.state.by_stream(stream)
            if op is not None and not op.terminal:
                arm.append(TimerRequest(stream, REISSUE, now + t.effect_reissue_after))
        return tuple(arm), tuple(cancel)


def _read_by_decision(trigger: Trigger) -> bool:
    """Does the decision read its input, not only the world and `now`? Only an
    effect's failure (`_forget_refused`, the rejection guards) and a migration the cap
    held back (`_note_held`); an observation, a timer or an effect done is a decision
    of the world at `now`."""
    return isinstance(trigger, EffectOutcome) and (
        not trigger.ok or bool(trigger.result.get("held"))
    )


def _note_held(session: _Session, trigger: Trigger, now: float) -> None:
    """The executor did not create the migration an operation asked for: nicplug's
    cluster-wide cap on concurrent migrations held it back. Journaled on the operation
    (`MigrationHeld`) when the count or the cap changed, so the condition, the Event and
    `explain` say what it waits for; the migration is asked for again with the
    operation's other effects (`effect_reissue_after`)."""
    if not (
        isinstance(trigger, EffectOutcome)
        and trigger.ok
        and trigger.type == CreateMigration.TYPE
        and trigger.result.get("held")
    ):
        return
    op = session.state.by_stream(trigger.stream)
    if op is None or op.state != "MigrationRequired":
        return  # it moved on meanwhile (another migration of the VMI runs, it ended...)
    held = (int(trigger.result["in_flight"]), int(trigger.result["cap"]))
    if held != op.held:
        payload = {"at": now, "in_flight": held[0], "cap": held[1]}
        session.append(op.stream, MIGRATION_HELD, payload)


def _pause(session: _Session, now: float) -> None:
    """The VM is not live: its operations' budgets stop counting (`Paused`)."""
    for op in list(session.state.ops.values()):
        if not op.terminal and op.paused_at is None:
            session.append(op.stream, PAUSED, {"at": now})


def _resume(session: _Session, now: float) -> None:
    """The VM is live again: the time it was not is credited to each budget."""
    for op in list(session.state.ops.values()):
        if not op.terminal and op.paused_at is not None:
            session.append(op.stream, RESUMED, {"at": now})


def _forget_refused(session: _Session, trigger: Trigger) -> None:
    """An effect refused for a failed precondition (a 409, a failed `test`, a 404) was
    decided from a world that is gone: forget what was issued, so this decision, taken
    from the newer world, asks again at once instead of `effect_reissue_after` later.

    Every operation's memo, not only the refused effect's owner's: a later decision may
    have asked for the same write (same key) under another owner while the refused one
    was still pending, and the outbox took that for the pending one."""
    if not isinstance(trigger, EffectOutcome) or trigger.ok or trigger.permanent:
        return
    for op in list(session.state.ops.values()):
        if op.issued:
            session.append(op.stream, EFFECTS_ISSUED, {"digests": [], "at": op.issued_at})


def _written_anywhere(if_name: str, facts: Facts) -> bool:
    """Does a KVVM or VMI hold this interface name?"""
    return (
        if_name in facts.kvvm_present
        or if_name in facts.vmi_present
        or if_name in facts.attached
    )  # not a launcher pod's request: the pod is rewritten as the pool names it


SDN_WAITS = frozenset({"Requested", "AnnotationPatched"})
"""The plug states in which the SDN's readiness is awaited (in either flavour's order)."""


def _not_yet(op: Operation, facts: Facts) -> str:
    """What the SDN says of a plug still waiting for it ("" when it says nothing), or
    that KubeVirt still gives the dynamic-networks controller its grace."""
    grace = grace_wait(facts, op)
    if grace:
        return grace
    if op.direction != "plug" or op.state not in SDN_WAITS:
        return ""
    return sdn_messages(facts, op.network)


def _first_move(moves: tuple[tuple[Move, tuple[Guard, ...]], ...], ctx: Context) -> Move | None:
    """The first move whose guards all hold (guards are asked in order, lazily)."""
    for move, guards in moves:
        for guard in guards:
            if not guard(ctx):
                break
        else:
            return move
    return None


def _slot(op: Operation) -> tuple[str, str]:
    return (op.network, op.direction)


def _conforms(decider: HotplugDecider) -> Decider[VMState, World]:
    """Never called: mypy checks here that the decider keeps the engine's contract."""
    return decider


__all__ = ["HotplugDecider"]


def _waits_for(type_: str, op: Operation) -> tuple[str, str] | None:
    """What an event saying the operation waits tells the user: the Event's reason (after
    the direction) and its words; None for any other event."""
    if type_ == MIGRATION_HELD and op.held is not None:
        return "WaitingForMigrationSlot", migration_slot_wait(op.held)
    if type_ == WAITING and op.waiting and not op.waiting.startswith(GRACE_WAIT):
        return "WaitingForSDN", f"not yet, the SDN says: {op.waiting}"
    return None


_VERBS = {"plug": "Adding", "unplug": "Removing", "update": "Changing"}
_OUTCOME_WORDS = {
    "Attached": "is done: the running VM has it",
    "Detached": "is done: the running VM no longer has it",
    "RestartRequired": "takes effect at the VM's next restart",
    "MigrationRequired": "waits for the VM to be migrated",
    "Failed": "failed",
    "Cancelled": "was cancelled",
}


def change_in_words(op: Operation) -> str:
    """`Adding Network/user-net`, `Removing the Main network`: an operation as an
    operator names the change (Event notes: `kubectl describe vm`)."""
    network = "the Main network" if op.network == "Main" else op.network
    return f"{_VERBS.get(op.direction, op.direction.capitalize())} {network}"


def outcome_in_words(op: Operation) -> str:
    """Where an operation came to, in words: `Adding Network/x is done: the running VM
    has it`, `Removing the Main network takes effect at the VM's next restart`."""
    return f"{change_in_words(op)} {_OUTCOME_WORDS.get(op.state, f'is {op.state}')}"
