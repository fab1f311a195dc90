"""The SDN dialects behind one port, and the registry that picks one by name.

The port (`Dialect`, `WritingDialect` where nicplug writes the annotation and the
KVVM networks, `MalformedAnnotation`) lives in `port`; each dialect is a module
of its own (`deckhouse`, `multus`) that imports the port, never the other dialect
and never this package's registry (import-linter checks it). Only this registry
knows them all.
"""

from __future__ import annotations

from nicplug.adapters.sdn.deckhouse import DeckhouseDialect
from nicplug.adapters.sdn.multus import MultusDialect
from nicplug.adapters.sdn.port import (
    DEFAULT_CLUSTER_NAD_NAMESPACE,
    Dialect,
    MalformedAnnotation,
    WritingDialect,
)

DIALECT_NAMES = (DeckhouseDialect.name, MultusDialect.name)


class UnknownDialect(ValueError):
    """`--dialect` named no dialect nicplug knows."""


def dialect_for(
    name: str, *, cluster_nad_namespace: str = DEFAULT_CLUSTER_NAD_NAMESPACE
) -> Dialect:
    """The dialect called `name`; `cluster_nad_namespace` is where multus finds the
    NetworkAttachmentDefinitions of ClusterNetworks (deckhouse ignores it)."""
    if name == "deckhouse":
        return DeckhouseDialect()
    if name == "multus":
        return MultusDialect(cluster_nad_namespace=cluster_nad_namespace)
    raise UnknownDialect(f"unknown SDN dialect {name!r}: choose one of {', '.join(DIALECT_NAMES)}")


__all__ = [
    "DEFAULT_CLUSTER_NAD_NAMESPACE",
    "DIALECT_NAMES",
    "Dialect",
    "MalformedAnnotation",
    "UnknownDialect",
    "WritingDialect",
    "dialect_for",
]
