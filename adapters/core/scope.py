"""Which VMs nicplug manages: a label selector and a list of namespaces.

So that nicplug can take VMs over a few at a time beside the platform's own
controller, a VM outside the scope is never observed: no operation is opened for it,
nothing of it is patched, no condition or Event is written. The selector speaks
Kubernetes' label-selector syntax (`k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`,
`k notin (a,b)`, comma-separated, all must hold). A selector that cannot be read is a
`ValueError` naming the part, raised when the settings are built.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Labels = Mapping[str, Any]
Requirement = Callable[[Labels], bool]

_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_SET = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s+\(([^()]*)\)\s*$")
_EQUALS = re.compile(rf"^\s*({_KEY})\s*(==|=|!=)\s*([-A-Za-z0-9_.]*)\s*$")
_EXISTS = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


def _split(selector: str) -> list[str]:
    """The requirements of `selector`: commas inside `(…)` do not split."""
    parts, depth, current = [], 0, ""
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p for p in parts if p.strip()]


def _requirement(text: str) -> Requirement:
    if found := _SET.match(text):
        key, op, values = found.group(1), found.group(3), found.group(4)
        allowed = frozenset(v.strip() for v in values.split(",") if v.strip())
        if op == "in":
            return lambda labels: labels.get(key) in allowed
        return lambda labels: labels.get(key) not in allowed
    if found := _EQUALS.match(text):
        key, op, value = found.group(1), found.group(3), found.group(4)
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if found := _EXISTS.match(text):
        negated, key = found.group(1) == "!", found.group(2)
        return lambda labels: (key in labels) is not negated
    raise ValueError(f"cannot read the label selector requirement {text.strip()!r}")


@dataclass(frozen=True, slots=True)
class VMScope:
    """`namespaces` empty: every namespace; `selector` empty: every VM."""

    selector: str = ""
    namespaces: frozenset[str] = frozenset()
    _requirements: tuple[Requirement, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        requirements = tuple(_requirement(p) for p in _split(self.selector))
        object.__setattr__(self, "_requirements", requirements)

    @property
    def everything(self) -> bool:
        return not self._requirements and not self.namespaces

    def covers(self, namespace: str, labels: Labels) -> bool:
        """Does nicplug manage the VM in `namespace` with these labels?"""
        if self.namespaces and namespace not in self.namespaces:
            return False
        return all(requirement(labels) for requirement in self._requirements)
