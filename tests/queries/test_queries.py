"""The journal queries over a journal written by the real decider through the runtime."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nicplug.adapters.queries import (
    Ambiguous,
    Selection,
    dossier,
    duration,
    explanation,
    open_for_queries,
    operations,
    resolve,
    stuck,
    timeline,
)
from nicplug.adapters.queries.explaining import GUARD_PHRASES, TIMER_PHRASES
from nicplug.engine.journal import Commit
from nicplug.engine.model import Cause, Key, NewEvent, StreamId, StreamView
from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.machines import decider
from nicplug.machines.graph import MOVES
from tests.engine.journal_support import opened
from tests.queries.journal_worlds import NOW

HAPPY = ["Requested", "AnnotationPatched", "SDNReady", "VMIPatched", "Attached"]
UNPLUG = ["Requested", "VMIPatched", "GuestDetached", "AnnotationPatched", "SDNReleased",
          "Detached"]


@pytest.fixture
async def journal(standard_journal: Path) -> AsyncIterator[SQLiteJournal]:
    j = await open_for_queries(standard_journal)
    try:
        yield j
    finally:
        await j.close()


def _id(vm: str, network: str = "Network/x", direction: str = "plug", attempt: int = 1) -> str:
    return f"uid-{vm}/{network}/{direction}/{attempt}"


async def test_every_operation_with_its_state(journal: SQLiteJournal) -> None:
    found = {(o.vm, o.network, o.direction, o.attempt): (o.state, o.reason)
             for o in await operations(journal)}
    assert found == {
        ("ns/failing", "Network/x", "plug", 1): ("Failed", "SDNError"),
        ("ns/failing", "Network/x", "plug", 2): ("Failed", "SDNError"),
        ("ns/failing", "Network/x", "plug", 3): ("Failed", "SDNError"),
        ("ns/flaky", "Network/x", "plug", 1): ("SDNReady", None),
        ("ns/plugged", "Network/x", "plug", 1): ("Attached", None),
        ("ns/rejected", "Network/x", "plug", 1): ("Failed", "PatchRejected"),
        ("ns/rejected", "Network/x", "plug", 2): ("Attached", None),
        ("ns/silent", "ClusterNetwork/y", "plug", 1): ("AnnotationPatched", None),
        ("ns/staged", "Network/x", "plug", 1): ("RestartRequired", None),
        ("ns/unplugged", "Network/x", "plug", 1): ("Attached", None),
        ("ns/unplugged", "Network/x", "unplug", 1): ("Detached", None),
    }
    plugged = next(o for o in await operations(journal) if o.vm == "ns/plugged")
    assert plugged.history == HAPPY and plugged.terminal
    assert plugged.id == _id("plugged")


async def test_filters_narrow_the_answer(journal: SQLiteJournal) -> None:
    async def ids(**given: str) -> list[str]:
        return [o.id for o in await operations(journal, Selection.checked(**given))]

    assert await ids(vm="ns/unplugged") == [_id("unplugged"), _id("unplugged", direction="unplug")]
    assert await ids(state="Failed") == [_id("failing", attempt=n) for n in (1, 2, 3)] + [
        _id("rejected")]
    assert await ids(network="ClusterNetwork/y") == [_id("silent", "ClusterNetwork/y")]
    assert await ids(vm="ns/unplugged", direction="unplug") == [
        _id("unplugged", direction="unplug")]
    assert await ids(vm="ns/plugged", state="Failed") == []
    assert await ids(vm="ns/nobody") == []


@pytest.mark.parametrize(("field", "value"), [
    ("vm", "plugged"), ("vm", "ns/plugged' OR '1'='1"), ("vm", "NS/Upper"),
    ("network", "user-net"), ("network", "Network/"), ("network", "Pod/x"),
    ("state", "attached"), ("state", "Bogus"), ("direction", "sideways"),
])
def test_bad_selections_are_refused_with_what_was_expected(field: str, value: str) -> None:
    with pytest.raises(ValueError) as refused:
        Selection.checked(**{field: value})
    assert repr(value) in str(refused.value)


async def test_a_timeline_has_each_step_with_its_cause(journal: SQLiteJournal) -> None:
    line = await timeline(journal, _id("plugged"))
    assert line is not None
    moves = [(s.source, s.to) for s in line.steps if s.type == "Transitioned"]
    assert moves == list(itertools.pairwise(HAPPY))
    assert line.steps[0].type == "Opened"
    assert all(s.cause.kind == "observation" for s in line.steps)
    assert all(s.cause.ref.startswith("VirtualMachine/ns/plugged@") for s in line.steps)
    assert [s.at for s in line.steps] == sorted(s.at for s in line.steps)
    assert all(s.wall.endswith("Z") for s in line.steps)
    patch = next(e for e in line.effects if e.type == "PatchVirtualMachine")
    assert (patch.outcome, patch.attempts, patch.target) == ("succeeded", 3, "ns/plugged")
    pods = next(e for e in line.effects if e.type == "PatchPodNetworks")
    assert (pods.outcome, pods.target) == ("succeeded", "ns/virt-launcher-plugged-1")


async def test_a_step_caused_by_an_effect_or_a_timer_says_so(journal: SQLiteJournal) -> None:
    rejected = await timeline(journal, _id("rejected"))
    assert rejected is not None
    failed = rejected.steps[-1]
    assert (failed.to, failed.reason, failed.message) == (
        "Failed", "PatchRejected", "admission webhook denied it")
    effect = next(e for e in rejected.effects if e.type == "PatchPodNetworks")
    assert (effect.outcome, effect.last_error) == ("failed", "admission webhook denied it")
    assert (failed.cause.kind, failed.cause.ref) == ("effect", f"effect:{effect.id}")
    retried = await timeline(journal, _id("failing", attempt=2))
    assert retried is not None
    assert (retried.steps[0].type, retried.steps[0].cause.kind) == ("Opened", "timer")
    assert retried.steps[0].cause.ref.startswith("timer:retry@")


async def test_an_effect_still_retrying_shows_its_last_error(journal: SQLiteJournal) -> None:
    line = await timeline(journal, _id("flaky"))
    assert line is not None
    patch = next(e for e in line.effects if e.type == "PatchVirtualMachine")
    assert patch.outcome == "retrying" and patch.attempts >= 2
    assert patch.last_error == "429 Too Many Requests"
    assert patch.next_attempt_at is not None and patch.next_attempt_at > patch.issued_at


async def test_stuck_is_live_and_still_for_longer_than_asked(journal: SQLiteJournal) -> None:
    ids = [o.id for o in await stuck(journal, older_than=5, now=NOW)]
    assert sorted(ids) == sorted([_id("staged"), _id("silent", "ClusterNetwork/y"), _id("flaky")])
    # staged entered RestartRequired at 0, the others moved at 1
    assert [o.id for o in await stuck(journal, older_than=NOW - 0.5, now=NOW)] == [_id("staged")]
    assert await stuck(journal, older_than=NOW + 1, now=NOW) == []


async def test_explain_a_live_operation(journal: SQLiteJournal) -> None:
    found = await explanation(journal, _id("silent", "ClusterNetwork/y"), now=NOW)
    assert found is not None
    assert found.operation.state == "AnnotationPatched"
    assert {m.to for m in found.waits_for} == {"SDNReady", "VMIPatched"}
    assert "reports the entry ready" in found.waits_for[0].meaning
    assert {m.trigger for m in found.ends_if} >= {"SDNTimeout", "Reverted", "SDNError"}
    assert found.next_timer is not None
    assert (found.next_timer.name, found.next_timer.deadline) == ("deadline", 121.0)
    assert found.next_timer.due_in == 91.0
    assert found.in_state_for == NOW - 1.0
    assert found.last_observation is not None
    assert found.last_observation.ref.startswith("VirtualMachine/ns/silent@")
    flaky = await explanation(journal, _id("flaky"), now=NOW)
    assert flaky is not None
    assert [e.type for e in flaky.pending_effects] == ["PatchVirtualMachine"]
    assert "PatchVirtualMachine ns/flaky (retrying)" in flaky.summary


async def test_explain_finished_and_superseded_operations(journal: SQLiteJournal) -> None:
    done = await explanation(journal, _id("plugged"), now=NOW)
    assert done is not None and done.summary == "done: Attached is terminal"
    assert done.waits_for == [] and done.next_timer is None
    first = await explanation(journal, _id("failing"), now=NOW)
    assert first is not None and first.superseded_by == _id("failing", attempt=3)
    last = await explanation(journal, _id("failing", attempt=3), now=NOW)
    assert last is not None and last.superseded_by is None
    assert last.next_timer is not None and last.next_timer.name == "retry"
    assert "a new attempt may open in" in last.summary
    staged = await explanation(journal, _id("staged"), now=NOW)
    assert staged is not None
    assert {m.to for m in staged.waits_for} == {"Requested", "VMIPatched"}
    assert await explanation(journal, "no/such/op", now=NOW) is None


async def test_a_dossier_is_the_timeline_and_the_explanation(journal: SQLiteJournal) -> None:
    found = await dossier(journal, _id("staged"), now=NOW)
    assert found is not None
    assert found.timeline.operation == found.explain.operation
    assert [s.to for s in found.timeline.steps] == [None, "RestartRequired"]
    assert found.timeline.steps[1].message == "added, vmRolloutStrategy is Stage"


async def test_resolve_names_an_operation(journal: SQLiteJournal) -> None:
    assert await resolve(journal, _id("plugged")) == _id("plugged")
    assert await resolve(journal, "no/such/op") is None
    assert await resolve(journal, "ns/failing", "Network/x") == _id("failing", attempt=3)
    assert await resolve(journal, "ns/unplugged", "Network/x") == _id(
        "unplugged", direction="unplug")
    assert await resolve(journal, "ns/unplugged", "Network/x", "plug") == _id("unplugged")
    assert await resolve(journal, "ns/plugged", "Main") is None
    with pytest.raises(ValueError, match="--direction needs"):
        await resolve(journal, _id("plugged"), None, "plug")
    with pytest.raises(ValueError, match="NAMESPACE/NAME"):
        await resolve(journal, "plugged", "Network/x")


async def test_resolve_asks_for_a_direction_when_two_are_live(tmp_path: Path) -> None:
    async with opened(tmp_path / "journal.db") as writer:
        for direction in ("plug", "unplug"):
            stream = StreamId(f"uid-1/Network/x/{direction}/1")
            snapshot = {"vm": "ns/vm", "network": "Network/x", "direction": direction,
                        "attempt": 1, "history": ["Requested"]}
            await writer.append(Commit(
                key=Key("ns/vm"), cause=Cause("observation", "VirtualMachine/ns/vm@1"),
                wall_time=0.0, logical_time=0.0,
                events=(NewEvent(stream, "Opened", {}),), expected={stream: 0},
                views=(StreamView(stream, Key("ns/vm"), "Requested", False, snapshot),),
            ))
        with pytest.raises(Ambiguous, match="choose one with --direction"):
            await resolve(writer, "ns/vm", "Network/x")
        assert await resolve(writer, "ns/vm", "Network/x", "unplug") == (
            "uid-1/Network/x/unplug/1")


def test_every_guard_and_timer_has_words() -> None:
    guards = {g for by_state in MOVES.values() for ms in by_state.values() for m in ms
              for g in m.guards}
    assert guards <= set(GUARD_PHRASES)
    timers = {decider.DEADLINE, decider.GRACE, decider.REISSUE, decider.RETRY}
    assert timers == set(TIMER_PHRASES)


@pytest.mark.parametrize(("text", "seconds"), [
    ("30s", 30), ("5m", 300), ("1h", 3600), ("1h30m", 5400), ("2d", 172800), ("90", 90),
    ("1.5m", 90), ("250ms", 0.25), ("0s", 0),
])
def test_durations(text: str, seconds: float) -> None:
    assert duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5x", "m5", "5 m", "-5m", "1h-5m", "nan", "inf", "5m!"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        duration(text)
