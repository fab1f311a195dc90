"""Watch responses: a chunked stream of JSON lines, one `{"type", "object"}` per event.

Honours `resourceVersion` (replay from the store's history, or one ERROR 410 event when
it is too old), watch-list (`sendInitialEvents=true`: the current state as ADDED events,
then a BOOKMARK annotated `k8s.io/initial-events-end`), `allowWatchBookmarks` (a
BOOKMARK with the current resourceVersion whenever the stream has been idle for
`bookmark_interval`), `timeoutSeconds`, and the watch faults (drop after N events,
stall, forced 410). It serialises the store's shared objects and never mutates them.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from nicplug.simulator.errors import BadRequest, Expired
from nicplug.simulator.faults import Faults, Target
from nicplug.simulator.routing import Call
from nicplug.simulator.store import Store
from nicplug.simulator.watching import Subscription

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
_DISCONNECT_CHECK = 1.0  # seconds between checks that an idle client is still there
DEFAULT_TIMEOUT = 1800.0


@dataclass(frozen=True, slots=True)
class WatchParams:
    resource_version: str | None
    label_selector: str | None
    field_selector: str | None
    bookmarks: bool
    timeout: float
    send_initial_events: bool = False
    resource_version_match: str | None = None

    def check(self) -> None:
        """As the real server: watch-list needs `resourceVersionMatch=NotOlderThan`
        and `allowWatchBookmarks` (its end is a bookmark)."""
        if not self.send_initial_events:
            return
        if self.resource_version_match != "NotOlderThan":
            raise BadRequest("sendInitialEvents is forbidden for watch unless "
                             "resourceVersionMatch is set to NotOlderThan")
        if not self.bookmarks:
            raise BadRequest("sendInitialEvents requires setting allowWatchBookmarks to true")


def _line(kind: str, obj: Any) -> bytes:
    return orjson.dumps({"type": kind, "object": obj}) + b"\n"


def _gone(request: web.BaseRequest) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def serve_watch(
    request: web.Request,
    call: Call,
    params: WatchParams,
    store: Store,
    faults: Faults,
    bookmark_interval: float,
    open_streams: set[Subscription],
    disconnect_check: float = _DISCONNECT_CHECK,
) -> web.StreamResponse:
    """Serve one watch; `open_streams` holds its subscription while it runs, so that
    the server can end every stream when it shuts down."""
    params.check()
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    target: Target = call.target()
    resuming = params.resource_version not in (None, "", "0") and not params.send_initial_events
    try:
        if resuming and faults.expires(target):
            raise Expired(f"too old resource version: {params.resource_version} (injected)")
        subscription = store.watch_shared(
            call.resource,
            call.namespace,
            # watch-list: the current state first (not older than any version asked for)
            resource_version=None if params.send_initial_events else params.resource_version,
            label_selector=params.label_selector,
            field_selector=params.field_selector,
        )
    except Expired as e:
        await response.prepare(request)
        await response.write(_line("ERROR", e.status()))
        await response.write_eof()
        return response
    # Other ApiErrors (bad selectors, bad resourceVersion) propagate: a plain error reply.
    await response.prepare(request)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + params.timeout
    next_bookmark = loop.time() + bookmark_interval
    stream = faults.open_stream(subscription.nudge)
    open_streams.add(subscription)
    initial = subscription.initial if params.send_initial_events else -1
    try:
        if initial == 0:
            await response.write(_line("BOOKMARK", _initial_events_end(call, subscription)))
        while loop.time() < deadline:
            if faults.drops(stream, target, sent=False):
                break
            if faults.stalled(target):
                await _stall(request, faults, target, subscription)
                if _gone(request) or subscription.closed:
                    break
                continue
            patience = min(disconnect_check, deadline - loop.time())
            if params.bookmarks:
                patience = min(patience, next_bookmark - loop.time())
            try:
                event = await subscription.next(max(patience, 0.0))
            except StopAsyncIteration:
                break
            if event is None:
                if _gone(request):
                    break
                if params.bookmarks and loop.time() >= next_bookmark:
                    await response.write(_line("BOOKMARK", _bookmark(call, store)))
                    next_bookmark = loop.time() + bookmark_interval
                continue
            if faults.stalled(target):  # armed while this stream was waiting
                await _stall(request, faults, target, subscription)
                if _gone(request):
                    break
            await response.write(_line(event[0], call.api.outward(event[1])))
            if initial > 0:
                initial -= 1
                if initial == 0:
                    await response.write(
                        _line("BOOKMARK", _initial_events_end(call, subscription)))
            next_bookmark = loop.time() + bookmark_interval
            if faults.drops(stream, target, sent=True):
                break
        await response.write_eof()
    except ConnectionError:
        pass  # the client went away mid-stream
    finally:
        subscription.close()
        open_streams.discard(subscription)
        faults.close_stream(stream, subscription.nudge)
    return response


async def _stall(
    request: web.Request, faults: Faults, target: Target, subscription: Subscription
) -> None:
    """Send nothing until the stall is lifted, the client leaves or the server stops."""
    while faults.stalled(target) and not _gone(request) and not subscription.closed:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(faults.changed(), _DISCONNECT_CHECK)


def _initial_events_end(call: Call, subscription: Subscription) -> dict[str, Any]:
    """The bookmark that ends a watch-list's initial events, at the listed version."""
    return {
        "kind": call.served.kind,
        "apiVersion": call.served.api_version,
        "metadata": {"resourceVersion": subscription.listed_rv,
                     "annotations": {INITIAL_EVENTS_END: "true"}},
    }


def _bookmark(call: Call, store: Store) -> dict[str, Any]:
    return {
        "kind": call.served.kind,
        "apiVersion": call.served.api_version,
        "metadata": {"resourceVersion": str(store.resource_version)},
    }
