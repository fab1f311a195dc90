"""One contract for every SDN dialect, run against each of them.

Each dialect comes with a stand-in for its SDN that writes the status annotation the
way that SDN does, and for whoever writes the request annotation and the KubeVirt
networks: nicplug itself for deckhouse (`WritingDialect`), KubeVirt and the user's
template for multus (written here as KubeVirt's generator and the user guide write
them, not by nicplug), so the reading rules are tested through the same questions.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nicplug.adapters.sdn import (
    DIALECT_NAMES,
    Dialect,
    MalformedAnnotation,
    UnknownDialect,
    WritingDialect,
    dialect_for,
)
from nicplug.machines.world import KVVMNetwork, NetworkSpec, SDNRequest
from nicplug.simulator import networking as nw

NS = "ns1"
CLUSTER_NS = "cluster-nets"

Progress = Literal["ready", "pending", "failed"]


def request_for(spec: NetworkSpec, mac: str | None = None) -> SDNRequest:
    return SDNRequest(identity=spec.identity, if_name=spec.if_name, id=spec.id, mac=mac)


USER_NET = request_for(NetworkSpec("Network", "user-net", 2), mac="aa:bb:cc:dd:ee:01")
STORAGE = request_for(NetworkSpec("ClusterNetwork", "storage", 3))
MAIN = request_for(NetworkSpec("Main", "", 1))


def deckhouse_sdn(entries: Sequence[tuple[SDNRequest, Progress]]) -> str:
    """The status Deckhouse's SDN writes: conditions per configured interface."""
    written = [{"type": "Main", "name": "", "conditions": []}]
    for request, progress in entries:
        type_, _, name = request.identity.partition("/")
        negotiated = {"type": "Negotiated", "status": "True", "reason": "Up"}
        configured = {"type": "Configured", "status": "True", "reason": "InterfaceConfigured"}
        if progress == "pending":
            negotiated = {"type": "Negotiated", "status": "Unknown"}
        if progress == "failed":
            configured = {
                "type": "Configured",
                "status": "False",
                "reason": "VLANConflict",
                "message": "vlan 10 is taken on the node",
            }
        written.append(
            {
                "type": type_,
                "name": name,
                "ifName": request.if_name,
                "mac": "02:00:00:00:00:01",
                "conditions": [configured, negotiated],
            }
        )
    return orjson.dumps(written).decode()


def kubevirt_writes(requests: Sequence[SDNRequest], namespace: str = NS,
                    cluster_namespace: str = CLUSTER_NS) -> str | None:
    """The networks annotation as KubeVirt's generator writes it
    (`pkg/network/pod/annotations/generator.go`: Go's field order, compact, `mac` from
    the interface's macAddress, the pod network never listed); None: nothing to list."""
    entries = []
    for request in requests:
        type_, _, name = request.identity.partition("/")
        if type_ == "Main":
            continue
        entry = {"name": name,
                 "namespace": cluster_namespace if type_ == "ClusterNetwork" else namespace}
        if request.mac is not None:
            entry["mac"] = request.mac
        entry["interface"] = nw.multus_pod_interface(request.if_name)
        entries.append(entry)
    return orjson.dumps(entries).decode() if entries else None


def templates_network(request: SDNRequest, namespace: str = NS,
                      cluster_namespace: str = CLUSTER_NS) -> dict[str, object]:
    """A KubeVirt VM template's network as the user guide writes it (multus)."""
    type_, _, name = request.identity.partition("/")
    if type_ == "Main":
        return {"name": "default", "pod": {}}
    where = cluster_namespace if type_ == "ClusterNetwork" else namespace
    return {"name": request.if_name, "multus": {"networkName": f"{where}/{name}"}}


def multus_sdn(entries: Sequence[tuple[SDNRequest, Progress]]) -> str:
    """The status multus writes: the default network, then every attachment that exists."""
    dialect = dialect_for("multus", cluster_nad_namespace=CLUSTER_NS)
    written: list[dict[str, object]] = [
        {"name": "kindnet", "interface": "eth0", "ips": ["10.244.1.7"], "mac": "0a:58:0a:f4:01:07",
         "default": True, "dns": {}},
    ]
    for request, progress in entries:
        if progress != "ready":
            continue  # multus lists an attachment once it exists, and nothing else
        network = templates_network(request)["multus"]
        assert isinstance(network, dict)
        written.append(
            {"name": network["networkName"], "interface": dialect.pod_interface(
                if_name=request.if_name), "mac": "02:00:00:00:00:02", "dns": {}}
        )
    return orjson.dumps(written).decode()


@dataclass(frozen=True)
class Case:
    dialect: Dialect
    sdn: Callable[[Sequence[tuple[SDNRequest, Progress]]], str]
    reports_failures: bool
    requests: Callable[[Sequence[SDNRequest]], str | None]
    """Who writes the request annotation: nicplug (deckhouse), KubeVirt (multus)."""
    network: Callable[[SDNRequest], dict[str, object]]
    """Who writes the KubeVirt networks: nicplug (deckhouse), the user (multus)."""


def _written_by_nicplug(dialect: Dialect) -> WritingDialect:
    assert isinstance(dialect, WritingDialect)
    return dialect


DECKHOUSE = _written_by_nicplug(dialect_for("deckhouse"))
CASES = {
    "deckhouse": Case(
        DECKHOUSE, deckhouse_sdn, reports_failures=True,
        requests=lambda rs: DECKHOUSE.render_requests(requests=rs, namespace=NS),
        network=lambda r: DECKHOUSE.kubevirt_network(request=r, namespace=NS),
    ),
    "multus": Case(
        dialect_for("multus", cluster_nad_namespace=CLUSTER_NS), multus_sdn,
        reports_failures=False, requests=kubevirt_writes, network=templates_network,
    ),
}


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> Case:
    return CASES[request.param]


def kvvm_network(body: dict[str, object]) -> KVVMNetwork:
    multus = body.get("multus")
    return KVVMNetwork(
        name=str(body["name"]),
        multus_network=str(multus["networkName"]) if isinstance(multus, dict) else None,
    )


def comparable(request: SDNRequest, dialect: Dialect) -> SDNRequest:
    """What survives a round trip: everything, bar the id or the MAC where the dialect
    has none."""
    kept_id = request.id if dialect.carries_ids else None
    if dialect.name == "deckhouse" and kept_id == 0:
        kept_id = None  # Deckhouse writes 0 for "no id" (Go's ptr.Deref(id, 0))
    carries_macs = not isinstance(dialect, WritingDialect) or dialect.carries_macs
    return SDNRequest(
        request.identity, request.if_name, kept_id, request.mac if carries_macs else None,
    )


# -- registry ---------------------------------------------------------------------


def test_registry_knows_every_dialect_by_name() -> None:
    assert sorted(DIALECT_NAMES) == sorted(CASES)
    for name in DIALECT_NAMES:
        assert dialect_for(name).name == name
    with pytest.raises(UnknownDialect, match="deckhouse, multus"):
        dialect_for("calico")


# -- requests ---------------------------------------------------------------------


def test_round_trip_keeps_order_identity_ifname_and_mac(case: Case) -> None:
    d = case.dialect
    requests = (STORAGE, USER_NET)
    value = case.requests(requests)
    assert value is not None
    parsed = d.parse_requests(value=value, namespace=NS)
    assert parsed == tuple(comparable(r, d) for r in requests)


def test_main_is_never_listed(case: Case) -> None:
    d = case.dialect
    with_main = case.requests([MAIN, USER_NET])
    assert with_main == case.requests([USER_NET])
    assert with_main is not None and "default" not in with_main
    assert [r.identity for r in d.parse_requests(value=with_main, namespace=NS)] == [
        "Network/user-net"
    ]


@pytest.mark.parametrize("requests", [(), (MAIN,)], ids=["nothing", "only-main"])
def test_only_main_removes_the_annotation(case: Case, requests: tuple[SDNRequest, ...]) -> None:
    assert case.requests(requests) is None


def test_absent_annotations_mean_nothing_requested_or_reported(case: Case) -> None:
    assert case.dialect.parse_requests(value=None, namespace=NS) == ()
    assert case.dialect.parse_statuses(value=None, namespace=NS) == ()
    assert case.dialect.parse_requests(value="[]", namespace=NS) == ()


KEY_ORDER = ["id", "type", "name", "ifName", "uid", "gid"]
"""Deckhouse marshals a Go struct: its field order, not sorted (pkg/common/network/types.go)."""


def test_rendering_is_deterministic_in_a_fixed_key_order() -> None:
    """Only where nicplug writes the request annotation (deckhouse)."""
    d = DECKHOUSE
    first = d.render_requests(requests=[USER_NET, STORAGE], namespace=NS)
    assert first == d.render_requests(requests=(USER_NET, STORAGE), namespace=NS)
    assert first is not None and ", " not in first
    entries = orjson.loads(first)
    for entry in entries:
        assert list(entry) == KEY_ORDER
    swapped = d.render_requests(requests=[STORAGE, USER_NET], namespace=NS)
    assert swapped is not None
    assert orjson.loads(swapped) == entries[::-1]


names = st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,30}[a-z0-9])?", fullmatch=True)
specs = st.builds(
    NetworkSpec,
    type=st.sampled_from(["Network", "ClusterNetwork"]),
    name=names,
    id=st.one_of(st.none(), st.integers(min_value=0, max_value=2**31)),
)
macs = st.one_of(st.none(), st.from_regex(r"([0-9a-f]{2}:){5}[0-9a-f]{2}", fullmatch=True))


@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=60, deadline=None)
@given(entries=st.lists(st.tuples(specs, macs), max_size=6, unique_by=lambda e: e[0].identity))
def test_any_list_of_networks_round_trips(
    name: str, entries: list[tuple[NetworkSpec, str | None]]
) -> None:
    d = CASES[name].dialect
    requests = [request_for(spec, mac) for spec, mac in entries]
    value = CASES[name].requests(requests)
    if not requests:
        assert value is None
        return
    assert value is not None
    assert d.parse_requests(value=value, namespace=NS) == tuple(comparable(r, d) for r in requests)


# -- names ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=60, deadline=None)
@given(spec=specs)
def test_interface_names_are_short_and_stable(name: str, spec: NetworkSpec) -> None:
    d = CASES[name].dialect
    request = request_for(spec)
    network = CASES[name].network(request)
    assert network["name"] == spec.if_name == NetworkSpec(spec.type, spec.name).if_name
    assert 0 < len(str(network["name"])) <= 15
    pod_side = d.pod_interface(if_name=spec.if_name)
    assert 0 < len(pod_side) <= 15
    assert pod_side == d.pod_interface(if_name=spec.if_name)


def test_pod_side_names_follow_each_sdn() -> None:
    if_name = NetworkSpec("Network", "user-net").if_name
    assert if_name == "veth_nc582920b"
    assert CASES["deckhouse"].dialect.pod_interface(if_name=if_name) == "veth_nc582920b"
    # KubeVirt: "pod" + the first 11 hex digits of sha256 of the network name.
    assert CASES["multus"].dialect.pod_interface(if_name=if_name) == "podb6254163652"
    assert CASES["multus"].dialect.pod_interface(if_name="red") == "podb1f51a511f1"


def test_kubevirt_network_shapes() -> None:
    """Only where nicplug writes the KVVM (deckhouse); in the kubevirt flavour the user
    writes the template and nicplug reads it."""
    assert DECKHOUSE.kubevirt_network(request=USER_NET, namespace=NS) == {
        "name": "veth_nc582920b",
        "pod": {},
    }
    assert not hasattr(CASES["multus"].dialect, "kubevirt_network")
    assert not hasattr(CASES["multus"].dialect, "render_requests")


def test_network_identity_reverses_the_kubevirt_network(case: Case) -> None:
    d = case.dialect
    known = {r.if_name: r.identity for r in (USER_NET, STORAGE)}
    for request in (USER_NET, STORAGE, MAIN):
        network = kvvm_network(case.network(request))
        assert d.network_identity(network=network, namespace=NS, known=known) == request.identity
    stranger = KVVMNetwork(name="veth_n00000000")
    assert d.network_identity(network=stranger, namespace=NS, known=known) is None


def test_multus_tells_network_from_cluster_network_in_one_namespace() -> None:
    d = dialect_for("multus", cluster_nad_namespace=NS)
    requests = (
        request_for(NetworkSpec("Network", "shared")),
        request_for(NetworkSpec("ClusterNetwork", "shared")),
    )
    value = kubevirt_writes(requests, NS, NS)
    assert d.parse_requests(value=value, namespace=NS) == requests
    for request in requests:
        network = kvvm_network(templates_network(request, NS, NS))
        assert d.network_identity(network=network, namespace=NS, known={}) == request.identity
    # without KubeVirt's interface name the NAD could be either: not nicplug's to claim
    assert d.parse_requests(value='[{"name": "shared", "namespace": "ns1"}]', namespace=NS) == ()
    ordinal = '[{"name": "shared", "namespace": "ns1", "interface": "net1"}]'
    assert d.parse_requests(value=ordinal, namespace=NS) == ()


def test_multus_entry_without_namespace_is_in_the_pods_namespace() -> None:
    d = CASES["multus"].dialect
    parsed = d.parse_requests(value='[{"name": "user-net"}]', namespace=NS)
    assert parsed == (comparable(SDNRequest("Network/user-net", "veth_nc582920b"), d),)


# -- statuses ---------------------------------------------------------------------


def test_configured_entries_are_ready(case: Case) -> None:
    value = case.sdn([(USER_NET, "ready"), (STORAGE, "ready")])
    statuses = case.dialect.parse_statuses(value=value, namespace=NS)
    assert {s.identity: s.ready for s in statuses} == {
        "Network/user-net": True,
        "ClusterNetwork/storage": True,
    }
    assert all(s.error is None for s in statuses)
    assert {s.if_name for s in statuses} == {USER_NET.if_name, STORAGE.if_name}


def test_pending_entries_are_not_ready(case: Case) -> None:
    value = case.sdn([(USER_NET, "pending"), (STORAGE, "ready")])
    statuses = {s.identity: s for s in case.dialect.parse_statuses(value=value, namespace=NS)}
    assert statuses["ClusterNetwork/storage"].ready
    pending = statuses.get("Network/user-net")
    assert pending is None or (not pending.ready and pending.error is None)


def test_failed_entries_carry_the_sdns_reason(case: Case) -> None:
    value = case.sdn([(USER_NET, "failed")])
    statuses = {s.identity: s for s in case.dialect.parse_statuses(value=value, namespace=NS)}
    if not case.reports_failures:
        assert statuses == {}
        return
    failed = statuses["Network/user-net"]
    assert not failed.ready
    if case.dialect.name == "deckhouse":  # "not yet", as Deckhouse reads it; the words kept
        assert failed.error is None
        assert failed.message == "Configured=False (VLANConflict: vlan 10 is taken on the node)"
    else:
        assert failed.error == "Configured=False (VLANConflict: vlan 10 is taken on the node)"


def test_the_default_network_is_never_reported(case: Case) -> None:
    statuses = case.dialect.parse_statuses(value=case.sdn([]), namespace=NS)
    assert statuses == ()


def test_deckhouse_reads_readiness_as_its_controller_does() -> None:
    """Listed with no condition other than True is ready, none at all included; any
    other condition is "not yet" (pkg/controller/vm/internal/network.go)."""
    d = CASES["deckhouse"].dialect
    for conditions in ("", ', "conditions": []', ', "conditions": null'):
        value = f'[{{"type": "Network", "name": "user-net", "ifName": "x"{conditions}}}]'
        (status,) = d.parse_statuses(value=value, namespace=NS)
        assert status.ready and status.error is None
    value = '[{"type":"Network","name":"a","conditions":[{"type":"Configured","status":"False"}]}]'
    (status,) = d.parse_statuses(value=value, namespace=NS)
    assert not status.ready and status.error is None and status.message == "Configured=False"


def test_multus_needs_the_requested_interface() -> None:
    d = CASES["multus"].dialect
    without_interface = '[{"name": "ns1/user-net"}]'
    assert d.parse_statuses(value=without_interface, namespace=NS) == ()
    someone_elses = orjson.dumps(
        [{"name": "ns1/user-net", "interface": d.pod_interface(if_name="dyniface1")}]
    ).decode()
    assert d.parse_statuses(value=someone_elses, namespace=NS) == ()
    ordinal = '[{"name": "ns1/user-net", "interface": "net1"}]'
    (status,) = d.parse_statuses(value=ordinal, namespace=NS)
    assert (status.identity, status.ready) == ("Network/user-net", True)
    elsewhere = orjson.dumps(
        [{"name": "other/user-net", "interface": d.pod_interface(if_name=USER_NET.if_name)}]
    ).decode()
    assert d.parse_statuses(value=elsewhere, namespace=NS) == ()


# -- malformed input --------------------------------------------------------------

NOT_ARRAYS_OF_OBJECTS = [
    "   ",
    "not json",
    "{",
    "{}",
    "null",
    "1",
    '"[]"',
    "true",
    "[1]",
    "[[]]",
    "[null]",
    '[{"name": "a"}, "b"]',
    "[" * 3000 + "]" * 3000,
    "[18446744073709551616]",
    "[{}] trailing",
    "\ud800",
    "user-net,ns1/storage@eth1",
]


def test_an_empty_value_is_nothing_only_where_the_sdn_writes_it() -> None:
    """KubeVirt writes `""` once the last secondary network is unplugged; Deckhouse's
    SDN never does, so there it stays malformed."""
    multus = CASES["multus"].dialect
    assert multus.parse_requests(value="", namespace=NS) == ()
    assert multus.parse_statuses(value="", namespace=NS) == ()
    deckhouse = CASES["deckhouse"].dialect
    with pytest.raises(MalformedAnnotation):
        deckhouse.parse_requests(value="", namespace=NS)


@pytest.mark.parametrize("value", NOT_ARRAYS_OF_OBJECTS)
def test_values_that_are_not_arrays_of_objects_are_malformed(case: Case, value: str) -> None:
    d = case.dialect
    with pytest.raises(MalformedAnnotation) as raised:
        d.parse_requests(value=value, namespace=NS)
    assert raised.value.key == d.request_annotation
    with pytest.raises(MalformedAnnotation) as raised:
        d.parse_statuses(value=value, namespace=NS)
    assert raised.value.key == d.status_annotation


BAD_ENTRIES = {
    "deckhouse": [
        {},
        {"type": "Main", "name": "", "ifName": "default"},
        {"type": "Network", "name": "user-net"},
        {"type": "Network", "name": "user-net", "ifName": "veth_n0123456789abcdef"},
        {"type": "Network", "name": "user-net", "ifName": ""},
        {"type": "Network", "name": "user-net", "ifName": 7},
        {"type": "Netwerk", "name": "user-net", "ifName": "veth_n1"},
        {"type": "Network", "name": "User_Net", "ifName": "veth_n1"},
        {"type": "Network", "name": "a/b", "ifName": "veth_n1"},
        {"type": "Network", "ifName": "veth_n1"},
        {"type": "Network", "name": "user-net", "ifName": "veth_n1", "id": "2"},
        {"type": "Network", "name": "user-net", "ifName": "veth_n1", "id": True},
        {"type": "Network", "name": "user-net", "ifName": "veth_n1", "id": -1},
        {"type": "Network", "name": "user-net", "ifName": "veth_n1", "mac": 5},
        {"type": ["Network"], "name": "user-net", "ifName": "veth_n1"},
    ],
    "multus": [
        {},
        {"namespace": "ns1"},
        {"name": "user-net", "namespace": "ns1", "interface": "pod0123456789abcdef"},
        {"name": "ns1/user-net"},
        {"name": "User-Net"},
        {"name": "user-net", "namespace": 1},
        {"name": "user-net", "mac": ""},
        {"name": ["user-net"]},
    ],
}


@pytest.mark.parametrize(
    ("name", "entry"),
    [(name, entry) for name, entries in BAD_ENTRIES.items() for entry in entries],
)
def test_request_entries_of_the_wrong_shape_are_malformed(
    name: str, entry: dict[str, object]
) -> None:
    d = CASES[name].dialect
    with pytest.raises(MalformedAnnotation, match="entry 0"):
        d.parse_requests(value=orjson.dumps([entry]).decode(), namespace=NS)


def test_a_network_listed_twice_is_malformed(case: Case) -> None:
    d = case.dialect
    value = case.requests([USER_NET])
    assert value is not None
    twice = orjson.dumps(orjson.loads(value) * 2).decode()
    with pytest.raises(MalformedAnnotation, match="listed twice"):
        d.parse_requests(value=twice, namespace=NS)
    status = case.sdn([(USER_NET, "ready")])
    entries = orjson.loads(status)
    with pytest.raises(MalformedAnnotation, match="listed twice"):
        d.parse_statuses(value=orjson.dumps(entries + entries[1:]).decode(), namespace=NS)


BAD_STATUS_ENTRIES = {
    "deckhouse": [
        {"name": "user-net"},
        {"type": "Network", "name": "user-net", "conditions": {"type": "Configured"}},
        {"type": "Network", "name": "user-net", "conditions": ["Configured"]},
        {"type": "Network", "name": "user-net", "conditions": [{"type": "Configured"}]},
        {"type": "Network", "name": "user-net", "conditions": [{"type": 1, "status": "True"}]},
        {"type": "Network", "name": "user-net",
         "conditions": [{"type": "Configured", "status": "False", "reason": 3}]},
    ],
    "multus": [
        {"interface": "eth0"},
        {"name": 5, "interface": "eth0"},
        {"name": "ns1/user-net", "interface": "eth0", "default": "yes"},
        {"name": "ns1/user-net", "interface": ""},
    ],
}


@pytest.mark.parametrize(
    ("name", "entry"),
    [(name, entry) for name, entries in BAD_STATUS_ENTRIES.items() for entry in entries],
)
def test_status_entries_of_the_wrong_shape_are_malformed(
    name: str, entry: dict[str, object]
) -> None:
    d = CASES[name].dialect
    with pytest.raises(MalformedAnnotation, match="entry 0"):
        d.parse_statuses(value=orjson.dumps([entry]).decode(), namespace=NS)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(
        st.sampled_from(
            ["type", "name", "namespace", "ifName", "interface", "id", "mac", "default",
             "conditions", "status", "reason", "message", "uid"]
        ),
        inner,
        max_size=6,
    ),
    max_leaves=20,
)


def _only_typed_errors(dialect: Dialect, value: str) -> None:
    for parse in (dialect.parse_requests, dialect.parse_statuses):
        with contextlib.suppress(MalformedAnnotation):
            parse(value=value, namespace=NS)


@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=150, deadline=None)
@given(value=st.text())
def test_arbitrary_strings_raise_nothing_but_the_typed_error(name: str, value: str) -> None:
    _only_typed_errors(CASES[name].dialect, value)


@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=150, deadline=None)
@given(value=json_values)
def test_arbitrary_json_raises_nothing_but_the_typed_error(name: str, value: object) -> None:
    # The standard library writes what orjson would refuse (integers beyond 64 bits).
    _only_typed_errors(CASES[name].dialect, json.dumps(value))
    _only_typed_errors(CASES[name].dialect, json.dumps([value]))
