"""Deckhouse's own annotation strings, read and written by nicplug's deckhouse dialect.

The strings in `tests/fixtures/deckhouse/network-annotations.json` are copied verbatim
from deckhouse/virtualization's Go tests (each names its path and commit). Deckhouse's
controller compares the networks-spec string byte for byte, so what nicplug renders for
the same list must be that string exactly, or each would rewrite the other's forever.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from nicplug.adapters.sdn import dialect_for
from nicplug.adapters.sdn.deckhouse import SDN_GID, SDN_UID
from nicplug.adapters.sdn.port import MalformedAnnotation
from nicplug.machines.effects import PatchPodNetworks
from nicplug.simulator import deckhouse_networks as dn

FIXTURES = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "deckhouse" / "network-annotations.json").read_text()
)
DIALECT = dialect_for("deckhouse")
NS = "ns"


def _case(entry: dict[str, Any]) -> str:
    return str(entry["case"])


def _as_deckhouse_writes_it(value: str) -> str:
    """The Go test builds its structs with zero uid/gid; Deckhouse's controller always
    sets 64535 (`deckhouseUID`, pkg/common/network/spec.go). Nothing else changes."""
    return value.replace('"uid":0,"gid":0', f'"uid":{SDN_UID},"gid":{SDN_GID}')


PLAIN_SPECS = [e for e in FIXTURES["networks_spec"] if "ipAssignmentMode" not in e["value"]]


@pytest.mark.parametrize("entry", PLAIN_SPECS, ids=_case)
def test_a_networks_spec_deckhouse_wrote_is_rendered_back_byte_for_byte(
    entry: dict[str, Any]
) -> None:
    value = _as_deckhouse_writes_it(entry["value"])
    requests = DIALECT.parse_requests(value=value, namespace=NS)
    assert [(r.identity, r.id) for r in requests] == [("Network/n1", 2)]
    assert DIALECT.render_requests(requests=requests, namespace=NS) == value


def test_only_main_left_is_an_empty_list_on_the_pod_as_deckhouse_writes_it() -> None:
    # `InterfaceSpecList{}.ToString()` marshals an empty list: "[]" (types.go)
    assert DIALECT.render_requests(requests=(), namespace=NS) is None
    assert DIALECT.empty_pod_requests == "[]"
    assert DIALECT.parse_requests(value="[]", namespace=NS) == ()


IPAM_SPECS = [e for e in FIXTURES["networks_spec"] if "ipAssignmentMode" in e["value"]]


@pytest.mark.parametrize("entry", IPAM_SPECS, ids=_case)
def test_ipam_fields_are_read_and_rendered_back_byte_for_byte(entry: dict[str, Any]) -> None:
    value = _as_deckhouse_writes_it(entry["value"])
    (request,) = DIALECT.parse_requests(value=value, namespace=NS)
    assert (request.identity, request.if_name, request.id) == ("Network/n1", "veth_n1", 2)
    assert (request.ip_assignment_mode, request.ip_address_names) == ("DHCP", ("my-ip",))
    assert DIALECT.render_requests(requests=(request,), namespace=NS) == value
    # what a drive-mode effect persists and reads back keeps them
    patch = PatchPodNetworks("ns", "pod", "uid", (request,))
    assert PatchPodNetworks.from_payload(patch.to_payload()).entries == (request,)


@pytest.mark.parametrize("entry", FIXTURES["networks_spec"], ids=_case)
def test_the_simulated_platform_marshals_as_deckhouse_does(entry: dict[str, Any]) -> None:
    """The simulator's own re-derivation of `InterfaceSpecList.ToString` against the
    same strings: the platform the tests run against writes Deckhouse's bytes."""
    (wire,) = orjson.loads(entry["value"])
    spec = dn.InterfaceSpec(
        wire["id"], wire["type"], wire["name"], wire["ifName"],
        ip_assignment_mode=wire.get("ipAssignmentMode", ""),
        ip_address_names=tuple(wire.get("ipAddressNames", ())))
    main = dn.InterfaceSpec(1, "Main", "", "default")
    assert dn.to_string([main, spec]) == _as_deckhouse_writes_it(entry["value"])
    assert dn.to_string([main]) == "[]"


def test_a_malformed_ip_address_list_is_a_clear_error() -> None:
    value = ('[{"id":2,"type":"Network","name":"n1","ifName":"veth_n1","uid":64535,'
             '"gid":64535,"ipAddressNames":"my-ip"}]')
    with pytest.raises(MalformedAnnotation, match="ipAddressNames"):
        DIALECT.parse_requests(value=value, namespace=NS)


@pytest.mark.parametrize("entry", FIXTURES["networks_status"], ids=_case)
def test_networks_status_as_deckhouse_reads_it(entry: dict[str, Any]) -> None:
    (status,) = DIALECT.parse_statuses(value=entry["value"], namespace=NS)
    parsed = orjson.loads(entry["value"])[0]
    assert status.identity == f"{parsed['type']}/{parsed['name']}"
    assert status.if_name == parsed["ifName"]
    assert status.ready is entry["ready"]
