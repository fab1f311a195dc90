"""`kubectl get`'s tables: the server-side `Table` a client asks for with
`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`.

kubectl prints only what the server's table holds (without one it shows NAME and AGE),
so the columns are the server's: a kind's printer columns (`Resource.columns`, as its
CRD's `additionalPrinterColumns`), Name and Age where it declares none (as for a CRD),
and the built-in printer's columns for Events (Last Seen, Type, Reason, Object,
Message). Each row carries the object's metadata (`PartialObjectMetadata`, or the whole
object with `includeObject=Object`), which kubectl reads for `-A`'s NAMESPACE column.
Dates become the API server's human durations. Pure functions of the objects and now.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from nicplug.simulator.resources import Column, Resource

Json = dict[str, Any]

_AGE = Column("Age", ".metadata.creationTimestamp", "date")
_EVENT_COLUMNS = (
    Column("Last Seen", ".lastTimestamp", "date"), Column("Type", ".type"),
    Column("Reason", ".reason"), Column("Object", ".involvedObject"),
    Column("Message", ".message"),
)


def wants_table(accept: str) -> bool:
    """Whether an Accept header asks for a `meta.k8s.io` Table (v1 or v1beta1)."""
    return any("as=Table" in part and "g=meta.k8s.io" in part for part in accept.split(","))


def _columns(res: Resource) -> tuple[Column, ...]:
    if res.kind == "Event" and res.group == "":
        return _EVENT_COLUMNS
    return res.columns or (_AGE,)


def human_duration(seconds: float) -> str:
    """As the API server's `duration.HumanDuration` prints an age."""
    s = int(seconds)
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    return f"{hours // 24}d"


def _at(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _value(obj: Json, path: str) -> Any:
    node: Any = obj
    for part in path.strip(".").split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _cell(obj: Json, column: Column, now: float) -> Any:
    if column.name == "Object" and column.json_path == ".involvedObject":
        involved = obj.get("involvedObject") or {}
        return f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}"
    if column.name == "Last Seen":
        series = obj.get("series") or {}
        when = (_at(series.get("lastObservedTime")) or _at(obj.get("lastTimestamp"))
                or _at(obj.get("eventTime")))
        return human_duration(now - when) if when is not None else "<unknown>"
    value = _value(obj, column.json_path)
    if column.type == "date":
        when = _at(value)
        return human_duration(now - when) if when is not None else "<unknown>"
    if value is None:
        return None if column.type == "integer" else ""
    return value if column.type == "integer" else str(value)


def _definition(column: Column) -> Json:
    return {"name": column.name, "type": "string" if column.type == "date" else column.type,
            "format": "", "description": column.name, "priority": column.priority}


def table(res: Resource, items: list[Json], rv: str, *, now: float,
          include_object: str = "Metadata") -> Json:
    """The `meta.k8s.io/v1` Table of `items` (objects as the client sees them)."""
    columns = _columns(res)
    rows = []
    for obj in items:
        if include_object == "Object":
            shown: Json | None = obj
        elif include_object == "None":
            shown = None
        else:
            shown = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                     "metadata": obj.get("metadata", {})}
        cells = [obj.get("metadata", {}).get("name", "")]
        cells += [_cell(obj, c, now) for c in columns]
        rows.append({"cells": cells, "object": shown})
    name = {"name": "Name", "type": "string", "format": "name",
            "description": "Name must be unique within a namespace.", "priority": 0}
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": rv},
            "columnDefinitions": [name] + [_definition(c) for c in columns], "rows": rows}
