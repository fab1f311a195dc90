"""The one spelling of a duration a person types, for every option that takes one.

`30s`, `5m`, `1h30m`, `1.5h`, `250ms`, `30d`, or a bare number of seconds (`90`): the
same text means the same time wherever it is typed (`run`'s timeouts, `--retention`,
`stuck --older-than`, `journal archive --older-than`, `replay --until +DURATION`).
Anything else, a negative, NaN or infinite value is a `ValueError` whose message says
what a duration looks like. Never reads a clock.
"""

from __future__ import annotations

import math
import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
EXAMPLES = "30s, 5m, 1h30m, 30d or seconds"


def parse_duration(text: str) -> float:
    """Seconds in `text`: a bare number of seconds, or units run together (`1h30m`)."""
    spelled = text.strip()
    if _NUMBER.fullmatch(spelled):
        seconds = float(spelled)
    else:
        parts = _PART.findall(spelled)
        if not parts or "".join(n + u for n, u in parts) != spelled:
            raise ValueError(f"a duration is like {EXAMPLES}, got {text!r}")
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not math.isfinite(seconds):
        raise ValueError(f"a duration must be a finite number of seconds, got {text!r}")
    return seconds


def spelled(seconds: float) -> str:
    """Seconds as a person reads them back: `5s`, `1m30s`, `2h`, `3d4h` (whole
    seconds; below one second, `0.25s`)."""
    if seconds < 1:
        return f"{seconds:g}s"
    left = round(seconds)
    out = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, left = divmod(left, size)
        if count:
            out.append(f"{count}{unit}")
    return "".join(out) or "0s"
