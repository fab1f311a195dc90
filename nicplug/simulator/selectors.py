"""Label and field selectors, parsed once into predicates over stored objects.

Labels: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, comma-joined.
Fields: `metadata.name` and `metadata.namespace` with `=`, `==`, `!=`. A selector that
cannot be parsed is a `BadRequest`, never a silent match-all. Predicates only read.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from nicplug.simulator.errors import BadRequest

Predicate = Callable[[dict[str, Any]], bool]

_SET_RE = re.compile(r"^\s*(!?)\s*([A-Za-z0-9./_-]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$")
_EQ_RE = re.compile(r"^\s*([A-Za-z0-9./_-]+)\s*(==|!=|=)\s*([A-Za-z0-9._-]*)\s*$")
_FIELDS = ("metadata.name", "metadata.namespace")


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


def _field_term(term: str) -> Predicate:
    eq = _EQ_RE.match(term)
    if eq is None or eq.group(1) not in _FIELDS:
        raise BadRequest(
            f"field selector {term.strip()!r} is not supported: use "
            "metadata.name or metadata.namespace with =, == or !="
        )
    path, op, value = eq.groups()
    field = path.split(".", 1)[1]
    if op == "!=":
        return lambda obj: obj.get("metadata", {}).get(field, "") != value
    return lambda obj: obj.get("metadata", {}).get(field, "") == value


def field_predicate(selector: str | None) -> Predicate | None:
    """A predicate for a field selector, or None when it selects everything."""
    if not selector or not selector.strip():
        return None
    terms = [_field_term(t) for t in _split_terms(selector)]
    return lambda obj: all(term(obj) for term in terms)


def combine(*predicates: Predicate | None) -> Predicate | None:
    """All of the given predicates (None ones select everything)."""
    present = [p for p in predicates if p is not None]
    if not present:
        return None
    if len(present) == 1:
        return present[0]
    return lambda obj: all(p(obj) for p in present)
