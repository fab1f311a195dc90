"""What the simulated cluster holds, read straight from its store, in the simulator's own
terms (its `networking` re-derives names independently of the controller's code).

`Trail` records every change of the given kinds in commit order (the store's global
resourceVersion), so a test can check orderings the final state cannot show: the guest
detached before the SDN entry left the pod. Read-only: nothing here writes the store.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from nicplug.simulator import networking as nw
from nicplug.simulator import objects as ob
from nicplug.simulator.actors.deckhouse_macs import mac_pool
from nicplug.simulator.apis import served_api
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.errors import NotFound
from nicplug.simulator.fixtures import fixture_mac
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.resources import ALL, KVVMS, PODS, VMIS, VMMACS, VMS, Resource
from nicplug.simulator.store import Store
from nicplug.simulator.watching import WatchEvent

Json = dict[str, Any]
NetworkRef = tuple[str, str]  # ("Network", "user-net")


def split(vm: str) -> tuple[str, str]:
    namespace, _, name = vm.partition("/")
    return namespace, name


def if_name(ref: NetworkRef) -> str:
    """The interface name where it follows from type and name (multus)."""
    return nw.if_name(*ref)


_SEEN: dict[tuple[int, str, NetworkRef], str] = {}


def iface(cluster: SimulatedCluster, vm: str, ref: NetworkRef) -> str:
    """The interface name of `ref` on `vm`. Deckhouse names it after the MAC the
    simulated Deckhouse gave the network (its status, else its pool of VMMACs); once
    known it is remembered, so a network unplugged since is still found by name."""
    if cluster.knobs.dialect != "deckhouse" or ref[0] == "Main":
        return nw.if_name(*ref)
    memo = (id(cluster.store), vm, ref)
    body = cluster.store.get(VMS, *split(vm))
    mac = next((str(n["macAddress"]) for n in ob.dig(body, "status", "networks") or []
                if n.get("name") == ref[1] and n.get("macAddress")), None)
    if mac is None:
        uid = body["metadata"]["uid"]
        mac = mac_pool(body, _vmmacs_of(cluster, vm, uid)).get(ref)
    fixed = list(cluster.fixtures.vm_networks)
    if mac is None and memo not in _SEEN and ref in fixed:  # the VM was made with it
        mac = fixture_mac(*split(vm), fixed.index(ref) + 2)
    if mac is not None:
        _SEEN[memo] = nw.mac_if_name(ref[0], mac)
    assert memo in _SEEN, f"{vm}: {ref} has no MAC address and never had one"
    return _SEEN[memo]


def _vmmacs_of(cluster: SimulatedCluster, vm: str, uid: str) -> list[Json]:
    vmmacs, _ = cluster.store.list(VMMACS, split(vm)[0])
    return [m for m in vmmacs if (m["metadata"].get("labels") or {}).get(ob.VM_UID_LABEL) == uid]


def ifaces_it_could_have(cluster: SimulatedCluster, vm: str, ref: NetworkRef) -> set[str]:
    """Every name `ref` could have on `vm`: its own where known, else (deckhouse, a
    network no longer desired) the name of every address of the VM's VMMACs that no
    desired network holds."""
    if cluster.knobs.dialect != "deckhouse" or ref[0] == "Main" or (
            id(cluster.store), vm, ref) in _SEEN:
        return {iface(cluster, vm, ref)}
    body = cluster.store.get(VMS, *split(vm))
    mine = _vmmacs_of(cluster, vm, body["metadata"]["uid"])
    held = set(mac_pool(body, mine).values())
    return {nw.mac_if_name(ref[0], str(a)) for m in mine
            if (a := ob.dig(m, "status", "address")) and a not in held}


def request_key(knobs: Knobs, ref: NetworkRef) -> str:
    """How the dialect's request entry is told apart: deckhouse entries by type and name
    (their ifName follows from the MAC), multus ones by KubeVirt's pod interface."""
    if knobs.dialect == "deckhouse":
        return f"{ref[0]}/{ref[1]}"
    return nw.multus_pod_interface(nw.if_name(*ref))


def request_keys(knobs: Knobs, raw: str | None) -> list[str]:
    entries = nw.parse_list(raw)
    assert entries is not None, f"unreadable request annotation {raw!r}"
    if knobs.dialect == "deckhouse":
        return [f"{e.get('type')}/{e.get('name')}" for e in entries]
    return [str(e.get("interface")) for e in entries]


def trail_iface(trail: Trail, ref: NetworkRef) -> str:
    """The interface name of `ref` as the pods' deckhouse request entries in the trail
    name it (after the MAC); where no pod ever held one (multus), from type and name."""
    for change in trail.changes:
        if change.resource != PODS.plural:
            continue
        raw = nw.annotations_of(change.obj).get(nw.DECKHOUSE_REQUEST)
        for entry in nw.parse_list(raw) or []:
            if (entry.get("type"), entry.get("name")) == ref:
                return str(entry.get("ifName"))
    return nw.if_name(*ref)


def active_pods(store: Store, vm: str) -> list[Json]:
    namespace, name = split(vm)
    vmi = store.get(VMIS, namespace, name)
    active = ob.dig(vmi, "status", "activePods") or {}
    items, _ = store.list(PODS, namespace, label_selector=f"{nw.VM_NAME_LABEL}={name}")
    return [p for p in items if p["metadata"]["uid"] in active]


def vm_condition(store: Store, vm: str, type_: str) -> Json | None:
    """A condition on the VM the user edits: Deckhouse's, or (upstream KubeVirt, where
    there is none) the KubeVirt VM."""
    try:
        return ob.condition(store.get(VMS, *split(vm)), type_)
    except NotFound:
        return ob.condition(store.get(KVVMS, *split(vm)), type_)


def restart_pending(cluster: SimulatedCluster, vm: str) -> bool:
    """The VM says a restart is needed, as the virtualization controller would."""
    condition = vm_condition(cluster.store, vm, "NetworkHotplugRestartRequired")
    return condition is not None and (condition["status"], condition["reason"]) == (
        "True", "ChangesPendingRestart"
    )


def attached(vmi: Json | None, name: str) -> bool:
    """VMI status lists the interface with `domain` in its infoSource."""
    for entry in ob.dig(vmi, "status", "interfaces") or []:
        if entry.get("name") == name:
            sources = [s.strip() for s in str(entry.get("infoSource") or "").split(",")]
            return "domain" in sources
    return False


def assert_requests(
    cluster: SimulatedCluster,
    vm: str,
    networks: Sequence[NetworkRef],
    *,
    template: Sequence[NetworkRef] | None = None,
) -> None:
    """Every active launcher pod requests exactly `networks`, each once; so does the
    KVVM template (`template`, when what the KVVM carries differs from the pods) where
    nicplug writes it (deckhouse; under multus KubeVirt keeps it empty)."""
    knobs, store = cluster.knobs, cluster.store
    annotation = ob.request_annotation(knobs.dialect)
    wanted = sorted(request_key(knobs, ref) for ref in networks)
    pods = active_pods(store, vm)
    assert pods, f"{vm} has no active launcher pod"
    for pod in pods:
        keys = request_keys(knobs, nw.annotations_of(pod).get(annotation))
        assert len(keys) == len(set(keys)), f"duplicate entries on {pod['metadata']['name']}"
        assert sorted(keys) == wanted, f"pod {pod['metadata']['name']} requests {keys}"
    kvvm = store.get(KVVMS, *split(vm))
    annotations = ob.dig(kvvm, "spec", "template", "metadata", "annotations") or {}
    keys = request_keys(knobs, annotations.get(annotation))
    wanted = sorted(request_key(knobs, ref) for ref in (networks if template is None
                                                           else template))
    if knobs.dialect == "multus":
        wanted = []  # KubeVirt generates a new pod's networks from the VMI, not the template
    assert len(keys) == len(set(keys)), "duplicate entries in the KVVM template"
    assert sorted(keys) == wanted, f"the KVVM template requests {keys}"


def assert_interface(cluster: SimulatedCluster, vm: str, ref: NetworkRef, *, present: bool) -> None:
    """The KVVM template, the VMI spec and the guest carry the interface (or none of
    them does, not even as `absent`)."""
    if not present:
        for name in ifaces_it_could_have(cluster, vm, ref):
            _assert_interface(cluster, vm, ref, name, present=False)
        return
    _assert_interface(cluster, vm, ref, iface(cluster, vm, ref), present=True)


def _assert_interface(cluster: SimulatedCluster, vm: str, ref: NetworkRef, name: str, *,
                      present: bool) -> None:
    store = cluster.store
    kvvm = store.get(KVVMS, *split(vm))
    vmi = store.get(VMIS, *split(vm))
    tspec = ob.dig(kvvm, "spec", "template", "spec")
    places = {
        "KVVM interfaces": [i for i in ob.interfaces_of(tspec) if i.get("name") == name],
        "KVVM networks": [n for n in ob.networks_of(tspec) if n.get("name") == name],
        "VMI interfaces": [i for i in ob.interfaces_of(vmi.get("spec")) if i.get("name") == name],
    }
    for place, found in places.items():
        if present:
            assert len(found) == 1, f"{place} of {vm} hold {found} for {ref}"
            assert found[0].get("state") != "absent", f"{place}: {ref} is absent"
        else:
            assert found == [], f"{place} of {vm} still hold {found} for {ref}"
    assert attached(vmi, name) is present, (
        f"VMI status of {vm}: {ref} attached={not present}: {ob.dig(vmi, 'status', 'interfaces')}"
    )


def served(cluster: SimulatedCluster, group: str, plural: str) -> tuple[str, str]:
    """(group, plural) of a kind as the cluster serves it: KubeVirt's kinds are renamed
    on a Deckhouse cluster."""
    res = next(r for r in ALL if (r.group, r.plural) == (group, plural))
    face = served_api(cluster.knobs.api).served(res)
    return face.group, face.plural


def writes(cluster: SimulatedCluster, what: tuple[str, str, str]) -> int:
    """How many (verb, API group, plural) requests the API server answered; the kind
    named by its upstream names, counted under the names the cluster serves it by."""
    verb, group, plural = what
    wanted = (verb, *served(cluster, group, plural))
    return sum(1 for r in cluster.requests if (r.verb, r.group, r.resource) == wanted)


def assert_healthy(cluster: SimulatedCluster) -> None:
    assert cluster.link_not_found == [], f"virt-handler crashed: {cluster.link_not_found}"
    assert cluster.actor_errors == [], f"simulated actors hit errors: {cluster.actor_errors}"
    crashes = [e for e in cluster.events() if _says_link_not_found(e)]
    assert crashes == [], f"'Link not found' events: {crashes}"


def _says_link_not_found(event: Json) -> bool:
    return "Link not found" in str(event.get("message") or "")


# --------------------------------------------------------------------------- the trail


@dataclass(frozen=True, slots=True)
class Change:
    version: int  # the store's global resourceVersion of the write
    resource: str  # plural
    type: str
    obj: Json


class Trail:
    """Changes of some kinds, from now on, in the order the store committed them."""

    def __init__(self, store: Store, resources: Iterable[Resource]) -> None:
        self._seen: list[Change] = []
        self._tasks = []
        for res in resources:
            live = store.subscribe(res)  # registered now: nothing after the listing is missed
            items, _ = store.list(res)
            self._seen += [
                Change(int(o["metadata"]["resourceVersion"]), res.plural, "ADDED", o)
                for o in items
            ]
            self._tasks.append(
                asyncio.create_task(self._follow(live, res), name=f"trail {res.plural}")
            )

    async def _follow(self, live: AsyncIterator[WatchEvent], res: Resource) -> None:
        async for event in live:
            version = int(event.object["metadata"]["resourceVersion"])
            self._seen.append(Change(version, res.plural, event.type, event.object))

    @property
    def changes(self) -> list[Change]:
        return sorted(self._seen, key=lambda c: c.version)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


def link_order_violations(trail: Trail, knobs: Knobs, vm: str, ref: NetworkRef) -> list[str]:
    """Moments when the guest had the interface attached while an active pod of its VMI
    no longer (or not yet) requested its SDN entry: the SDN link would be pulled from
    under the guest (or never was there)."""
    namespace, name = split(vm)
    key, iface = request_key(knobs, ref), trail_iface(trail, ref)
    annotation = ob.request_annotation(knobs.dialect)
    vmi: Json | None = None
    pods: dict[str, Json] = {}
    violations = []
    for change in trail.changes:
        meta = change.obj["metadata"]
        if meta.get("namespace") != namespace:
            continue
        if change.resource == VMIS.plural and meta["name"] == name:
            vmi = None if change.type == "DELETED" else change.obj
        elif change.resource == PODS.plural and \
                (meta.get("labels") or {}).get(nw.VM_NAME_LABEL) == name:
            if change.type == "DELETED":
                pods.pop(meta["uid"], None)
            else:
                pods[meta["uid"]] = change.obj
        else:
            continue
        if vmi is None or not attached(vmi, iface):
            continue
        for uid in ob.dig(vmi, "status", "activePods") or {}:
            pod = pods.get(uid)
            if pod is not None and key not in request_keys(
                knobs, nw.annotations_of(pod).get(annotation)
            ):
                violations.append(
                    f"rv {change.version}: {iface} attached while pod "
                    f"{pod['metadata']['name']} does not request it"
                )
    return violations


def attachment_spans(trail: Trail, vm: str, ref: NetworkRef) -> list[bool]:
    """The guest's attachment of the interface over time, collapsed to its changes
    (e.g. [False, True, False]: attached once, then detached)."""
    namespace, name = split(vm)
    iface = trail_iface(trail, ref)
    spans: list[bool] = []
    for change in trail.changes:
        meta = change.obj["metadata"]
        if change.resource != VMIS.plural or (meta.get("namespace"), meta["name"]) != (
            namespace, name
        ):
            continue
        now = change.type != "DELETED" and attached(change.obj, iface)
        if not spans or spans[-1] != now:
            spans.append(now)
    return spans
