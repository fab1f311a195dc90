"""Raw JSON bodies from kubernetes_asyncio calls, with failures already translated.

Every call in this adapter passes `_preload_content=False`: kubernetes_asyncio then
returns aiohttp's response untouched instead of building its generated models (a
pod model costs far more than the dict nicplug needs). The price is that it no longer
raises on an error status, so this module checks the status, parses the body with
orjson and raises the project's errors. It never retries.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio.client.exceptions import ApiException

from nicplug.adapters.kube.errors import KubeError, translate

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


def failure(status: int, reason: str, body: Any, headers: Any) -> KubeError:
    """The translated error of an HTTP error response."""
    exc = ApiException(status=status, reason=reason)
    exc.body = body
    exc.headers = headers
    return translate(exc)
