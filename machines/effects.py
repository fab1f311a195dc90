"""What the machines ask the world to do, as data (DESIGN §4).

Each effect is a frozen record that round-trips through `EffectRequest.payload` JSON
(`to_payload` / `effect_from_payload`) and has a deterministic idempotency key derived
from its content, so asking twice for the same thing is recognised as the same effect.
The adapters execute them; nothing here talks to Kubernetes.

Patches carry whole desired lists, not deltas: one `PatchPodNetworks` holds every SDN
entry that should be on the pod, one `PatchVirtualMachine` every interface the KVVM
should carry, so executing one twice, late, or after another changes nothing.

Patches also carry the preconditions their decision read (`observed`: the pod's requests,
the KVVM's template and resourceVersion; `pods`: the launcher pods whose SDN readiness
let an interface join a running VM). The executor checks them against the object as it
is when the patch is sent: a world that moved means "decide again", never a stale
write. They are not part of the idempotency key: the same write asked from a newer
observation is the same effect.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Literal, Self, cast

import orjson

from nicplug.engine.model import EffectRequest, StreamId
from nicplug.engine.records import quick_init
from nicplug.machines.world import KVVMInterface, KVVMNetwork, SDNRequest

CONDITION_RESTART = "NetworkHotplugRestartRequired"
"""True while a network change waits for a restart (reason `ChangesPendingRestart`).
nicplug's own: Deckhouse's `AwaitingRestartToApplyConfiguration` is the platform's,
removed on every reconcile unless its own change detection sets it (`sync_kvvm.go`), so
one set by nicplug would flap (docs/decisions/observe-or-drive.md)."""
PLATFORM_RESTART_CONDITION = "AwaitingRestartToApplyConfiguration"
REASON_RESTART = "ChangesPendingRestart"
CONDITION_MIGRATION = "NetworkHotplugAwaitingMigration"
CONDITION_FAILED = "NetworkHotplugFailed"
CONDITION_ROLLOUT = "NetworkChangeBypassedRollout"
CONDITION_WAITING = "NetworkHotplugWaiting"
"""True while an operation waits on what the platform says is not ready yet (the SDN's
`False` condition for its entry): reason `SDNNotReady`, the SDN's words as message."""
NICPLUG_CONDITIONS = (
    CONDITION_RESTART, CONDITION_MIGRATION, CONDITION_FAILED, CONDITION_ROLLOUT,
    CONDITION_WAITING,
)


def _request_payload(r: SDNRequest) -> dict[str, Any]:
    payload: dict[str, Any] = {"identity": r.identity, "if_name": r.if_name, "id": r.id,
                               "mac": r.mac}
    if r.ip_assignment_mode or r.ip_address_names:  # IPAM's; absent in older payloads
        payload["ip_assignment_mode"] = r.ip_assignment_mode
        payload["ip_address_names"] = list(r.ip_address_names)
    return payload


def _request_of(p: Mapping[str, Any]) -> SDNRequest:
    return SDNRequest(str(p["identity"]), str(p["if_name"]), p.get("id"), p.get("mac"),
                      str(p.get("ip_assignment_mode") or ""),
                      tuple(str(n) for n in p.get("ip_address_names") or ()))


class Effect(ABC):
    """Common behaviour: a type name, a target, a payload and an idempotency key."""

    __slots__ = ()
    TYPE: ClassVar[str]
    PRECONDITIONS: ClassVar[tuple[str, ...]] = ()
    """Payload members that say what the decision read, not what to do: left out of
    the idempotency key."""

    @property
    @abstractmethod
    def target(self) -> str:
        """`namespace/name` of the object the effect acts on."""

    def to_payload(self) -> dict[str, Any]:
        """The JSON-ready payload; `from_payload` of the same class reads it back.

        A flat effect's payload is its fields by name; effects that hold records
        (`SDNRequest`, `VMNetworkEntry`) override both directions.
        """
        return {f.name: getattr(self, f.name) for f in fields(cast(Any, self))}

    @classmethod
    def from_payload(cls, p: Mapping[str, Any]) -> Self:
        return cls(**{f.name: p[f.name] for f in fields(cast(Any, cls))})

    def idempotency_key(self, payload: Mapping[str, Any] | None = None) -> str:
        """Derived from the payload (`to_payload()` unless the caller has it already)."""
        content = self.to_payload() if payload is None else payload
        if self.PRECONDITIONS:
            content = {k: v for k, v in content.items() if k not in self.PRECONDITIONS}
        text = orjson.dumps(content, option=orjson.OPT_SORT_KEYS)
        digest = hashlib.blake2b(text, digest_size=8).hexdigest()
        return f"{self.TYPE}:{self.target}:{digest}"

    def request(self, stream: StreamId) -> EffectRequest:
        payload = self.to_payload()
        return EffectRequest(stream, self.TYPE, payload, self.idempotency_key(payload))


@quick_init
@dataclass(frozen=True, slots=True)
class PatchPodNetworks(Effect):
    """Set the pod's SDN request annotation to exactly `entries` (Main never listed),
    provided the pod is still `pod_uid` and requests what the decision saw
    (`observed`; None: not checked)."""

    TYPE: ClassVar[str] = "PatchPodNetworks"
    PRECONDITIONS: ClassVar[tuple[str, ...]] = ("observed",)
    namespace: str
    pod: str
    pod_uid: str
    entries: tuple[SDNRequest, ...]
    observed: tuple[SDNRequest, ...] | None = None

    @property
    def target(self) -> str:
        return f"{self.namespace}/{self.pod}"

    def to_payload(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "pod": self.pod,
            "pod_uid": self.pod_uid,
            "entries": [_request_payload(e) for e in self.entries],
            "observed": None
            if self.observed is None
            else [_request_payload(e) for e in self.observed],
        }

    @classmethod
    def from_payload(cls, p: Mapping[str, Any]) -> PatchPodNetworks:
        entries = tuple(_request_of(e) for e in p["entries"])
        seen = p.get("observed")
        observed = None if seen is None else tuple(_request_of(e) for e in seen)
        return cls(p["namespace"], p["pod"], p["pod_uid"], entries, observed)


@quick_init
@dataclass(frozen=True, slots=True)
class VMNetworkEntry:
    """One KVVM interface+network in neutral form; the dialect renders the network."""

    if_name: str
    identity: str
    absent: bool = False


@quick_init
@dataclass(frozen=True, slots=True)
class KVVMTemplate:
    """What a KVVM patch was decided from: the template's interfaces, networks and SDN
    requests as read at resourceVersion `version`."""

    version: str
    interfaces: tuple[KVVMInterface, ...]
    networks: tuple[KVVMNetwork, ...]
    template_requests: tuple[SDNRequest, ...]

    def to_payload(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "interfaces": [[i.name, i.absent] for i in self.interfaces],
            "networks": [[n.name, n.multus_network] for n in self.networks],
            "template_requests": [_request_payload(r) for r in self.template_requests],
        }

    @classmethod
    def from_payload(cls, p: Mapping[str, Any]) -> KVVMTemplate:
        return cls(
            str(p["version"]),
            tuple(KVVMInterface(str(n), bool(a)) for n, a in p["interfaces"]),
            tuple(KVVMNetwork(str(n), m) for n, m in p["networks"]),
            tuple(_request_of(r) for r in p["template_requests"]),
        )

    def same_template(self, interfaces: tuple[KVVMInterface, ...],
                      networks: tuple[KVVMNetwork, ...],
                      template_requests: tuple[SDNRequest, ...]) -> bool:  # fmt: skip
        return (self.interfaces, self.networks, self.template_requests) == (
            interfaces, networks, template_requests)  # fmt: skip


@quick_init
@dataclass(frozen=True, slots=True)
class PatchVirtualMachine(Effect):
    """Set the KVVM template's interfaces/networks and SDN request annotation, provided
    the template is still what the decision saw (`observed`), when `pods` is set, the
    VMI is still served by exactly those launcher pods (their SDN was ready), and when
    `stopped` is set, the VM still has no live VMI (a write for the next boot must not
    reach a VM that started meanwhile: KubeVirt would hot-plug it before its SDN)."""

    TYPE: ClassVar[str] = "PatchVirtualMachine"
    PRECONDITIONS: ClassVar[tuple[str, ...]] = ("observed", "pods", "stopped")
    namespace: str
    name: str
    networks: tuple[VMNetworkEntry, ...]
    template_requests: tuple[SDNRequest, ...]
    observed: KVVMTemplate | None = None
    pods: tuple[str, ...] = ()
    stopped: bool = False

    @property
    def target(self) -> str:
        return f"{self.namespace}/{self.name}"

    def to_payload(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "networks": [
                {"if_name": n.if_name, "identity": n.identity, "absent": n.absent}
                for n in self.networks
            ],
            "template_requests": [_request_payload(r) for r in self.template_requests],
            "observed": None if self.observed is None else self.observed.to_payload(),
            "pods": list(self.pods),
        } | ({"stopped": True} if self.stopped else {})

    @classmethod
    def from_payload(cls, p: Mapping[str, Any]) -> PatchVirtualMachine:
        networks = tuple(
            # (`multus_network` and `mac`, which older payloads hold, were always None
            # where nicplug writes the KVVM: read and ignored)
            VMNetworkEntry(n["if_name"], n["identity"], bool(n["absent"]))
            for n in p["networks"]
        )
        requests = tuple(_request_of(r) for r in p["template_requests"])
        seen = p.get("observed")
        observed = None if seen is None else KVVMTemplate.from_payload(seen)
        pods = tuple(str(u) for u in p.get("pods", ()))
        return cls(p["namespace"], p["name"], networks, requests, observed, pods,
                   bool(p.get("stopped", False)))


@quick_init
@dataclass(frozen=True, slots=True)
class SetVMCondition(Effect):
    """Set one condition on the `virtualization.deckhouse.io` VirtualMachine status."""

    TYPE: ClassVar[str] = "SetVMCondition"
    namespace: str
    name: str
    type: str
    status: Literal["True", "False"]
    reason: str
    message: str

    @property
    def target(self) -> str:
        return f"{self.namespace}/{self.name}"


@quick_init
@dataclass(frozen=True, slots=True)
class RemoveVMCondition(Effect):
    """Remove one condition from the VirtualMachine status, as the platform does with
    its `AwaitingRestartToApplyConfiguration` once the change is applied (its only
    reasons are `ChangesPendingRestart`, `NoRestartRequired`, `UnexpectedState`:
    `api/core/v1alpha2/vmcondition/condition.go`), rather than leave it `False`:
    nicplug's `NetworkHotplugRestartRequired` goes the same way.

    `message` is the condition's message as the decision saw it ("": any): removed only
    while it still says that, so a removal decided before the condition was set anew
    for a later change does not take the new one away; and two removals, each of the
    condition set anew, are two requests (under one key, the second was held back as
    issued already, and the VM said "restart" after its restart: seed 25834)."""

    TYPE: ClassVar[str] = "RemoveVMCondition"
    namespace: str
    name: str
    type: str
    message: str = ""

    @property
    def target(self) -> str:
        return f"{self.namespace}/{self.name}"

    def to_payload(self) -> dict[str, Any]:
        payload = {"namespace": self.namespace, "name": self.name, "type": self.type}
        return payload | ({"message": self.message} if self.message else {})

    @classmethod
    def from_payload(cls, p: Mapping[str, Any]) -> RemoveVMCondition:
        # (absent in the payloads written before it was said: any message)
        return cls(p["namespace"], p["name"], p["type"], str(p.get("message") or ""))


@quick_init
@dataclass(frozen=True, slots=True)
class RestartVM(Effect):
    """One step of a restart the platform performs: halt, (the change is written), start.

    `by="run-strategy"` (upstream KubeVirt): `halt`, only while the VMI is still
    `vmi_uid` and the KVVM's run strategy still `resumes`, sets it to halted and notes
    `resumes` on the KVVM (`RESTART_ANNOTATION`); `start`, only while that note says
    `resumes`, puts the strategy back and drops it.
    `by="operation"` (Deckhouse): `halt` creates a `Stop` `VirtualMachineOperation`
    for the VMI `vmi_uid` (only while it is still the VM's VMI), `start` a `Start` one
    for the restart of that VMI; each has a name fixed by the VMI uid and the step, so
    it is created at most once. `restart` (a `runPolicy: AlwaysOn` VM, which Deckhouse
    will not stop but restarts: `restart.go` against `stop.go`) creates one `Restart`
    operation for that VMI: Deckhouse stops and starts it, and the change is written to
    the KVVM while it is down, as for a restart the user asks for.
    Never deletes a VMI: under a strategy that recreates it at once, the new VMI would
    come from the template before the change is in it.
    """

    TYPE: ClassVar[str] = "RestartVM"
    namespace: str
    name: str
    vmi_uid: str
    step: Literal["halt", "start", "restart"] = "halt"
    resumes: str = ""
    by: Literal["run-strategy", "operation"] = "run-strategy"
    for_streams: tuple[str, ...] = ()
    """A `halt` by operation: the operations (streams) the restart is for, noted on the
    `Stop` (`World.taken_back`)."""
    after: tuple[str, ...] = ()
    """A `halt` by operation: the user's operations it follows though they may share its
    second, noted on the `Stop` (`VMOperation.after`; none: not said)."""
    number: int = 0
    """A `halt` by operation: the `Stop`'s place among nicplug's `Stop`s of the VM, noted
    on it (`VMOperation.number`; 0: not said, as payloads were before)."""

    def to_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "namespace": self.namespace, "name": self.name, "vmi_uid": self.vmi_uid,
            "step": self.step, "resumes": self.resumes}
        if self.by != "run-strategy":  # absent: as payloads were before operations
            payload["by"] = self.by
        if self.for_streams:  # absent: not said, as payloads were before
            payload["for"] = list(self.for_streams)
        if self.number:  # absent: not said, as payloads were before
            payload["number"] = self.number
        if self.after:  # absent: not said, as payloads were before
            payload["after"] = list(self.after)
        return payload

    @classmethod
    def from_payload(cls, p: Mapping[str, Any]) -> RestartVM:
        resumes = str(p.get("resumes", ""))
        found = p.get("step")
        step: Literal["halt", "start", "restart"] = (
            "start" if found == "start" else "restart" if found == "restart" else "halt")
        by: Literal["run-strategy", "operation"] = (
            "operation" if p.get("by") == "operation" else "run-strategy")
        return cls(p["namespace"], p["name"], p["vmi_uid"], step, resumes, by,
                   tuple(str(s) for s in p.get("for") or ()),
                   number=int(p.get("number") or 0),
                   after=tuple(str(s) for s in p.get("after") or ()))

    @property
    def target(self) -> str:
        return f"{self.namespace}/{self.name}"


@quick_init
@dataclass(frozen=True, slots=True)
class CreateMigration(Effect):
    """Create the VMIM `migration` for `vmi`; an existing one of that name is success."""

    TYPE: ClassVar[str] = "CreateMigration"
    namespace: str
    vmi: str
    migration: str

    @property
    def target(self) -> str:
        return f"{self.namespace}/{self.migration}"


@quick_init
@dataclass(frozen=True, slots=True)
class EmitEvent(Effect):
    """A Kubernetes Event on the VM; `stream`/`step` make each transition's event unique."""

    TYPE: ClassVar[str] = "EmitEvent"
    namespace: str
    name: str
    reason: str
    message: str
    type: Literal["Normal", "Warning"]
    stream: str
    step: int

    @property
    def target(self) -> str:
        return f"{self.namespace}/{self.name}"


AnyEffect = (
    PatchPodNetworks
    | PatchVirtualMachine
    | SetVMCondition
    | RemoveVMCondition
    | RestartVM
    | CreateMigration
    | EmitEvent
)

EFFECT_TYPES: Mapping[str, Any] = {
    cls.TYPE: cls
    for cls in (
        PatchPodNetworks,
        PatchVirtualMachine,
        SetVMCondition,
        RemoveVMCondition,
        RestartVM,
        CreateMigration,
        EmitEvent,
    )
}


def effect_from_payload(type_: str, payload: Mapping[str, Any]) -> AnyEffect:
    """Rebuild an effect from `EffectRequest.type` and `.payload`; unknown types raise."""
    cls = EFFECT_TYPES.get(type_)
    if cls is None:
        raise ValueError(f"unknown effect type {type_!r}")
    effect: AnyEffect = cls.from_payload(payload)
    return effect
