"""A term of leadership that ended sends nothing more: the fence before every write.

The term is ended while the executor's read is on the wire (the server holds reads
of the KVVM for a moment), so the check that stops the write is the one made just
before it is sent, not one made when the effect started.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from nicplug.adapters.core.executor import KubeExecutor
from nicplug.adapters.kube.calls import KubeCalls
from nicplug.adapters.kube.client import ApiConnection
from nicplug.adapters.kube.flavour import UPSTREAM
from nicplug.adapters.kube.lease import Term
from nicplug.adapters.sdn import dialect_for
from nicplug.engine.clock import VirtualClock
from nicplug.engine.errors import Deposed
from nicplug.engine.journal import PendingEffect
from nicplug.engine.model import Cause, Key
from nicplug.engine.sqlite_journal import SQLiteJournal
from nicplug.machines.effects import VMNetworkEntry
from nicplug.simulator import networking as nw
from nicplug.simulator.fixtures import kvvm_for
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.resources import KVVMS, NAMESPACES
from tests.engine.journal_support import opened
from tests.engine.test_runtime import make, types_of
from tests.kube.conftest import ApiServer, eventually
from tests.kube.test_executor_order import kvvm_patch, pending

NET_B = nw.if_name("Network", "net-b")
KVVM = "virtualmachines.kubevirt.io"


async def test_a_write_of_an_ended_term_is_never_sent(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    store = api_server.store
    store.create(NAMESPACES, {"metadata": {"name": "ns1"}})
    store.create(KVVMS, kvvm_for(Knobs(), "ns1", "vm", (("Network", "net-a"),)))
    before = store.get(KVVMS, "ns1", "vm")["metadata"]["resourceVersion"]
    term = Term(1, until=float("inf"), now=asyncio.get_running_loop().time)
    executor = KubeExecutor(KubeCalls(connection, fence=term.check), dialect_for("deckhouse"),
                            flavour=UPSTREAM)
    plug_b = kvvm_patch(VMNetworkEntry(nw.if_name("Network", "net-a"), "Network/net-a"),
                        VMNetworkEntry(NET_B, "Network/net-b"))
    api_server.faults.add_latency(0.3, verb="get", resource=KVVM)

    execution = asyncio.create_task(executor.execute(pending(1, plug_b)))
    await eventually(lambda: api_server.count(verb="get", resource="virtualmachines") == 1)
    term.end()  # the Lease is lost while the read is on the wire
    with pytest.raises(Deposed):
        await execution
    assert api_server.count(verb="patch") == 0
    assert store.get(KVVMS, "ns1", "vm")["metadata"]["resourceVersion"] == before

    api_server.faults.clear()
    held = Term(2, until=float("inf"), now=asyncio.get_running_loop().time)
    executor = KubeExecutor(KubeCalls(connection, fence=held.check), dialect_for("deckhouse"),
                            flavour=UPSTREAM)
    await executor.execute(pending(2, plug_b))  # the next term sends it
    assert api_server.count(verb="patch", resource="virtualmachines") == 1


def test_a_term_ends_at_its_deadline_by_the_clock_alone() -> None:
    now = [0.0]
    term = Term(1, until=10.0, now=lambda: now[0])
    assert term.holds()
    term.extend(12.0)
    term.extend(11.0)  # a late answer never shortens it
    now[0] = 11.9
    term.check()
    now[0] = 12.0
    assert not term.holds()
    with pytest.raises(Deposed, match="term 1"):
        term.check()


class DeposedExecutor:
    def __init__(self) -> None:
        self.calls = 0

    async def execute(self, effect: PendingEffect) -> Mapping[str, Any]:
        self.calls += 1
        raise Deposed("term 1 of leadership has ended")


async def test_an_effect_fenced_off_stays_in_the_outbox_unrecorded() -> None:
    """Nothing is recorded of a fenced effect: it is neither failed nor retried by
    this runtime; the outbox keeps it `issued` for the next leader."""
    clock = VirtualClock()
    executor = DeposedExecutor()
    journal: SQLiteJournal
    async with opened(":memory:") as journal:
        runtime = make(journal, executor, clock)
        await runtime.start()
        await runtime.observe(Key("ns/a"), 1, Cause("observation", "target@1"))
        await runtime.drain()
        clock.advance(10.0)
        await runtime.drain()
        (row,) = await journal.outbox()
        assert (row.status, row.attempts, row.last_error) == ("issued", 0, None)
        assert await types_of(journal, Key("ns/a")) == ["Requested"]
        assert executor.calls == 1
        await runtime.stop(drain=False)
