"""Table tests of the comparator (DESIGN §3) and the gating table."""

from __future__ import annotations

import pytest

from nicplug.machines.comparator import compare
from nicplug.machines.policy import Timeouts, hotplug_in_place
from nicplug.machines.world import KVVM, KVVMInterface, NetworkSpec, SDNRequest, if_name_of

MAIN = NetworkSpec("Main")
X = NetworkSpec("Network", "x", 2)
Y = NetworkSpec("ClusterNetwork", "y", 3)


def kvvm(*specs: NetworkSpec) -> KVVM:
    """A KVVM carrying `specs` in order, with the template annotation naming them."""
    return KVVM(
        resource_version="1",
        running=True,
        interfaces=tuple(KVVMInterface(s.if_name) for s in specs),
        template_requests=tuple(
            SDNRequest(s.identity, s.if_name, s.id) for s in specs if s.type != "Main"
        ),
    )


def summary(desired: tuple[NetworkSpec, ...] | None, carried: KVVM) -> set[tuple[str, str, bool]]:
    result = compare(desired, carried)
    assert result.invalid is None, result.invalid
    return {(c.identity, c.direction, c.restart) for c in result.changes}


@pytest.mark.parametrize(
    ("desired", "carried", "expected"),
    [
        pytest.param(None, kvvm(MAIN), set(), id="nil is Main"),
        pytest.param((), kvvm(MAIN), set(), id="empty is Main"),
        pytest.param(None, kvvm(), set(), id="a KVVM without interfaces has Main"),
        pytest.param((MAIN, X), kvvm(MAIN), {("Network/x", "plug", False)}, id="nil→[Main,X]"),
        pytest.param((MAIN,), kvvm(MAIN, X), {("Network/x", "unplug", False)}, id="remove X"),
        pytest.param(
            (MAIN, X, Y),
            kvvm(MAIN),
            {("Network/x", "plug", False), ("ClusterNetwork/y", "plug", False)},
            id="two hotplugs",
        ),
        pytest.param((X,), kvvm(MAIN, X), {("Main", "unplug", True)}, id="remove Main"),
        pytest.param((MAIN, X), kvvm(X), {("Main", "plug", True)}, id="add Main"),
        pytest.param(
            (MAIN, NetworkSpec("Network", "x", 7)),
            kvvm(MAIN, X),
            {("Network/x", "update", True)},
            id="id change",
        ),
        pytest.param(
            (MAIN, Y, X),
            kvvm(MAIN, X, Y),
            {("Network/x", "update", True), ("ClusterNetwork/y", "update", True)},
            id="reorder",
        ),
        pytest.param(
            (MAIN, X, Y), kvvm(MAIN, Y), {("Network/x", "plug", False)}, id="insert is a plug"
        ),
        pytest.param(
            (MAIN, NetworkSpec("Network", "x")), kvvm(MAIN, X), set(), id="no id asks nothing"
        ),
    ],
)
def test_changes(
    desired: tuple[NetworkSpec, ...] | None, carried: KVVM, expected: set[tuple[str, str, bool]]
) -> None:
    assert summary(desired, carried) == expected


@pytest.mark.parametrize(
    ("desired", "fragment"),
    [
        ((MAIN, X, X), "duplicate network Network/x"),
        ((MAIN, X, NetworkSpec("Network", "z", 2)), "duplicate id 2"),
        ((X, MAIN), "Main must be the first"),
        ((MAIN, NetworkSpec("Network", "")), "has no name"),
    ],
)
def test_invalid_specs_change_nothing(desired: tuple[NetworkSpec, ...], fragment: str) -> None:
    result = compare(desired, kvvm(MAIN))
    assert result.invalid is not None and fragment in result.invalid
    assert result.changes == ()


def test_absent_interfaces_are_not_carried() -> None:
    carried = KVVM("1", True, (KVVMInterface("default"), KVVMInterface(X.if_name, absent=True)))
    assert summary((MAIN, X), carried) == {("Network/x", "plug", False)}


def test_interfaces_are_identified_by_their_derived_name_without_annotation() -> None:
    carried = KVVM("1", True, (KVVMInterface("default"), KVVMInterface(X.if_name)))
    assert summary((MAIN, X), carried) == set()
    assert if_name_of("Network", "x") == X.if_name


def test_unknown_interfaces_are_left_alone() -> None:
    carried = KVVM("1", True, (KVVMInterface("default"), KVVMInterface("eth-foreign")))
    assert summary(None, carried) == set()


@pytest.mark.parametrize(
    ("gating", "strategy", "live"),
    [
        ("rollout-strategy", "LiveUpdate", True),
        ("rollout-strategy", "Stage", False),
        ("always-live", "LiveUpdate", True),
        ("always-live", "Stage", True),
    ],
)
def test_gating_table(gating: str, strategy: str, live: bool) -> None:
    assert hotplug_in_place(gating, strategy) is live  # type: ignore[arg-type]


def test_backoff_doubles_up_to_its_cap() -> None:
    timeouts = Timeouts(backoff_base=5, backoff_max=60)
    assert [timeouts.backoff(a) for a in (1, 2, 3, 4, 5, 50)] == [5, 10, 20, 40, 60, 60]
