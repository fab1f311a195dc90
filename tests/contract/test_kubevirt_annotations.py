"""The multus dialect against annotation values as KubeVirt and multus really write them.

The values come from `tests/fixtures/kubevirt_annotations.json`, copied from upstream
test data (each names repository, path and commit). On a KubeVirt cluster those
annotations also hold what nicplug did not write: binding plugins' entries, users' own
interfaces, ordinal pod interface names of older pods, and `""` after the last unplug.
None of it may read as malformed, and none of it may be taken for nicplug's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from nicplug.adapters.sdn import dialect_for
from nicplug.machines.world import NetworkSpec, if_name_of

FIXTURES = Path(__file__).parent.parent / "fixtures" / "kubevirt_annotations.json"
LOADED: dict[str, Any] = json.loads(FIXTURES.read_text())

DIALECT = dialect_for("multus", cluster_nad_namespace="cluster-nets")


def _cases(kind: str) -> list[Any]:
    return [pytest.param(case, id=f"{case['source']}: {case['name']}") for case in LOADED[kind]]


def test_every_fixture_names_its_source() -> None:
    for kind in ("networks", "network_status"):
        for case in LOADED[kind]:
            source = LOADED["sources"][case["source"]]
            assert source["repository"] and source["path"]
            assert len(source["commit"]) == 40


@pytest.mark.parametrize("case", _cases("networks"))
def test_kubevirts_networks_annotations_are_readable(case: dict[str, str]) -> None:
    requests = DIALECT.parse_requests(value=case["value"], namespace=case["pod_namespace"])
    for request in requests:
        # whatever is read as nicplug's is the network the entry's NAD names
        type_, _, name = request.identity.partition("/")
        assert type_ in ("Network", "ClusterNetwork") and name


@pytest.mark.parametrize("case", _cases("network_status"))
def test_multus_network_status_is_readable(case: dict[str, str]) -> None:
    statuses = DIALECT.parse_statuses(value=case["value"], namespace=case["pod_namespace"])
    assert all(s.ready for s in statuses)


def _value(source: str, name: str, kind: str = "networks") -> str:
    found = [c for c in LOADED[kind] if c["source"] == source and c["name"] == name]
    assert len(found) == 1, (source, name)
    return str(found[0]["value"])


def test_the_annotation_after_the_last_unplug_lists_nothing() -> None:
    value = _value("generator_test", "the last secondary interface hot-unplugged")
    assert value == ""
    assert DIALECT.parse_requests(value=value, namespace="default") == ()


@pytest.mark.parametrize(
    "name", ["a binding plugin's entry", "a binding plugin's entry in another namespace"]
)
def test_binding_plugin_entries_are_not_networks(name: str) -> None:
    value = _value("multus_annotation_test", name)
    assert DIALECT.parse_requests(value=value, namespace="default") == ()


def test_a_binding_plugin_entry_beside_nicplugs_network_leaves_the_network_alone() -> None:
    binding = orjson.loads(_value("multus_annotation_test", "a binding plugin's entry"))
    ours = NetworkSpec("Network", "my-binding")  # a Network named like the binding's NAD
    entry = {
        "name": "my-binding",
        "namespace": "default",
        "interface": DIALECT.pod_interface(if_name=ours.if_name),
    }
    value = orjson.dumps([entry, *binding]).decode()
    (request,) = DIALECT.parse_requests(value=value, namespace="default")
    assert (request.identity, request.if_name) == ("Network/my-binding", ours.if_name)


def test_interfaces_kubevirt_named_for_other_networks_are_someone_elses() -> None:
    """KubeVirt hashes its own network name (`test1`, the guide's `dyniface1`), which is
    never one of nicplug's `veth_…` names: the NAD alone does not make it nicplug's."""
    for source, name in [
        ("generator_test", "three multus networks, the first one named default"),
        ("generator_test", "one network, hashed name"),
        ("vmi_test", "hashed name"),
        ("user_guide", _guide_case()),
    ]:
        assert DIALECT.parse_requests(value=_value(source, name), namespace="default") == ()
    status = _value("vmi_test", "primary and a secondary network, hashed name", "network_status")
    assert DIALECT.parse_statuses(value=status, namespace="default") == ()


def _guide_case() -> str:
    (case,) = [c for c in LOADED["networks"] if c["source"] == "user_guide"]
    return str(case["name"])


def test_ordinal_pod_interfaces_are_attributed_by_their_nad() -> None:
    requests = DIALECT.parse_requests(
        value=_value("generator_test", "two networks, ordinal names"), namespace="default"
    )
    assert [(r.identity, r.if_name) for r in requests] == [
        ("Network/some-net", if_name_of("Network", "some-net")),
        ("Network/other-net", if_name_of("Network", "other-net")),
    ]
    status = _value("vmi_test", "primary and a secondary network, ordinal name", "network_status")
    (reported,) = DIALECT.parse_statuses(value=status, namespace="default")
    assert (reported.identity, reported.ready) == ("Network/meganet", True)


def test_an_ordinal_entry_in_the_cluster_networks_namespace_is_a_cluster_network() -> None:
    status = _value("generator_test", "an ordinal status of a migration source", "network_status")
    dialect = dialect_for("multus", cluster_nad_namespace="other-namespace")
    reported = dialect.parse_statuses(value=status, namespace="default")
    assert sorted(s.identity for s in reported) == ["ClusterNetwork/test1", "Network/test1"]


def test_kubevirts_mac_request_is_read() -> None:
    ours = NetworkSpec("Network", "test1")
    entry = orjson.loads(_value("generator_test", "an interface with a custom MAC address"))[1]
    entry["interface"] = DIALECT.pod_interface(if_name=ours.if_name)
    (request,) = DIALECT.parse_requests(value=orjson.dumps([entry]).decode(), namespace="default")
    assert request.mac == "de:ad:00:00:be:af"
