"""The throwaway PostgreSQL server starts as an unprivileged user even when the
installation it comes from sits where that user cannot reach (a checkout in root's
0700 home): then it runs from a copy inside its own directory."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import asyncpg
import pytest

from nicplug.simulator import postgres_server
from nicplug.simulator.postgres_server import LocalPostgres


def test_a_server_starts_from_an_unreachable_installation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(postgres_server, "_reachable_by_others", lambda _path: False)
    server = LocalPostgres().start()
    try:
        async def ask() -> int:
            conn = await asyncpg.connect(server.dsn())
            try:
                return int(await conn.fetchval("SELECT 1"))
            finally:
                await conn.close()

        assert asyncio.run(ask()) == 1
        copied = Path(server.root, "server")
        assert copied.is_dir() == (os.geteuid() == 0)  # root runs it as another user
    finally:
        server.stop()
    assert not server.root.exists()
