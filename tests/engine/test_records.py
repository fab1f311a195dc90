"""`quick_init` builds the same records as the dataclass's own `__init__`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from nicplug.engine.model import EffectOutcome, RecordedEvent, StreamId
from nicplug.engine.records import quick_init
from nicplug.machines.world import KVVM, NetworkSpec


@dataclass(frozen=True, slots=True)
class Plain:
    name: str
    count: int = 1
    labels: Mapping[str, str] = field(default_factory=dict)
    memo: Any = field(default=None, init=False, compare=False)
    derived: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "derived", f"{self.name}/{self.count}")


@quick_init
@dataclass(frozen=True, slots=True)
class Quick:
    """`Plain`, field for field, built by `quick_init`'s `__init__`."""

    name: str
    count: int = 1
    labels: Mapping[str, str] = field(default_factory=dict)
    memo: Any = field(default=None, init=False, compare=False)
    derived: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "derived", f"{self.name}/{self.count}")


def _fields(record: Any) -> dict[str, Any]:
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [(("a",), {}), (("a", 3), {}), (("a",), {"labels": {"x": "y"}}),
     ((), {"name": "b", "count": 0})],
)
def test_the_same_fields_defaults_factories_and_post_init(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    assert _fields(Quick(*args, **kwargs)) == _fields(Plain(*args, **kwargs))


def test_each_record_gets_its_own_default_from_a_factory() -> None:
    assert Quick("a").labels is not Quick("a").labels


def test_the_record_stays_frozen_and_hashable() -> None:
    record = Quick("a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.name = "b"  # type: ignore[misc]
    assert RecordedEvent.__init__.__qualname__ == "RecordedEvent.__init__"
    assert hash(NetworkSpec("Network", "x")) == hash(NetworkSpec("Network", "x"))


def test_bad_calls_fail_as_the_dataclass_would() -> None:
    with pytest.raises(TypeError):
        Quick()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Quick("a", 1, {}, None)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Quick("a", colour="red")  # type: ignore[call-arg]


def test_the_project_records_keep_their_defaults() -> None:
    outcome = EffectOutcome(1, StreamId("s"), "T", True)
    assert (outcome.permanent, outcome.error, dict(outcome.result)) == (False, None, {})
    assert outcome.result is not EffectOutcome(2, StreamId("s"), "T", True).result
    assert KVVM("1", True, ()).derived is None
    assert NetworkSpec("Network", "x").identity == "Network/x"


def test_refuses_what_it_cannot_build() -> None:
    @dataclass
    class Mutable:
        name: str

    with pytest.raises(TypeError):
        quick_init(Mutable)
