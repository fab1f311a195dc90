"""One tape line at the edge: pydantic models of the envelope, and what a line means.

A line is a watch event exactly as the API server sends it (`type`, `object`), with an
optional `at` (RFC 3339), or an `EFFECT` line (`object: {type, target}`) that says what
the recording controller did. Only the envelope is validated here; the objects are
read later by the same translation the live controller uses. It never feeds anything.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from nicplug.adapters.kube.flavour import ALL_WATCHED, DECKHOUSE, UPSTREAM
from nicplug.adapters.kube.resources import KindRef
from nicplug.engine.records import quick_init

_MAPPING = (dict, Mapping)
"""`isinstance` of a JSON body: dict first, an exact type check (the ABC's is slow)."""

EFFECT = "EFFECT"
WATCH_TYPES = ("ADDED", "MODIFIED", "DELETED")
LINE_TYPES = frozenset({*WATCH_TYPES, "BOOKMARK", "ERROR", EFFECT})
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
"""The annotation of the BOOKMARK that ends a watch's initial events (as the API server
marks it for `sendInitialEvents`); a recording writes one once every kind is listed."""


class TapeLine(BaseModel):
    """The envelope of one line; unknown top-level fields are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    type: Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR", "EFFECT"]
    object: dict[str, Any]
    at: datetime.datetime | None = None


class EffectObject(BaseModel):
    """The object of an `EFFECT` line."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    type: str = Field(min_length=1)
    target: str


@quick_init
@dataclass(frozen=True, slots=True)
class WatchEvent:
    """An ADDED / MODIFIED / DELETED of a watched kind, to be fed."""

    line: int
    type: str
    kind: KindRef
    object: dict[str, Any]
    at: float | None


@dataclass(frozen=True, slots=True)
class TapedEffect:
    """What the recording controller did: compared on replay, never fed."""

    line: int
    type: str
    target: str
    at: float | None


@dataclass(frozen=True, slots=True)
class Bookmark:
    """A line that feeds nothing but says what time it was (a BOOKMARK, or an ERROR
    with an `at`): on replay it moves the clock, so a quiet period fires its timers."""

    line: int
    at: float | None


@dataclass(frozen=True, slots=True)
class InitialEventsEnd:
    """Every kind has been listed: what came before is the initial state."""

    line: int
    at: float | None


def initial_events_end(obj: Mapping[str, Any]) -> bool:
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, _MAPPING) else None
    return isinstance(annotations, _MAPPING) and annotations.get(INITIAL_EVENTS_END) == "true"


@dataclass(frozen=True, slots=True)
class Malformed:
    line: int
    problem: str


_BY_GROUP_KIND: Mapping[tuple[str, str], KindRef] = {
    (k.group, k.kind): k for k in ALL_WATCHED if k is not DECKHOUSE.launcher_pods}
"""A tape is read by whichever flavour's names it holds (the replay's settings say
which flavour assembles the worlds); pods are one kind in both."""
_CREATED_BY_LABELS = (UPSTREAM.created_by_label, DECKHOUSE.created_by_label)


def kind_of(obj: Mapping[str, Any]) -> KindRef | str:
    """The watched kind of an object (any version of its group), or its `apiVersion/kind`
    text when nicplug does not watch it."""
    api_version = obj.get("apiVersion")
    kind = obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return f"{api_version}/{kind}"
    found = _SEEN_KINDS.get((api_version, kind))
    if found is not None:
        return found
    group = api_version.rpartition("/")[0]
    found = _BY_GROUP_KIND.get((group, kind))
    if found is None:
        return f"{api_version}/{kind}"
    if len(_SEEN_KINDS) < _KEEP_SEEN_KINDS:
        _SEEN_KINDS[(api_version, kind)] = found
    return found


_SEEN_KINDS: dict[tuple[str, str], KindRef] = {}
"""(apiVersion, kind) → the watched kind: looked up once per version of a kind, not
cut on every event."""
_KEEP_SEEN_KINDS = 256


def selected(kind: KindRef, obj: Mapping[str, Any]) -> bool:
    """Would the live controller's watch of `kind` deliver `obj`? (Pods: only those
    labelled with the VMI that created them, as the informer's label selector asks.)"""
    if kind.plural != "pods":
        return True
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, _MAPPING) else None
    if not isinstance(labels, _MAPPING):
        return False
    upstream, deckhouse = _CREATED_BY_LABELS  # no generator per event
    return bool(labels.get(upstream) or labels.get(deckhouse))
