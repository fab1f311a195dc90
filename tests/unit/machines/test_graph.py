"""The machine graphs: every registered machine passes the load-time rules, a broken
graph is rejected, and every guard the graphs name exists."""

from __future__ import annotations

import pytest

from nicplug.machines.graph import (
    GRAPHS,
    MOVES,
    TERMINAL,
    Edge,
    InvalidMachine,
    MachineGraph,
    validate,
)
from nicplug.machines.guards import GUARDS

DESIGN_STATES = {
    "plug": {"Requested", "AnnotationPatched", "SDNReady", "VMIPatched", "Attached"},
    "unplug": {
        "Requested",
        "VMIPatched",
        "GuestDetached",
        "AnnotationPatched",
        "SDNReleased",
        "Detached",
    },
    "update": {"Requested", "VMIPatched", "Attached"},
}
BRANCHES = {"RestartRequired", "Failed", "Cancelled"}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_every_registered_machine_is_valid(name: str) -> None:
    graph = GRAPHS[name]
    moves = validate(graph.machine())
    assert graph.initial == "Requested"
    assert DESIGN_STATES[name] | BRANCHES <= set(graph.states)
    for state in graph.states:
        assert bool(moves[state]) is (state not in TERMINAL)


@pytest.mark.parametrize("name", ["plug", "unplug"])
def test_migration_branch_exists(name: str) -> None:
    assert {"MigrationRequired", "Migrating"} <= set(GRAPHS[name].states)
    assert any(m.dest == "Migrating" for m in MOVES[name]["MigrationRequired"])


def test_every_guard_is_defined() -> None:
    named = {g for graph in GRAPHS.values() for e in graph.edges for g in e.guards}
    assert named <= set(GUARDS), named - set(GUARDS)


def test_failure_triggers_name_the_reason() -> None:
    reasons = {e.trigger for g in GRAPHS.values() for e in g.edges if e.dest == "Failed"}
    assert {"SDNTimeout", "SDNError", "AttachTimeout", "DetachTimeout", "PatchRejected",
            "MigrationFailed", "InvalidSpec"} <= reasons  # fmt: skip


def _graph(
    *edges: tuple[str, str, str], states: tuple[str, ...] = ("A", "B", "Failed")
) -> MachineGraph:
    return MachineGraph("broken", states, "A", tuple(Edge(t, (s,), d, ("g",)) for t, s, d in edges))


@pytest.mark.parametrize(
    ("graph", "fragment"),
    [
        (_graph(("go", "A", "Failed")), "unreachable states ['B']"),
        (_graph(("go", "A", "B"), ("x", "A", "Failed")), "state B has no exit"),
        (_graph(("go", "A", "B"), ("end", "B", "Failed"), ("back", "Failed", "A")), "terminal"),
        (
            MachineGraph("noguard", ("A", "Failed"), "A", (Edge("go", ("A",), "Failed", ()),)),
            "guard",
        ),
    ],
)
def test_an_invalid_graph_is_rejected(graph: MachineGraph, fragment: str) -> None:
    with pytest.raises(InvalidMachine, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        validate(graph.machine())
