"""The API server in-process: kubernetes_asyncio → aiohttp → bytes → the simulator's app.

The controller's requests go through the very code they take in production (the
generated API classes, `ApiClient`, aiohttp's client, HTTP/1.1 framing, the simulated
server's aiohttp handlers); only the socket is replaced, by a pair of in-memory
transports that hand each write to the other side on the next turn of the event loop.
No descriptor, no thread, no kernel: the order of bytes is the loop's order, so a
simulation run is repeatable. Flow control is honoured (a paused reader buffers), and
closing either end delivers EOF to the other, as TCP would.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import types
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
from aiohttp import web, web_app
from aiohttp.client_proto import ResponseHandler
from kubernetes_asyncio.client import ApiClient, Configuration

from nicplug.adapters.kube.client import WATCH_READ_BUFFER, ApiConnection, ClientSettings

_PEER = ("127.0.0.1", 6443)


class _MemoryTransport(asyncio.Transport):
    """One end of an in-memory byte pipe."""

    def __init__(self, loop: asyncio.AbstractEventLoop, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self._loop = loop
        self._protocol = protocol
        self.peer: _MemoryTransport | None = None
        self._inbox: deque[bytes] = deque()
        self._paused = False
        self._closing = False
        self._lost = False
        self._eof_pending = False
        self._scheduled = False

    # -- receiving (the peer's writes) -----------------------------------------------------

    def _receive(self, data: bytes) -> None:
        if self._lost:
            return
        self._inbox.append(data)
        self._schedule()

    def _receive_eof(self) -> None:
        if self._lost:
            return
        self._eof_pending = True
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled and not self._paused:
            self._scheduled = True
            self._loop.call_soon(self._deliver)

    def _deliver(self) -> None:
        self._scheduled = False
        delivered = False
        while self._inbox and not self._paused and not self._lost:
            self._protocol.data_received(self._inbox.popleft())
            delivered = True
        if self._eof_pending and not self._inbox and not self._lost:
            if delivered:
                # the end of the stream is read on a later turn than the bytes before
                # it, as asyncio's transports read it: what those bytes woke runs
                # first (aiohttp's server forgets how to build a request once the
                # connection is lost, and a request woken but not yet built then fails)
                self._schedule()
            else:
                self._lose()

    def _lose(self) -> None:
        if self._lost:
            return
        self._lost = True
        self._closing = True
        self._protocol.connection_lost(None)

    # -- the Transport API -----------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or self.peer is None:
            return
        self.peer._receive(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(bytes(d) for d in list_of_data))

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        if self.peer is not None:
            self.peer._receive_eof()
        self._loop.call_soon(self._lose)

    def abort(self) -> None:
        self.close()

    def pause_reading(self) -> None:
        self._paused = True

    def resume_reading(self) -> None:
        self._paused = False
        if self._inbox or self._eof_pending:
            # asyncio reads a resumed socket at the loop's next poll, after every
            # callback queued until then: aiohttp's server resumes reading while it
            # parses a request's body, before it wakes the task that builds the
            # request, and that task runs before the end of the stream is read
            self._loop.call_soon(self._schedule)

    def is_reading(self) -> bool:
        return not self._paused

    def can_write_eof(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        return None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name in ("peername", "sockname"):
            return _PEER
        return default


class InProcessConnector(aiohttp.BaseConnector):
    """Opens every connection to `server` (an aiohttp `web.Server`) in memory."""

    def __init__(self, server: Callable[[], asyncio.Protocol]) -> None:
        super().__init__(force_close=True)
        self._server = server

    async def _create_connection(
        self, req: Any, traces: Any, timeout: aiohttp.ClientTimeout  # noqa: ASYNC109
    ) -> ResponseHandler:
        loop = asyncio.get_running_loop()
        client = ResponseHandler(loop=loop)
        connect(loop, client, self._server())
        return client


def connect(loop: asyncio.AbstractEventLoop, client: asyncio.Protocol,
            server: asyncio.Protocol) -> tuple[_MemoryTransport, _MemoryTransport]:
    """Join `client` and `server` by a pair of in-memory transports, the server made
    connected first (as a listening socket accepts before the client's connect returns);
    return the client's end and the server's."""
    client_end = _MemoryTransport(loop, client)
    server_end = _MemoryTransport(loop, server)
    client_end.peer, server_end.peer = server_end, client_end
    server.connection_made(server_end)
    client.connection_made(client_end)
    return client_end, server_end


_TLS: list[ssl.SSLContext] = []


@contextlib.contextmanager
def _one_tls_context() -> Iterator[None]:
    """kubernetes_asyncio builds a TLS context (reading the system's CA store, ~0.1 s)
    for every `ApiClient`, whose connector the in-process server then replaces unused:
    while the client is built, hand it one context made once per process."""
    from kubernetes_asyncio.client import rest

    if not _TLS:
        _TLS.append(ssl.create_default_context())
    shim = types.SimpleNamespace(create_default_context=lambda **_: _TLS[0],
                                 CERT_NONE=ssl.CERT_NONE,
                                 VERIFY_X509_STRICT=ssl.VERIFY_X509_STRICT)
    original = getattr(rest, "ssl")  # noqa: B009
    setattr(rest, "ssl", shim)  # noqa: B010
    try:
        yield
    finally:
        setattr(rest, "ssl", original)  # noqa: B010


class InProcessServer:
    """The simulated cluster's aiohttp application, served without a socket."""

    def __init__(self, app: web.Application) -> None:
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)

    async def start(self) -> None:
        await self._runner.setup()

    async def stop(self) -> None:
        await self._runner.cleanup()
        # aiohttp memoizes each handler's middleware chain by (handler, apps), up to
        # 1,024 of them: a process that plays many runs would keep hundreds of past
        # runs' applications, and with them their stores, alive. The memo changes no
        # answer; forgetting it lets this run's cluster go with the run.
        memo = getattr(web_app, "_cached_build_middleware", None)
        if memo is not None:
            memo.cache_clear()

    def protocol(self) -> asyncio.Protocol:
        server = self._runner.server
        assert server is not None, "start() the server first"
        return server()

    async def connect(self, settings: ClientSettings) -> ApiConnection:
        """An `ApiConnection` like `kube.client.connect` builds, over this server."""
        configuration = Configuration(host="http://sim.invalid")
        configuration.api_key = {"authorization": "Bearer simulated"}
        with _one_tls_context():
            client = ApiClient(configuration)
        if settings.user_agent:
            client.user_agent = settings.user_agent
        rest = client.rest_client
        await rest.pool_manager.close()
        rest.pool_manager = aiohttp.ClientSession(
            connector=InProcessConnector(self.protocol), trust_env=False,
            read_bufsize=WATCH_READ_BUFFER,
        )
        return ApiConnection(client=client, settings=settings)
