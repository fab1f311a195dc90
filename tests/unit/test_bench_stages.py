"""`bench._stages` puts a sampled stack in the stage of its innermost frame that names
one, counts the Event recorder's stacks as Events, and leaves out the waits py-spy
counts as active (the journal thread's queue, its COMMIT)."""

from __future__ import annotations

from bench._stages import split, stage_of

LOOP = "thread (1): MainThread;Handle._run (asyncio/events.py:80)"


def _stack(*frames: str) -> list[str]:
    return [*LOOP.split(";"), *frames]


def test_the_innermost_frame_that_names_a_stage_wins() -> None:
    logged = _stack("Runtime._decide (engine/runtime.py:380)",
                    "Logger.info (logging/__init__.py:1489)")
    assert stage_of(logged) == "logs and metrics"
    read = _stack("Observing._read (adapters/core/observing.py:172)",
                  "read (adapters/kube/translate/objects.py:80)",
                  "BaseModel.model_validate (pydantic/main.py:792)")
    assert stage_of(read) == "world assembly"
    projected = _stack("Informer._apply (adapters/kube/informer.py:312)",
                       "project (adapters/kube/translate/projection.py:73)")
    assert stage_of(projected) == "watch decode and projection"


def test_an_events_request_is_the_events_and_a_bare_client_request_the_executors() -> None:
    event = _stack("EventRecorder.record (adapters/kube/events.py:67)",
                   "send (adapters/kube/wire.py:39)",
                   "ClientSession._request (aiohttp/client.py:900)")
    assert stage_of(event) == "Events"
    bare = _stack("ClientRequest.write_bytes (aiohttp/client_reqrep.py:1594)")
    assert stage_of(bare) == "executor and HTTP"
    assert stage_of(_stack("EpollSelector.select (selectors.py:468)")) == (
        "event loop and the rest")


def test_waits_are_left_out() -> None:
    worker = "thread (2): Thread-1 (_connection_worker_thread);Thread.run (threading.py:982)"
    lines = [
        f"{worker};_connection_worker_thread (aiosqlite/core.py:59) 7",
        f"{worker};_connection_worker_thread (aiosqlite/core.py:63);"
        "_write (engine/sqlite_writes.py:300) 3",
        f"{LOOP};Runtime._decide (engine/runtime.py:356) 2",
    ]
    counts, total = split(lines)
    assert total == 5
    assert counts == {"journal": 3, "decision (and the runtime)": 2}
