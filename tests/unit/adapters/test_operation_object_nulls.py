"""An operation object patched after its create reads back whole.

The projection writes later steps with a JSON merge patch (RFC 7386), in which a null
deletes its key: an explanation whose `reason` or `next_timer` is null lost those keys
on the server, and the plugin then refused the object (seen under load, where a
hotplug's steps no longer fell into the create's batch).
"""

from __future__ import annotations

from typing import Any

from nicplug.adapters.queries.operation_object import explanation_of, summary_of


def _without_nulls(value: Any) -> Any:
    """What the server keeps of `value` sent in a merge patch over an existing key."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


EXPLANATION = {
    "operation": {
        "id": "uid/Network/user-net/plug/1", "vm": "default/vm-00000", "vm_uid": "uid",
        "network": "Network/user-net", "if_name": "veth_n1", "direction": "plug",
        "flavour": "deckhouse", "attempt": 1, "mode": "observe", "state": "Attached",
        "terminal": True, "reason": None, "message": "", "history": ["Requested", "Attached"],
        "opened_at": 1.0, "entered_at": 2.0, "retry_at": None, "bypassed_vmi": None,
        "waiting": "", "held": None, "updated_wall": "2026-12-04T00:00:00Z",
    },
    "summary": "done: Attached is terminal", "superseded_by": None, "in_state_for": 0.0,
    "waits_for": [], "ends_if": [], "pending_effects": [],
    "timers": [], "next_timer": None, "last_observation": None,
}


def test_an_explanation_that_lost_its_nulls_in_a_merge_patch_reads_as_written() -> None:
    patched = {"metadata": {"name": "op"},
               "status": {"explanation": _without_nulls(EXPLANATION)}}
    written = {"metadata": {"name": "op"}, "status": {"explanation": EXPLANATION}}
    assert explanation_of(patched, now=5.0) == explanation_of(written, now=5.0)
    assert summary_of(patched).reason is None and summary_of(patched).state == "Attached"
