"""The simulated Deckhouse controllers' part that gives VMs their MAC addresses.

Deckhouse (deckhouse/virtualization) makes the MAC address of every additional network
of a VM a `VirtualMachineMACAddress` (VMMAC), and names the network's interface after
that MAC. Three of its handlers are played here, each as the real one does it:

* the VM controller's `MACHandler` (`pkg/controller/vm/internal/mac.go`): while a VM
  has fewer VMMACs (labelled with its uid) than additional networks, it creates the
  missing ones: `generateName: <vm>-`, the uid label, owned by the VM;
* the VMMAC controller: a VMMAC without an address gets one after
  `delays.mac_allocate` (`status.address`, phase `Bound`, `virtualMachineName`), and
  turns `Attached` once the VM's status lists its address;
* the VM controller's `UpdateNetworkStatus` (`pkg/controller/vm/internal/network.go`):
  `status.networks` lists each network of the spec with the MAC the KVVM's interface of
  that name holds (the name derived from the MAC the pool gives the network), so a
  network keeps its address once written; an entry the spec dropped stays while the VMI
  still has an interface with its MAC.

The pool (`pkg/common/network/mac_pool.go`) is re-derived here, not shared with the
controller, so a difference shows up as a mismatch. It never writes a KVVM or a pod.
"""

from __future__ import annotations

from collections.abc import Callable

from nicplug.simulator import networking as nw
from nicplug.simulator import objects as ob
from nicplug.simulator.actors.reactor import Reactor, VMKey
from nicplug.simulator.networking import Json
from nicplug.simulator.resources import KVVMS, VMIS, VMMACS, VMS


def mac_pool(vm: Json, vmmacs: list[Json]) -> dict[tuple[str, str], str]:
    """(type, name) → MAC of the VM's additional networks that get one, as Deckhouse's
    `CreateNetworkSpec` hands them out: a name its status gives a MAC keeps it (the
    status alone: `NewMacAddressPool` holds nothing else); the others take the next
    allocated address nobody holds (VMMACs by name)."""
    reserved = {str(n.get("name")): str(n["macAddress"])
                for n in ob.dig(vm, "status", "networks") or []
                if n.get("type") != "Main" and n.get("macAddress")}
    taken = set(reserved.values())
    ordered = sorted(vmmacs, key=lambda m: str(m["metadata"]["name"]))
    available = [a for m in ordered if (a := str(ob.dig(m, "status", "address") or ""))
                 and a not in taken]
    assigned: dict[tuple[str, str], str] = {}
    for network in ob.dig(vm, "spec", "networks") or []:
        type_, name = str(network.get("type")), str(network.get("name") or "")
        if type_ == "Main":
            continue
        mac = reserved.get(name) or (available.pop(0) if available else "")
        if mac:
            assigned[(type_, name)] = mac
    return assigned


def _allocating(status: Json) -> Callable[[Json], None]:
    def change(vmmac: Json) -> None:
        vmmac.setdefault("status", {}).update(status)
    return change


class MACAddresses(Reactor):
    watches = (VMS, VMMACS, KVVMS, VMIS)
    indexed = (VMMACS,)

    def reconcile(self, key: VMKey) -> None:
        vm = self.find(VMS, *key)
        if vm is None:
            return
        uid = vm["metadata"]["uid"]
        vmmacs = [m for m in self.members(VMMACS, key)
                  if (m["metadata"].get("labels") or {}).get(ob.VM_UID_LABEL) == uid]
        wanted = sum(1 for n in ob.dig(vm, "spec", "networks") or [] if n.get("type") != "Main")
        for _ in range(wanted - len(vmmacs)):
            self.store.create(VMMACS, ob.vm_mac_address(vm, None))
        for vmmac in vmmacs:
            if ob.dig(vmmac, "status", "address"):
                continue
            token = (vmmac["metadata"]["uid"], "allocate")
            if not self.due(token, self.knobs.delays.mac_allocate, key):
                continue
            allocated = {"address": nw.allocated_mac(key[0], vmmac["metadata"]["name"]),
                         "phase": "Bound", "virtualMachineName": key[1]}
            self.edit(VMMACS, vmmac, _allocating(allocated), status=True)
            self.forget(token)
        self._network_status(key, vm, vmmacs)

    def _network_status(self, key: VMKey, vm: Json, vmmacs: list[Json]) -> None:
        spec = ob.dig(vm, "spec", "networks") or []
        if all(n.get("type") == "Main" for n in spec):  # Deckhouse: Main alone, no MACs
            main = [{"type": "Main", "id": n.get("id", 1)} for n in spec] or [
                {"type": "Main", "id": 1}]
            self.edit(VMS, vm, lambda v: v.setdefault("status", {}).update({"networks": main}),
                      status=True)
            return
        kvvm = self.find(KVVMS, *key)
        vmi = self.find(VMIS, *key)
        on_kvvm = {str(i.get("name")): str(i.get("macAddress") or "")
                   for i in ob.interfaces_of(ob.dig(kvvm, "spec", "template", "spec"))}
        pool = mac_pool(vm, vmmacs)
        networks: list[Json] = []
        for network in spec:
            type_, name = str(network.get("type")), str(network.get("name") or "")
            if type_ == "Main":
                networks.append({"type": "Main", "id": network.get("id", 0)})
                continue
            mac = pool.get((type_, name))
            if mac is None:
                continue  # no address yet: Deckhouse leaves the network out
            entry: Json = {"type": type_, "name": name, "id": network.get("id", 0)}
            if on_kvvm.get(nw.mac_if_name(type_, mac)):
                entry["macAddress"] = on_kvvm[nw.mac_if_name(type_, mac)]
            networks.append(entry)
        in_vmi = {str(i.get("macAddress") or "").lower()
                  for i in ob.interfaces_of(ob.dig(vmi, "spec"))}
        for previous in ob.dig(vm, "status", "networks") or []:
            mac = str(previous.get("macAddress") or "")
            if previous.get("type") == "Main" or not mac:
                continue
            if any(n.get("type") == previous.get("type") and n.get("name") == previous.get("name")
                   for n in networks):
                continue
            if mac.lower() in in_vmi:  # being unplugged: kept until the VMI lets it go
                networks.append(previous)
        self.edit(VMS, vm, lambda v: v.setdefault("status", {}).update({"networks": networks}),
                  status=True)
        held = {str(n.get("macAddress")) for n in networks if n.get("macAddress")}
        for vmmac in vmmacs:
            address = ob.dig(vmmac, "status", "address")
            if address in held and ob.dig(vmmac, "status", "phase") != "Attached":
                self.edit(VMMACS, vmmac,
                          lambda m: m["status"].update({"phase": "Attached"}), status=True)
