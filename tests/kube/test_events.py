"""Events as a person reads them: a repeat of the same Event is counted in its
`events.k8s.io/v1` series, not created again (against the simulated API server)."""

from __future__ import annotations

from nicplug.adapters.kube.calls import EventNote, KubeCalls
from nicplug.adapters.kube.client import ApiConnection
from nicplug.adapters.kube.events import SERIES_WINDOW, EventRecorder
from nicplug.simulator import resources as sim
from nicplug.simulator.event_views import as_v1
from tests.kube.conftest import ApiServer

VM = {"apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": "VirtualMachine",
      "metadata": {"namespace": "ns1", "name": "vm1", "uid": "u-1"}}
FAILED = EventNote(VM, "PlugFailed", "Network/a plug: Requested → Failed (SDNTimeout)",
                   "Warning")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_a_repeat_is_counted_in_the_series_of_the_recorded_event(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    clock = Clock()
    recorder = EventRecorder(KubeCalls(connection), monotonic=clock)

    first = await recorder.record(FAILED)
    clock.now += 30
    second = await recorder.record(FAILED)
    clock.now += SERIES_WINDOW - 1  # within the window of the last repeat
    third = await recorder.record(FAILED)

    assert first["event"] == second["event"] == third["event"]
    items = [as_v1(e) for e in api_server.store.list(sim.EVENTS, "ns1")[0]]
    assert len(items) == 1 and items[0]["series"]["count"] == 3
    assert (api_server.count("create"), api_server.count("patch")) == (1, 2)


async def test_a_different_event_or_one_after_the_window_is_created(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    clock = Clock()
    recorder = EventRecorder(KubeCalls(connection), monotonic=clock)

    await recorder.record(FAILED)
    await recorder.record(EventNote(VM, "PlugAttached", "Network/a plug: … → Attached"))
    clock.now += SERIES_WINDOW + 1
    await recorder.record(FAILED)

    items = [as_v1(e) for e in api_server.store.list(sim.EVENTS, "ns1")[0]]
    assert sorted(e["reason"] for e in items) == ["PlugAttached", "PlugFailed", "PlugFailed"]
    assert not any("series" in e for e in items)
    assert api_server.count("patch") == 0


async def test_a_repeat_of_an_event_gone_meanwhile_is_created_again(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    recorder = EventRecorder(KubeCalls(connection), monotonic=Clock())
    first = await recorder.record(FAILED)
    api_server.store.delete(sim.EVENTS, "ns1", str(first["event"]))  # expired

    again = await recorder.record(FAILED)

    items = [as_v1(e) for e in api_server.store.list(sim.EVENTS, "ns1")[0]]
    assert [e["metadata"]["name"] for e in items] == [again["event"]] != [first["event"]]
    assert again["count"] == 1


async def test_a_note_longer_than_the_api_takes_is_cut_to_it(
    api_server: ApiServer, connection: ApiConnection
) -> None:
    long = EventNote(VM, "PlugFailed", "Network/ü plug: " + "é" * 2000, "Warning")
    await EventRecorder(KubeCalls(connection), monotonic=Clock()).record(long)
    items = [as_v1(e) for e in api_server.store.list(sim.EVENTS, "ns1")[0]]
    note = items[0]["note"]
    assert len(note.encode()) <= 1024 and note.startswith("Network/ü plug: é")
    assert note.endswith("…")
