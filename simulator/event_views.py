"""One Event behind two APIs: `core/v1` (stored) and `events.k8s.io/v1` (a view of it).

A real API server keeps each Event once and serves it through both groups, converting
on the way (`pkg/apis/events/v1/conversion.go` in kubernetes): what nicplug records
through `events.k8s.io` is what `kubectl get events` and `kubectl describe` list through
`core/v1`. The two shapes differ only in the names of top-level fields, so the view
renames those (objects, merge patches, the first token of JSON patch paths, field
selectors) and the apiVersion; everything else is shared. The store keeps the core
shape; `EventsView` wraps the API's own renaming, so the HTTP layer sees one more
`ServedApi`-like naming and nothing else changes. Pure functions, no store access.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from nicplug.simulator.apis import ServedApi
from nicplug.simulator.resources import EVENTS, EVENTS_V1

# core/v1 name -> events.k8s.io/v1 name (fields not listed keep their name)
CORE_TO_V1: dict[str, str] = {
    "involvedObject": "regarding",
    "message": "note",
    "reportingComponent": "reportingController",
    "source": "deprecatedSource",
    "firstTimestamp": "deprecatedFirstTimestamp",
    "lastTimestamp": "deprecatedLastTimestamp",
    "count": "deprecatedCount",
}
V1_TO_CORE: dict[str, str] = {v: k for k, v in CORE_TO_V1.items()}

Json = dict[str, Any]


def _renamed(obj: Json, names: dict[str, str], api_version: str) -> Json:
    out = {names.get(k, k): v for k, v in obj.items()}
    if "apiVersion" in out:
        out["apiVersion"] = api_version
    return out


def as_v1(event: Any) -> Any:
    """A stored (core/v1) Event as `events.k8s.io/v1` shows it."""
    if not isinstance(event, dict):
        return event
    out = _renamed(event, CORE_TO_V1, EVENTS_V1.api_version)
    if isinstance(out.get("items"), list):
        out["items"] = [as_v1(i) for i in out["items"]]
    return out


def as_core(document: Any) -> Any:
    """An `events.k8s.io/v1` body (object, merge patch or JSON patch) in core/v1 names."""
    if isinstance(document, list):
        return [_operation(op) for op in document]
    if not isinstance(document, dict):
        return document
    return _renamed(document, V1_TO_CORE, EVENTS.api_version)


def _operation(op: Any) -> Any:
    if not isinstance(op, dict):
        return op
    out = dict(op)
    for key in ("path", "from"):
        path = out.get(key)
        if isinstance(path, str) and path.startswith("/"):
            head, slash, rest = path[1:].partition("/")
            out[key] = "/" + V1_TO_CORE.get(head, head) + slash + rest
    return out


def fields_as_core(selector: str | None) -> str | None:
    """A field selector on `events.k8s.io/v1` names in core/v1 names."""
    if not selector:
        return selector
    return ",".join(_FIELD.sub(_core_field, term) for term in selector.split(","))


_FIELD = re.compile(r"^(\s*)([A-Za-z]+)")


def _core_field(match: re.Match[str]) -> str:
    return match.group(1) + V1_TO_CORE.get(match.group(2), match.group(2))


@dataclass(frozen=True, slots=True)
class EventsView:
    """The naming of `events.k8s.io/v1` calls: the API's own, then the view's."""

    api: ServedApi

    @property
    def renames(self) -> bool:
        return True

    def outward(self, obj: Any) -> Any:
        return as_v1(self.api.outward(obj))

    def inward(self, document: Any) -> Any:
        return self.api.inward(as_core(document))

    def inward_selector(self, selector: str | None) -> str | None:
        return self.api.inward_selector(selector)

    def inward_fields(self, selector: str | None) -> str | None:
        return fields_as_core(selector)
