"""The demo's board: every operation of every world, read from the journals.

It opens each world's journal read-only (as `nicplug status` would, while the
controller writes it) and turns the read model into rows, then into a `rich` table.
It never writes and never decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from nicplug.engine.errors import JournalError
from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.machines.versions import schemas

Row = Mapping[str, Any]

_STYLE = {
    "Attached": "green", "Detached": "green", "Failed": "red", "Cancelled": "yellow",
    "RestartRequired": "magenta", "MigrationRequired": "cyan", "Migrating": "cyan",
}


class Board:
    def __init__(self, journals: Mapping[str, Path]) -> None:
        self._paths = dict(journals)
        self._open: dict[str, SQLiteJournal] = {}
        self.rows: list[Row] = []

    async def refresh(self) -> list[Row]:
        rows: list[Row] = []
        for world, path in self._paths.items():
            journal = self._open.get(world)
            if journal is None:
                if not path.exists():
                    continue
                try:
                    journal = await SQLiteJournal.open(
                        path, read_only=True, integrity="none", schemas=schemas()
                    )
                except JournalError:
                    continue  # not created yet by the controller: try again next time
                if journal.read_mode != "shared":  # a snapshot would not follow a writer
                    await journal.close()
                    continue
                self._open[world] = journal
            for stored in await journal.views():
                view = stored.view
                s = view.snapshot
                rows.append({
                    "world": world, "vm": s.get("vm"), "network": s.get("network"),
                    "direction": s.get("direction"), "attempt": s.get("attempt"),
                    "state": view.state, "reason": s.get("reason"),
                    "history": list(s.get("history") or ()), "terminal": view.terminal,
                })
        rows.sort(key=lambda r: (r["world"], str(r["vm"]), str(r["network"]), r["attempt"]))
        self.rows = rows
        return rows

    async def close(self) -> None:
        for journal in self._open.values():
            await journal.close()
        self._open.clear()


def table(rows: Sequence[Row], *, title: str = "operations") -> Table:
    t = Table(title=title, expand=False)
    for column in ("world", "vm", "network", "op", "state", "reason", "path"):
        t.add_column(column, overflow="fold")
    for r in rows:
        style = _STYLE.get(str(r["state"]), "")
        path = " → ".join(r["history"][-6:])
        t.add_row(
            str(r["world"]), str(r["vm"]), str(r["network"]),
            f"{r['direction']}#{r['attempt']}", f"[{style}]{r['state']}[/]" if style else
            str(r["state"]), str(r["reason"] or ""), path,
        )
    return t
