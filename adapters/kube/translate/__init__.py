"""Kubernetes objects → the domain's World of one VM, at the edge of the controller.

`objects` validates raw API bodies (pydantic, lenient about unknown fields, strict
about the ones nicplug uses); `records` maps one object to one domain record with
the SDN annotations read by a `Dialect`; `assemble` gathers one VM's World. All of
it is pure: the informers hand in bodies, nothing here calls the API server.
"""

from __future__ import annotations

from nicplug.adapters.kube.translate.assemble import Translation, VMObjects, assemble_world
from nicplug.adapters.kube.translate.objects import MalformedObject

__all__ = ["MalformedObject", "Translation", "VMObjects", "assemble_world"]
