"""One kubernetes_asyncio ApiClient for the whole controller, with explicit limits.

kubernetes_asyncio sends requests without any timeout unless `_request_timeout` is
passed on the call (its REST layer builds an empty `aiohttp.ClientTimeout()`), and
sizes its connection pool for a handful of callers. This module builds the client
from a kubeconfig or the in-cluster service account, sizes the pool for many VMs
proceeding in parallel, and hands out the timeouts every call must carry. It never
issues a request itself.

kubernetes_asyncio's REST client also builds a TLS context for every client, reading
the system's CA store (20-90 ms of CPU each, two clients per controller), even when
the server is plain `http://` (a local proxy, the simulated cluster): such a server
gets a client that builds none.

Every request any part of the controller sends is reported to `on_request`
(`requests_seen.py`), when given.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import yaml
from aiohttp.helpers import get_env_proxy_for_url
from kubernetes_asyncio.client.api_client import ApiClient
from kubernetes_asyncio.client.configuration import Configuration
from kubernetes_asyncio.client.rest import RESTClientObject
from kubernetes_asyncio.config import load_incluster_config, load_kube_config
from kubernetes_asyncio.config.config_exception import ConfigException
from yarl import URL

from nicplug.adapters.kube.requests_seen import RequestSeen, request_tracing

WATCH_READ_BUFFER = 2**21  # as kubernetes_asyncio: a watch event may carry a large object


class ClientConfigError(Exception):
    """Neither the given kubeconfig nor the in-cluster configuration could be loaded."""


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """How to reach the API server and how long to wait for it.

    `read_timeout` bounds every non-watch request end to end; watches are bounded by
    the informer's own inactivity watchdog and the server-side `timeoutSeconds`.
    """

    kubeconfig: Path | None = None  # None: in-cluster, else $KUBECONFIG / ~/.kube/config
    context: str | None = None
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    max_connections: int = 256
    user_agent: str | None = None  # how the API server's logs name this client
    on_request: RequestSeen | None = None  # told of every request (metrics)

    def __post_init__(self) -> None:
        if self.connect_timeout <= 0 or self.read_timeout <= 0:
            raise ValueError("timeouts must be positive")
        if self.max_connections < 1:
            raise ValueError("max_connections must be at least 1")


@dataclass(frozen=True, slots=True)
class ApiConnection:
    """The shared client and the timeouts to pass as `_request_timeout`."""

    client: ApiClient
    settings: ClientSettings

    @property
    def request_timeout(self) -> aiohttp.ClientTimeout:
        s = self.settings
        return aiohttp.ClientTimeout(
            total=s.read_timeout, connect=s.connect_timeout, sock_connect=s.connect_timeout
        )

    def watch_timeout(self, read: float | None) -> aiohttp.ClientTimeout:
        """A watch stays open for minutes: bound the connect and, optionally, each read."""
        s = self.settings
        return aiohttp.ClientTimeout(
            total=None, connect=s.connect_timeout, sock_connect=s.connect_timeout,
            sock_read=read,
        )

    async def close(self) -> None:
        await self.client.close()


async def connect(settings: ClientSettings) -> ApiConnection:
    """An `ApiConnection` from the kubeconfig in `settings`, or from inside the cluster.

    With no kubeconfig given, the in-cluster service account is tried first, then
    `$KUBECONFIG` / `~/.kube/config`, as kubectl does.
    """
    configuration = Configuration()
    try:
        if settings.kubeconfig is not None:
            if not settings.kubeconfig.is_file():
                raise ClientConfigError(_not_a_kubeconfig(settings.kubeconfig))
            await load_kube_config(
                config_file=str(settings.kubeconfig), context=settings.context,
                client_configuration=configuration, persist_config=False,
            )
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            await load_kube_config(
                context=settings.context, client_configuration=configuration,
                persist_config=False,
            )
    except (ConfigException, OSError, ValueError, yaml.YAMLError) as exc:
        problem = " ".join(str(exc).split())
        raise ClientConfigError(
            f"cannot load the Kubernetes client configuration: {problem}"
        ) from exc
    configuration.connection_pool_maxsize = settings.max_connections
    plain = URL(configuration.host or "").scheme == "http"
    client = PlainHttpApiClient(configuration) if plain else ApiClient(configuration)
    if settings.user_agent:
        client.user_agent = settings.user_agent
    _skip_environment_lookups(client, configuration.host or "")
    if settings.on_request is not None:
        _trace_requests(client, settings.on_request)
    return ApiConnection(client=client, settings=settings)


class _PlainHttpRest(RESTClientObject):
    """kubernetes_asyncio's REST client for an `http://` server, without the TLS
    context its own `__init__` builds first (the rest of that `__init__`, as it is)."""

    def __init__(self, configuration: Configuration) -> None:
        # The stubs declare these `str` and a dict; the library assigns the
        # configuration's values, None unless set (as here).
        self.server_hostname = configuration.tls_server_name  # type: ignore[assignment]
        self.proxy = configuration.proxy  # type: ignore[assignment]
        self.proxy_headers = configuration.proxy_headers  # type: ignore[assignment]
        self.pool_manager = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=configuration.connection_pool_maxsize,
                                           ssl=False),
            trust_env=True, read_bufsize=WATCH_READ_BUFFER,
        )


class PlainHttpApiClient(ApiClient):
    """An `ApiClient` for an `http://` server: `ApiClient.__init__` as it is, but its
    REST client builds no TLS context (tests compare the attributes with a stock one)."""

    def __init__(self, configuration: Configuration) -> None:
        self.configuration = configuration
        self.pool_threads = 1
        self.rest_client = _PlainHttpRest(configuration)
        self.default_headers: dict[str, str] = {}
        self.cookie = None  # type: ignore[assignment]  # as ApiClient's: None unless given
        self.user_agent = "OpenAPI-Generator/33.3.0+snapshot/python"
        self.client_side_validation = configuration.client_side_validation


def _not_a_kubeconfig(path: Path) -> str:
    if path.is_dir():
        return f"kubeconfig {path} is a directory; give the kubeconfig file in it"
    if path.exists():
        return f"kubeconfig {path} is not a regular file"
    return f"kubeconfig {path} does not exist"


def _skip_environment_lookups(client: ApiClient, server: str) -> None:
    """Resolve the proxy environment once, not on every request.

    kubernetes_asyncio's session trusts the environment, so aiohttp looks for a proxy
    and for `~/.netrc` credentials on every request, each in a worker thread: two
    thread hops and a file read per call, the largest single cost of an effect on a
    loaded controller. When no proxy applies to the API server (none set, or
    `NO_PROXY` covers it) the session is swapped for one that does not trust the
    environment; netrc credentials could only clash with the client's own
    Authorization header. With a proxy in force the client is left as it is.
    """
    try:
        get_env_proxy_for_url(URL(server))
    except LookupError:
        pass
    else:
        return
    rest = client.rest_client
    trusting: aiohttp.ClientSession = rest.pool_manager
    connector = trusting.connector
    trusting.detach()
    rest.pool_manager = aiohttp.ClientSession(
        connector=connector, trust_env=False, read_bufsize=WATCH_READ_BUFFER
    )


def _trace_requests(client: ApiClient, seen: RequestSeen) -> None:
    """The client's session, rebuilt on its own connector with a trace reporting every
    request to `seen` (a session takes its traces only when built)."""
    rest = client.rest_client
    session: aiohttp.ClientSession = rest.pool_manager
    trust_env = session.trust_env
    connector = session.connector
    session.detach()
    rest.pool_manager = aiohttp.ClientSession(
        connector=connector, trust_env=trust_env, read_bufsize=WATCH_READ_BUFFER,
        trace_configs=[request_tracing(seen)],
    )
