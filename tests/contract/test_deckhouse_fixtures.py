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


def test_ipam_fields_are_read_without_complaint() -> None:
    (entry,) = [e for e in FIXTURES["networks_spec"] if "ipAssignmentMode" in e["value"]]
    (request,) = DIALECT.parse_requests(value=entry["value"], namespace=NS)
    assert (request.identity, request.if_name, request.id) == ("Network/n1", "veth_n1", 2)


@pytest.mark.parametrize("entry", FIXTURES["networks_status"], ids=_case)
def test_networks_status_as_deckhouse_reads_it(entry: dict[str, Any]) -> None:
    (status,) = DIALECT.parse_statuses(value=entry["value"], namespace=NS)
    parsed = orjson.loads(entry["value"])[0]
    assert status.identity == f"{parsed['type']}/{parsed['name']}"
    assert status.if_name == parsed["ifName"]
    assert status.ready is entry["ready"]
