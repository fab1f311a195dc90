"""The `at` times of tapes: RFC 3339 in UTC, to the millisecond, both ways.

One spelling for every time a tape or a replay report prints, so the same instant is
always the same text (byte-identical reports), and the two spellings of where a replay
ends (`--until`: a time, or `+` a duration). Never reads a clock.
"""

from __future__ import annotations

import datetime

from nicplug.adapters.durations import parse_duration

_UTC = datetime.UTC


def format_at(seconds: float) -> str:
    """Epoch seconds → `2026-01-02T03:04:05.678Z` (milliseconds, rounded)."""
    millis = round(seconds * 1000)
    moment = datetime.datetime.fromtimestamp(millis // 1000, _UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{millis % 1000:03d}Z"


def epoch_of(moment: datetime.datetime) -> float:
    """A parsed time → epoch seconds; a time without a zone is taken as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_UTC)
    return moment.timestamp()


__all__ = ["epoch_of", "format_at", "parse_at", "parse_duration"]


def parse_at(text: str) -> float:
    """An RFC 3339 time with its zone (`2026-01-02T03:04:05Z`) → epoch seconds."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an RFC 3339 time") from None
    if moment.tzinfo is None or "T" not in text:
        raise ValueError(f"{text!r} is not an RFC 3339 time with its zone (like "
                         "2026-01-02T03:04:05Z)")
    return moment.timestamp()
