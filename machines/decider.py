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

The decider is the façade of the rooms that do the work, each a module of its own:
`session.py` (the decision being built, folding as it appends; the budgets' pauses and
the issued effects' memos), `walking.py` (an operation's graph walked as far as the
world allows), `opening.py` (operations opened for changes nobody handles),
`issuing.py` (the effects and the Events), `timers.py` (deadlines, reissues, retries).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nicplug.engine.model import (
    Decider,
    Decision,
    Input,
    Key,
    RecordedEvent,
    StreamView,
)
from nicplug.machines.candidates import changes_needing_operations
from nicplug.machines.facts import facts_of, same_for_decisions
from nicplug.machines.guards import budget_when
from nicplug.machines.issuing import OUTCOMES, effects_of
from nicplug.machines.opening import open_invalid, open_operation
from nicplug.machines.operation import SNAPSHOT_SCHEMA, VMState
from nicplug.machines.policy import MachineConfig
from nicplug.machines.session import (
    Fold,
    Session,
    forget_refused,
    note_held,
    pause,
    read_by_decision,
    resume,
)
from nicplug.machines.timers import (
    DEADLINE,
    GRACE,
    REISSUE,
    RETRY,
    issued_recently,
    timers_of,
)
from nicplug.machines.walking import Walker
from nicplug.machines.world import World

NOTHING = Decision()


@dataclass(slots=True)
class _Quiet:
    """A state settled for a world: by whom, of what (the latest world seen equal to
    it, so no older world is kept alive), whether the VM ran, and how every test of
    `now` came out."""

    decider: HotplugDecider
    world: World
    live: bool
    timing: tuple[bool, ...]


class HotplugDecider:
    """Implements `nicplug.engine.model.Decider[VMState, World]`."""

    snapshot_schema = SNAPSHOT_SCHEMA

    def __init__(self, config: MachineConfig | None = None) -> None:
        self.config = config or MachineConfig()
        self._walker = Walker(self.config)
        self._folds: tuple[Fold, ...] = ()

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
            and not read_by_decision(trigger)
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
        session = Session(state, f"{vm.namespace}/{vm.name}" if vm else "", vm.uid if vm else "")
        forget_refused(session, trigger)
        if facts.live:
            resume(session, now)
        asked: frozenset[tuple[str, str]] = frozenset()
        comparison = facts.comparison
        if comparison is not None and comparison.invalid is not None:
            asked = frozenset({(comparison.invalid_network, "update")})
            open_invalid(self.config, session, comparison, now)
            for op in list(session.state.ops.values()):
                if op.target.startswith("invalid:") and not op.terminal:
                    self._walker.walk(session, op, facts, now, trigger)
        else:
            for slot in sorted(state.ops):
                op = session.state.ops[slot]
                if not op.terminal:
                    self._walker.walk(session, op, facts, now, trigger)
            if comparison is not None:
                candidates = changes_needing_operations(
                    session.state, facts, comparison, self.config
                )
                asked = frozenset((c.network, c.direction) for c in candidates)
                for c in candidates:
                    opened = open_operation(self.config, session, c, facts, now)
                    if opened is not None:
                        self._walker.walk(session, opened, facts, now, trigger)
        note_held(session, trigger, now)
        if not facts.live:
            pause(session, now)
        effects = effects_of(self.config, session, facts, asked, now)
        timers, cancels = timers_of(self.config, session, facts, now, effects)
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
        retried (`opening.py`), are its issued effects still recent (`issuing.py`)?"""
        timing: list[bool] = []
        for op in state.ops.values():
            if op.terminal:
                timing.append(op.retry_at is not None and now < op.retry_at)
            else:
                limit = budget_when(op, live, self.config)
                timing.append(limit is not None and now >= op.deadline_base + limit)
            timing.append(issued_recently(op, self.config, now))
        return tuple(timing)


def _conforms(decider: HotplugDecider) -> Decider[VMState, World]:
    """Never called: mypy checks here that the decider keeps the engine's contract."""
    return decider


__all__ = ["DEADLINE", "GRACE", "OUTCOMES", "REISSUE", "RETRY", "HotplugDecider"]
