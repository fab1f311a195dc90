"""What a Kubernetes API server does with an object of a CRD: validate it, prune it.

A CRD's `openAPIV3Schema` is a structural schema. The server drops (prunes) every field
the schema does not declare unless `x-kubernetes-preserve-unknown-fields` allows it,
and rejects types, enums and required fields that do not fit. This reports both, with
the path of each finding, so a test can demand that an object passes untouched. It
covers what the real schemas here use (types, `nullable`, `int-or-string`,
`properties`, `additionalProperties`, `items`, `required`, `enum`); CEL rules and
formats are not evaluated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

Schema = dict[str, Any]


@dataclass
class Findings:
    pruned: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.pruned or self.invalid)


def load_crds(*paths: Path) -> dict[tuple[str, str, str], Schema]:
    """(group, version, kind) → the version's openAPIV3Schema, from CRD YAML files."""
    schemas: dict[tuple[str, str, str], Schema] = {}
    for path in paths:
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for version in spec["versions"]:
                schemas[(spec["group"], version["name"], spec["names"]["kind"])] = (
                    version["schema"]["openAPIV3Schema"])
    return schemas


_TYPES = {"string": str, "boolean": bool, "object": dict, "array": list}


def check(value: Any, schema: Schema, path: str = "", found: Findings | None = None) -> Findings:
    found = found if found is not None else Findings()
    if value is None:
        if not schema.get("nullable"):
            found.invalid.append(f"{path or '.'}: null")
        return found
    if schema.get("x-kubernetes-int-or-string"):
        if not isinstance(value, int | str) or isinstance(value, bool):
            found.invalid.append(f"{path}: not an int or string")
        return found
    kind = schema.get("type")
    if kind in ("integer", "number"):
        wanted: tuple[type, ...] = (int,) if kind == "integer" else (int, float)
        if not isinstance(value, wanted) or isinstance(value, bool):
            found.invalid.append(f"{path}: {value!r} is not an {kind}")
        return found
    if kind in _TYPES and not isinstance(value, _TYPES[kind]):
        found.invalid.append(f"{path}: {type(value).__name__} where {kind} is declared")
        return found
    if "enum" in schema and value not in schema["enum"]:
        found.invalid.append(f"{path}: {value!r} not in {schema['enum']}")
    if isinstance(value, dict):
        _object(value, schema, path, found)
    elif isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            check(item, schema["items"], f"{path}[{index}]", found)
    return found


def _object(value: dict[str, Any], schema: Schema, path: str, found: Findings) -> None:
    for name in schema.get("required", ()):
        if name not in value:
            found.invalid.append(f"{path}.{name}: required")
    properties: dict[str, Schema] = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    keeps_unknown = schema.get("x-kubernetes-preserve-unknown-fields", False)
    for key, item in value.items():
        where = f"{path}.{key}"
        if path == "" and key in ("apiVersion", "kind", "metadata"):
            continue  # the server's own schema (ObjectMeta), never pruned by the CRD's
        if key in properties:
            check(item, properties[key], where, found)
        elif isinstance(extra, dict):
            check(item, extra, where, found)
        elif not keeps_unknown and extra is not True:
            found.pruned.append(where)
