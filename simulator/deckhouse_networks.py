"""How Deckhouse's virtualization controller turns a VM's networks into what it writes.

Re-derived from deckhouse/virtualization (`images/virtualization-artifact/pkg/`), so the
simulated platform writes the bytes and makes the judgements the real one does:

* `interface_specs` — `common/network/spec.go` `CreateNetworkSpec` over the MAC pool of
  `mac_pool.go` (a network named in `status.networks` keeps its MAC; the others take,
  in order, the allocated VirtualMachineMACAddresses nobody holds; a network without a
  MAC is left out), after `filterReadyNetworks` (a Network/ClusterNetwork that does not
  exist or is not `Ready` is left out);
* `enrich_with_ipam` — `common/network/types.go` `EnrichWithIPAM`: on a network whose
  object names an IPAM pool (`spec.ipam.ipAddressPoolRef.name`), `ipAssignmentMode:
  DHCP` and `ipAddressNames: [<IPAddress>]` — the VM's own automatic one, or the
  `ipAddressName` it asks for — and the network left out while that IPAddress is missing,
  not `Allocated`, bound to another network or claimed by another VM; on a network
  without a pool an `ipAddressName` leaves it out;
* `to_string` — `InterfaceSpecList.ToString`: Go's `json.Marshal` of the non-Main
  entries, fields `id,type,name,ifName,uid,gid[,ipAssignmentMode][,ipAddressNames]`,
  `[]` for none;
* `network_error` — `controller/vm/internal/network.go` `extractNetworkStatusFromPods`:
  the launcher pods' `networks-status` read as Deckhouse reads it ("" when ready);
* `classify` — `controller/vmchange/comparator_pod_placement.go` `compareNetworks`: an
  id filled in where there was none needs nothing, a change that keeps Main (present or
  absent) is applied at once (an id-only change and a reorder included), adding or
  removing Main needs a restart.

Pure functions over plain JSON; the store is read by the caller.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from nicplug.simulator import networking as nw

Json = dict[str, Any]
Action = Literal["none", "apply", "restart"]

MAIN_ID = 1  # `ReservedMainID`
DECKHOUSE_UID = 64535
DHCP = "DHCP"
VM_UID_LABEL = "virtualization.deckhouse.io/virtual-machine-uid"
LAST_APPLIED = "virtualization.deckhouse.io/vm.last-applied-spec"  # on the KVVM
TAP_PROVISION = "network.deckhouse.io/tap-provision-by-dvp-supported"  # on its template


@dataclass(frozen=True, slots=True)
class InterfaceSpec:
    """One entry of Deckhouse's `InterfaceSpecList` (MAC kept out of the JSON)."""

    id: int
    type: str
    name: str
    if_name: str
    mac: str = ""
    ip_assignment_mode: str = ""
    ip_address_names: tuple[str, ...] = ()

    def wire(self) -> Json:
        entry: Json = {"id": self.id, "type": self.type, "name": self.name,
                       "ifName": self.if_name, "uid": DECKHOUSE_UID, "gid": DECKHOUSE_UID}
        if self.ip_assignment_mode:
            entry["ipAssignmentMode"] = self.ip_assignment_mode
        if self.ip_address_names:
            entry["ipAddressNames"] = list(self.ip_address_names)
        return entry


def spec_networks(vm: Json) -> list[Json]:
    networks = (vm.get("spec") or {}).get("networks")
    return list(networks) if isinstance(networks, list) else []


def mac_pool(vm: Json, vmmacs: list[Json]) -> Callable[[str], str]:
    """`NewMacAddressPool(vm, vmmacs).Assign`: reserved by name from `status.networks`
    only, then the VMMACs' addresses (in the order listed) nobody holds."""
    reserved: dict[str, str] = {}
    for n in (vm.get("status") or {}).get("networks") or []:
        if n.get("type") != "Main" and n.get("macAddress"):
            reserved[str(n.get("name") or "")] = str(n["macAddress"])
    taken = set(reserved.values())
    available = [a for m in vmmacs
                 if (a := str((m.get("status") or {}).get("address") or "")) and a not in taken]

    def assign(name: str) -> str:
        if name in reserved:
            return reserved[name]
        return available.pop(0) if available else ""

    return assign


def interface_specs(vm: Json, vmmacs: list[Json], ready: Callable[[Json], bool]
                    ) -> list[InterfaceSpec]:
    """`CreateNetworkSpec(filterReadyNetworks(vm), vmmacs)`; `ready(network)` says
    whether the network's object exists and is `Ready`."""
    networks = spec_networks(vm)
    if not networks:
        return [InterfaceSpec(MAIN_ID, "Main", "", nw.MAIN_IF_NAME)]
    kept = [n for n in networks if n.get("type") == "Main" or ready(n)]
    filtered = {**vm, "spec": {**(vm.get("spec") or {}), "networks": kept}}
    assign = mac_pool(filtered, vmmacs)
    specs: list[InterfaceSpec] = []
    for n in kept:
        type_, name, id_ = str(n.get("type")), str(n.get("name") or ""), int(n.get("id") or 0)
        if type_ == "Main":
            specs.append(InterfaceSpec(id_, "Main", name, nw.MAIN_IF_NAME))
            continue
        mac = assign(name)
        if mac:
            address = str(n.get("ipAddressName") or "")
            specs.append(InterfaceSpec(id_, type_, name, nw.mac_if_name(type_, mac), mac,
                                       ip_address_names=(address,) if address else ()))
    return specs


@dataclass(frozen=True, slots=True)
class IPAMFacts:
    """What `EnrichWithIPAM` reads from the cluster for one VM."""

    pools: Mapping[tuple[str, str], bool]  # (type, name) → its network names a pool
    addresses: Mapping[str, Json]  # the namespace's IPAddresses by name
    vm_uid: str
    claimed_by_others: Mapping[tuple[str, str, str], str]  # (type, name, address) → VM


def enrich_with_ipam(specs: list[InterfaceSpec], facts: IPAMFacts) -> list[InterfaceSpec]:
    result: list[InterfaceSpec] = []
    for spec in specs:
        if spec.type == "Main":
            result.append(spec)
            continue
        if not facts.pools.get((spec.type, spec.name), False):
            if spec.ip_address_names:
                continue  # an address asked for on a network without a pool
            result.append(spec)
            continue
        if spec.ip_address_names:
            name = spec.ip_address_names[0]
            address = facts.addresses.get(name)
            if address is None or _network_ref(address) != (spec.type, spec.name):
                continue
            if not allocated(address):
                continue
            if (spec.type, spec.name, name) in facts.claimed_by_others:
                continue
        else:
            found = auto_address(facts.addresses.values(), facts.vm_uid, spec.type, spec.name)
            if found is None or not allocated(found):
                continue
            name = str(found["metadata"]["name"])
        result.append(InterfaceSpec(spec.id, spec.type, spec.name, spec.if_name, spec.mac,
                                    DHCP, (name,)))
    return result


def auto_address(addresses: Any, vm_uid: str, type_: str, name: str) -> Json | None:
    """`FindSDNIPAddress`: the IPAddress labelled with the VM's uid for the network."""
    for address in sorted(addresses, key=lambda a: str(a["metadata"]["name"])):
        labels = address["metadata"].get("labels") or {}
        if labels.get(VM_UID_LABEL) == vm_uid and _network_ref(address) == (type_, name):
            return dict(address)
    return None


def _network_ref(address: Json) -> tuple[str, str]:
    ref = (address.get("spec") or {}).get("networkRef") or {}
    return str(ref.get("kind") or ""), str(ref.get("name") or "")


def allocated(address: Json) -> bool:
    """`GetSDNIPAddressStatus(...).Allocated`: its `Allocated` condition is True."""
    for condition in (address.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Allocated":
            return bool(condition.get("status") == "True")
    return False


def to_string(specs: list[InterfaceSpec]) -> str:
    """`InterfaceSpecList.ToString`, byte for byte (Go's `json.Marshal`: compact, HTML
    characters escaped)."""
    text = json.dumps([s.wire() for s in specs if s.type != "Main"], separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def only_main(specs: list[InterfaceSpec]) -> bool:
    return all(s.type == "Main" for s in specs)


def network_error(pods: list[Json], desired: list[str]) -> str:
    """`extractNetworkStatusFromPods`: "" when every pod's SDN reports each `desired`
    network and no condition other than True; otherwise what Deckhouse says."""
    if not pods:
        return "Waiting for the pod to be created."
    messages: list[str] = []
    for pod in pods:
        phase = (pod.get("status") or {}).get("phase")
        if phase == "Succeeded":
            continue
        raw = nw.annotations_of(pod).get(nw.DECKHOUSE_STATUS)
        if raw is None:
            messages.append(
                "Cannot determine the status of additional interfaces, waiting for a "
                "response from the SDN module" if phase == "Running"
                else "Waiting for virt-launcher pod to start")
            continue
        statuses = json.loads(raw)
        pod_messages = []
        for status in statuses:
            failing = [str(c.get("message") or "") for c in status.get("conditions") or []
                       if c.get("status") != "True"]
            if failing:
                pod_messages.append(f"({status.get('name')}): {'; '.join(failing)}")
        present = {s.get("name") for s in statuses}
        pod_messages += [f"({name}): waiting for SDN to report status"
                         for name in desired if name not in present]
        if pod_messages:
            messages.append(f"[{pod['metadata']['name']}]: {'; '.join(pod_messages)}")
    return ". ".join(messages)


def _key(network: Json) -> tuple[str, str, int | None, str, str]:
    id_ = network.get("id")
    return (str(network.get("type") or ""), str(network.get("name") or ""),
            int(id_) if id_ is not None else None,
            str(network.get("virtualMachineMACAddressName") or ""),
            str(network.get("ipAddressName") or ""))


def _has_main(networks: list[Json] | None) -> bool:
    return not networks or any(n.get("type") == "Main" for n in networks)


def classify(last: list[Json] | None, current: list[Json] | None) -> Action | None:
    """None when the networks did not change; else what `compareNetworks` requires."""
    if last is None and current is None:
        return None
    if last is not None and current is not None and [_key(n) for n in last] == [
            _key(n) for n in current]:
        return None
    old, new = last or [], current or []
    if len(old) == len(new) and all(
            a[:2] == b[:2] and a[3:] == b[3:] and (a[2] is None or a[2] == b[2])
            for a, b in zip(map(_key, old), map(_key, new), strict=True)):
        return "none"  # an id filled in where there was none
    return "apply" if _has_main(last) == _has_main(current) else "restart"
