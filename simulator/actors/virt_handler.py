"""The simulated virt-handler: boots VMIs, attaches and detaches interfaces via "libvirt".

An interface is attached (its VMI `status.interfaces[]` entry gains `domain` in
`infoSource`) only when its link — the tap — exists in the active launcher pod
(`objects.links_in`). The dialects differ in what happens when it does not:

* deckhouse: virt-handler attaches as soon as the VMI spec has the interface (after
  `delays.attach`). If the SDN has not made the link yet, libvirt fails and the VMI
  crashes: a Warning Event whose message contains "Link not found", VMI phase Failed,
  and an entry in `crashes`. That is the crash the plug order exists to avoid.
* multus: it attaches only interfaces the pod's network-status lists and that KubeVirt
  already reports with `infoSource` `multus-status` (`pkg/network/setup/filters.go`),
  and otherwise waits (KubeVirt then asks for a migration).

`state: absent` interfaces are detached from the domain at once (KubeVirt's virt-launcher
does not wait for the pod), unless `knobs.detaches_live` is off: Deckhouse's KubeVirt
leaves a bpfbridge NIC in a running domain, and the guest keeps it until a migration or
a restart. Their status entry goes, except in multus while the pod's
network-status still lists the link: then it stays with `infoSource` `multus-status` alone
(without a dynamic-networks controller, until a migration), as KubeVirt reports it.

A VMI in `Scheduled` boots to `Running` once every interface of its spec has its link:
networks given at pod start are set up before the domain starts, so booting never
crashes.
"""

from __future__ import annotations

from dataclasses import dataclass

from nicplug.simulator import networking as nw
from nicplug.simulator import objects as ob
from nicplug.simulator.actors.reactor import Reactor, VMKey
from nicplug.simulator.clock import SimClock
from nicplug.simulator.knobs import Knobs
from nicplug.simulator.networking import Json
from nicplug.simulator.resources import EVENTS, PODS, VMIS
from nicplug.simulator.store import Store

LINK_NOT_FOUND = "Link not found"
MULTUS_ONLY = "multus-status"


@dataclass(frozen=True, slots=True)
class Crash:
    """A VMI virt-handler crashed by attaching an interface whose link did not exist."""

    namespace: str
    vmi: str
    interface: str
    at: float
    message: str


class VirtHandler(Reactor):
    watches = (VMIS, PODS)

    def __init__(self, store: Store, knobs: Knobs, clock: SimClock) -> None:
        super().__init__(store, knobs, clock)
        self.crashes: list[Crash] = []

    def reconcile(self, key: VMKey) -> None:
        vmi = self.find(VMIS, *key)
        phase = ob.dig(vmi, "status", "phase")
        if vmi is None or phase not in ("Scheduled", "Running"):
            return
        pod = ob.domain_pod(vmi, self.members(PODS, key))
        if pod is None or ob.dig(pod, "status", "phase") != "Running":
            return
        spec = vmi.get("spec") or {}
        links = ob.links_in(pod, spec, self.knobs.dialect)
        wanted = [i for i in ob.interfaces_of(spec) if i.get("state") != "absent"]
        if phase == "Scheduled":
            if all(i.get("name") in links for i in wanted):
                self._boot(vmi, spec, links)
            return
        uid = vmi["metadata"]["uid"]
        multus = self.knobs.dialect == "multus"
        status_entries = {e.get("name"): e for e in ob.dig(vmi, "status", "interfaces") or []}
        attach: dict[str, int] = {}
        for index, iface in enumerate(ob.interfaces_of(spec)):
            name = str(iface.get("name"))
            entry = status_entries.get(name)
            if iface.get("state") == "absent" or _attached(entry):
                continue
            if not self.due((uid, "attach", name), self.knobs.delays.attach, key):
                continue
            if name in links and (not multus or entry is not None or name == nw.MAIN_IF_NAME):
                attach[name] = index
            elif self.knobs.dialect == "deckhouse":
                self._crash(vmi, pod, name)
                return
        absent = [str(i.get("name")) for i in ob.interfaces_of(spec) if i.get("state") == "absent"]
        # (`detaches_live` off: Deckhouse's KubeVirt leaves a bpfbridge NIC in the domain)
        detach = [n for n in absent if _attached(status_entries.get(n))
                  and self.knobs.detaches_live
                  and self.due((uid, "detach", n), self.knobs.delays.attach, key)]
        # multus: a detached interface stays reported (`multus-status` only) while the
        # pod's network-status still lists its link, as KubeVirt reports it
        linger = {n for n in absent if multus and n in links}
        released = [n for n in absent if n in status_entries and n not in detach
                    and not _attached(status_entries[n]) and n not in linger]
        if not attach and not detach and not released:
            return

        def plug(obj: Json) -> None:
            status = obj.setdefault("status", {})
            entries = []
            for e in status.get("interfaces") or []:
                name = e.get("name")
                if name in attach or name in released:
                    continue
                if name in detach:
                    if name not in linger:
                        continue
                    e = {**e, "infoSource": MULTUS_ONLY}
                entries.append(e)
            entries += [
                ob.attached_interface(n, i, links[n], multus=multus and n != nw.MAIN_IF_NAME)
                for n, i in attach.items()
            ]
            status["interfaces"] = entries

        self.edit(VMIS, vmi, plug, status=True)
        for name in (*attach, *detach):
            self.forget((uid, "attach", name))
            self.forget((uid, "detach", name))

    def _boot(self, vmi: Json, spec: Json, links: dict[str, str]) -> None:
        multus = self.knobs.dialect == "multus"

        def boot(obj: Json) -> None:
            status = obj.setdefault("status", {})
            status["phase"] = "Running"
            status["interfaces"] = [
                ob.attached_interface(str(i.get("name")), index, links[str(i.get("name"))],
                                      multus=multus and i.get("name") != nw.MAIN_IF_NAME)
                for index, i in enumerate(ob.interfaces_of(spec)) if i.get("state") != "absent"
            ]
            ob.set_condition(status, "Ready", "True", "")

        self.edit(VMIS, vmi, boot, status=True)

    def _crash(self, vmi: Json, pod: Json, interface: str) -> None:
        meta = vmi["metadata"]
        message = (f"failed to hot-plug interface {interface}: server error. command "
                   f"SyncVMI failed: \"LibvirtError(Code=38, Domain=0, Message='{LINK_NOT_FOUND}"
                   f": tap of {interface} does not exist in pod {pod['metadata']['name']}')\"")

        def failed(obj: Json) -> None:
            status = obj.setdefault("status", {})
            status["phase"] = "Failed"
            status["reason"] = "SyncFailed"
            ob.set_condition(status, "Ready", "False", "SyncFailed", message)

        self.edit(VMIS, vmi, failed, status=True)
        self.crashes.append(Crash(meta["namespace"], meta["name"], interface,
                                  self.clock.now(), message))
        self.store.create(EVENTS, ob.event(vmi, VMIS, reason="SyncFailed", message=message,
                                           component="virt-handler", seq=len(self.crashes)))


def _attached(entry: Json | None) -> bool:
    return entry is not None and "domain" in str(entry.get("infoSource", ""))
