"""Reading a tape as a stream: one item at a time, whatever its layout.

A tape may hold one JSON object per line (what `nicplug record` writes), objects
concatenated on a line, or pretty-printed objects spanning lines (what `kubectl get
--watch --output-watch-events -o json` prints). The reader holds at most one object's
text at a time, and a stream is cut into lines by `framing` (a line over the value cap
is never held), so memory is bounded by the cap whatever the input. Every line that
cannot be read becomes a `Malformed` item naming its line number, and reading goes on:
so does an event of a watched kind whose object has no usable `metadata` (no name, or
no namespace for a namespaced kind), which the live controller could not index either.
Unknown kinds and ERROR events are counted and skipped; a bookmark is an item only for
its time. It never feeds anything.
"""

from __future__ import annotations

import datetime
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import ValidationError

from nicplug.adapters.tapes.framing import MAX_VALUE_BYTES, Overlong, Readable, lines_of
from nicplug.adapters.tapes.lines import (
    EFFECT,
    LINE_TYPES,
    WATCH_TYPES,
    Bookmark,
    EffectObject,
    InitialEventsEnd,
    Malformed,
    TapedEffect,
    TapeLine,
    WatchEvent,
    initial_events_end,
    kind_of,
    selected,
)
from nicplug.adapters.tapes.times import epoch_of

Item = WatchEvent | TapedEffect | InitialEventsEnd | Bookmark | Malformed

_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"')
"""A JSON string. Possessive: the backtracking form keeps a frame per character of a
string that never closes (1.2 GB for a 10 MB line); this one keeps none."""
_DECODER = json.JSONDecoder()


@dataclass
class TapeStats:
    """What a tape held besides the events fed."""

    events: int = 0
    effects: int = 0
    bookmarks: int = 0
    errors: int = 0
    unselected: int = 0
    malformed: int = 0
    unknown_kinds: Counter[str] = field(default_factory=Counter)


def _depth(line: bytes) -> int:
    """How many more brackets `line` opens than it closes (strings ignored)."""
    if b'"' in line:
        line = _STRING.sub(b"", line)
    return line.count(b"{") + line.count(b"[") - line.count(b"}") - line.count(b"]")


def _texts(lines: Iterable[bytes | Overlong]) -> Iterator[tuple[int, bytes | None, str]]:
    """(line number, the text of one top-level value or None, problem if None)."""
    buffer: list[bytes] = []
    start = depth = size = 0
    for number, raw in enumerate(lines, 1):
        if isinstance(raw, Overlong):
            if buffer:
                yield start, None, f"a JSON value longer than {MAX_VALUE_BYTES} bytes"
                buffer = []
            else:
                yield number, None, (f"a line of {raw.size} bytes, longer than the "
                                     f"{MAX_VALUE_BYTES} a tape line may hold")
            continue
        if buffer:
            if raw[:1] == b"{":  # a new top-level value: the one before never closed
                yield start, None, "a JSON object that never closes"
                buffer = []
            else:
                buffer.append(raw)
                depth += _depth(raw)
                size += len(raw)
                if depth <= 0:
                    yield start, b"".join(buffer), ""
                    buffer = []
                elif size > MAX_VALUE_BYTES:
                    yield start, None, f"a JSON value longer than {MAX_VALUE_BYTES} bytes"
                    buffer = []
                continue
        if raw[:1] == b"{" and raw[-2:] == b"}\n":  # a line as `nicplug record` writes it
            yield number, raw, ""
            continue
        text = raw.strip()
        if not text:
            continue
        if text[:1] == b"{" and text[-1:] == b"}":
            yield number, text, ""
            continue
        opened = _depth(text)
        if text[:1] == b"{" and opened > 0:
            buffer, start, depth, size = [raw], number, opened, len(raw)
            continue
        yield number, None, "not a JSON object"
    if buffer:
        yield start, None, "a JSON object that never closes (end of tape)"


def _split(text: bytes) -> list[object] | str:
    """Values concatenated in one text, or why it cannot be read as JSON."""
    try:
        decoded = text.decode()
    except UnicodeDecodeError:
        return "not valid JSON"
    values: list[object] = []
    index, end = 0, len(decoded)
    try:
        while index < end:
            value, index = _DECODER.raw_decode(decoded, index)
            values.append(value)
            while index < end and decoded[index].isspace():
                index += 1
    except json.JSONDecodeError:
        return "not valid JSON"
    except RecursionError:
        return "JSON nested too deeply to read"
    return values


class TapeReader:
    """Iterates the items of a tape; `stats` counts what was skipped."""

    def __init__(self, source: Readable | Iterable[bytes | Overlong]) -> None:
        """`source`: a binary stream (cut into lines here), or lines already cut."""
        # a file is iterable too, by lines of any length: read it through `lines_of`
        self._lines = lines_of(source) if isinstance(source, Readable) else source
        self.stats = TapeStats()
        self._last_at: tuple[str, float | None] = ("", None)

    def __iter__(self) -> Iterator[Item]:
        for number, text, problem in _texts(self._lines):
            if text is None:
                yield self._malformed(number, problem)
                continue
            canonical = self._canonical(text)
            if canonical is not None:
                item = self._item(number, *canonical)
                if item is not None:
                    yield item
                continue
            try:
                item = self._validated(number, TapeLine.model_validate_json(text))
            except ValidationError as exc:
                if any(e["type"] != "json_invalid" for e in exc.errors()):
                    yield self._malformed(number, _explain(exc))
                    continue
                values = _split(text)
                if isinstance(values, str):
                    yield self._malformed(number, values)
                    continue
                for value in values:
                    try:
                        item = self._validated(number, TapeLine.model_validate(value))
                    except ValidationError as inner:
                        yield self._malformed(number, _explain(inner))
                        continue
                    if item is not None:
                        yield item
                continue
            if item is not None:
                yield item

    def _canonical(self, text: bytes) -> tuple[str, dict[str, Any], float | None] | None:
        """The hot path for lines in the shape `nicplug record` writes: a plain check of
        the envelope instead of pydantic's; anything else (None) goes to pydantic,
        which decides and explains."""
        try:
            decoded = orjson.loads(text)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(decoded, dict) or len(decoded) > 3:
            return None
        type_, obj, at = decoded.get("type"), decoded.get("object"), decoded.get("at")
        if type_ not in LINE_TYPES or not isinstance(obj, dict):
            return None
        if len(decoded) != 2 + ("at" in decoded):
            return None
        if at is None:
            return type_, obj, None
        when = self._time(at) if isinstance(at, str) else None
        return None if when is None else (type_, obj, when)

    def _time(self, text: str) -> float | None:
        """An RFC 3339 `at` with its zone, in epoch seconds (the last one is remembered:
        a burst shares it)."""
        if text == self._last_at[0]:
            return self._last_at[1]
        try:
            moment = datetime.datetime.fromisoformat(text)
        except ValueError:
            return None
        if moment.tzinfo is None or "T" not in text:
            return None
        self._last_at = (text, epoch_of(moment))
        return self._last_at[1]

    def _malformed(self, number: int, problem: str) -> Malformed:
        self.stats.malformed += 1
        return Malformed(number, problem)

    def _validated(self, number: int, line: TapeLine) -> Item | None:
        at = epoch_of(line.at) if line.at is not None else None
        return self._item(number, line.type, line.object, at)

    def _item(
        self, number: int, type_: str, obj: dict[str, Any], at: float | None
    ) -> Item | None:
        """What one line holds (None: nothing to hand on)."""
        if type_ in WATCH_TYPES:
            kind = kind_of(obj)
            if isinstance(kind, str):
                self.stats.unknown_kinds[kind] += 1
            elif isinstance(obj.get("metadata"), dict) and not selected(kind, obj):
                self.stats.unselected += 1  # a pod the live watch's selector leaves out
            elif (problem := _unaddressable(obj, namespaced=kind.namespaced)) is not None:
                return self._malformed(number, f"{type_} {kind.kind}: {problem}")
            else:
                self.stats.events += 1
                return WatchEvent(number, type_, kind, obj, at)
            return None
        if type_ == EFFECT:
            try:
                effect = EffectObject.model_validate(obj)
            except ValidationError as exc:
                return self._malformed(number, "EFFECT " + _explain(exc))
            self.stats.effects += 1
            return TapedEffect(number, effect.type, effect.target, at)
        if type_ == "BOOKMARK":
            self.stats.bookmarks += 1
            if initial_events_end(obj):
                return InitialEventsEnd(number, at)
        else:
            self.stats.errors += 1
        return Bookmark(number, at) if at is not None else None


def _unaddressable(obj: Mapping[str, Any], *, namespaced: bool) -> str | None:
    """Why the object cannot be indexed (as the live controller keys it), or None."""
    meta = obj.get("metadata")
    if meta is None:
        return "the object has no metadata"
    if not isinstance(meta, dict):
        return f"the object's metadata is a {type(meta).__name__}, not an object"
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return "the object has no metadata.name"
    namespace = meta.get("namespace")
    if namespaced and (not isinstance(namespace, str) or not namespace):
        return "the object has no metadata.namespace"
    return None


def _explain(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors()[:3]:
        where = ".".join(str(p) for p in error["loc"]) or "line"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)
