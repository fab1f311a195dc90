"""The simulated KubeVirt owns the launcher pod's networks annotation, as KubeVirt does.

The generator is held against the values KubeVirt's own tests expect (copied into
`tests/fixtures/kubevirt_annotations.json` with repository, path and commit); the
running actors against the order KubeVirt, multus and virt-handler act in.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from nicplug.simulator import networking as nw
from nicplug.simulator import objects as ob
from nicplug.simulator import pod_networks
from nicplug.simulator.clock import VirtualSimClock
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Delays, Knobs
from nicplug.simulator.resources import KVVMS, PODS, VMIS
from tests.simulator import driving as d

NS, VM = "default", "vm-00000"
DELAYS = Delays(sdn_configure=0.5, attach=0.1, migration=2.0, restart=1.0)
FIXTURES = Path(__file__).parent.parent / "fixtures" / "kubevirt_annotations.json"
UPSTREAM: dict[str, Any] = json.loads(FIXTURES.read_text())


def upstream(name: str) -> str:
    (case,) = [c for c in UPSTREAM["networks"] if c["name"] == name]
    return str(case["value"])


def vmi_spec(*interfaces: dict[str, Any], networks: list[dict[str, Any]]) -> dict[str, Any]:
    return {"domain": {"devices": {"interfaces": list(interfaces)}}, "networks": networks}


def multus(name: str, nad: str) -> dict[str, Any]:
    return {"name": name, "multus": {"networkName": nad}}


def test_the_generator_writes_what_kubevirts_tests_expect() -> None:
    spec = vmi_spec(
        {"name": "default", "bridge": {}}, {"name": "test1", "bridge": {}},
        {"name": "other-test1", "bridge": {}},
        networks=[multus("default", "default"), multus("test1", "test1"),
                  multus("other-test1", "other-namespace/test1")],
    )
    assert pod_networks.generate(spec, "default") == upstream(
        "three multus networks, the first one named default")
    two = vmi_spec(
        {"name": "default", "bridge": {}},
        {"name": "test1", "sriov": {}, "macAddress": "de:ad:00:00:be:af"},
        networks=[multus("default", "default"), multus("test1", "test1")],
    )
    assert pod_networks.generate(two, "default") == upstream(
        "an interface with a custom MAC address")
    red = vmi_spec({"name": "default", "bridge": {}}, {"name": "red", "bridge": {}},
                   networks=[{"name": "default", "pod": {}}, multus("red", "some-net")])
    assert pod_networks.generate(red, "default") == upstream("one network, hashed name")
    red_absent = vmi_spec({"name": "default", "bridge": {}},
                          {"name": "red", "bridge": {}, "state": "absent"},
                          networks=[{"name": "default", "pod": {}}, multus("red", "some-net")])
    assert pod_networks.generate(red_absent, "default") == upstream(
        "the last secondary interface hot-unplugged")
    assert pod_networks.generate(red, "default", ordinal=True) == upstream(
        "one network, ordinal name")


def test_binding_plugins_add_their_own_entry() -> None:
    spec = vmi_spec({"name": "default", "binding": {"name": "my-binding"}},
                    networks=[{"name": "default", "pod": {}}])
    value = pod_networks.generate(spec, "default", bindings={"my-binding": "my-binding"})
    assert json.loads(value) == json.loads(upstream("a binding plugin's entry"))


async def test_virt_controller_rewrites_the_running_pod_and_writes_empty_at_the_end() -> None:
    knobs = Knobs(dialect="multus", dynamic_networks_controller=True, delays=DELAYS)
    cluster = SimulatedCluster(knobs, clock=VirtualSimClock(), serve=False,
                               fixtures=Fixtures(vms=1))
    await cluster.start()
    store = cluster.store
    assert nw.MULTUS_REQUEST not in nw.annotations_of(d.active_pod(store, NS, VM))

    d.plug_kvvm(store, knobs, NS, VM, "Network", "user-net")
    await cluster.advance(0.01)
    if_name = nw.if_name("Network", "user-net")
    expected = json.dumps([{"name": "user-net", "namespace": NS,
                            "interface": nw.multus_pod_interface(if_name)}],
                          separators=(",", ":"))
    assert nw.annotations_of(d.active_pod(store, NS, VM))[nw.MULTUS_REQUEST] == expected
    # multus has not reported it yet: neither KubeVirt nor virt-handler acts
    assert d.vmi_interface(store, NS, VM, "Network", "user-net") is None
    await cluster.advance(0.5)
    entry = d.vmi_interface(store, NS, VM, "Network", "user-net")
    assert entry is not None and "domain" in entry["infoSource"]
    kvvm = store.get(KVVMS, NS, VM)
    assert nw.MULTUS_REQUEST not in (ob.dig(kvvm, "spec", "template", "metadata",
                                            "annotations") or {})

    d.mark_absent(store, NS, VM, "Network", "user-net")
    await cluster.advance(0.01)
    assert nw.annotations_of(d.active_pod(store, NS, VM))[nw.MULTUS_REQUEST] == ""
    await cluster.advance(1.0)
    assert d.vmi_interface(store, NS, VM, "Network", "user-net") is None
    assert cluster.actor_errors == []
    await cluster.stop()


async def test_virt_handler_attaches_only_what_kubevirt_reported_from_multus() -> None:
    """The pre-attach entry: `multus-status` alone, then `domain` once attached."""
    knobs = Knobs(dialect="multus", dynamic_networks_controller=True,
                  delays=Delays(sdn_configure=0.5, attach=1.0))
    cluster = SimulatedCluster(knobs, clock=VirtualSimClock(), serve=False,
                               fixtures=Fixtures(vms=1))
    await cluster.start()
    store = cluster.store
    d.plug_kvvm(store, knobs, NS, VM, "Network", "user-net")
    await cluster.advance(0.6)
    entry = d.vmi_interface(store, NS, VM, "Network", "user-net")
    assert entry is not None and entry["infoSource"] == "multus-status"
    await cluster.advance(1.0)
    assert d.attached(store, NS, VM, "Network", "user-net")
    await cluster.stop()


async def test_the_dynamic_networks_controller_keeps_no_order() -> None:
    knobs = Knobs(dialect="multus", dynamic_networks_controller=True, delays=DELAYS, seed=3)
    networks = tuple(("Network", f"net-{i}") for i in range(6))
    cluster = SimulatedCluster(knobs, clock=VirtualSimClock(), serve=False,
                               fixtures=Fixtures(vms=1, networks=tuple(n for _, n in networks)))
    await cluster.start()
    store = cluster.store
    for type_, name in networks:
        d.plug_kvvm(store, knobs, NS, VM, type_, name)
    await cluster.advance(1.0)
    pod = d.active_pod(store, NS, VM)
    requested = [e["interface"] for e in nw.parse_list(
        nw.annotations_of(pod)[nw.MULTUS_REQUEST]) or []]
    reported = [e["interface"] for e in nw.parse_list(
        nw.annotations_of(pod)[nw.MULTUS_STATUS]) or []][1:]
    assert sorted(reported) == sorted(requested) and reported != requested
    assert all(d.attached(store, NS, VM, t, n) for t, n in networks)
    assert store.get(VMIS, NS, VM)["status"]["phase"] == "Running"
    assert len(store.list(PODS, NS)[0]) == 1
    await cluster.stop()


async def test_live_migratable_follows_kubevirts_rule_for_the_pod_network() -> None:
    """A bridge on the pod network is not live-migratable upstream; masquerade is, and so
    is a bridge the VMI allows by annotation (`pkg/network/vmispec/interface.go`)."""
    assert pod_networks.network_migratable({"spec": vmi_spec(
        {"name": "default", "masquerade": {}}, networks=[{"name": "default", "pod": {}}])}) is None
    bridged = {"spec": vmi_spec({"name": "default", "bridge": {}},
                                networks=[{"name": "default", "pod": {}}])}
    assert pod_networks.network_migratable(bridged) == pod_networks.NOT_MIGRATABLE
    allowed = bridged | {"metadata": {"annotations": {
        pod_networks.ALLOW_POD_BRIDGE_MIGRATION: ""}}}
    assert pod_networks.network_migratable(allowed) is None

    for binding, expected in (("masquerade", ("True", "")),
                              ("bridge", ("False", "InterfaceNotLiveMigratable"))):
        knobs = Knobs(dialect="multus", delays=DELAYS)
        cluster = SimulatedCluster(knobs, clock=VirtualSimClock(), serve=False,
                                   fixtures=Fixtures(vms=1, pod_network_binding=binding))
        await cluster.start()
        assert d.condition(cluster.store, NS, VM, "LiveMigratable") == expected
        cluster.store.delete(VMIS, NS, VM)  # a restart: the new VMI is judged the same way
        await cluster.advance(2.0)
        assert d.condition(cluster.store, NS, VM, "LiveMigratable") == expected
        await cluster.stop()


async def test_virt_controller_rewrites_the_pod_of_a_vmi_not_yet_booted() -> None:
    """The VMI controller patches any ready launcher pod, whatever the VMI's phase
    (pkg/virt-controller/watch/vmi/lifecycle.go), and the VM controller syncs the
    template's NICs into a `Scheduled` VMI: a NIC swapped the instant the restarted VMI
    is scheduled reaches its pod, and the VMI boots with it (it waited for ever)."""
    knobs = Knobs(dialect="multus", dynamic_networks_controller=True, delays=DELAYS)
    cluster = SimulatedCluster(knobs, clock=VirtualSimClock(), serve=False,
                               fixtures=Fixtures(vms=1, networks=("user-net", "second-net")))
    await cluster.start()
    store = cluster.store
    d.plug_kvvm(store, knobs, NS, VM, "Network", "second-net")
    await cluster.advance(1.0)
    assert d.attached(store, NS, VM, "Network", "second-net")
    before = store.get(VMIS, NS, VM)["metadata"]["uid"]
    swapped: list[str] = []

    async def the_user_swaps_the_nic_once_the_new_vmi_is_scheduled() -> None:
        async for event in store.subscribe(VMIS):
            vmi = event.object
            if vmi["metadata"]["uid"] != before and ob.dig(vmi, "status", "phase") == "Scheduled":
                swapped.append(vmi["metadata"]["uid"])
                d.mark_absent(store, NS, VM, "Network", "second-net")
                d.plug_kvvm(store, knobs, NS, VM, "Network", "user-net")
                return

    user = asyncio.ensure_future(the_user_swaps_the_nic_once_the_new_vmi_is_scheduled())
    d.restart(store, knobs, NS, VM)
    await cluster.advance(DELAYS.restart + 2.0)
    await user
    vmi = store.get(VMIS, NS, VM)
    assert swapped == [vmi["metadata"]["uid"]]
    assert vmi["status"]["phase"] == "Running"
    assert d.attached(store, NS, VM, "Network", "user-net")
    assert d.vmi_interface(store, NS, VM, "Network", "second-net") is None
    requested = nw.parse_list(nw.annotations_of(d.active_pod(store, NS, VM))[nw.MULTUS_REQUEST])
    assert [e["name"] for e in requested or []] == ["user-net"]
    assert cluster.actor_errors == []
    await cluster.stop()
