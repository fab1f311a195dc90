"""How the simulated API server reads requests and writes answers: JSON in, JSON out.

Responses are orjson-encoded; errors leave as Kubernetes `Status` objects; bodies are
read up to `BODY_LIMIT` (413 beyond) and must be JSON (400 when malformed, 415 for
another media type). Nothing here knows the store.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from nicplug.simulator.errors import (
    ApiError,
    BadRequest,
    RequestEntityTooLarge,
    UnsupportedMediaType,
)
from nicplug.simulator.routing import Call

BODY_LIMIT = 3 * 1024 * 1024  # the real server's default request size limit
MAX_DEPTH = 100
"""How deep a request body may nest. Kubernetes' JSON decoder stops at 10,000
(apimachinery `util/json`, "exceeded max depth") with a 400; the patches here recurse
once or twice a level, so the simulated server refuses far less deep, the same way."""


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def error_response(error: ApiError, headers: dict[str, str] | None = None) -> web.Response:
    response = json_response(error.status(), error.code)
    response.headers.update(headers or {})
    return response


async def read_json(request: web.Request) -> Any:
    """The request's JSON body: 413 over `BODY_LIMIT`, 400 when empty or malformed."""
    if request.content_length is not None and request.content_length > BODY_LIMIT:
        raise RequestEntityTooLarge(f"the request body exceeds {BODY_LIMIT} bytes")
    data = bytearray()
    async for chunk in request.content.iter_chunked(1 << 16):
        data += chunk
        if len(data) > BODY_LIMIT:
            raise RequestEntityTooLarge(f"the request body exceeds {BODY_LIMIT} bytes")
    if not data:
        raise BadRequest("the request has no body")
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise BadRequest(f"the request body is not valid JSON: {e}") from e
    if _depth(body) > MAX_DEPTH:
        raise BadRequest(f"the request body is nested deeper than {MAX_DEPTH} levels")
    return body


def _depth(value: Any) -> int:
    """How deep maps and lists nest in `value`, counted without recursing."""
    deepest, level = 0, [(value, 1)]
    while level:
        item, depth = level.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        level.extend((child, depth + 1) for child in children)
    return deepest


def require_json(request: web.Request) -> None:
    """415 unless the body of a create or update is declared JSON."""
    media = request.headers.get("Content-Type", "application/json").split(";")[0].strip()
    if media not in ("application/json", "*/*", ""):
        raise UnsupportedMediaType(f"the body's media type {media!r} is not accepted")


def place(call: Call, body: Any) -> dict[str, Any]:
    """Put the path's namespace (and name) into the body, refusing contradictions."""
    if not isinstance(body, dict):
        raise BadRequest(f"the body must be a {call.resource.kind} object")
    meta = body.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise BadRequest("metadata must be a JSON object")
    if call.namespace is not None:
        if meta.get("namespace", call.namespace) != call.namespace:
            raise BadRequest(
                "the namespace of the provided object does not match the namespace sent "
                "on the request"
            )
        meta["namespace"] = call.namespace
    if call.name is not None:
        if meta.get("name", call.name) != call.name:
            raise BadRequest("the name of the object does not match the name on the URL")
        meta["name"] = call.name
    return body


def flag(value: str | None) -> bool:
    """A boolean query parameter (`watch=1`, `allowWatchBookmarks=true`)."""
    return value is not None and value.lower() in ("1", "true")
