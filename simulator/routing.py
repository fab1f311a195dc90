"""From an HTTP request to what it asks of the store: verb, resource, namespace, name.

Kubernetes paths are `/api/v1/...` for the core group and `/apis/<group>/<version>/...`
for the others, then `[namespaces/<ns>/]<plural>[/<name>[/<subresource>]]`; the
namespace object itself lives at `/api/v1/namespaces/<name>[/status]`. Pure parsing:
nothing here touches the store or the faults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from nicplug.simulator.apis import ServedApi
from nicplug.simulator.errors import MethodNotAllowed, NotFound
from nicplug.simulator.event_views import EventsView
from nicplug.simulator.faults import Target
from nicplug.simulator.resources import EVENTS, EVENTS_V1, Resource


class Naming(Protocol):
    """How a call's bodies and selectors are renamed between client and store."""

    @property
    def renames(self) -> bool: ...

    def outward(self, obj: Any) -> Any: ...

    def inward(self, document: Any) -> Any: ...

    def inward_selector(self, selector: str | None) -> str | None: ...

    def inward_fields(self, selector: str | None) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Call:
    """One request to a resource endpoint, as the API server's RBAC would name it.

    `resource` is the kind as stored; `served` the face the API shows clients (its
    group, kind and plural renamed in the deckhouse API; `events.k8s.io` Events are
    stored as core/v1 ones); `api` renames bodies."""

    verb: str  # get list watch create update patch delete deletecollection
    resource: Resource
    namespace: str | None
    name: str | None
    subresource: str | None
    served: Resource
    api: Naming

    def target(self) -> Target:
        names = {self.served.plural, self.served.key}
        if self.subresource:
            names = {f"{n}/{self.subresource}" for n in names}
        return Target(self.verb, frozenset(names))


def _verb(method: str, name: str | None, watching: bool) -> str:
    if method == "GET":
        return "get" if name else ("watch" if watching else "list")
    verbs = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
    verb = verbs.get(method)
    if verb is None:
        raise MethodNotAllowed(f"method {method} is not allowed")
    if verb == "create" and name:
        raise MethodNotAllowed("create is made on a collection, not on a named object")
    if verb in ("update", "patch") and not name:
        raise MethodNotAllowed(f"{verb} needs an object name")
    if verb == "delete" and not name:
        return "deletecollection"
    return verb


def locate(method: str, path: str, *, watching: bool, api: ServedApi) -> Call:
    """The `Call` a request path asks for; `NotFound` for paths no kind serves."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise NotFound(f"the server could not find the requested resource ({path})")
    namespace: str | None = None
    if (
        len(rest) >= 3
        and rest[0] == "namespaces"
        and not (len(rest) == 3 and rest[2] in ("status", "finalize"))
    ):
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise NotFound(f"the server could not find the requested resource ({path})")
    res = api.internal(group, version, rest[0])
    if res is None:
        raise NotFound(f"the server could not find the requested resource ({path})")
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    if namespace is not None and not res.namespaced:
        raise NotFound(f"{res.key} are not namespaced ({path})")
    if res.namespaced and name is not None and namespace is None:
        raise NotFound(f"{res.key} are namespaced: the path needs a namespace ({path})")
    if subresource is not None and (subresource != "status" or not res.has_status):
        raise NotFound(f"{res.key} has no subresource {subresource!r}")
    verb = _verb(method, name, watching)
    if verb == "create" and res.namespaced and namespace is None:
        raise MethodNotAllowed(f"{res.key} are created in a namespace")
    if res == EVENTS_V1:  # one Event behind both groups, stored as core/v1
        return Call(verb, EVENTS, namespace, name, subresource, res, EventsView(api))
    return Call(verb, res, namespace, name, subresource, api.served(res), api)
