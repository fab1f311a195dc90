"""The objects of one kind as the world index holds them, and what a new version changed.

Most watch events of a running cluster change an object in fields nicplug never reads,
and the API server gives each a new resourceVersion: once cut to what is read, the new
object is the held one but for its resourceVersion. Telling that used to cost a decode
of the held encoding and two encodes per event. Here each object is held as its
encoding at its last change that was not its resourceVersion alone (`base`, whose
resourceVersion it carries) plus the resourceVersion it has now: a new version is
encoded once, with the base's resourceVersion put in its place, and compared byte for
byte with the held encoding. Equal: what is read did not change, only the version is
kept. Any other difference, even of key order, is a change, as it was.

A body read from here is decoded anew each time, with the resourceVersion it has now:
nothing outside sees the base. It decides nothing and touches no VM.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from nicplug.adapters.kube.encoded import decode, encode

Body = dict[str, Any]

_VERSION = "resourceVersion"


class Change(enum.Enum):
    NONE = "none"
    """The same object, resourceVersion included: nothing to do."""
    VERSION = "version"
    """The same but for its resourceVersion: no world changed."""
    READ = "read"
    """New, or changed in something other than its resourceVersion."""


Entry = tuple[bytes, object, object]
"""(encoding at the base, the base's resourceVersion, the resourceVersion now); the
two versions are one object while the body is the base."""


class HeldObjects:
    """Key → object of one kind, held encoded."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}

    def put(self, key: str, obj: Body) -> tuple[Change, bytes | None]:
        """Hold `obj` as `key`'s object now; what changed, and the object held before,
        encoded, but for its resourceVersion, which may be older (None: it is new).
        `obj` is as it came when this returns."""
        held = self._entries.get(key)
        meta = obj.get("metadata")
        version = meta.get(_VERSION) if isinstance(meta, dict) else None
        if held is None:
            self._entries[key] = (encode(obj), version, version)
            return Change.READ, None
        encoded, base, now = held
        if isinstance(version, str) and isinstance(base, str) and isinstance(now, str):
            assert isinstance(meta, dict)  # a str version came from a dict
            moved = version != base
            # only compared: orjson's own buffer, not a copy of the object's size
            if moved:  # encoded with the base's version in its place, then put back
                meta[_VERSION] = base
                try:
                    probe = orjson.dumps(obj)
                finally:
                    meta[_VERSION] = version
            else:
                probe = orjson.dumps(obj)
            if probe == encoded:
                if version == now:
                    return Change.NONE, encoded
                self._entries[key] = (encoded, base, version if moved else base)
                return Change.VERSION, encoded
            self._entries[key] = (encode(obj), version, version)
            return Change.READ, encoded
        # a resourceVersion that is no string (never from an API server): compared whole
        before = self._encoded(held)
        fresh = encode(obj)
        if fresh == before:
            return Change.NONE, before
        self._entries[key] = (fresh, version, version)
        return (Change.VERSION if _same_but_version(before, obj, fresh) else Change.READ,
                before)

    def pop(self, key: str) -> bytes | None:
        """Forget `key`; its encoding as it was (None: it was not held)."""
        held = self._entries.pop(key, None)
        return None if held is None else self._encoded(held)

    def body(self, key: str) -> Body | None:
        """`key`'s object as last seen, decoded anew (None: not held)."""
        held = self._entries.get(key)
        return None if held is None else _body(held)

    def bodies(self, keys: Iterable[str]) -> list[Body]:
        """The objects of `keys` still held, in that order, decoded."""
        entries = self._entries
        return [_body(held) for k in keys if (held := entries.get(k)) is not None]

    def encoded(self) -> dict[str, bytes]:
        """Every object held, key → its encoding as last seen."""
        return {key: self._encoded(held) for key, held in self._entries.items()}

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    @staticmethod
    def _encoded(held: Entry) -> bytes:
        return held[0] if held[1] is held[2] else encode(_body(held))


def _body(held: Entry) -> Body:
    body = decode(held[0])
    if held[1] is not held[2]:
        body["metadata"][_VERSION] = held[2]
    return body


def _same_but_version(before: bytes, obj: Body, encoded: bytes) -> bool:
    """Is `obj` (encoded as `encoded`) the object held as `before` but for its
    resourceVersion? Compared as encodings, so any other difference, even of key order,
    counts as a change."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or _VERSION not in meta:
        return False
    held = decode(before)
    held_meta = held.get("metadata")
    if not isinstance(held_meta, dict) or _VERSION not in held_meta:
        return False
    held_meta[_VERSION] = meta[_VERSION]
    return encode(held) == encoded
