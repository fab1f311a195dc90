"""The runtime: feeds a pure `Decider`, journals its decisions, then carries them out.

Every input of a key (an observation, a timer that fired, an effect's outcome) goes
through the same path, one at a time per key: decide → append the events, the views
derived from them, the effects and the timers in one commit → only then arm the timers
and execute the effects. On start it resumes from the journal: the state of each live
key is the fold of its events, loaded as its snapshots (a cache, `recovery`) plus the
events after them; timers are re-armed, effects without a recorded outcome re-issued.

An effect refused because the world moved (`RetryAfterObservation`) is decided again
with the key's next observation, or at once when one newer than its decision's world
has come in meanwhile (else it would wait for one that already came), or when `seen`
says a newer version came that is the same for decisions.

A key whose world cannot be read is held (`hold`): nothing is decided for it, and the
timers that fire, the outcomes that arrive and the effects due to be attempted (a first
attempt or a retry) meanwhile wait for its next observation, so it is held still rather
than driven from its last readable world. `start(hold=True)`
holds every key the journal resumes until it is first observed: a re-issued effect
waits for the world it will meet.

With `rest`, a key whose inputs are decided and of which nothing is live (every
stream ended or none began, no timer armed, no effect under way, nothing held) leaves
memory, state and last world, as a forgotten key does, and the listeners are told
(`on_rest`); its next input loads it from the journal again. Which keys have rows there
is read once at start and kept current, with or without `rest`: a key without any (an
idle VM that never had an operation, every VM of a replay's lists) starts from its
initial state with no read. At 10,000 VMs most VMs are
idle: their last worlds were most of the memory.

Decisions, timers and backoff take time only from the injected clock (the performance
counter only measures commit latency for listeners), so a virtual clock and a
recording executor replay deterministically. The runtime must never interpret events
or effects itself.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from nicplug.engine.clock import Clock
from nicplug.engine.commit_retry import COMMIT_RETRY, CommitRetries
from nicplug.engine.dispatch import Activity, Dispatch
from nicplug.engine.effects import EffectExecutor, RetryPolicy
from nicplug.engine.errors import JournalClosed, JournalConflict, JournalError, UnknownSchema
from nicplug.engine.journal import Commit, EffectUpdate, Journal, PendingEffect, StoredView
from nicplug.engine.listening import Listeners, RuntimeListener
from nicplug.engine.model import (
    Cause,
    Decider,
    EffectOutcome,
    Input,
    Key,
    Observed,
    RecordedEvent,
    StreamId,
    StreamView,
    TimerCancel,
    TimerFired,
    Trigger,
)
from nicplug.engine.outbox import EffectRunner
from nicplug.engine.recovery import Distrust, rebuild, restore
from nicplug.engine.slicing import LoopSlices

S = TypeVar("S")
W = TypeVar("W")


@dataclass
class _Slot(Generic[S]):
    """What the runtime holds of one key between inputs."""

    state: S
    versions: dict[StreamId, int] = field(default_factory=dict)
    views: dict[StreamId, StreamView] = field(default_factory=dict)
    synced: S | None = None
    """The state every view of which `views` holds already (a decision that appends
    nothing to it has no view to write, and need not list them)."""


Loaded = Mapping[Key, tuple[Sequence[StoredView], Sequence[RecordedEvent]]]
"""Live keys with their read-model rows and the events after those rows' snapshots."""


class Runtime(Generic[S, W]):
    """Runs `decider` over keys. `start()` first; `stop()` to finish.

    `concurrency` bounds how many keys are decided at once; `effects_in_flight` how
    many effects are executed at once (the others wait their turn: a burst of ten
    thousand never means ten thousand requests in flight); `conflict_retries` how often
    a key is reloaded and decided again when its append meets a concurrent writer.
    With `slices`, the decisions and effect attempts of all keys share each turn of the
    event loop's budget (`slicing`); without, a replay's interleaving never depends on
    how long work takes.
    """

    def __init__(
        self,
        decider: Decider[S, W],
        journal: Journal,
        executor: EffectExecutor,
        clock: Clock,
        *,
        concurrency: int = 64,
        effects_in_flight: int = 128,
        retry: RetryPolicy | None = None,
        rng: random.Random | None = None,
        listeners: Sequence[RuntimeListener] = (),
        conflict_retries: int = 5,
        commit_retry: RetryPolicy = COMMIT_RETRY,
        slices: LoopSlices | None = None,
        claim: Callable[[int], Awaitable[bool]] | None = None,
        rest: bool = False,
    ) -> None:
        """`claim(effect_id)`: the journal's claim of an outbox row before each attempt
        (a journal that fences terms); refused with `Deposed`, the effect is not sent.
        `rest`: keys of which nothing is live leave memory once decided."""
        self._rest = rest
        self._decider = decider
        self._journal = journal
        self._clock = clock
        self._listen = Listeners(listeners)
        self._conflict_retries = conflict_retries
        self._activity = Activity()
        self._dispatch = Dispatch(
            self._handle, concurrency=concurrency, activity=self._activity,
            on_error=self._listen.on_error, on_idle=self._evict_if_done, slices=slices,
        )
        rng = rng or random.Random(0)
        self._retries = CommitRetries(
            clock, policy=commit_retry, rng=rng, submit=self._resubmit,
            on_change=self._listen.on_journal,
        )
        self._effects = EffectRunner(
            executor, journal, clock, retry=retry or RetryPolicy(),
            rng=rng, activity=self._activity, listener=self._listen,
            deliver=self._deliver_outcome, journal_health=self._journal_health,
            held=lambda key: key in self._holding,
            park=lambda effect: self._unsent.setdefault(effect.key, []).append(effect),
            in_flight=effects_in_flight, slices=slices, claim=claim,
        )
        self._slots: dict[Key, _Slot[S]] = {}
        self._gone: set[Key] = set()  # forgotten: evicted once nothing of them is live
        self._stored: set[Key] | None = None
        """The keys that have rows in the journal (the others have nothing to load),
        read at start and kept current; None: not known, every key not in memory is
        read."""
        self._worlds: dict[Key, W] = {}
        self._held: dict[Key, list[EffectOutcome]] = {}
        self._holding: set[Key] = set()
        self._held_timers: dict[Key, list[TimerFired]] = {}
        self._unsent: dict[Key, list[PendingEffect]] = {}
        self._observation_numbers = itertools.count(1)
        self._observations: dict[Key, int] = {}
        """key → the number of its latest observation (numbered across keys, so a key
        evicted and observed again still counts on from where it was)"""
        self._decided_on: dict[int, int] = {}
        """effect id → the number of its key's latest observation when it was decided"""
        self._updates: dict[int, EffectUpdate] = {}
        self._timers: dict[tuple[StreamId, str], tuple[float, asyncio.Task[None]]] = {}
        self._timed: dict[Key, int] = {}  # key → how many of `_timers` are its
        self._started = False
        self._stopping = False

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self, *, hold: bool = False, loaded: Loaded | None = None) -> None:
        """Resume from the journal: live keys, armed timers, effects without outcome.
        With `hold`, each resumed key is held until its first observation. `loaded`:
        the live keys' snapshots and the events after them as a standby kept them
        current (`standby.Follower`): they are not read again."""
        if self._started:
            raise RuntimeError("the runtime is started already")
        self._started = True
        # which keys have rows: a key without any starts blank, unread (at 10,000 VMs
        # most never had an operation; a replay starts on an empty journal)
        self._stored = {stored.view.key for stored in await self._journal.views()}
        collecting = gc.isenabled()
        gc.disable()  # loading builds many long-lived objects: collections would only rescan them
        try:
            await self._load(loaded)
        finally:
            if collecting:
                gc.enable()
        timers, outbox = await self._journal.timers(), await self._journal.outbox()
        if hold:
            self._holding.update(self._slots, (t.key for t in timers), (e.key for e in outbox))
        for timer in timers:
            self._arm(timer.key, timer.stream, timer.name, timer.deadline)
        for effect in outbox:
            if effect.key in self._holding:
                self._unsent.setdefault(effect.key, []).append(effect)
            else:
                self._effects.run(effect)

    def hold(self, key: Key) -> None:
        """The world of `key` cannot be read: decide nothing for it until it is observed
        again (timers that fire, outcomes that arrive and effects due to be attempted
        wait for that observation; a request already sent is not called back)."""
        self._worlds.pop(key, None)
        self._holding.add(key)

    async def _load(self, loaded: Loaded | None = None) -> None:
        """Every key with a live stream, from its snapshots and the events after them."""
        if loaded is not None:
            for key, (stored_views, tail) in loaded.items():
                try:
                    self._slots[key] = await self._recovered(key, list(stored_views), list(tail))
                except (JournalError, ValueError, KeyError, TypeError) as error:
                    self._listen.on_error(key, error)
            return
        by_key: dict[Key, list[StoredView]] = {}
        for stored in await self._journal.views(live=True):
            by_key.setdefault(stored.view.key, []).append(stored)
        tails: dict[Key, list[RecordedEvent]] | None = None
        try:
            bulk: dict[Key, list[RecordedEvent]] = {}
            for event in await self._journal.tail(live=True):
                bulk.setdefault(event.key, []).append(event)
            tails = bulk
        except UnknownSchema:
            pass  # some key has an event this code cannot read: read them key by key
        for key, stored_views in by_key.items():
            try:
                tail = list(await self._journal.tail(key=key)) if tails is None else tails.get(
                    key, [])
                self._slots[key] = await self._recovered(key, stored_views, tail)
            except (JournalError, ValueError, KeyError, TypeError) as error:
                # this key cannot be loaded; the others are served (its inputs fail alone)
                self._listen.on_error(key, error)

    async def observe(self, key: Key, world: W, cause: Cause) -> None:
        """The world of `key` is now `world`: decide again (coalescing with any
        observation of the key still waiting)."""
        self._require_running()
        self._gone.discard(key)
        self._worlds[key] = world
        self._observations[key] = next(self._observation_numbers)
        self._holding.discard(key)
        for effect in self._unsent.pop(key, []):
            self._effects.run(effect)
        for outcome in self._held.pop(key, []):
            self._dispatch.submit(key, outcome)
        for fired in self._held_timers.pop(key, []):
            self._dispatch.submit(key, fired)
        self._dispatch.submit(key, Observed(cause))

    def seen(self, key: Key) -> None:
        """A newer version of `key`'s objects came that is the same for decisions as
        its last world (only resourceVersions moved): nothing is decided from it, but
        what waits for the world to move since its decision (an effect refused as
        stale, a 409) is decided again now, from the last world."""
        self._require_running()
        if key in self._holding or key not in self._observations:
            return  # held still, or never observed: its next observation decides
        self._observations[key] = next(self._observation_numbers)
        for outcome in self._held.pop(key, []):
            self._dispatch.submit(key, outcome)

    def forget(self, key: Key) -> None:
        """`key` is gone from the world (nothing of its VM is left). Once its inputs
        are decided and nothing of it is live — every stream's view terminal, no timer
        armed, nothing held — its state and last world leave memory. The journal keeps
        everything: a later input of the key (an effect's outcome, the VM back) loads
        it from there again, as after a restart."""
        self._gone.add(key)
        if not self._dispatch.busy(key):
            self._evict_if_done(key)

    def _evict_if_done(self, key: Key) -> None:
        gone = key in self._gone
        if not gone and not self._rest:
            return
        slot = self._slots.get(key)
        if slot is not None and (set(slot.versions) - set(slot.views) or not all(
                v.terminal for v in slot.views.values())):
            return  # a live stream, or one whose row this process has not seen
        if self._timed.get(key):
            return
        if key in self._holding or self._held.get(key) or self._held_timers.get(key) \
                or self._unsent.get(key):
            return
        if not gone and (self._effects.busy(key) or self._retries.waiting(key)):
            return  # an outcome or a refused input still to decide, from the last world
        if slot is None and key not in self._worlds and key not in self._observations:
            self._gone.discard(key)
            return  # not in memory: nothing to evict
        self._gone.discard(key)
        self._slots.pop(key, None)
        self._worlds.pop(key, None)
        self._observations.pop(key, None)
        if self._stored is not None and slot is not None and slot.versions:
            self._stored.add(key)  # it has rows now: its next input reads them
        if not gone:
            self._listen.on_rest(key)

    async def drain(self) -> None:
        """Wait until nothing is runnable: no input waiting or being decided, no effect
        executing. Timers and backoff waiting on the clock do not count."""
        await self._activity.settled()

    async def stop(self, *, drain: bool = True) -> None:
        """Stop taking inputs; with `drain`, finish what is in flight first. Timers and
        effects still waiting are dropped from memory only: the journal keeps them and
        the next `start` resumes them. `drain=False` is as abrupt as a crash."""
        self._stopping = True
        if drain:
            await self.drain()
        for _, task in self._timers.values():
            task.cancel()
        await asyncio.gather(*(t for _, t in self._timers.values()), return_exceptions=True)
        self._timers.clear()
        self._timed.clear()
        await self._retries.close()
        await self._effects.close()
        await self._dispatch.close()

    @property
    def journal_failing(self) -> JournalError | None:
        """Why the journal refuses writes, while it does (None when it takes them)."""
        return self._retries.failing

    def _require_running(self) -> None:
        if not self._started or self._stopping:
            raise RuntimeError("the runtime is not running (start it; it may be stopping)")

    # -- one input of one key ----------------------------------------------------------

    async def _handle(self, key: Key, trigger: Trigger) -> None:
        """Decide one input of `key`. Should the journal refuse the commit, what the
        input consumed (a fired timer, an effect's recorded outcome) is put back and
        the input is decided again later: nothing is lost and nothing stays wedged."""
        cancels: tuple[TimerCancel, ...] = ()
        updates: tuple[EffectUpdate, ...] = ()
        armed: tuple[float, asyncio.Task[None]] | None = None
        if isinstance(trigger, TimerFired):
            armed = self._timers.get((trigger.stream, trigger.name))
            if armed is None or armed[0] != trigger.deadline:
                self._retries.decided(key, trigger)
                return  # re-armed or cancelled since it fired
            del self._timers[(trigger.stream, trigger.name)]
            self._untimed(key)
            cancels = (TimerCancel(trigger.stream, trigger.name),)
        elif isinstance(trigger, EffectOutcome):
            update = self._updates.pop(trigger.effect_id, None)
            updates = (update,) if update else ()
        try:
            await self._decide_with_retries(key, trigger, cancels, updates)
        except (JournalClosed, UnknownSchema):
            raise  # stopping, or a key this code cannot read: it fails alone, not retried
        except JournalError as error:
            if isinstance(trigger, TimerFired) and armed is not None \
                    and (trigger.stream, trigger.name) not in self._timers:
                self._timers[(trigger.stream, trigger.name)] = armed
                self._timed[key] = self._timed.get(key, 0) + 1
            for update in updates:
                self._updates.setdefault(update.effect_id, update)
            self._retries.failed(key, trigger, error)
        else:
            self._retries.decided(key, trigger)

    async def _decide_with_retries(
        self, key: Key, trigger: Trigger,
        cancels: tuple[TimerCancel, ...], updates: tuple[EffectUpdate, ...],
    ) -> None:
        cause = _cause_of(trigger)
        slot = await self._slot(key)
        for _ in range(self._conflict_retries + 1):
            try:
                await self._decide(key, slot, trigger, cause, cancels, updates)
                return
            except JournalConflict as conflict:
                slot = await self._reload(key)
                slot.versions[StreamId(conflict.stream)] = max(
                    conflict.actual, slot.versions.get(StreamId(conflict.stream), 0)
                )
        raise RuntimeError(f"key {key}: still conflicting after {self._conflict_retries} retries")

    def _resubmit(self, key: Key, trigger: Trigger) -> None:
        if not self._stopping:
            self._dispatch.submit(key, trigger)

    def _journal_health(self, error: JournalError | None) -> None:
        if error is None:
            self._retries.wrote()
        elif not isinstance(error, JournalClosed | JournalConflict):
            self._retries.journal_failed(error)

    async def _decide(
        self, key: Key, slot: _Slot[S], trigger: Trigger, cause: Cause,
        cancels: tuple[TimerCancel, ...], updates: tuple[EffectUpdate, ...],
    ) -> None:
        now, wall = self._clock.now(), self._clock.wall()
        observations = self._observations.get(key, 0)
        decision = self._decider.decide(slot.state, Input(key, self._worlds.get(key), trigger), now)
        state, versions = slot.state, dict(slot.versions)
        for event in decision.events:
            versions[event.stream] = versions.get(event.stream, 0) + 1
            state = self._decider.evolve(state, RecordedEvent(
                stream=event.stream, key=key, version=versions[event.stream], position=0,
                type=event.type, schema_version=event.schema_version, payload=event.payload,
                cause=cause, wall_time=wall, logical_time=now,
            ))
        views: tuple[StreamView, ...] = ()
        if decision.events or slot.synced is not state:
            views = tuple(v for v in self._decider.views(state) if slot.views.get(v.stream) != v)
        commit = Commit(
            key=key, cause=cause, wall_time=wall, logical_time=now, events=decision.events,
            expected={s: slot.versions.get(s, 0) for s in dict.fromkeys(
                e.stream for e in decision.events)},
            views=views, effects=decision.effects, timers=decision.timers,
            cancel_timers=cancels + decision.cancel_timers, effect_updates=updates,
        )
        if not (commit.events or views or commit.effects or commit.timers
                or commit.cancel_timers or updates):
            slot.synced = state
            return
        started = time.perf_counter()
        appended = await self._journal.append(commit)
        if appended.duplicate:
            await self._reload(key)
            return
        recorded_events = appended.events  # built on each ask: once
        self._listen.on_commit(key, time.perf_counter() - started, len(recorded_events))
        slot.state, slot.versions = state, versions
        slot.views.update((v.stream, v) for v in views)
        slot.synced = state
        for cancel in decision.cancel_timers:
            armed = self._timers.pop((cancel.stream, cancel.name), None)
            if armed is not None:
                armed[1].cancel()
                self._untimed(key)
        for timer in decision.timers:
            self._arm(key, timer.stream, timer.name, timer.deadline)
        for recorded in recorded_events:
            self._listen.on_transition(recorded)
        for request, enqueued in zip(decision.effects, appended.effects, strict=True):
            if enqueued.new:
                self._decided_on[enqueued.id] = observations
                self._effects.run(PendingEffect(
                    id=enqueued.id, stream=request.stream, key=key, type=request.type,
                    payload=request.payload, idempotency_key=request.idempotency_key,
                    status="issued", attempts=0, next_attempt_at=None, last_error=None,
                ))

    # -- state of keys -----------------------------------------------------------------

    async def _slot(self, key: Key) -> _Slot[S]:
        slot = self._slots.get(key)
        if slot is None:
            if self._stored is not None and key not in self._stored:  # no rows to read
                slot = self._slots[key] = _Slot(self._decider.initial(key))
            else:
                slot = await self._reload(key)
        return slot

    async def _reload(self, key: Key) -> _Slot[S]:
        stored = list(await self._journal.views(key=key))
        tail = list(await self._journal.tail(key=key)) if stored else []
        slot = await self._recovered(key, stored, tail)
        self._slots[key] = slot
        return slot

    async def _recovered(
        self, key: Key, stored: list[StoredView], tail: list[RecordedEvent]
    ) -> _Slot[S]:
        """The state of `key`: its snapshots plus the events after them, or, when a
        snapshot cannot be trusted, the fold of all its events (said in the log and to
        the listeners)."""
        if not stored:
            return _Slot(self._decider.initial(key))
        loaded = restore(self._decider, key, stored, tail)
        if isinstance(loaded, Distrust):
            self._listen.on_rebuild(key, loaded.reason)
            archived = [s.view for s in stored if s.archived is not None]
            loaded = rebuild(
                self._decider, key, archived, await self._journal.events_of(key=key)
            )
            return _Slot(loaded, versions={s.view.stream: s.version for s in stored})
        return _Slot(
            loaded,
            versions={s.view.stream: s.version for s in stored},
            views={s.view.stream: s.view for s in stored if s.through == s.version},
        )

    def state_of(self, key: Key) -> S | None:
        """The in-memory state of a key, if loaded (for inspection and tests)."""
        slot = self._slots.get(key)
        return slot.state if slot else None

    def remembers(self, key: Key) -> bool:
        """Whether anything of `key` is held in memory: its state, last world, latest
        observation's number, inputs held for it (for inspection and tests)."""
        return any(key in table for table in (
            self._slots, self._worlds, self._observations, self._held, self._holding,
            self._held_timers, self._unsent, self._gone))

    # -- timers and effect outcomes ----------------------------------------------------

    def _arm(self, key: Key, stream: StreamId, name: str, deadline: float) -> None:
        previous = self._timers.pop((stream, name), None)
        if previous is not None:
            previous[1].cancel()
        else:
            self._timed[key] = self._timed.get(key, 0) + 1
        task = asyncio.create_task(self._wait(key, TimerFired(stream, name, deadline)))
        self._timers[(stream, name)] = (deadline, task)

    def _untimed(self, key: Key) -> None:
        left = self._timed.get(key, 0) - 1
        if left > 0:
            self._timed[key] = left
        else:
            self._timed.pop(key, None)

    async def _wait(self, key: Key, fired: TimerFired) -> None:
        await self._clock.sleep_until(fired.deadline)
        if key in self._holding:
            self._held_timers.setdefault(key, []).append(fired)
            return
        # A held outcome waits for the world to move; a timer is the machine's own
        # word that it has waited long enough (e.g. to re-issue what the world never
        # answered). Deliver the outcome first, or the re-issued effect finds the held
        # one still pending under its key, is not enqueued, and nothing is ever sent.
        for outcome in self._held.pop(key, []):
            self._dispatch.submit(key, outcome)
        self._dispatch.submit(key, fired)

    def _deliver_outcome(
        self, key: Key, outcome: EffectOutcome, update: EffectUpdate, *, hold: bool
    ) -> None:
        self._updates[outcome.effect_id] = update
        decided_on = self._decided_on.pop(outcome.effect_id, 0)
        latest = self._observations.get(key)
        # No number but a decision after an observation: the key was forgotten and
        # evicted since (its VM is gone), and no observation will come to wait for.
        if hold and (latest > decided_on if latest is not None else decided_on > 0):
            hold = False  # the world it waits for is observed already: decide now
        if hold or key in self._holding:
            self._held.setdefault(key, []).append(outcome)
        else:
            self._dispatch.submit(key, outcome)


def _cause_of(trigger: Trigger) -> Cause:
    if isinstance(trigger, Observed):
        return trigger.cause
    if isinstance(trigger, TimerFired):
        ref = f"timer:{trigger.name}@{trigger.deadline}"
        return Cause("timer", ref, dedup_key=ref)
    ref = f"effect:{trigger.effect_id}"
    return Cause("effect", ref, dedup_key=ref)
