"""Pydantic models of the Kubernetes objects nicplug reads: the edge of the controller.

Each model names only the fields nicplug uses, strictly typed (a string where a
string is due, no coercion), and ignores every other field, so a newer API server
or another controller's additions never break us. `null` means "not set". A body
that does not fit becomes `MalformedObject`, naming kind, namespace/name and the
fields at fault; it is reported and the object skipped, never fatal. These models
never leave the adapter: `records` turns them into the domain's frozen records.
"""

from __future__ import annotations

from collections.abc import Mapping
from sys import intern
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel

_MAPPING = (dict, Mapping)
"""`isinstance` of a JSON body: dict first, an exact type check (the ABC's is slow)."""


class MalformedObject(ValueError):
    """An object nicplug cannot read; the rest of the world is still usable."""

    def __init__(self, kind: str, namespace: str, name: str, problem: str) -> None:
        where = f"{namespace}/{name}" if namespace else name or "<unnamed>"
        super().__init__(f"{kind} {where}: {problem}")
        self.kind = kind
        self.namespace = namespace
        self.name = name
        self.problem = problem


Shared = Annotated[str, AfterValidator(intern)]
"""A string many objects hold alike (a namespace, a phase, a condition, a node, an
interface name): kept once (interned), however many records keep it. Objects are
decoded anew from the cache on every read, so without it each record would keep a
copy of its own."""


class Model(BaseModel):
    """camelCase on the wire, snake_case here; strict types; unknown fields ignored."""

    model_config = ConfigDict(
        extra="ignore", frozen=True, strict=True, alias_generator=to_camel, validate_by_alias=True
    )

    @model_validator(mode="before")
    @classmethod
    def _null_is_unset(cls, data: Any) -> Any:
        if isinstance(data, dict) and None in data.values():
            return {k: v for k, v in data.items() if v is not None}
        return data


class ObjectMeta(Model):
    name: str = Field(min_length=1)
    namespace: Shared = ""
    uid: str = Field(min_length=1)
    resource_version: str = ""
    creation_timestamp: str = ""
    deletion_timestamp: str = ""
    labels: dict[str, Shared] = {}
    annotations: dict[str, str] = {}


class ConditionModel(Model):
    type: Shared
    status: Shared
    reason: Shared = ""
    message: Shared = ""
    last_transition_time: str | None = None


class KubeObject(Model):
    metadata: ObjectMeta


class TemplateMeta(Model):
    annotations: dict[str, str] = {}


# -- KubeVirt: VirtualMachine (KVVM), VirtualMachineInstance, migration, KubeVirt CR --


class InterfaceModel(Model):
    """`domain.devices.interfaces[]`: its name, state and how it is bound (KubeVirt
    hot-plugs only bridge and SR-IOV interfaces). The binding is read leniently: a shape
    nicplug does not know leaves it unsaid rather than the object unreadable."""

    name: Shared = Field(min_length=1)
    state: Shared = ""
    mac_address: str = ""
    bridge: Any = None
    sriov: Any = None
    masquerade: Any = None
    binding: Any = None

    @property
    def bound_by(self) -> str:
        """`bridge`, `sriov`, `masquerade`, `plugin/<name>`; "" when it says none (KubeVirt
        defaults a secondary interface to a bridge)."""
        plugin = self.binding.get("name") if isinstance(self.binding, dict) else None
        if isinstance(plugin, str) and plugin:
            return f"plugin/{plugin}"
        for method in ("bridge", "sriov", "masquerade"):
            if getattr(self, method) is not None:
                return method
        return ""


class MultusRef(Model):
    network_name: str = Field(min_length=1)


class PodRef(Model):
    """`networks[].pod: {}`: the pod network (nicplug's `Main`)."""


class NetworkModel(Model):
    """`networks[]`: `pod: {}` or `multus: {networkName}`."""

    name: Shared = Field(min_length=1)
    multus: MultusRef | None = None
    pod: PodRef | None = None


class Devices(Model):
    interfaces: list[InterfaceModel] = []


class Domain(Model):
    devices: Devices = Devices()


class VMISpec(Model):
    domain: Domain = Domain()
    networks: list[NetworkModel] = []
    eviction_strategy: str | None = None


class Template(Model):
    metadata: TemplateMeta = TemplateMeta()
    spec: VMISpec = VMISpec()


RunStrategy = Literal["Always", "RerunOnFailure", "Manual", "Halted", "Once", "WaitAsReceiver"]


class KVVMSpec(Model):
    running: bool | None = None
    run_strategy: RunStrategy | None = None
    template: Template

    @model_validator(mode="after")
    def _one_way_to_say_running(self) -> KVVMSpec:
        if self.running is not None and self.run_strategy is not None:
            raise ValueError("spec.running and spec.runStrategy are mutually exclusive")
        return self


class KVVMStatus(Model):
    conditions: list[ConditionModel] = []


class KVVMObject(KubeObject):
    spec: KVVMSpec
    status: KVVMStatus = KVVMStatus()


class VMIInterfaceStatusModel(Model):
    name: Shared = ""
    interface_name: Shared = ""
    mac: str = ""
    info_source: Shared = ""
    """A comma+space separated list: `domain, guest-agent, multus-status`."""


class VMIStatusModel(Model):
    phase: Shared = ""
    interfaces: list[VMIInterfaceStatusModel] = []
    conditions: list[ConditionModel] = []
    active_pods: dict[str, Shared] = {}


class VMIObject(KubeObject):
    spec: VMISpec = VMISpec()
    status: VMIStatusModel = VMIStatusModel()


class VMIMSpec(Model):
    vmi_name: str = Field(min_length=1)


class MigrationStateModel(Model):
    """`status.migrationState`: what KubeVirt says of a migration it ran."""

    failure_reason: str = ""


class VMIMStatus(Model):
    phase: str = ""
    migration_state: MigrationStateModel | None = None


class VMIMObject(KubeObject):
    spec: VMIMSpec
    status: VMIMStatus = VMIMStatus()


class KubeVirtConfiguration(Model):
    vm_rollout_strategy: Literal["LiveUpdate", "Stage"] = "LiveUpdate"


class WorkloadUpdateStrategy(Model):
    workload_update_methods: list[str] = []


class KubeVirtSpec(Model):
    configuration: KubeVirtConfiguration = KubeVirtConfiguration()
    workload_update_strategy: WorkloadUpdateStrategy = WorkloadUpdateStrategy()


class KubeVirtStatus(Model):
    phase: str = ""


class KubeVirtObject(KubeObject):
    spec: KubeVirtSpec = KubeVirtSpec()
    status: KubeVirtStatus = KubeVirtStatus()


# -- Pods ---------------------------------------------------------------------------


class PodSpec(Model):
    node_name: Shared = ""


class PodStatus(Model):
    phase: Shared = ""


class PodObject(KubeObject):
    spec: PodSpec = PodSpec()
    status: PodStatus = PodStatus()


# -- Deckhouse: VirtualMachine, Network, ClusterNetwork ----------------------------

NetworkTypeName = Literal["Main", "Network", "ClusterNetwork"]


class VMNetworkModel(Model):
    type: NetworkTypeName
    name: str = ""
    id: int | None = Field(default=None, ge=0)
    virtual_machine_mac_address_name: str = Field(
        default="", alias="virtualMachineMACAddressName")
    ip_address_name: str = Field(default="", alias="ipAddressName")  # IPAM's static address

    @model_validator(mode="after")
    def _named_unless_main(self) -> VMNetworkModel:
        if self.type != "Main" and not self.name:
            raise ValueError(f"a {self.type} needs a name")
        if self.type == "Main" and self.name:
            raise ValueError("Main has no name")
        return self


class Disruptions(Model):
    restart_approval_mode: Literal["Manual", "Automatic"] = "Manual"


class VMSpec(Model):
    networks: list[VMNetworkModel] | None = None
    disruptions: Disruptions = Disruptions()
    run_policy: Shared = ""


class VMStatusNetworkModel(Model):
    type: NetworkTypeName
    name: str = ""
    mac_address: str = ""


class VMStatus(Model):
    networks: list[VMStatusNetworkModel] = []
    conditions: list[ConditionModel] = []


class VirtualMachineObject(KubeObject):
    spec: VMSpec = VMSpec()
    status: VMStatus = VMStatus()


class VMOPSpec(Model):
    type: str
    virtual_machine_name: str = Field(min_length=1)


class VMOPStatus(Model):
    phase: str = ""
    conditions: list[ConditionModel] = []


class VMOPObject(KubeObject):
    """A Deckhouse `VirtualMachineOperation` (`virtualization.deckhouse.io/v1alpha2`,
    `crds/virtualmachineoperations.yaml`): `spec.type` asked of the VM
    `spec.virtualMachineName`; Deckhouse reports `status.phase` and a `Completed`
    condition."""

    spec: VMOPSpec
    status: VMOPStatus = VMOPStatus()


class VMMACStatus(Model):
    """Only the address: the informers keep what the models read, and Deckhouse's
    later writes of the `phase` (Bound, then Attached) would otherwise wake a
    decision per VMMAC that reads nothing new."""

    address: str = ""


class VMMACObject(KubeObject):
    """A `VirtualMachineMACAddress` (`virtualization.deckhouse.io/v1alpha2`): the MAC
    address Deckhouse allocated (`status.address`) for one additional network of a VM;
    created by Deckhouse's VM controller, labelled with the VM's uid."""

    status: VMMACStatus = VMMACStatus()


class SDNNetworkStatus(Model):
    conditions: list[ConditionModel] = []


class SDNNetworkObject(KubeObject):
    """A `Network` or a `ClusterNetwork` of `network.deckhouse.io`."""

    status: SDNNetworkStatus = SDNNetworkStatus()

    @property
    def ready(self) -> bool:
        return any(c.type == "Ready" and c.status == "True" for c in self.status.conditions)


# -- Reading -------------------------------------------------------------------------

M = TypeVar("M", bound=KubeObject)


def read(model: type[M], body: object, *, kind: str) -> M:
    """`body` (a decoded API object) as `model`, or `MalformedObject`."""
    if not isinstance(body, _MAPPING):
        raise MalformedObject(kind, "", "", f"not an object but {type(body).__name__}")
    try:
        return model.model_validate(body)
    except ValidationError as e:
        namespace, name = address_of(body)
        raise MalformedObject(kind, namespace, name, _problems(e)) from e


def address_of(body: object) -> tuple[str, str]:
    """Best-effort namespace and name of a body that may be broken anywhere."""
    metadata = body.get("metadata") if isinstance(body, _MAPPING) else None
    if not isinstance(metadata, _MAPPING):
        return "", ""
    namespace, name = metadata.get("namespace"), metadata.get("name")
    return (namespace if isinstance(namespace, str) else "", name if isinstance(name, str) else "")


def _problems(error: ValidationError, limit: int = 3) -> str:
    found = []
    for detail in error.errors()[:limit]:
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in detail["loc"])
        found.append(f"{path.lstrip('.') or '(body)'}: {detail['msg']}")
    more = error.error_count() - limit
    return "; ".join(found) + (f" (and {more} more)" if more > 0 else "")
