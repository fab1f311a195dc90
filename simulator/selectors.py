"""Label and field selectors, parsed once into predicates over stored objects.

Labels: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, comma-joined.
Fields: `metadata.name` and `metadata.namespace` for every kind, plus the fields the
real server indexes for pods (`spec.nodeName`, `status.phase`, ...) and events
(`involvedObject.*`, `reason`, `type`, ...), with `=`, `==`, `!=`. A selector that cannot
be parsed, or names a field the kind does not support, is a `BadRequest`, never a
silent match-all. Predicates only read.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from nicplug.simulator.errors import BadRequest

Predicate = Callable[[dict[str, Any]], bool]

_SET_RE = re.compile(r"^\s*(!?)\s*([A-Za-z0-9./_-]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$")
_EQ_RE = re.compile(r"^\s*([A-Za-z0-9./_-]+)\s*(==|!=|=)\s*([A-Za-z0-9._-]*)\s*$")
_COMMON_FIELDS = frozenset({"metadata.name", "metadata.namespace"})
FIELDS_BY_KIND: dict[str, frozenset[str]] = {
    "Pod": frozenset({
        "spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
        "spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP",
        "status.nominatedNodeName",
    }),
    "Event": frozenset({
        "involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
        "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
        "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type",
    }),
    "Namespace": frozenset({"status.phase"}),
}


def _split_terms(selector: str) -> list[str]:
    """Split on commas outside parentheses (`a in (x,y),b` is two terms)."""
    terms: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(selector):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            terms.append(selector[start:i])
            start = i + 1
    terms.append(selector[start:])
    return [t for t in terms if t.strip()]


def _label_term(term: str) -> Callable[[dict[str, str]], bool]:
    eq = _EQ_RE.match(term)
    if eq:
        key, op, value = eq.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    st = _SET_RE.match(term)
    if st is None:
        raise BadRequest(f"unable to parse requirement: {term.strip()!r}")
    negated, key, op, values = st.groups()
    if op is None:
        if negated:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    if negated:
        raise BadRequest(f"unable to parse requirement: {term.strip()!r}")
    allowed = frozenset(v.strip() for v in values.split(",") if v.strip())
    if op == "in":
        return lambda labels: labels.get(key) in allowed
    return lambda labels: labels.get(key) not in allowed


def label_predicate(selector: str | None) -> Predicate | None:
    """A predicate for a label selector, or None when it selects everything."""
    if not selector or not selector.strip():
        return None
    terms = [_label_term(t) for t in _split_terms(selector)]

    def matches(obj: dict[str, Any]) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(term(labels) for term in terms)

    return matches


def _field_value(obj: dict[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


def _field_term(term: str, allowed: frozenset[str]) -> Predicate:
    eq = _EQ_RE.match(term)
    if eq is None or eq.group(1) not in allowed:
        raise BadRequest(
            f"field selector {term.strip()!r} is not supported: use one of "
            f"{', '.join(sorted(allowed))} with =, == or !="
        )
    path, op, value = eq.groups()
    if op == "!=":
        return lambda obj: _field_value(obj, path) != value
    return lambda obj: _field_value(obj, path) == value


def field_predicate(selector: str | None, kind: str = "") -> Predicate | None:
    """A predicate for a field selector on objects of `kind`, or None for everything."""
    if not selector or not selector.strip():
        return None
    allowed = _COMMON_FIELDS | FIELDS_BY_KIND.get(kind, frozenset())
    terms = [_field_term(t, allowed) for t in _split_terms(selector)]
    return lambda obj: all(term(obj) for term in terms)


def combine(*predicates: Predicate | None) -> Predicate | None:
    """All of the given predicates (None ones select everything)."""
    present = [p for p in predicates if p is not None]
    if not present:
        return None
    if len(present) == 1:
        return present[0]
    return lambda obj: all(p(obj) for p in present)
