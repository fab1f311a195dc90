"""Old payloads upgraded in code when read: events, snapshots and outbox effects.

Persisted payloads are written once and never rewritten in place. When a payload's
shape changes, its schema version goes up and an upcaster from the old version is
registered here; readers then only ever see current payloads. A registry that knows
the current version of its types (`current`) also refuses what it cannot read: a type
it has never heard of, or a version newer than the code (`UnknownSchema`), instead of
handing a guess to a machine. Upcasters must be pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set
from typing import Any

from nicplug.engine.errors import UnknownSchema

Payload = Mapping[str, Any]
SNAPSHOT = "snapshot"
"""The type name a decider's snapshots are registered under in `Schemas.snapshots`."""
Upcaster = Callable[[Payload], Payload]


class Upcasters:
    """`(type, schema_version) -> function` returning the payload of `schema_version + 1`.

    `current` maps each known type to the version this code writes; when given, `upcast`
    raises `UnknownSchema` for other types and for versions above it.
    """

    def __init__(self, current: Mapping[str, int] | None = None) -> None:
        self._steps: dict[tuple[str, int], Upcaster] = {}
        self.current: Mapping[str, int] = dict(current or {})
        self._latest = set(self.current.items())
        """(type, version) pairs read as they are: what this code writes (almost every
        payload read), answered with one set lookup."""

    def register(self, type: str, from_version: int, step: Upcaster) -> None:
        if (type, from_version) in self._steps:
            raise ValueError(f"an upcaster of {type} v{from_version} is registered already")
        self._steps[(type, from_version)] = step
        self._latest.discard((type, from_version))

    @property
    def reads_as_is(self) -> Set[tuple[str, int]]:
        """The (type, version) pairs `upcast` returns unchanged without a look: a reader
        of millions of payloads skips the call for those."""
        return self._latest

    def upcast(self, type: str, version: int, payload: Payload) -> tuple[int, Payload]:
        if (type, version) in self._latest:
            return version, payload
        if self.current:
            latest = self.current.get(type)
            if latest is None:
                raise UnknownSchema(f"unknown type {type!r} (this nicplug knows "
                                    f"{', '.join(sorted(self.current))})")
            if version > latest:
                raise UnknownSchema(
                    f"{type} schema {version} is newer than this nicplug reads ({latest})"
                )
        step = self._steps.get((type, version))
        while step is not None:
            payload = step(payload)
            version += 1
            step = self._steps.get((type, version))
        return version, payload

    def __bool__(self) -> bool:
        return bool(self._steps) or bool(self.current)


class Schemas:
    """The three registries a journal reads through: events, snapshots (one type per
    decider, `snapshot_type`) and outbox effects."""

    def __init__(
        self,
        events: Upcasters | None = None,
        snapshots: Upcasters | None = None,
        effects: Upcasters | None = None,
    ) -> None:
        self.events = events or Upcasters()
        self.snapshots = snapshots or Upcasters()
        self.effects = effects or Upcasters()
