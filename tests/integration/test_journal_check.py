"""A controller opens its journal checking only what recovery reads whole, and checks
the whole file beside its work after start: a journal whose history is damaged ends
`nicplug run` with the one line a damaged journal gets at open, left as it was. (The
journal is the journal benchmark's: real plug operations, 30 of them live.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bench.journal import Sizes, build_journal
from nicplug.adapters.core.controller import Controller
from nicplug.adapters.core.settings import Settings
from nicplug.engine.errors import JournalRefused
from tests.engine.journal_support import scribbled
from tests.integration.conftest import ClusterFactory


async def test_a_journal_with_damaged_history_stops_the_controller_with_one_line(
    start_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = await start_cluster()
    path = tmp_path / "journal.db"
    build_journal(str(path), Sizes(appends=0, append_rounds=0, journal=3000, live=30))
    damaged = scribbled(path, "events", tmp_path / "damaged.db")
    before = damaged.read_bytes()
    controller = Controller(Settings(
        kubeconfig=cluster.kubeconfig_path, journal=damaged, dialect=cluster.knobs.dialect,
        cluster_network_namespace=cluster.knobs.cluster_network_nad_namespace,
        metrics_addr="127.0.0.1:0", query_addr="", identity="itest-check", synchronous="NORMAL",
        request_timeout=5.0,
    ))
    with pytest.raises(JournalRefused, match="is corrupt or not an SQLite journal") as refused:
        await asyncio.wait_for(controller.run(), timeout=60)
    assert str(damaged) in str(refused.value) and "\n" not in str(refused.value)
    assert "restore it from a backup" in str(refused.value)
    assert damaged.read_bytes() == before
