"""A decision that ends one attempt and opens the next writes both read-model rows."""

from __future__ import annotations

from nicplug.engine.model import Key
from nicplug.machines.operation import OPENED, TRANSITIONED, VMState, stream_of


def _opened(attempt: int) -> dict[str, object]:
    return {"vm": "ns/vm", "vm_uid": "u1", "network": "Network/n", "if_name": "veth_n00000000",
            "direction": "plug", "attempt": attempt, "at": 1.0}


def test_the_superseded_attempt_keeps_its_last_view() -> None:
    first, second = stream_of("u1", "Network/n", "plug", 1), stream_of("u1", "Network/n", "plug", 2)
    state = VMState(Key("ns/vm"), {})
    state = state.fold(first, OPENED, _opened(1))
    state = state.fold(first, TRANSITIONED, {"from": "Requested", "to": "Failed",
                                             "reason": "SDNError", "at": 2.0})
    state = state.fold(second, OPENED, _opened(2))

    views = {v.stream: v for v in state.views()}
    assert views[first].state == "Failed" and views[first].terminal
    assert views[second].state == "Requested"
    assert [op.stream for op in state.ops.values()] == [second]


def test_restore_keeps_only_the_latest_attempt() -> None:
    first, second = stream_of("u1", "Network/n", "plug", 1), stream_of("u1", "Network/n", "plug", 2)
    state = VMState(Key("ns/vm"), {}).fold(first, OPENED, _opened(1))
    state = state.fold(second, OPENED, _opened(2))
    restored = VMState.restore(Key("ns/vm"), state.views())
    assert [op.stream for op in restored.ops.values()] == [second]
    assert not restored.retired
