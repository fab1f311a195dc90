"""A TCP proxy that can cut a controller off the API server the way a network does.

While partitioned it still accepts connections (the kernel would, or a load balancer
in front of the API server) but forwards nothing in either direction: requests and
answers already on their way stay where they are, silently, as packets that are
dropped and retransmitted. Nothing is refused or reset, so the client learns of the
partition only from its own timeouts. When healed, whatever was held is delivered
late, as TCP would deliver its retransmissions: a request sent before the partition
can still reach the server after it.
"""

from __future__ import annotations

import asyncio
import contextlib


class PartitionProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._connected, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def partition(self) -> None:
        self._open.clear()

    def heal(self) -> None:
        self._open.set()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._open.wait()  # accepted, but not a byte goes on while partitioned
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        except (OSError, asyncio.CancelledError):
            writer.close()
            return
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pump(source, sink))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while True:
                await self._open.wait()
                data = await source.read(65536)
                await self._open.wait()  # read before the cut: held until it heals
                if not data:
                    break
                sink.write(data)
                await sink.drain()
        except (OSError, ConnectionError):
            pass
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                sink.close()
