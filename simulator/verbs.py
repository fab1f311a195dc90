"""One handler per Kubernetes verb on a resource endpoint (watch lives in `streaming`).

Each takes the request, the parsed `Call` and the store, and answers with the store's
result encoded as the real server would (201 on create, `<Kind>List` lists carrying the
list's resourceVersion, the deleted object on delete). Faults and logging happen
before a handler runs; handlers never see them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from nicplug.simulator import admission_policy
from nicplug.simulator.admission import admit
from nicplug.simulator.errors import BadRequest
from nicplug.simulator.routing import Call
from nicplug.simulator.store import Store
from nicplug.simulator.tables import table, wants_table
from nicplug.simulator.wire import json_response, place, read_json, require_json

Verb = Callable[[web.Request, Call, Store], Awaitable[web.Response]]

USERNAME = web.RequestKey("username", str)
"""Who the server took the request for (set before a handler runs)."""


def _policy(request: web.Request, call: Call, name: str | None, store: Store | None = None
            ) -> None:
    """The admission policies that judge the requester (Deckhouse's, on its groups).
    Given the `store`, an object that does not exist is not judged: the registry answers
    404 before admission runs."""
    if store is not None and name is not None and store.peek(
            call.resource, call.namespace, name) is None:
        return
    admission_policy.check(call.served, call.verb, call.subresource, name,
                           request.get(USERNAME, ""))


def _list_body(call: Call, items: list[dict[str, Any]], rv: str) -> dict[str, Any]:
    res, outward = call.served, call.api.outward
    return {
        "kind": f"{res.kind}List",
        "apiVersion": res.api_version,
        "metadata": {"resourceVersion": rv},
        "items": [outward(i) for i in items] if call.api.renames else items,
    }


def _selected(request: web.Request, call: Call, store: Store) -> tuple[list[dict[str, Any]], str]:
    return store.list_shared(
        call.resource,
        call.namespace,
        label_selector=call.api.inward_selector(request.query.get("labelSelector")),
        field_selector=call.api.inward_fields(request.query.get("fieldSelector")),
    )


def _name(call: Call) -> str:
    assert call.name is not None  # routing gives every per-object verb a name
    return call.name


def _answer(request: web.Request, call: Call, store: Store, body: dict[str, Any]) -> web.Response:
    """The list (or one object) as JSON, or as the Table `kubectl get` asks for."""
    if not wants_table(request.headers.get("Accept", "")):
        return json_response(body)
    items = body.get("items", [body])
    answer = table(call.served, items, str(store.resource_version), now=store.now(),
                   include_object=request.query.get("includeObject", "Metadata"))
    if "items" in body:
        answer["metadata"] = body["metadata"]
    return json_response(answer)


async def list_objects(request: web.Request, call: Call, store: Store) -> web.Response:
    limit = _limit(request.query.get("limit"))
    token = request.query.get("continue")
    if limit is None and not token:
        items, rv = _selected(request, call, store)  # the stored dicts: serialised, not copied
        return _answer(request, call, store, _list_body(call, items, rv))
    items, rv, next_token, remaining = store.page(
        call.resource, call.namespace, limit=limit or 500, token=token,
        label_selector=call.api.inward_selector(request.query.get("labelSelector")),
        field_selector=call.api.inward_fields(request.query.get("fieldSelector")),
    )
    body = _list_body(call, items, rv)
    if next_token is not None:
        body["metadata"] |= {"continue": next_token, "remainingItemCount": remaining}
    return _answer(request, call, store, body)


def _limit(value: str | None) -> int | None:
    """`limit`: a positive page size; absent or 0 means the whole list."""
    if value is None:
        return None
    try:
        limit = int(value)
    except ValueError as e:
        raise BadRequest(f"invalid limit {value!r}") from e
    if limit < 0:
        raise BadRequest(f"limit must not be negative, not {limit}")
    return limit or None


async def get(request: web.Request, call: Call, store: Store) -> web.Response:
    found = call.api.outward(store.get(call.resource, call.namespace, _name(call)))
    return _answer(request, call, store, found)


async def create(request: web.Request, call: Call, store: Store) -> web.Response:
    require_json(request)
    body = place(call, call.api.inward(await read_json(request)))
    _policy(request, call, (body.get("metadata") or {}).get("name"))
    admit(store, call.resource, body)
    return json_response(call.api.outward(store.create(call.resource, body, drop_status=True)),
                         201)


async def update(request: web.Request, call: Call, store: Store) -> web.Response:
    require_json(request)
    body = place(call, call.api.inward(await read_json(request)))
    _policy(request, call, call.name, store)
    return json_response(call.api.outward(
        store.update(call.resource, body, subresource=call.subresource)))


async def patch(request: web.Request, call: Call, store: Store) -> web.Response:
    document = call.api.inward(await read_json(request))
    _policy(request, call, call.name, store)
    patched = store.patch(
        call.resource,
        call.namespace,
        _name(call),
        document,
        content_type=request.headers.get("Content-Type", ""),
        subresource=call.subresource,
    )
    return json_response(call.api.outward(patched))


async def delete(request: web.Request, call: Call, store: Store) -> web.Response:
    _policy(request, call, call.name, store)
    options = await read_json(request) if request.can_read_body else {}
    found = options.get("preconditions") if isinstance(options, dict) else None
    preconditions = found if isinstance(found, dict) else {}
    deleted = store.delete(
        call.resource,
        call.namespace,
        _name(call),
        uid=preconditions.get("uid"),
        resource_version=preconditions.get("resourceVersion"),
    )
    return json_response(call.api.outward(deleted))


async def delete_collection(request: web.Request, call: Call, store: Store) -> web.Response:
    _policy(request, call, None)
    items, _ = _selected(request, call, store)
    doomed = [(i["metadata"].get("namespace"), i["metadata"]["name"]) for i in items]
    deleted = [store.delete(call.resource, ns, name) for ns, name in doomed]
    return json_response(_list_body(call, deleted, str(store.resource_version)))


VERBS: dict[str, Verb] = {
    "list": list_objects,
    "get": get,
    "create": create,
    "update": update,
    "patch": patch,
    "delete": delete,
    "deletecollection": delete_collection,
}
