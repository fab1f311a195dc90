"""What a person may ask the journal for, checked before any SQL runs.

A VM is `namespace/name`, a network `Main`, `Network/<name>` or `ClusterNetwork/<name>`,
a state one of the machines' states, a direction `plug`, `unplug` or `update`, a
duration as `durations.py` reads it. Anything else is a `BadSelection` saying what was expected,
so a typo gives an error instead of an empty answer. Values only ever reach the journal
as bound parameters. Never reads the journal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from nicplug.adapters.durations import parse_duration
from nicplug.engine.inspection import Scalar, ViewQuery
from nicplug.engine.model import Key
from nicplug.machines.graph import GRAPHS

STATES: frozenset[str] = frozenset(s for g in GRAPHS.values() for s in g.states)
DIRECTIONS: tuple[str, ...] = tuple(GRAPHS)

_VM = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_NETWORK = re.compile(r"^(Main|(Network|ClusterNetwork)/[a-z0-9]([-a-z0-9.]*[a-z0-9])?)$")


class BadSelection(ValueError):
    """What the user asked for cannot be a selection (a usage error, exit code 2)."""


def vm_ref(value: str) -> str:
    if not _VM.match(value):
        raise BadSelection(f"a VM is NAMESPACE/NAME (lower case), got {value!r}")
    return value


def network_ref(value: str) -> str:
    if not _NETWORK.match(value):
        raise BadSelection(
            f"a network is Main, Network/NAME or ClusterNetwork/NAME, got {value!r}"
        )
    return value


def state_ref(value: str) -> str:
    if value not in STATES:
        raise BadSelection(f"unknown state {value!r}; states: {', '.join(sorted(STATES))}")
    return value


def direction_ref(value: str) -> str:
    if value not in DIRECTIONS:
        raise BadSelection(f"a direction is {' | '.join(DIRECTIONS)}, got {value!r}")
    return value


def duration(value: str) -> float:
    """Seconds in `value` (`durations.parse_duration`), a `BadSelection` otherwise."""
    try:
        return parse_duration(value)
    except ValueError as error:
        raise BadSelection(str(error)) from None


@dataclass(frozen=True, slots=True)
class Selection:
    """Which operations: every filter left None matches everything."""

    vm: str | None = None
    state: str | None = None
    network: str | None = None
    direction: str | None = None

    @classmethod
    def checked(
        cls, *, vm: str | None = None, state: str | None = None, network: str | None = None,
        direction: str | None = None,
    ) -> Selection:
        """The selection, each given value checked (a `BadSelection` names the bad one)."""
        return cls(
            vm=vm_ref(vm) if vm is not None else None,
            state=state_ref(state) if state is not None else None,
            network=network_ref(network) if network is not None else None,
            direction=direction_ref(direction) if direction is not None else None,
        )

    def query(self, **extra: Any) -> ViewQuery:
        """The journal query (`extra` sets or overrides `ViewQuery` fields). The
        controller keys every VM's streams by its `namespace/name`."""
        equal: dict[str, Scalar] = {}
        if self.network is not None:
            equal["network"] = self.network
        if self.direction is not None:
            equal["direction"] = self.direction
        given: dict[str, Any] = {
            "key": Key(self.vm) if self.vm is not None else None, "state": self.state,
            "equal": equal,
        }
        return ViewQuery(**(given | extra))
