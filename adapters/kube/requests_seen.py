"""Every request to the API server, named as the API server's own metrics name it.

An aiohttp trace on the client's session sees each request that any part of the
controller sends (effects, lists, watches, the Lease), whichever API class or raw
call built it; it reports `(verb, resource, code, seconds)` to a callback. The verb
is Kubernetes' (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
`deletecollection`), read from the method and the path as the API server's request
info does; the resource is its plural, `.group` for a named group and `/subresource`
when there is one (`virtualmachines.kubevirt.io/status`). The code is the HTTP status,
or `error` when no answer came (refused, reset, timed out). Never raises into the
request: a callback that fails is the metric's loss, not the request's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from types import SimpleNamespace

import aiohttp
from yarl import URL

log = logging.getLogger(__name__)

RequestSeen = Callable[[str, str, str, float], None]
"""`(verb, resource, code, seconds)` of one request."""

_READS = {"GET": ("get", "list"), "HEAD": ("get", "list")}
_WRITES = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def verb_and_resource(method: str, url: URL) -> tuple[str, str]:
    """Kubernetes' verb and resource of a request to `url` (`other`, the path's first
    segment, for a path that is no resource: `/version`, `/openapi/v2`)."""
    segments = [s for s in url.path.split("/") if s]
    if segments[:1] == ["api"] and len(segments) >= 2:
        group, rest = "", segments[2:]
    elif segments[:1] == ["apis"] and len(segments) >= 3:
        group, rest = segments[1], segments[3:]
    else:
        return method.lower(), segments[0] if segments else "/"
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]  # inside a namespace; `namespaces/NAME` alone is the namespace
    if not rest:
        return method.lower(), "other"
    resource = rest[0] + (f".{group}" if group else "")
    named = len(rest) >= 2
    if len(rest) >= 3:
        resource += "/" + rest[2]
    upper = method.upper()
    if upper in _READS:
        if url.query.get("watch", "").lower() in ("true", "1"):
            return "watch", resource
        one, many = _READS[upper]
        return (one if named else many), resource
    if upper == "DELETE":
        return ("delete" if named else "deletecollection"), resource
    return _WRITES.get(upper, upper.lower()), resource


def request_tracing(seen: RequestSeen, *, clock: Callable[[], float] = time.monotonic,
                    ) -> aiohttp.TraceConfig:
    """A trace that calls `seen` once per request, when its answer's headers arrive
    or it fails."""

    def report(context: SimpleNamespace, method: str, url: URL, code: str) -> None:
        try:
            verb, resource = verb_and_resource(method, url)
            seen(verb, resource, code, clock() - getattr(context, "started", clock()))
        except Exception:  # a metric must never break a request
            log.debug("could not count a request to %s", url, exc_info=True)

    async def started(_: aiohttp.ClientSession, context: SimpleNamespace,
                      _params: aiohttp.TraceRequestStartParams) -> None:
        context.started = clock()

    async def ended(_: aiohttp.ClientSession, context: SimpleNamespace,
                    params: aiohttp.TraceRequestEndParams) -> None:
        report(context, params.method, params.url, str(params.response.status))

    async def failed(_: aiohttp.ClientSession, context: SimpleNamespace,
                     params: aiohttp.TraceRequestExceptionParams) -> None:
        report(context, params.method, params.url, "error")

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(started)
    trace.on_request_end.append(ended)
    trace.on_request_exception.append(failed)
    trace.freeze()
    return trace
