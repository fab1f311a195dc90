"""Replaying a tape: the controller's own decision code, a virtual clock, no server.

Watch events go through `Observing` (index → dirty VMs → assembled worlds →
`runtime.observe`), exactly as in `nicplug run`, each object cut to what nicplug reads
of it as the live informers cut it (`cache_projection`: an event that changes nothing
read touches no VM), into a `Runtime` over the
`HotplugDecider`, with a `VirtualClock` and an executor that only writes effects down.
Time is every line's `at` (bookmarks, ERROR and EFFECT lines too, so a quiet period
recorded as bookmarks fires its timers), or one second after the previous event where
an event has none. Time never goes backwards: a line whose `at` is before the clock is
reported with its number (`--strict` refuses it) and taken at the clock's time. Like
the live controller, nothing is observed until the initial events (the lists) are all
in (`_Listing`). Events sharing one `at` are applied together and observed once per
VM, as the live controller coalesces a burst; timers due at or before a line's time
fire before it is fed; after each moment the runtime is drained, so the order of
everything is fixed and the same tape gives the same journal and the same report. The
replay ends at the last line's time, or at `until` (`Until`): an absolute time stops
it there, a duration lets that much time pass after the last line. There is no world
reaction to effects: the tape holds the world's reactions as they were recorded.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nicplug.adapters.core.observing import Observing
from nicplug.adapters.core.settings import Settings
from nicplug.adapters.core.worldview import cache_projection
from nicplug.adapters.heap import loading_long_lived
from nicplug.adapters.kube.flavour import DECKHOUSE, UPSTREAM, Flavour, with_dialect
from nicplug.adapters.kube.resources import object_key
from nicplug.adapters.sdn import dialect_for
from nicplug.adapters.tapes.framing import Overlong, Readable, lines_of
from nicplug.adapters.tapes.lines import (
    InitialEventsEnd,
    Malformed,
    TapedEffect,
    WatchEvent,
)
from nicplug.adapters.tapes.reader import Item, TapeReader, TapeStats
from nicplug.adapters.tapes.times import format_at
from nicplug.adapters.tapes.writer import effect_target
from nicplug.engine.clock import VirtualClock
from nicplug.engine.journal import PendingEffect, StoredView
from nicplug.engine.listening import RuntimeListener
from nicplug.engine.model import Key
from nicplug.engine.runtime import Runtime
from nicplug.engine.sqlite_inline import connect_inline
from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.engine.sqlite_opening import MEMORY
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.operation import VMState
from nicplug.machines.versions import schemas
from nicplug.machines.world import World

KEEP_MALFORMED = 100
"""Malformed lines kept for the report (all are counted)."""
LOAD_WITHOUT_COLLECTOR = 600.0
"""Seconds of wall time the initial events may load with the cyclic collector held off
(`heap.py`); a tape whose lists take longer gets it back then."""


class TapeMalformed(Exception):
    """A malformed line, or time going backwards, in a `--strict` replay."""

    def __init__(self, malformed: Malformed) -> None:
        super().__init__(f"line {malformed.line}: {malformed.problem}")
        self.malformed = malformed


@dataclass(frozen=True, slots=True)
class Until:
    """Where a replay ends: at `moment` (epoch seconds; later lines are not fed), or
    `after` seconds past the last line's time."""

    moment: float | None = None
    after: float | None = None


@dataclass(frozen=True, slots=True)
class ReplayedEffect:
    type: str
    target: str
    at: float


@dataclass(frozen=True, slots=True)
class OperationRow:
    vm: str
    network: str
    direction: str
    attempt: int
    state: str
    reason: str | None
    history: tuple[str, ...]


@dataclass
class ReplayResult:
    operations: list[OperationRow] = field(default_factory=list)
    effects: list[ReplayedEffect] = field(default_factory=list)
    taped: list[TapedEffect] = field(default_factory=list)
    malformed: list[Malformed] = field(default_factory=list)
    backwards: list[Malformed] = field(default_factory=list)
    """Lines whose `at` was before the clock (first `KEEP_MALFORMED`)."""
    backwards_count: int = 0
    stopped_at_line: int | None = None
    """The first line not fed because it is after `Until.moment`."""
    stats: TapeStats = field(default_factory=TapeStats)
    observations: int = 0
    held: frozenset[str] = frozenset()
    errors: list[str] = field(default_factory=list)
    started: float | None = None
    ended: float | None = None

    def effects_by_type(self) -> list[tuple[str, int]]:
        counts: dict[str, int] = {}
        for effect in self.effects:
            counts[effect.type] = counts.get(effect.type, 0) + 1
        return sorted(counts.items())


class EffectLog:
    """The replay's executor: executes nothing, writes down type, target and time."""

    def __init__(self, clock: VirtualClock) -> None:
        self._clock = clock
        self.effects: list[ReplayedEffect] = []

    async def execute(self, effect: PendingEffect) -> Mapping[str, Any]:
        self.effects.append(ReplayedEffect(effect.type, effect_target(effect), self._clock.now()))
        return {}


class _Errors(RuntimeListener):
    def __init__(self) -> None:
        self.errors: list[str] = []

    def on_error(self, key: Key, error: BaseException) -> None:
        self.errors.append(f"{key}: {error}")


_FLAVOUR_MARKS = (
    (b'"apiVersion":"' + DECKHOUSE.kvvms.group.encode() + b"/", DECKHOUSE),
    (b'"apiVersion":"' + UPSTREAM.kvvms.group.encode() + b"/", UPSTREAM),
)


def sniff_flavour(
    lines: Iterable[bytes | Overlong], *, default: Flavour
) -> tuple[Flavour, Iterable[bytes | Overlong]]:
    """The KubeVirt API flavour whose names the tape holds (the first KubeVirt object
    tells), and the lines unchanged; `default` when no line names a KubeVirt kind.
    Only the lines up to that object are held in memory."""
    iterator = iter(lines)
    seen: list[bytes | Overlong] = []
    found = default
    for line in iterator:
        seen.append(line)
        if isinstance(line, Overlong):
            continue
        compact = line.replace(b" ", b"")
        match = next((f for mark, f in _FLAVOUR_MARKS if mark in compact), None)
        if match is not None:
            found = match
            break
    return found, itertools.chain(seen, iterator)


class Replay:
    """One replay of one tape; `run(lines)` returns the result."""

    def __init__(
        self, settings: Settings, *, journal: Path | None = None, strict: bool = False,
        until: Until | None = None,
    ) -> None:
        self.settings = settings
        self.journal_path = journal
        self.strict = strict
        self.until = until or Until()
        self.clock = VirtualClock()
        self._dialect = dialect_for(
            settings.dialect, cluster_nad_namespace=settings.cluster_network_namespace
        )
        self._flavour = settings.flavour()
        self._observing = Observing(self._dialect, self._flavour, scope=settings.scope())
        self._projections: dict[str, Callable[[dict[str, Any]], dict[str, Any]] | None] = {}

    async def run(self, lines: Readable | Iterable[bytes | Overlong]) -> ReplayResult:
        """Replay a tape: a binary stream, or its lines already cut."""
        if self.settings.kubevirt_api is None:
            cut = lines_of(lines) if isinstance(lines, Readable) else lines
            flavour, lines = sniff_flavour(cut, default=self.settings.flavour())
            flavour = with_dialect(flavour, self.settings.dialect)
            self._flavour = flavour
            self._observing = Observing(self._dialect, flavour, scope=self.settings.scope())
        journal = await SQLiteJournal.open(
            str(self.journal_path) if self.journal_path else MEMORY, synchronous="NORMAL",
            # one key decided at a time, each commit awaited: no hop to a thread and back
            schemas=schemas(), connect=connect_inline,
        )
        executor = EffectLog(self.clock)
        errors = _Errors()
        # One key decided at a time: the journal's order then never depends on timing.
        runtime: Runtime[VMState, World] = Runtime(
            # restarts as the tape's cluster performs them (its flavour's names tell)
            HotplugDecider(replace(self.settings.machine_config(),
                                   restarts=self._flavour.restarts)),
            journal, executor, self.clock,
            concurrency=1, listeners=[errors],
        )
        result = ReplayResult()
        reader = TapeReader(lines)
        try:
            await runtime.start()
            try:
                await self._feed(reader, runtime, result)
            finally:
                await runtime.stop()
            result.operations = _rows(await journal.views())
        finally:
            await journal.close()
        result.stats = reader.stats
        result.effects = executor.effects
        result.held = self._observing.held
        result.errors = errors.errors
        return result

    async def _feed(
        self, reader: TapeReader, runtime: Runtime[VMState, World], result: ReplayResult
    ) -> None:
        listing = _Listing()
        # as the controller loads its lists: the cyclic collector held off while the
        # initial events build the cache, which is then frozen out of its way
        loading = ExitStack()
        loading.enter_context(loading_long_lived(
            at_most=LOAD_WITHOUT_COLLECTOR, later=asyncio.get_running_loop().call_later))
        try:
            await self._feed_lines(reader, runtime, result, listing, loading)
        finally:
            loading.close()

    async def _feed_lines(
        self, reader: TapeReader, runtime: Runtime[VMState, World], result: ReplayResult,
        listing: _Listing, loading: ExitStack,
    ) -> None:
        moment: float | None = None
        changed, projected = self._observing.changed, self._projected
        for item in reader:
            if (type(item) is WatchEvent and moment is not None and item.at == moment
                    and not listing.active):
                # most lines: an event of the moment being fed, the lists done; the
                # clock, `until` and the listing were settled by the moment's first line
                changed(item.kind, item.type, projected(item))
                continue
            if isinstance(item, Malformed):
                if self.strict:
                    raise TapeMalformed(item)
                if len(result.malformed) < KEEP_MALFORMED:
                    result.malformed.append(item)
                continue
            at = self._time_of(item, moment, result)
            if at is not None and self.until.moment is not None and at > self.until.moment:
                result.stopped_at_line = item.line
                if isinstance(item, WatchEvent):
                    reader.stats.events -= 1  # read, but not fed
                break
            if isinstance(item, TapedEffect):
                result.taped.append(item)
            elif _ends_listing(item, listing) and listing.ends():
                result.observations += await self._settle(runtime)
                loading.close()
            if at is not None and at != moment:
                if not listing.active:
                    result.observations += await self._settle(runtime)
                await self._until(at, runtime)
                moment = at
                if result.started is None:
                    result.started = at
            if isinstance(item, WatchEvent):
                self._observing.changed(item.kind, item.type, self._projected(item))
        result.observations += await self._settle(runtime)
        end = self.until.moment
        if self.until.after is not None:
            end = (moment if moment is not None else self.clock.now()) + self.until.after
        if end is not None and end > self.clock.now():
            await self._until(end, runtime)
            result.observations += await self._settle(runtime)
            moment = end
        result.ended = moment

    def _projected(self, event: WatchEvent) -> dict[str, Any]:
        """The object as a live informer hands it on: only what nicplug reads of it."""
        name = event.kind.name
        try:
            project = self._projections[name]
        except KeyError:
            project = self._projections[name] = cache_projection(event.kind)
        return event.object if project is None else project(event.object)

    def _time_of(self, item: Item, moment: float | None, result: ReplayResult) -> float | None:
        """The time a line moves the clock to (None: it does not); a line whose `at` is
        before the clock is reported and taken at the clock's time."""
        at = item.at if not isinstance(item, Malformed) else None
        if at is None:
            return (moment or 0.0) + 1.0 if isinstance(item, WatchEvent) else None
        now = self.clock.now()
        if moment is None or at >= now:
            return at
        went_back = Malformed(item.line, (
            f"time goes backwards: at {format_at(at)} is {now - at:.3f} s before the "
            f"replay's clock ({format_at(now)})"))
        if self.strict:
            raise TapeMalformed(went_back)
        result.backwards_count += 1
        if len(result.backwards) < KEEP_MALFORMED:
            result.backwards.append(went_back)
        return now

    async def _settle(self, runtime: Runtime[VMState, World]) -> int:
        """Observe the VMs the current moment changed, and wait until all is decided."""
        fed = await self._observing.feed(runtime)
        await runtime.drain()
        return fed

    async def _until(self, moment: float, runtime: Runtime[VMState, World]) -> None:
        """Fire every timer due at or before `moment`, in deadline order."""
        while True:
            deadline = self.clock.next_deadline()
            if deadline is None or deadline > moment:
                break
            self.clock.set(max(deadline, self.clock.now()))
            await runtime.drain()
        self.clock.set(moment)


def _ends_listing(item: Item, listing: _Listing) -> bool:
    if isinstance(item, InitialEventsEnd):
        return True
    return isinstance(item, WatchEvent) and not listing.goes_on(item)


class _Listing:
    """The initial events: what a tape holds before its first change.

    The live controller decides nothing until every kind is listed; a replay does the
    same. The initial events end at the `k8s.io/initial-events-end` bookmark a
    recording writes, or else (a tape made with kubectl) at the first event that is
    not ADDED, or that adds an object already added (a second listing).
    """

    def __init__(self) -> None:
        self.active = True
        self._seen: set[tuple[str, str]] = set()

    def goes_on(self, event: WatchEvent) -> bool:
        if not self.active:
            return False
        if event.type != "ADDED":
            return False
        try:
            key = (event.kind.name, object_key(event.object))
        except ValueError:
            return True
        if key in self._seen:
            return False
        self._seen.add(key)
        return True

    def ends(self) -> bool:
        """End the listing; True when it was still going on."""
        was, self.active = self.active, False
        self._seen = set()
        return was


def _rows(stored: Iterable[StoredView]) -> list[OperationRow]:
    rows = []
    for s in stored:
        snap = s.view.snapshot
        rows.append(OperationRow(
            vm=str(snap.get("vm", "")), network=str(snap.get("network", "")),
            direction=str(snap.get("direction", "")), attempt=int(snap.get("attempt", 0)),
            state=s.view.state, reason=snap.get("reason"),
            history=tuple(str(h) for h in snap.get("history", ())),
        ))
    rows.sort(key=lambda r: (r.vm, r.network, r.direction, r.attempt))
    return rows
