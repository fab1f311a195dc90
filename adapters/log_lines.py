"""How `nicplug run` writes its log: one line per record, as text or as JSON.

Text reads well in a terminal; JSON (`--log-format json`) is what the log pipelines of
KubeVirt and Deckhouse clusters parse, as their own components write it. A JSON line
carries `time`, `level`, `logger`, `message` and the fields a record names besides its
message: `vm`, `operation`, `network`, `state`, `effect` (`reporting.py`,
`observing.py`), so a pipeline filters on them without reading the message. Only
configures the root logger; never writes itself.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")


def formatter(log_format: LogFormat) -> logging.Formatter:
    if log_format == "json":
        from pythonjsonlogger.json import JsonFormatter  # only a JSON log loads it

        return JsonFormatter(
            "{levelname}{name}{message}", style="{", timestamp="time",  # RFC 3339, UTC, µs
            rename_fields={"levelname": "level", "name": "logger"},
        )
    return logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")


def configure_logging(level: int, log_format: LogFormat = "text") -> None:
    """Every record of the process to stderr, one line each, at `level` and above."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(log_format))
    logging.basicConfig(level=level, handlers=[handler], force=True)
