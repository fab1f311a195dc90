"""The simulated Deckhouse virtualization controller's hotplug of additional networks.

Since #2187 (`3d5170713`) Deckhouse's VM controller hot-plugs `Network` and
`ClusterNetwork` interfaces itself (`pkg/controller/vm/internal/sync_kvvm.go`). Played
here on every reconcile of a VM, as that handler does it (the pure parts are
`deckhouse_networks`):

* the VM's networks are compared with the KVVM's `vm.last-applied-spec`: an id filled in
  where there was none only updates that annotation; a change that keeps Main is applied
  at once (`applyVMChangesToKVVM`: a Normal Event "Apply changes without restart", the
  active launcher pods' `networks-spec` written as Deckhouse marshals it, IPAM fields
  and exclusions included (`patchPodNetworkAnnotation`), then — once the SDN reports
  every network of the spec ready on the pods (`isNetworkReadyOnPod`) — the KVVM
  rebuilt (`updateKVVM`); until then a Normal Event "Waiting for SDN to configure network
  interfaces" and `ConfigurationApplied` False); adding or removing Main waits for the
  user's restart (`AwaitingRestartToApplyConfiguration` True, `ChangesPendingRestart`);
* with nothing changed, a KVVM or pod out of step with the spec is brought back the
  same way (`networksOutOfSync`, `applyNetworkReadinessSync`);
* the KVVM as `kvbuilder` writes it (`setNetwork`, `setNetworksAnnotation`): each
  network `{name: <ifName>, pod: {}}`, each interface `{name, model: virtio,
  acpiIndex: <id>, binding: {name: bpfbridge}, macAddress}` (Main's `default` too), an
  interface no longer wanted marked `state: absent` (Main's removed), `default` first;
  the template's `networks-spec` and `tap-provision-by-dvp-supported: "true"`, both
  removed when only Main is left. An unplug is thus the pod's annotation first, then the
  KVVM, without waiting for the SDN to let the link go;
* `AwaitingRestartToApplyConfiguration` is removed on every reconcile of a running VM
  unless this reconcile set it (also from the KVVM's `RestartRequired`), whoever wrote
  it (the handler's deferred conditions, lines ~101-129); `ConfigurationApplied` kept
  only while False; a VM that does not run has neither;
* a VM with a network whose object names an IPAM pool gets its automatic IPAddress
  (`EnsureSDNIPAddress`: `generateName: <vm>-`, the VM's uid label, owned by the VM,
  `spec.networkRef`, `type: Auto`); it goes when the network leaves the spec.

Simplified: a VM without a VMI gets its KVVM rebuilt at once (the handler's stopped-VM
case); only networks are compared; `restartApprovalMode: Automatic` waits like
`Manual`; Events are recorded once per VM, reason, message and spec, as the Event
recorder's aggregation shows them. Its writes go to the store directly, as the
identity `IDENTITY` (which the admission policy admits): they are not in the HTTP
request log. With `knobs.hotplugs` False the cluster does not run it (a release before
#2187). MACs are allocated by `deckhouse_macs`, addresses by the SDN (`sdn_ipam`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from nicplug.simulator import deckhouse_networks as dn
from nicplug.simulator import networking as nw
from nicplug.simulator import objects as ob
from nicplug.simulator.actors.reactor import Reactor, VMKey
from nicplug.simulator.clock import SimClock
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.networking import Json
from nicplug.simulator.resources import (
    CLUSTER_NETWORKS,
    EVENTS,
    IP_ADDRESSES,
    KVVMS,
    NETWORKS,
    PODS,
    VMIS,
    VMMACS,
    VMS,
)
from nicplug.simulator.store import Store

IDENTITY = "system:serviceaccount:d8-virtualization:virtualization-controller"
COMPONENT = "virtualization-controller"
LAST_APPLIED = dn.LAST_APPLIED
TAP_PROVISION = dn.TAP_PROVISION
AWAITING_RESTART = "AwaitingRestartToApplyConfiguration"
CONFIGURATION_APPLIED = "ConfigurationApplied"
REQUEUE = 5.0  # seconds: the handler's requeue while waiting for the network
MODEL = "virtio"
BINDING = "bpfbridge"

APPLY_EVENT = "Apply changes without restart"
WAITING_EVENT = "Waiting for SDN to configure network interfaces"
SYNCED_EVENT = "The virtual machine configuration successfully synced"
WAITING_CONDITION = "Waiting for SDN to configure network interfaces."
RESTART_MESSAGE = "Waiting for the user to restart in order to apply the configuration changes."
UNEXPECTED_MESSAGE = "Please restart the virtual machine to synchronize its configuration."


class NetworkHotplug(Reactor):
    watches = (VMS, KVVMS, VMIS, PODS, VMMACS, IP_ADDRESSES)
    indexed = (PODS, VMMACS, IP_ADDRESSES)

    def __init__(self, store: Store, knobs: Knobs, clock: SimClock) -> None:
        super().__init__(store, knobs, clock)
        self._recorded: set[tuple[str, str, str, str]] = set()
        self._events = 0

    def reconcile(self, key: VMKey) -> None:
        vm = self.find(VMS, *key)
        kvvm = self.find(KVVMS, *key)
        if vm is None or kvvm is None:
            return
        self._addresses(key, vm)
        vmi = self.find(VMIS, *key)
        running = ob.dig(vmi, "status", "phase") == "Running"
        awaiting: tuple[str, str] | None = None
        applied: str | None = None
        if vmi is None:
            self._update_kvvm(key, vm, kvvm)
        else:
            change = dn.classify(_last_networks(kvvm), _networks(vm))
            if change == "none":
                self._set_last_applied(kvvm, vm)
            elif change == "restart":
                self._record(vm, "RestartAwaitingChanges", SYNCED_EVENT)
                applied = RESTART_MESSAGE
                awaiting = ("ChangesPendingRestart", RESTART_MESSAGE + " ")
            elif change == "apply":
                self._record(vm, "ChangesApplied", APPLY_EVENT)
                if self._sync(key, vm, kvvm, vmi):
                    self._record(vm, "VirtualMachineSynced", SYNCED_EVENT)
                else:
                    self._record(vm, "ChangesApplied", WAITING_EVENT)
                    applied = WAITING_CONDITION
            elif self._out_of_sync(key, vm, kvvm, vmi) and not self._sync(key, vm, kvvm, vmi):
                applied = WAITING_CONDITION
            kvvm = self.find(KVVMS, *key) or kvvm
            if awaiting is None and _restart_required(kvvm):
                awaiting = ("UnexpectedState", UNEXPECTED_MESSAGE)
        if applied == WAITING_CONDITION:  # `RequeueAfter: 5s` while waiting for the SDN
            self._wake(key, self.clock.now() + REQUEUE)
        self._conditions(vm, running, applied, awaiting)

    # ------------------------------------------------------------- the pod, then the KVVM

    def _specs(self, key: VMKey, vm: Json, *, ipam: bool) -> list[dn.InterfaceSpec]:
        specs = dn.interface_specs(vm, self.members(VMMACS, key), self._ready_in(key[0]))
        return dn.enrich_with_ipam(specs, self._ipam_facts(key, vm)) if ipam else specs

    def _sync(self, key: VMKey, vm: Json, kvvm: Json, vmi: Json) -> bool:
        """Write the pods' networks-spec; once the SDN reports it ready, the KVVM."""
        value = dn.to_string(self._specs(key, vm, ipam=True))
        active = ob.dig(vmi, "status", "activePods") or {}
        pods = self.members(PODS, key)
        for pod in pods:
            if pod["metadata"]["uid"] not in active:
                continue
            if nw.annotations_of(pod).get(nw.DECKHOUSE_REQUEST) != value:
                self.merge_patch(PODS, pod, {"metadata": {"annotations": {
                    nw.DECKHOUSE_REQUEST: value}}})
        ready = self._ready_in(key[0])
        desired = [str(n.get("name") or "") for n in _networks(vm) or []
                   if n.get("type") != "Main" and ready(n)]
        if dn.network_error(self.members(PODS, key), desired):
            return False
        self._update_kvvm(key, vm, kvvm)
        return True

    def _out_of_sync(self, key: VMKey, vm: Json, kvvm: Json, vmi: Json) -> bool:
        """`networksOutOfSync`: the KVVM's interfaces or the active pods' networks-spec
        differ from the spec (not enriched with IPAM, as Deckhouse compares it)."""
        networks = _networks(vm) or []
        only_default = all(n.get("type") == "Main" for n in networks)
        if only_default and not _active_additional(kvvm) and (
                ob.dig(vmi, "status", "phase") == "Running"):
            return False
        desired = self._specs(key, vm, ipam=False)
        actual = {str(i.get("name")) for i in _template_interfaces(kvvm)
                  if i.get("state") != "absent"}
        if {s.if_name for s in desired} != actual or len(desired) != len(actual):
            return True
        if only_default:
            return False
        value = dn.to_string(desired)
        active = ob.dig(vmi, "status", "activePods") or {}
        return any(nw.annotations_of(p).get(nw.DECKHOUSE_REQUEST) != value
                   for p in self.members(PODS, key) if p["metadata"]["uid"] in active)

    def _update_kvvm(self, key: VMKey, vm: Json, kvvm: Json) -> None:
        specs = self._specs(key, vm, ipam=True)

        def rebuild(obj: Json) -> None:
            template = obj.setdefault("spec", {}).setdefault("template", {})
            spec = template.setdefault("spec", {})
            _set_network(spec, specs)
            annotations = template.setdefault("metadata", {}).setdefault("annotations", {})
            if dn.only_main(specs):
                annotations.pop(nw.DECKHOUSE_REQUEST, None)
                annotations.pop(TAP_PROVISION, None)
            else:
                annotations[nw.DECKHOUSE_REQUEST] = dn.to_string(specs)
                annotations[TAP_PROVISION] = "true"
            _stamp(obj, vm)

        self.edit(KVVMS, kvvm, rebuild)

    def _set_last_applied(self, kvvm: Json, vm: Json) -> None:
        self.edit(KVVMS, kvvm, lambda obj: _stamp(obj, vm))

    # ------------------------------------------------------------- what it reads

    def _ready_in(self, namespace: str) -> Callable[[Json], bool]:
        """`IsNetworkSpecReady`: the network's object exists and its `Ready` is True."""
        def ready(network: Json) -> bool:
            found = self._network_object(namespace, str(network.get("type")),
                                         str(network.get("name") or ""))
            return found is not None and ob.dig(ob.condition(found, "Ready"), "status") == "True"
        return ready

    def _network_object(self, namespace: str, type_: str, name: str) -> Json | None:
        if not name:
            return None
        if type_ == "ClusterNetwork":
            return self.find(CLUSTER_NETWORKS, "", name)
        if type_ == "Network":
            return self.find(NETWORKS, namespace, name)
        return None

    def _pool(self, namespace: str, type_: str, name: str) -> bool:
        found = self._network_object(namespace, type_, name)
        return bool(ob.dig(found, "spec", "ipam", "ipAddressPoolRef", "name"))

    def _ipam_facts(self, key: VMKey, vm: Json) -> dn.IPAMFacts:
        namespace = key[0]
        networks = _networks(vm) or []
        pools = {(str(n.get("type")), str(n.get("name") or "")): self._pool(
                     namespace, str(n.get("type")), str(n.get("name") or ""))
                 for n in networks if n.get("type") != "Main"}
        addresses, _ = self.store.list_shared(IP_ADDRESSES, namespace)
        claimed: dict[tuple[str, str, str], str] = {}
        if any(n.get("ipAddressName") for n in networks):
            others, _ = self.store.list_shared(VMS, namespace)
            for other in others:
                if other["metadata"]["name"] == key[1]:
                    continue
                for n in _networks(other) or []:
                    if n.get("ipAddressName"):
                        claimed[(str(n.get("type")), str(n.get("name") or ""),
                                 str(n["ipAddressName"]))] = other["metadata"]["name"]
        return dn.IPAMFacts(pools, {a["metadata"]["name"]: a for a in addresses},
                            vm["metadata"]["uid"], claimed)

    # ------------------------------------------------------------- IPAddresses

    def _addresses(self, key: VMKey, vm: Json) -> None:
        """The VM's automatic IPAddress per pooled network; none for a network gone."""
        uid = vm["metadata"]["uid"]
        wanted = {(str(n.get("type")), str(n.get("name") or "")) for n in _networks(vm) or []
                  if n.get("type") != "Main" and not n.get("ipAddressName")
                  and self._pool(key[0], str(n.get("type")), str(n.get("name") or ""))}
        mine = [a for a in self.members(IP_ADDRESSES, key)
                if (a["metadata"].get("labels") or {}).get(dn.VM_UID_LABEL) == uid]
        held = set()
        for address in mine:
            ref = ob.dig(address, "spec", "networkRef") or {}
            network = (str(ref.get("kind")), str(ref.get("name")))
            if network in wanted:
                held.add(network)
            else:
                self.delete(IP_ADDRESSES, address)
        for type_, name in sorted(wanted - held):
            self.store.create(IP_ADDRESSES, {
                "apiVersion": IP_ADDRESSES.api_version, "kind": IP_ADDRESSES.kind,
                "metadata": {"generateName": f"{key[1]}-", "namespace": key[0],
                             "labels": {dn.VM_UID_LABEL: uid},
                             "ownerReferences": [ob.owner(VMS, vm) | {"controller": True}]},
                "spec": {"networkRef": {"kind": type_, "name": name}, "type": "Auto"}})

    # ------------------------------------------------------------- the VM's status

    def _conditions(self, vm: Json, running: bool, applied: str | None,
                    awaiting: tuple[str, str] | None) -> None:
        def update(obj: Json) -> None:
            status = obj.setdefault("status", {})
            for type_, wanted in ((CONFIGURATION_APPLIED, applied), (AWAITING_RESTART, awaiting)):
                if not running or wanted is None:
                    if ob.condition(obj, type_) is not None:
                        ob.drop_condition(status, type_)
                    continue
                if type_ == CONFIGURATION_APPLIED:
                    state, reason, message = "False", "ConfigurationNotApplied", str(applied)
                else:
                    assert awaiting is not None
                    state, (reason, message) = "True", awaiting
                current = ob.condition(obj, type_) or {}
                if (current.get("status"), current.get("reason"), current.get("message")) != (
                        state, reason, message):
                    ob.set_condition(status, type_, state, reason, message)

        self.edit(VMS, vm, update, status=True)

    def _record(self, vm: Json, reason: str, message: str) -> None:
        """A Normal Event on the VM, once per reason, message and spec."""
        meta = vm["metadata"]
        token = (str(meta["uid"]), reason, message,
                 json.dumps(vm.get("spec") or {}, sort_keys=True))
        if token in self._recorded:
            return
        self._recorded.add(token)
        self._events += 1
        event = ob.event(vm, VMS, reason=reason, message=message, component=COMPONENT,
                         seq=self._events, type_="Normal")
        event["metadata"]["name"] = f"{meta['name']}.dvc{self._events:013x}"
        self.store.create(EVENTS, event)


def _networks(vm: Json) -> list[Json] | None:
    networks = (vm.get("spec") or {}).get("networks")
    return list(networks) if isinstance(networks, list) else None


def _last_networks(kvvm: Json) -> list[Json] | None:
    raw = ((kvvm.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED)
    if not raw:
        return None  # Deckhouse then compares with an empty spec
    try:
        spec = json.loads(raw)
    except ValueError:
        return None
    networks = spec.get("networks") if isinstance(spec, dict) else None
    return list(networks) if isinstance(networks, list) else None


def _stamp(kvvm: Json, vm: Json) -> None:
    """`SetLastAppliedSpec`: the VM's spec as JSON on the KVVM."""
    annotations = kvvm.setdefault("metadata", {}).setdefault("annotations", {})
    annotations[LAST_APPLIED] = json.dumps(vm.get("spec") or {}, separators=(",", ":"))


def _template_interfaces(kvvm: Json) -> list[Json]:
    return ob.interfaces_of(ob.dig(kvvm, "spec", "template", "spec"))


def _active_additional(kvvm: Json) -> bool:
    """`hasActiveAdditionalInterfaces`."""
    return any(i.get("name") != nw.MAIN_IF_NAME and i.get("state") != "absent"
               for i in _template_interfaces(kvvm))


def _restart_required(kvvm: Json) -> bool:
    """The KVVM's `RestartRequired` is True and no state change is under way."""
    condition = ob.condition(kvvm, "RestartRequired")
    requests = ob.dig(kvvm, "status", "stateChangeRequests") or []
    return condition is not None and condition.get("status") == "True" and not requests


def _set_network(spec: Json, specs: list[dn.InterfaceSpec]) -> None:
    """`setNetwork`: the wanted interfaces set, the others absent (Main's removed)."""
    wanted = {s.if_name for s in specs}
    interfaces: list[Json] = []
    networks: list[Json] = [copy.deepcopy(n) for n in ob.networks_of(spec)]
    for iface in ob.interfaces_of(spec):
        name = iface.get("name")
        if name in wanted:
            interfaces.append(copy.deepcopy(iface))
        elif name == nw.MAIN_IF_NAME:
            networks = [n for n in networks if n.get("name") != name]
        else:
            interfaces.append(copy.deepcopy(iface) | {"state": "absent"})
    for s in specs:
        network: Json = {"name": s.if_name, "pod": {}}
        at = next((i for i, n in enumerate(networks) if n.get("name") == s.if_name), None)
        if at is None:
            networks.append(network)
        else:
            networks[at] = network
        interface: dict[str, Any] = {"name": s.if_name, "model": MODEL, "acpiIndex": s.id,
                                     "binding": {"name": BINDING}}
        if s.mac:
            interface["macAddress"] = s.mac
        at = next((i for i, x in enumerate(interfaces) if x.get("name") == s.if_name), None)
        if at is None:
            interfaces.append(interface)
        else:
            interfaces[at] = interface
    first = [i for i in interfaces if i.get("name") == nw.MAIN_IF_NAME]
    ob.set_interfaces(spec, first + [i for i in interfaces if i.get("name") != nw.MAIN_IF_NAME])
    spec["networks"] = ([n for n in networks if n.get("name") == nw.MAIN_IF_NAME]
                        + [n for n in networks if n.get("name") != nw.MAIN_IF_NAME])
