"""The simulated Kubernetes API server: HTTP in front of the `Store`.

`make_app(store, faults)` builds the aiohttp application: discovery, CRUD and watch on
every kind of `resources.ALL`, the status subresource, patches by Content-Type, Status
errors shaped like the real server's, a body limit, injected faults, a log of every
resource request (`app[REQUEST_LOG]`) and the fault admin endpoint `/_sim/faults`.
It binds nothing itself (`serve` does, on loopback only) and holds no state of its own
beyond that log: objects live in the store.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
import pydantic
from aiohttp import web

from nicplug.simulator import discovery, openapi
from nicplug.simulator.errors import (
    ApiError,
    BadRequest,
    InternalError,
    MethodNotAllowed,
    NotFound,
    RequestEntityTooLarge,
    UnsupportedMediaType,
)
from nicplug.simulator.faults import FAULT_SPECS, Faults, arm
from nicplug.simulator.routing import Call, locate
from nicplug.simulator.store import Store
from nicplug.simulator.streaming import DEFAULT_TIMEOUT, WatchParams, serve_watch
from nicplug.simulator.watching import Subscription

log = logging.getLogger(__name__)

BODY_LIMIT = 3 * 1024 * 1024  # the real server's default request size limit


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One resource request as RBAC would see it."""

    verb: str
    group: str
    resource: str
    subresource: str | None
    namespace: str | None
    name: str | None


REQUEST_LOG = web.AppKey("request_log", list[RequestRecord])
STORE = web.AppKey("store", Store)
FAULTS = web.AppKey("faults", Faults)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def _error(error: ApiError, headers: dict[str, str] | None = None) -> web.Response:
    response = _json(error.status(), error.code)
    response.headers.update(headers or {})
    return response


@web.middleware
async def _statuses(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure leaves as a Kubernetes `Status`."""
    try:
        return await handler(request)
    except ApiError as e:
        return _error(e)
    except web.HTTPException as e:
        if e.status == 404:
            missing = f"the server could not find the requested resource ({request.path})"
            return _error(NotFound(missing))
        if e.status == 405:
            return _error(MethodNotAllowed(f"method {request.method} is not allowed"))
        raise
    except Exception as e:
        log.exception("simulated API server failed on %s %s", request.method, request.path)
        return _error(InternalError(f"internal error: {e}"))


async def _body(request: web.Request) -> Any:
    """The request's JSON body: 413 over `BODY_LIMIT`, 400 when malformed."""
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
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise BadRequest(f"the request body is not valid JSON: {e}") from e


def _check_json(request: web.Request) -> None:
    media = request.headers.get("Content-Type", "application/json").split(";")[0].strip()
    if media not in ("application/json", "*/*", ""):
        raise UnsupportedMediaType(f"the body's media type {media!r} is not accepted")


def _place(call: Call, body: Any) -> dict[str, Any]:
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
    if call.name is not None and meta.get("name", call.name) != call.name:
        raise BadRequest("the name of the object does not match the name on the URL")
    if call.name is not None:
        meta["name"] = call.name
    return body


def _flag(value: str | None) -> bool:
    return value is not None and value.lower() in ("1", "true")


class _Api:
    """The request handlers over one store and one set of faults."""

    def __init__(self, store: Store, faults: Faults, bookmark_interval: float) -> None:
        self.store = store
        self.faults = faults
        self.bookmark_interval = bookmark_interval
        self.requests: list[RequestRecord] = []
        self.streams: set[Subscription] = set()

    async def end_streams(self, app: web.Application) -> None:
        """On shutdown: end every watch stream, as a stopping API server does."""
        for subscription in list(self.streams):
            subscription.close()

    async def resource(self, request: web.Request) -> web.StreamResponse:
        query = request.query
        call = locate(request.method, request.path, watching=_flag(query.get("watch")))
        res = call.resource
        self.requests.append(
            RequestRecord(call.verb, res.group, res.plural, call.subresource, call.namespace,
                          call.name)
        )
        if query.get("dryRun"):
            raise BadRequest("dryRun is not supported by the simulated API server")
        target = call.target()
        delay = self.faults.latency(target)
        if delay > 0:
            await asyncio.sleep(delay)
        failure = self.faults.failure(target)
        if failure is not None:
            error, retry_after = failure
            headers = {"Retry-After": str(retry_after)} if error.code == 429 else None
            return _error(error, headers)
        store, ns, name = self.store, call.namespace, call.name
        if call.verb == "watch":
            params = WatchParams(
                resource_version=query.get("resourceVersion"),
                label_selector=query.get("labelSelector"),
                field_selector=query.get("fieldSelector"),
                bookmarks=_flag(query.get("allowWatchBookmarks")),
                timeout=_timeout(query.get("timeoutSeconds")),
            )
            return await serve_watch(
                request, call, params, store, self.faults, self.bookmark_interval,
                self.streams,
            )
        if call.verb == "list":
            items, rv = store.list_shared(
                res, ns, label_selector=query.get("labelSelector"),
                field_selector=query.get("fieldSelector"),
            )
            return _json({
                "kind": f"{res.kind}List",
                "apiVersion": res.api_version,
                "metadata": {"resourceVersion": rv},
                "items": items,
            })
        assert name is not None or call.verb in ("create", "deletecollection")
        if call.verb == "get":
            return _json(store.get(res, ns, name or ""))
        if call.verb == "create":
            _check_json(request)
            return _json(store.create(res, _place(call, await _body(request)), drop_status=True),
                         201)
        if call.verb == "update":
            _check_json(request)
            body = _place(call, await _body(request))
            return _json(store.update(res, body, subresource=call.subresource))
        if call.verb == "patch":
            patch = await _body(request)
            content_type = request.headers.get("Content-Type", "")
            return _json(store.patch(res, ns, name or "", patch, content_type=content_type,
                                     subresource=call.subresource))
        if call.verb == "delete":
            options = await _body(request) if request.can_read_body else {}
            pre = options.get("preconditions") or {} if isinstance(options, dict) else {}
            return _json(store.delete(res, ns, name or "", uid=pre.get("uid"),
                                      resource_version=pre.get("resourceVersion")))
        items, rv = store.list_shared(
            res, ns, label_selector=query.get("labelSelector"),
            field_selector=query.get("fieldSelector"),
        )
        doomed = [(i["metadata"].get("namespace"), i["metadata"]["name"]) for i in items]
        deleted = [store.delete(res, n, m) for n, m in doomed]
        return _json({"kind": f"{res.kind}List", "apiVersion": res.api_version,
                      "metadata": {"resourceVersion": str(store.resource_version)},
                      "items": deleted})

    async def faults_admin(self, request: web.Request) -> web.Response:
        if request.method == "POST":
            body = await _body(request)
            try:
                specs = FAULT_SPECS.validate_python(body if isinstance(body, list) else [body])
                for spec in specs:
                    arm(self.faults, spec)
            except (pydantic.ValidationError, ValueError) as e:
                raise BadRequest(f"invalid fault: {e}") from e
        return _json(self.faults.describe())


def _timeout(value: str | None) -> float:
    if value is None:
        return DEFAULT_TIMEOUT
    try:
        seconds = float(value)
    except ValueError as e:
        raise BadRequest(f"invalid timeoutSeconds {value!r}") from e
    return seconds if seconds > 0 else DEFAULT_TIMEOUT


async def _version(request: web.Request) -> web.Response:
    return _json(discovery.version())


async def _core(request: web.Request) -> web.Response:
    return _json(discovery.core_versions(request.host))


async def _groups(request: web.Request) -> web.Response:
    return _json(discovery.groups())


async def _core_resources(request: web.Request) -> web.Response:
    return _json(discovery.resource_list("", "v1"))


async def _group_resources(request: web.Request) -> web.Response:
    found = discovery.resource_list(request.match_info["group"], request.match_info["version"])
    if found is None:
        raise NotFound(f"the server could not find the requested resource ({request.path})")
    return _json(found)


async def _openapi_index(request: web.Request) -> web.Response:
    return _json(openapi.index())


async def _openapi_document(request: web.Request) -> web.Response:
    found = openapi.document(request.match_info["prefix"])
    if found is None:
        raise NotFound(f"no OpenAPI document for {request.match_info['prefix']}")
    return _json(found)


async def _healthy(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def make_app(
    store: Store, faults: Faults, *, bookmark_interval: float = 60.0
) -> web.Application:
    """The HTTP application; `bookmark_interval` is how long a watch with bookmarks
    stays idle before the server sends one."""
    api = _Api(store, faults, bookmark_interval)
    app = web.Application(middlewares=[_statuses], client_max_size=BODY_LIMIT + 1)
    app[REQUEST_LOG] = api.requests
    app[STORE] = store
    app[FAULTS] = faults
    app.on_shutdown.append(api.end_streams)
    router = app.router
    for slash in ("", "/"):  # the real server answers both spellings
        router.add_get("/version" + slash, _version)
        router.add_get("/api" + slash, _core)
        router.add_get("/apis" + slash, _groups)
        router.add_get("/api/v1" + slash, _core_resources)
        router.add_get("/apis/{group}/{version}" + slash, _group_resources)
    router.add_get("/openapi/v3", _openapi_index)
    router.add_get("/openapi/v3/{prefix:.+}", _openapi_document)
    for probe in ("/healthz", "/livez", "/readyz"):
        router.add_get(probe, _healthy)
    router.add_route("*", "/_sim/faults", api.faults_admin)
    router.add_route("*", "/api/v1/{tail:.+}", api.resource)
    router.add_route("*", "/apis/{group}/{version}/{tail:.+}", api.resource)
    return app


async def serve(app: web.Application, port: int = 0) -> tuple[web.AppRunner, str]:
    """Bind `app` on 127.0.0.1 (`port` 0: an ephemeral one); returns the runner to
    clean up and the base URL. Handlers are cancelled when their client disconnects, so
    an abandoned watch does not linger."""
    runner = web.AppRunner(
        app, handler_cancellation=True, access_log=None, shutdown_timeout=2.0
    )
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    bound = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{bound}"
