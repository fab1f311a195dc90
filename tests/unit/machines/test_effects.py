"""Effects round-trip through JSON payloads and have deterministic idempotency keys."""

from __future__ import annotations

import json

import pytest

from nicplug.engine.model import StreamId
from nicplug.machines.effects import (
    AnyEffect,
    CreateMigration,
    EmitEvent,
    PatchPodNetworks,
    PatchVirtualMachine,
    RemoveVMCondition,
    RestartVM,
    SetVMCondition,
    VMNetworkEntry,
    effect_from_payload,
)
from nicplug.machines.world import SDNRequest

ENTRY = SDNRequest("Network/x", "veth_nc40a0808", 2, "aa:bb:cc:dd:ee:01")
EXAMPLES: list[AnyEffect] = [
    PatchPodNetworks("ns", "virt-launcher-vm-1", "pod-uid", (ENTRY,)),
    PatchVirtualMachine(
        "ns",
        "vm",
        (
            VMNetworkEntry("default", "Main"),
            VMNetworkEntry("veth_nc40a0808", "Network/x", True),
        ),
        (ENTRY,),
    ),
    SetVMCondition(
        "ns", "vm", "AwaitingRestartToApplyConfiguration", "True", "ChangesPendingRestart", "m"
    ),
    RemoveVMCondition("ns", "vm", "AwaitingRestartToApplyConfiguration"),
    RestartVM("ns", "vm", "vmi-uid"),
    CreateMigration("ns", "vm", "nicplug-vm-0011aabb"),
    EmitEvent("ns", "vm", "PlugAttached", "Network/x plug: Requested → Attached", "Normal", "s", 2),
]


@pytest.mark.parametrize("effect", EXAMPLES, ids=lambda e: e.TYPE)
def test_payload_round_trip_through_json(effect: AnyEffect) -> None:
    request = effect.request(StreamId("uid/Network/x/plug/1"))
    payload = json.loads(json.dumps(request.payload))
    again = effect_from_payload(request.type, payload)
    assert again == effect
    assert again.idempotency_key() == request.idempotency_key


def test_an_older_kvvm_patch_payload_still_reads() -> None:
    """Payloads of PatchVirtualMachine written before its entries lost `multus_network`
    and `mac` (always None where nicplug writes a KVVM) read with them ignored."""
    older = {"namespace": "ns", "name": "vm", "template_requests": [], "observed": None,
             "pods": [], "networks": [{"if_name": "veth_nc40a0808", "identity": "Network/x",
                                       "absent": False, "multus_network": None}]}
    effect = effect_from_payload("PatchVirtualMachine", older)
    assert isinstance(effect, PatchVirtualMachine)
    assert effect.networks == (VMNetworkEntry("veth_nc40a0808", "Network/x"),)


def test_keys_are_deterministic_and_content_addressed() -> None:
    a = PatchPodNetworks("ns", "p", "u", (ENTRY,))
    assert a.idempotency_key() == PatchPodNetworks("ns", "p", "u", (ENTRY,)).idempotency_key()
    assert a.idempotency_key() != PatchPodNetworks("ns", "p", "u", ()).idempotency_key()
    assert a.idempotency_key().startswith("PatchPodNetworks:ns/p:")


def test_unknown_effect_type_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown effect type 'Reboot'"):
        effect_from_payload("Reboot", {})
