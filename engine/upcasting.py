"""Old event payloads upgraded in code when read.

Events are written once and never rewritten. When an event type's payload changes,
its schema version goes up and an upcaster from the old version is registered here;
readers then only ever see current payloads. Upcasters must be pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Payload = Mapping[str, Any]
Upcaster = Callable[[Payload], Payload]


class Upcasters:
    """`(type, schema_version) -> function` returning the payload of `schema_version + 1`."""

    def __init__(self) -> None:
        self._steps: dict[tuple[str, int], Upcaster] = {}

    def register(self, type: str, from_version: int, step: Upcaster) -> None:
        if (type, from_version) in self._steps:
            raise ValueError(f"an upcaster of {type} v{from_version} is registered already")
        self._steps[(type, from_version)] = step

    def upcast(self, type: str, version: int, payload: Payload) -> tuple[int, Payload]:
        step = self._steps.get((type, version))
        while step is not None:
            payload = step(payload)
            version += 1
            step = self._steps.get((type, version))
        return version, payload

    def __bool__(self) -> bool:
        return bool(self._steps)
