"""Retention keeps the journal flat under churn, and what it archives stays findable.

VMs of the machine tests' `Sim` worlds plug and unplug a network round after round
through the real decider, runtime and journal file; after each round everything that
finished is archived. The file's size after round 10 stays within 10 % of round 2.
"""

from __future__ import annotations

import os
from pathlib import Path

from nicplug.adapters.core.retention import archive_finished
from nicplug.adapters.exporting import read_events
from nicplug.engine.audit import audit, folder
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.operation import fold_view, retrying
from tests.queries.journal_worlds import X, start, stop
from tests.unit.machines.sim import MAIN, Sim

VMS = 8
ROUNDS = 10


def size(path: Path) -> int:
    return sum(os.path.getsize(p) for p in (path, Path(f"{path}-wal")) if p.exists())


async def test_churn_with_retention_keeps_the_journal_flat(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    archives = tmp_path / "archives"
    archives.mkdir()
    sims = {f"ns/vm-{n}": Sim(networks=(MAIN,)) for n in range(VMS)}
    cluster = await start(path, sims)
    sizes = []
    try:
        for _ in range(ROUNDS):
            for sim in sims.values():
                sim.networks = (MAIN, X)
            await cluster.run(8)
            for sim in sims.values():
                sim.networks = (MAIN,)
            await cluster.run(8)
            done = await archive_finished(
                cluster.journal, window=0.0, into=archives, now=cluster.clock.wall() + 1
            )
            assert done is not None and done.streams == 2 * VMS
            await cluster.journal.checkpoint()
            sizes.append(size(path))
        views = await cluster.journal.views()
        decider = HotplugDecider()
        mismatches = audit(decider, await cluster.journal.audit_input(folder(fold_view)), retrying)
    finally:
        await stop(cluster)
    assert mismatches == []
    # each (VM, direction) keeps its newest attempt as a summary, naming its archive
    assert len(views) == 2 * VMS and all(v.archived for v in views)
    assert {v.view.snapshot["attempt"] for v in views} == {ROUNDS}
    assert sizes[-1] <= sizes[1] * 1.10, sizes
    archived = [e for file in sorted(archives.iterdir()) for e in read_events(file)]
    assert len({e["stream"] for e in archived}) == 2 * VMS * ROUNDS
