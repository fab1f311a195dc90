"""The simulation's in-memory socket keeps TCP's order: the end of a stream is seen on a
later turn of the loop than the bytes before it, as asyncio's own transports see it
(`adapters/simulation/wire.py`)."""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import Any

import pytest
from aiohttp import web

from nicplug.adapters.simulation.run import simulate
from nicplug.adapters.simulation.schedule import draw
from nicplug.adapters.simulation.wire import InProcessServer, connect


async def _turns(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_request_whose_client_closes_in_the_turn_it_sends_is_no_error_of_the_server(
) -> None:
    # aiohttp's server forgets its request factory when the connection is lost: had the
    # request's bytes and the end of the stream come in one call, the handler's task
    # woke to a request it could no longer build, and died of `'NoneType' object is
    # not callable`, said only when the task was collected, at the simulation's teardown
    served: list[str] = []

    async def hello(request: web.Request) -> web.Response:
        served.append(request.path)
        return web.Response(text="hello")

    app = web.Application()
    app.router.add_get("/", hello)
    server = InProcessServer(app)
    await server.start()
    loop = asyncio.get_running_loop()
    said: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: said.append(context))
    try:
        client_end, server_end = connect(loop, asyncio.Protocol(), server.protocol())
        await _turns(3)  # the server waits for a request

        client_end.write(b"GET / HTTP/1.1\r\nHost: sim.invalid\r\n\r\n")
        client_end.close()
        await _turns(10)
        await server.stop()
        gc.collect()
    finally:
        loop.set_exception_handler(None)
    assert said == [], [context.get("message") for context in said]
    assert server_end.is_closing()
    assert served == ["/"]  # what arrived before the end is served, as over TCP


# Seeds of 100,000 schedules during which asyncio said something at a run's end: 81531
# the request woken after its connection was lost (aiohttp's server resumes reading while
# it parses a request's body, and the end of the stream was read before the woken task
# ran); the others the gather of the informers' `synced` events, cancelled when a replica
# stopped before its first lists, whose `CancelledError` nobody read.
SAID_AT_TEARDOWN = (81531, 85059, 85620, 88972, 94192, 94612)


@pytest.mark.parametrize("seed", SAID_AT_TEARDOWN)
def test_a_schedule_ends_with_nothing_said(seed: int, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        simulate(draw(seed))
    said = [record.getMessage().splitlines()[0] for record in caplog.records
            if record.name == "asyncio"]
    assert said == []
