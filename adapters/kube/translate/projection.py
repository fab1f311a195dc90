"""Only what nicplug reads of each object, kept as it arrives (a cache transform).

An informer caches every object of its kind for as long as it exists, and a launcher
pod or a VMI is 10–20 KB of JSON of which nicplug reads a few hundred bytes: at
10,000 VMs the raw bodies are most of the process's memory. `projector(model)` keeps
of a body the fields the pydantic model of `objects.py` reads (by their wire names,
nested models and lists of them followed) and drops the rest, as controller-runtime's
cache transforms do. The models stay the one statement of what is read: a field added
to a model is kept from then on.

The strings kept are not interned: every cache encodes the projected body at once
(`kube/encoded.py`) and drops the dict, so an interned string outlived nothing, and
interning each was a third of the projection's cost on every watch event.
The walk over a shape is written out as code once per shape (`compiled`): it runs on
every watch event. A projection never repairs or judges: a field the model reads is kept as it came,
malformed or not, so reading the projected body fails exactly where reading the whole
body fails, and gives the same record where it succeeds.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Union

from pydantic import BaseModel

Body = dict[str, Any]
Shape = dict[str, "Shape | None"]
"""Wire name → the shape of the model it holds (kept field by field, through lists),
or None: kept whole."""


def shape_of(model: type[BaseModel]) -> Shape:
    shape: Shape = {}
    for name, info in model.model_fields.items():
        wire = info.alias or name
        nested = _model_in(info.annotation)
        shape[wire] = shape_of(nested) if nested is not None else None
    return shape


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds: itself, in a list, a tuple or an optional; else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (list, tuple, Union, types.UnionType):
        found = {_model_in(a) for a in typing.get_args(annotation) if a is not type(None)}
        found.discard(None)
        if len(found) == 1:
            return found.pop()
    return None


_MAPPING = (dict, Mapping)
"""`isinstance` of a JSON body: dict first, an exact type check (the ABC's is slow)."""
_ABSENT = object()


def project(shape: Shape, body: Mapping[str, Any]) -> Body:
    kept: Body = {}
    for wire, inner in shape.items():
        value = body.get(wire, _ABSENT)
        if value is _ABSENT:
            continue
        if inner is not None:
            if isinstance(value, _MAPPING):
                value = project(inner, value)
            elif isinstance(value, list):
                value = [project(inner, v) if isinstance(v, _MAPPING) else v for v in value]
        kept[wire] = value
    return kept


def projector(model: type[BaseModel], *, keep: Shape | None = None) -> Callable[[Body], Body]:
    """The transform keeping what `model` reads of a body, plus `keep` (merged in: fields
    read elsewhere than through the model, such as `apiVersion` and `kind`)."""
    return compiled(merged(shape_of(model), keep or {}))


def compiled(shape: Shape) -> Callable[[Body], Body]:
    """`project(shape, ·)` as straight-line code, one function per nested shape.

    It runs on every watch event, and the walk of `project` (a loop over the shape, a
    lookup and an ABC check per field) cost more than decoding the event's JSON: the
    shape is fixed when the models load, so its walk is written out once, as the
    standard library's dataclasses write their `__init__`. It keeps exactly what
    `project` keeps (`test_projection.py` compares them)."""
    lines: list[str] = []
    names: dict[int, str] = {}

    def function_of(inner: Shape) -> str:
        name = names.get(id(inner))
        if name is not None:
            return name
        name = names[id(inner)] = f"_shape{len(names)}"
        body = [f"def {name}(body):", "    kept = {}", "    get = body.get"]
        for wire, nested in inner.items():
            body += [f"    value = get({wire!r}, _ABSENT)", "    if value is not _ABSENT:"]
            if nested is not None:
                into = function_of(nested)
                body += [
                    "        kind = type(value)",
                    "        if kind is dict or (kind is not list"
                    " and isinstance(value, _MAPPING)):",
                    f"            value = {into}(value)",
                    "        elif isinstance(value, list):",
                    f"            value = [{into}(v) if isinstance(v, _MAPPING) else v"
                    " for v in value]",
                ]
            body.append(f"        kept[{wire!r}] = value")
        lines.extend([*body, "    return kept", ""])
        return name

    top = function_of(shape)
    source = "\n".join(lines)
    transform = _COMPILED.get(source)
    if transform is None:
        namespace: dict[str, Any] = {"_ABSENT": _ABSENT, "_MAPPING": _MAPPING}
        exec(compile(source, f"<projection {top}>", "exec"), namespace)
        transform = _COMPILED[source] = namespace[top]
    return transform


_COMPILED: dict[str, Callable[[Body], Body]] = {}
"""Each shape's function, by its source: every informer of every controller in the
process asks for the same few shapes, and compiling one costs ~1 ms, more than writing
its source (a simulation starts controllers hundreds of times). The functions hold no
state, so sharing one is safe."""


def merged(a: Shape, b: Shape) -> Shape:
    """Both shapes in one: a field kept whole by either is kept whole."""
    both: Shape = dict(a)
    for wire, inner in b.items():
        mine = both.get(wire)
        if wire in both and (mine is None or inner is None):
            both[wire] = None  # kept whole by either
        elif mine is not None and inner is not None:
            both[wire] = merged(mine, inner)
        else:
            both[wire] = inner
    return both
