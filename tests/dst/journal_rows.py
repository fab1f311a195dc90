"""What a played schedule's journal holds, read as an operator's query would: plain
SQLite, read-only, after the run."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path


def unplugs_of(journal: Path, network: str) -> list[tuple[str, str | None, str]]:
    """(state, reason, message) of every unplug of `network` (of any VM), by attempt."""
    conn = sqlite3.connect(f"file:{journal}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT stream, state, snapshot FROM streams WHERE stream LIKE ?",
                            (f"%/{network}/unplug/%",)).fetchall()
    finally:
        conn.close()
    rows.sort(key=lambda r: int(str(r[0]).rpartition("/")[2]))
    return [(state, json.loads(s).get("reason"), json.loads(s).get("message", ""))
            for _, state, s in rows]
