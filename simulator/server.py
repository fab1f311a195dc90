"""The simulated Kubernetes API server: HTTP in front of the `Store`.

`make_app(store, faults)` builds the aiohttp application: discovery, CRUD and watch on
every kind of `resources.ALL`, the status subresource, patches by Content-Type, Status
errors shaped like the real server's, a body limit, injected faults, the requester's
identity from its bearer token (`identity`) and the admission policy that judges it
(`admission_policy`), a log of every resource request with its username
(`app[REQUEST_LOG]`) and the fault admin endpoint `/_sim/faults`.
It binds nothing itself (`serve` does, on loopback only) and holds no state of its own
beyond that log: objects live in the store.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pydantic
from aiohttp import web

from nicplug.simulator import discovery, openapi
from nicplug.simulator.apis import ServedApi, served_api
from nicplug.simulator.errors import (
    ApiError,
    BadRequest,
    InternalError,
    MethodNotAllowed,
    NotFound,
)
from nicplug.simulator.faults import FAULT_SPECS, Faults, arm
from nicplug.simulator.identity import DEFAULT_USER, username_of
from nicplug.simulator.routing import Call, locate
from nicplug.simulator.store import Store
from nicplug.simulator.streaming import DEFAULT_TIMEOUT, WatchParams, serve_watch
from nicplug.simulator.verbs import USERNAME, VERBS
from nicplug.simulator.watching import Subscription
from nicplug.simulator.wire import (
    BODY_LIMIT,
    error_response,
    flag,
    json_response,
    read_json,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One resource request as RBAC would see it."""

    verb: str
    group: str
    resource: str
    subresource: str | None
    namespace: str | None
    name: str | None
    user_agent: str = ""  # tells apart the clients of one server (e.g. two controllers)
    username: str = DEFAULT_USER  # who the bearer token authenticates (`identity`)
    answered: list[int] = field(default_factory=list, compare=False, repr=False)
    """The status it was answered with, once answered (empty while in flight)."""

    @property
    def landed(self) -> bool:
        """Was it answered with success (a write the store applied)?"""
        return bool(self.answered) and self.answered[0] < 300


REQUEST_LOG = web.AppKey("request_log", deque[RequestRecord])
"""The last `REQUEST_LOG_SIZE` resource requests, oldest first."""
REQUEST_LOG_SIZE = 100_000
STORE = web.AppKey("store", Store)
FAULTS = web.AppKey("faults", Faults)

UPSTREAM_API = served_api("upstream")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _statuses(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure leaves as a Kubernetes `Status`."""
    try:
        return await handler(request)
    except ApiError as e:
        return error_response(e)
    except web.HTTPException as e:
        if e.status == 404:
            missing = f"the server could not find the requested resource ({request.path})"
            return error_response(NotFound(missing))
        if e.status == 405:
            return error_response(MethodNotAllowed(f"method {request.method} is not allowed"))
        raise
    except Exception as e:
        log.exception("simulated API server failed on %s %s", request.method, request.path)
        return error_response(InternalError(f"internal error: {e}"))


class _Api:
    """The request handlers over one store and one set of faults."""

    def __init__(
        self, store: Store, faults: Faults, bookmark_interval: float, api: ServedApi,
        disconnect_check: float,
    ) -> None:
        self.api = api
        self.served = api.all_served
        self.store = store
        self.faults = faults
        self.bookmark_interval = bookmark_interval
        self.disconnect_check = disconnect_check
        self.requests: deque[RequestRecord] = deque(maxlen=REQUEST_LOG_SIZE)
        self.streams: set[Subscription] = set()  # only ever ended all together

    async def end_streams(self, app: web.Application) -> None:
        """On shutdown: end every watch stream, as a stopping API server does."""
        for subscription in list(self.streams):
            subscription.close()

    async def resource(self, request: web.Request) -> web.StreamResponse:
        call = locate(request.method, request.path, watching=flag(request.query.get("watch")),
                      api=self.api)
        res = call.served
        username = username_of(request.headers.get("Authorization"))
        request[USERNAME] = username
        record = RequestRecord(call.verb, res.group, res.plural, call.subresource,
                               call.namespace, call.name, request.headers.get("User-Agent", ""),
                               username)
        self.requests.append(record)
        try:
            response = await self._answer(request, call)
        except ApiError as e:
            record.answered.append(e.code)
            raise
        except Exception:  # answered 500 by `_statuses`; a cut-off request stays unanswered
            record.answered.append(500)
            raise
        record.answered.append(response.status)
        return response

    async def _answer(self, request: web.Request, call: Call) -> web.StreamResponse:
        if request.query.get("dryRun"):
            raise BadRequest("dryRun is not supported by the simulated API server")
        target = call.target()
        delay = self.faults.latency(target)
        if delay > 0:
            await asyncio.sleep(delay)
        failure = self.faults.failure(target)
        if failure is not None:
            error, retry_after = failure
            headers = {"Retry-After": str(retry_after)} if error.code == 429 else None
            return error_response(error, headers)
        if call.verb == "watch":
            query = request.query
            params = WatchParams(
                resource_version=query.get("resourceVersion"),
                label_selector=call.api.inward_selector(query.get("labelSelector")),
                field_selector=call.api.inward_fields(query.get("fieldSelector")),
                bookmarks=flag(query.get("allowWatchBookmarks")),
                timeout=_timeout(query.get("timeoutSeconds")),
                send_initial_events=flag(query.get("sendInitialEvents")),
                resource_version_match=query.get("resourceVersionMatch"),
            )
            return await serve_watch(
                request, call, params, self.store, self.faults, self.bookmark_interval,
                self.streams, self.disconnect_check,
            )
        return await VERBS[call.verb](request, call, self.store)

    async def faults_admin(self, request: web.Request) -> web.Response:
        if request.method == "POST":
            body = await read_json(request)
            try:
                specs = FAULT_SPECS.validate_python(body if isinstance(body, list) else [body])
                for spec in specs:
                    arm(self.faults, spec)
            except (pydantic.ValidationError, ValueError) as e:
                raise BadRequest(f"invalid fault: {e}") from e
        return json_response(self.faults.describe())

    async def groups(self, request: web.Request) -> web.Response:
        return json_response(discovery.groups(self.served))

    async def core_resources(self, request: web.Request) -> web.Response:
        return json_response(discovery.resource_list(self.served, "", "v1"))

    async def group_resources(self, request: web.Request) -> web.Response:
        found = discovery.resource_list(
            self.served, request.match_info["group"], request.match_info["version"])
        if found is None:
            raise NotFound(f"the server could not find the requested resource ({request.path})")
        return json_response(found)

    async def openapi_index(self, request: web.Request) -> web.Response:
        return json_response(openapi.index(self.served))

    async def openapi_document(self, request: web.Request) -> web.Response:
        found = openapi.document(self.served, request.match_info["prefix"])
        if found is None:
            raise NotFound(f"no OpenAPI document for {request.match_info['prefix']}")
        return json_response(found)


def _timeout(value: str | None) -> float:
    if value is None:
        return DEFAULT_TIMEOUT
    try:
        seconds = float(value)
    except ValueError as e:
        raise BadRequest(f"invalid timeoutSeconds {value!r}") from e
    return seconds if seconds > 0 else DEFAULT_TIMEOUT


async def _version(request: web.Request) -> web.Response:
    return json_response(discovery.version())


async def _core(request: web.Request) -> web.Response:
    return json_response(discovery.core_versions(request.host))


async def _healthy(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def make_app(
    store: Store, faults: Faults, *, bookmark_interval: float = 60.0,
    disconnect_check: float = 1.0, api: ServedApi = UPSTREAM_API,
) -> web.Application:
    """The HTTP application; `bookmark_interval` is how long a watch with bookmarks
    stays idle before the server sends one; an idle watch looks for a client that went
    away every `disconnect_check` seconds (a simulation on virtual time checks less
    often: each check is a wake-up it pays for); `api` names the KubeVirt kinds."""
    api_ = _Api(store, faults, bookmark_interval, api, disconnect_check)
    return _routes(api_, store, faults)


def _routes(api: _Api, store: Store, faults: Faults) -> web.Application:
    app = web.Application(middlewares=[_statuses], client_max_size=BODY_LIMIT + 1)
    app[REQUEST_LOG] = api.requests
    app[STORE] = store
    app[FAULTS] = faults
    app.on_shutdown.append(api.end_streams)
    router = app.router
    for slash in ("", "/"):  # the real server answers both spellings
        router.add_get("/version" + slash, _version)
        router.add_get("/api" + slash, _core)
        router.add_get("/apis" + slash, api.groups)
        router.add_get("/api/v1" + slash, api.core_resources)
        router.add_get("/apis/{group}/{version}" + slash, api.group_resources)
    router.add_get("/openapi/v3", api.openapi_index)
    router.add_get("/openapi/v3/{prefix:.+}", api.openapi_document)
    for probe in ("/healthz", "/livez", "/readyz"):
        router.add_get(probe, _healthy)
    router.add_route("*", "/_sim/faults", api.faults_admin)
    router.add_route("*", "/api/v1/{tail:.+}", api.resource)
    router.add_route("*", "/apis/{group}/{version}/{tail:.+}", api.resource)
    return app


async def serve(
    app: web.Application, port: int = 0, *, shutdown_timeout: float = 2.0
) -> tuple[web.AppRunner, str]:
    """Bind `app` on 127.0.0.1 (`port` 0: an ephemeral one); returns the runner to
    clean up and the base URL. Handlers are cancelled when their client disconnects, so
    an abandoned watch does not linger; on cleanup, open watches end at once and other
    requests get `shutdown_timeout` seconds to finish."""
    runner = web.AppRunner(
        app, handler_cancellation=True, access_log=None, shutdown_timeout=shutdown_timeout
    )
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    bound = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{bound}"
