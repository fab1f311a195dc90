"""The JSON-array-in-a-string shape both SDN annotations share, read defensively.

Annotation values come from other controllers and from users with `kubectl`;
anything may be in them. Every reader here turns bad input into
`MalformedAnnotation` naming the entry and field, and never lets another exception
out. Writers are deterministic (sorted keys), so an unchanged list renders to an
unchanged string and patches stay idempotent. Nothing dialect-specific lives here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

import orjson

from nicplug.adapters.sdn.port import MalformedAnnotation
from nicplug.machines.world import NetworkType

IFNAMSIZ = 15
"""The longest Linux interface name (IFNAMSIZ minus the terminating NUL)."""

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")

Entry = dict[str, Any]


def entries_of(value: str, *, key: str) -> Iterator[EntryReader]:
    """A reader for each entry of a JSON array of objects, or `MalformedAnnotation`."""
    try:
        loaded = orjson.loads(value)
    except orjson.JSONDecodeError as e:
        raise MalformedAnnotation(key, f"not JSON ({e})") from e
    if not isinstance(loaded, list):
        raise MalformedAnnotation(key, f"not a JSON array but {type(loaded).__name__}")
    for index, entry in enumerate(loaded):
        if not isinstance(entry, dict):
            raise MalformedAnnotation(
                key, f"entry {index} is {type(entry).__name__}, not an object"
            )
    return (EntryReader(entry, key=key, index=index) for index, entry in enumerate(loaded))


def dump_entries(entries: Sequence[Entry], *, sort_keys: bool = True) -> str:
    """The annotation value for `entries`: compact JSON, keys sorted unless the
    platform's own writer keeps a field order of its own."""
    return orjson.dumps(list(entries), option=orjson.OPT_SORT_KEYS if sort_keys else 0).decode()


@dataclass(frozen=True, slots=True)
class EntryReader:
    """Typed access to the fields of one entry; each failure names entry and field."""

    entry: Entry
    key: str
    index: int

    def fail(self, problem: str) -> MalformedAnnotation:
        return MalformedAnnotation(self.key, f"entry {self.index}: {problem}")

    @overload
    def text(self, field: str, *, required: Literal[True]) -> str: ...
    @overload
    def text(self, field: str, *, required: bool = False) -> str | None: ...
    def text(self, field: str, *, required: bool = False) -> str | None:
        """`entry[field]` as a non-empty string; None when absent (or null)."""
        value = self.entry.get(field)
        if value is None:
            if required:
                raise self.fail(f"no {field!r}")
            return None
        if not isinstance(value, str) or not value:
            raise self.fail(f"{field!r} is not a non-empty string")
        return value

    @overload
    def object_name(self, field: str, *, required: Literal[True]) -> str: ...
    @overload
    def object_name(self, field: str, *, required: bool = False) -> str | None: ...
    def object_name(self, field: str, *, required: bool = False) -> str | None:
        """A Kubernetes object name (DNS-1123 subdomain)."""
        value = self.text(field, required=required)
        if value is not None and not is_object_name(value):
            raise self.fail(f"{field!r} {value!r} is not an object name")
        return value

    @overload
    def interface(self, field: str, *, required: Literal[True]) -> str: ...
    @overload
    def interface(self, field: str, *, required: bool = False) -> str | None: ...
    def interface(self, field: str, *, required: bool = False) -> str | None:
        """An interface name: a non-empty string of at most 15 characters."""
        value = self.text(field, required=required)
        if value is not None and len(value) > IFNAMSIZ:
            raise self.fail(f"{field!r} {value!r} is longer than {IFNAMSIZ} characters")
        return value

    def id(self, field: str) -> int | None:
        """An optional non-negative integer (booleans are not ids)."""
        value = self.entry.get(field)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.fail(f"{field!r} is not a non-negative integer")
        return value

    def flag(self, field: str) -> bool:
        """An optional boolean, false when absent."""
        value = self.entry.get(field, False)
        if not isinstance(value, bool):
            raise self.fail(f"{field!r} is not a boolean")
        return value


def is_object_name(value: str) -> bool:
    return _DNS_SUBDOMAIN.fullmatch(value) is not None


def split_identity(identity: str) -> tuple[NetworkType, str]:
    """(`Network` | `ClusterNetwork` | `Main`, name) of an identity nicplug built."""
    if identity == "Main":
        return "Main", ""
    type_, _, name = identity.partition("/")
    if type_ == "Network" and name:
        return "Network", name
    if type_ == "ClusterNetwork" and name:
        return "ClusterNetwork", name
    raise ValueError(f"not a network identity: {identity!r}")


def check_unique(identities: Sequence[str], *, key: str, what: str) -> None:
    """Two entries for one network make the annotation ambiguous: malformed."""
    seen: set[str] = set()
    for identity in identities:
        if identity in seen:
            raise MalformedAnnotation(key, f"{what} {identity} is listed twice")
        seen.add(identity)
