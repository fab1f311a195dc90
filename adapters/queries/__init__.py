"""Read-only questions to the journal, asked by people (CLI) and scripts (CLI `--json`,
HTTP): which operations exist, how each one went, which are stuck, what one waits for."""

from nicplug.adapters.queries.explaining import Dossier, Explanation, explain
from nicplug.adapters.queries.reading import (
    DEFAULT_JOURNAL,
    Ambiguous,
    dossier,
    explanation,
    open_for_queries,
    operations,
    resolve,
    stuck,
    timeline,
)
from nicplug.adapters.queries.records import OperationSummary, Timeline
from nicplug.adapters.queries.selection import BadSelection, Selection, duration

__all__ = [
    "DEFAULT_JOURNAL",
    "Ambiguous",
    "BadSelection",
    "Dossier",
    "Explanation",
    "OperationSummary",
    "Selection",
    "Timeline",
    "dossier",
    "duration",
    "explain",
    "explanation",
    "open_for_queries",
    "operations",
    "resolve",
    "stuck",
    "timeline",
]
