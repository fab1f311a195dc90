"""Writing tapes: one JSON object per line, with the time each was observed.

`TapeWriter` appends watch events (the object exactly as received, with `apiVersion`
and `kind` filled in from the watched kind, since list items may lack them) and
`EFFECT` lines; each line is flushed, so a recording cut short keeps every line written.
A tape holds whole objects, so it is written 0600 like the journal.
`EffectTaping` is the runtime listener that writes an `EFFECT` line when an effect is
first started. Nothing here decides or changes what it writes down.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import orjson

from nicplug.adapters.kube.resources import KindRef
from nicplug.adapters.private_files import open_private
from nicplug.adapters.tapes.lines import EFFECT, INITIAL_EVENTS_END
from nicplug.adapters.tapes.times import format_at
from nicplug.engine.journal import PendingEffect
from nicplug.engine.listening import EffectPhase, RuntimeListener
from nicplug.machines.effects import effect_from_payload


class TapeUnwritable(Exception):
    """The tape file cannot be created or written over (one line for the operator)."""


class TapeWriter:
    """Appends lines to a tape file; `now()` gives each line's `at` (epoch seconds)."""

    def __init__(self, path: Path, *, now: Callable[[], float]) -> None:
        self.path = path
        self._now = now
        try:
            self._file: IO[bytes] = open_private(path)
        except OSError as error:
            raise TapeUnwritable(
                f"cannot write the tape {path}: {error.strerror or error}") from error
        self.lines = 0

    def watch_event(self, kind: KindRef, event_type: str, obj: dict[str, Any]) -> None:
        body = {**obj, "apiVersion": kind.api_version, "kind": kind.kind}
        self._write({"type": event_type, "at": format_at(self._now()), "object": body})

    def initial_events_end(self) -> None:
        """Every kind is listed: the lines so far are the initial state."""
        meta = {"annotations": {INITIAL_EVENTS_END: "true"}}
        line = {"type": "BOOKMARK", "at": format_at(self._now()), "object": {"metadata": meta}}
        self._write(line)

    def effect(self, type_: str, target: str, *, at: float | None = None) -> None:
        when = format_at(self._now() if at is None else at)
        self._write({"type": EFFECT, "at": when, "object": {"type": type_, "target": target}})

    def _write(self, line: dict[str, Any]) -> None:
        self._file.write(orjson.dumps(line) + b"\n")
        self._file.flush()
        self.lines += 1

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TapeWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def effect_target(effect: PendingEffect) -> str:
    """`namespace/name` of what an effect acts on (its payload's target)."""
    try:
        return effect_from_payload(effect.type, effect.payload).target
    except (KeyError, TypeError, ValueError):
        return str(effect.key)


class EffectTaping(RuntimeListener):
    """Writes an `EFFECT` line the first time each effect starts (retries are not
    new effects)."""

    def __init__(self, tape: TapeWriter) -> None:
        self._tape = tape
        self._seen: set[int] = set()

    def on_effect(self, effect: PendingEffect, phase: EffectPhase, error: str | None) -> None:
        if phase != "started" or effect.id in self._seen:
            return
        self._seen.add(effect.id)
        self._tape.effect(effect.type, effect_target(effect))
