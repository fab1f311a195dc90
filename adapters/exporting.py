"""The JSON-lines format of `journal export` and of retention's archives: one event a
line, as the journal holds it (upcast), in position order.

`event_line` writes one; `read_events` reads a file back and refuses one that is not
whole: a line that is not a JSON object with every field (a truncated last line, a
copy cut short) is `ArchiveDamaged` naming the file and the line, never skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from nicplug.engine.model import RecordedEvent

FIELDS = ("position", "stream", "key", "version", "type", "schema_version", "payload",
          "cause", "wall_time", "logical_time")


class ArchiveDamaged(ValueError):
    def __init__(self, path: Path, line: int, problem: str) -> None:
        super().__init__(f"archive {path}: line {line}: {problem}; the archive is damaged or "
                         "cut short: restore it from where it was copied")


def event_line(event: RecordedEvent) -> bytes:
    return orjson.dumps({
        "position": event.position, "stream": event.stream, "key": event.key,
        "version": event.version, "type": event.type, "schema_version": event.schema_version,
        "payload": event.payload,
        "cause": {"kind": event.cause.kind, "ref": event.cause.ref,
                  "dedup_key": event.cause.dedup_key},
        "wall_time": event.wall_time, "logical_time": event.logical_time,
    }) + b"\n"


def read_events(path: Path) -> Iterator[dict[str, Any]]:
    """Each event of an export or archive, checked whole; `OSError` when unreadable."""
    with path.open("rb") as source:
        number = 0
        for number, line in enumerate(source, start=1):
            if not line.endswith(b"\n"):
                raise ArchiveDamaged(path, number, "the last line is cut short")
            try:
                item = orjson.loads(line)
            except orjson.JSONDecodeError as error:
                raise ArchiveDamaged(path, number, f"not JSON ({error})") from None
            if not isinstance(item, dict) or any(f not in item for f in FIELDS):
                raise ArchiveDamaged(path, number, "not an event of nicplug's export format")
            yield item
