"""How the caches keep objects: as their JSON encoding, decoded when read.

At 10,000 VMs the cached objects are most of the controller's memory, and a decoded
object is a tree of dicts and lists, each 60-700 bytes however little it holds: even
projected (`translate/projection.py`), a VMI costs ~3.4 KB decoded and ~0.75 KB
encoded. Decoding one with orjson takes a few microseconds, and it is needed only when
the object's VM is assembled again or a write is built from it. A decoded object is
new on every read: nothing else holds it, so a caller may change it freely.
"""

from __future__ import annotations

from typing import Any, cast

import orjson

JsonObject = dict[str, Any]


def encode(obj: JsonObject) -> bytes:
    """`obj` as JSON, in a bytes object of its own size (orjson writes into a 4 KB
    buffer, which kept as it is costs 4 KB whatever the object's size)."""
    return memoryview(orjson.dumps(obj)).tobytes()


def decode(encoded: bytes) -> JsonObject:
    return cast(JsonObject, orjson.loads(encoded))
