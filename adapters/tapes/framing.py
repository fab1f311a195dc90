"""Cutting a tape's bytes into lines with memory bounded by the value cap.

A file object's own line iteration reads a whole line before it returns it, so one
line that never ends (a 300 MB value, a binary file, a truncated download) is held
whole and can take the machine down. Here the bytes are read in chunks; a line longer
than the cap is never held: it is skipped to its end and becomes an `Overlong` marker
in its place, before anything parses or scans it. The UTF-8 byte order mark that
editors and tools on other systems put at the start, and the CR of CRLF line ends, are
dropped, so such a tape reads as its LF twin. Nothing here parses JSON.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

MAX_VALUE_BYTES = 16 * 1024 * 1024
"""The longest value (one line, or one value spanning lines) a tape may hold: the API
server refuses objects over 3 MiB, so anything longer is not a watch event."""

CHUNK_BYTES = 1024 * 1024

BOM = b"\xef\xbb\xbf"


@runtime_checkable
class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Overlong:
    """A line longer than the cap, skipped unread; `size` is how long it was."""

    size: int


def lines_of(
    stream: Readable, *, limit: int = MAX_VALUE_BYTES, chunk: int = CHUNK_BYTES
) -> Iterator[bytes | Overlong]:
    """Every line of `stream`, each ending in `\\n` (CRLF as LF, a leading BOM
    dropped), or `Overlong` in place of a line longer than `limit` bytes."""
    pending = bytearray()
    skipped: int | None = None  # bytes of an overlong line so far, while skipping it
    first = True
    while data := stream.read(chunk):
        if first:
            pending += data
            if len(pending) < len(BOM) and BOM.startswith(bytes(pending)):
                continue  # so few bytes that the BOM may yet come
            first = False
            data = bytes(pending[len(BOM):] if pending.startswith(BOM) else pending)
            pending.clear()
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            size = len(pending) + end - start
            if not pending and skipped is None and size <= limit:
                # the common line, whole in this chunk: one copy, its own `\n` kept
                line = data[start:end + 1]
                yield line if line[-2:-1] != b"\r" else line[:-2] + b"\n"
                start = end + 1
                continue
            if skipped is not None:
                yield Overlong(skipped + end - start)
                skipped = None
            elif size > limit:
                yield Overlong(size)
                pending.clear()
            else:
                pending += data[start:end]
                yield _line(pending)
                pending.clear()
            start = end + 1
        rest = len(data) - start
        if skipped is not None:
            skipped += rest
        elif len(pending) + rest > limit:
            skipped = len(pending) + rest
            pending.clear()
        else:
            pending += data[start:]
    if skipped is not None:
        yield Overlong(skipped)
    elif pending:
        if first and pending.startswith(BOM):
            del pending[:len(BOM)]
        if pending:
            yield _line(pending)


def _line(text: bytearray) -> bytes:
    if text.endswith(b"\r"):
        return bytes(text[:-1]) + b"\n"
    return bytes(text) + b"\n"
