"""Raw JSON bodies from kubernetes_asyncio calls, with failures already translated.

Every call in this adapter passes `_preload_content=False`: kubernetes_asyncio then
returns aiohttp's response untouched instead of building its generated models (a
pod model costs far more than the dict nicplug needs). The price is that it no longer
raises on an error status, so this module checks the status, parses the body with
orjson and raises the project's errors. It never retries.

Writes (`write`) do not go through the generated API classes at all: they walk every
body to "sanitize" it and encode it with the standard `json`, which was a third of
what an effect cost the client. A write is sent on the same client's session, with its
headers (User-Agent) and credentials (`update_params_for_auth`, which refreshes an
expiring token as the generated calls do), its body encoded once with orjson.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
from kubernetes_asyncio.client.exceptions import ApiException

from nicplug.adapters.kube.client import ApiConnection
from nicplug.adapters.kube.errors import KubeError, translate
from nicplug.adapters.kube.resources import KindRef

JsonObject = dict[str, Any]


async def send(request: Awaitable[Any]) -> aiohttp.ClientResponse:
    """Await a kubernetes_asyncio call made with `_preload_content=False`.

    Returns the open response when its status is 2xx; raises a `KubeError` otherwise.
    """
    try:
        response = await request
    except Exception as exc:  # translate() re-raises what it does not know
        raise translate(exc) from exc
    if not isinstance(response, aiohttp.ClientResponse):
        raise TypeError(f"expected a raw response, got {type(response).__name__}")
    if 200 <= response.status < 300:
        return response
    try:
        body = await response.read()
    except (aiohttp.ClientError, TimeoutError) as exc:
        body = str(exc).encode()
    finally:
        response.release()
    raise failure(response.status, response.reason or "", body, response.headers)


async def fetch_object(request: Awaitable[Any]) -> JsonObject:
    """The JSON object a kubernetes_asyncio call returns (`_preload_content=False`)."""
    response = await send(request)
    try:
        body = await response.read()
    except Exception as exc:
        raise translate(exc) from exc
    finally:
        response.release()
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise KubeError(f"the API server sent a body that is not JSON: {exc}") from exc
    if not isinstance(parsed, dict):
        raise KubeError("the API server sent JSON that is not an object")
    return parsed


def path_of(
    kind: KindRef, namespace: str | None, name: str | None = None, subresource: str = ""
) -> str:
    """The API path of a collection (no `name`) or of one object of `kind`."""
    parts = ["/api" if kind.core else f"/apis/{kind.group}", kind.version]
    if namespace is not None:
        parts += ["namespaces", quote(namespace, safe="")]
    parts.append(kind.plural)
    if name is not None:
        parts.append(quote(name, safe=""))
    if subresource:
        parts.append(subresource)
    return "/".join(parts)


async def write(
    connection: ApiConnection, method: str, path: str, body: Any, *,
    content_type: str = "application/json",
) -> JsonObject:
    """Send `body` (plain dicts and lists) as JSON to `path`; the object answered."""
    client = connection.client
    headers = {**client.default_headers, "Accept": "application/json",
               "Content-Type": content_type}
    await client.update_params_for_auth(headers, [], ["BearerToken"])
    rest = client.rest_client
    options: dict[str, Any] = {}  # as kubernetes_asyncio's own requests carry them
    if rest.proxy:
        options.update(proxy=rest.proxy, proxy_headers=rest.proxy_headers)
    if rest.server_hostname:
        options["server_hostname"] = rest.server_hostname
    return await fetch_object(rest.pool_manager.request(
        method, f"{client.configuration.host}{path}", data=orjson.dumps(body, default=_plain),
        headers=headers, timeout=connection.request_timeout, **options,
    ))


def _plain(value: Any) -> Any:
    """What orjson does not encode itself: any other mapping, as a dict."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def failure(status: int, reason: str, body: Any, headers: Any) -> KubeError:
    """The translated error of an HTTP error response."""
    exc = ApiException(status=status, reason=reason)
    exc.body = body
    exc.headers = headers
    return translate(exc)
