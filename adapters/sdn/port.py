"""The SDN port: how one SDN spells a VM's secondary networks on the launcher pod.

nicplug speaks to two SDNs: Deckhouse's own and multus. Each is a
`Dialect` in a module of its own; the two never import each other (import-linter
checks it). A dialect is pure translation between annotation strings / KubeVirt
network bodies and the domain's `SDNRequest` / `SDNStatus` records: it never does
I/O, never decides anything, and never raises anything but `MalformedAnnotation`
on input it did not write itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from nicplug.machines.world import KVVMNetwork, SDNRequest, SDNStatus

DEFAULT_CLUSTER_NAD_NAMESPACE = "default"


class MalformedAnnotation(ValueError):
    """An SDN annotation value nicplug cannot read: an observation error, never fatal.

    The caller turns it into `LauncherPod.observation_error` (or a world-level
    observation error) so that it is journaled and surfaced.
    """

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"annotation {key}: {problem}")
        self.key = key
        self.problem = problem


class Dialect(ABC):
    """One SDN's spelling of the networks of a VM (the port)."""

    name: ClassVar[str]
    request_annotation: ClassVar[str]
    """The pod annotation nicplug writes: the networks the pod should have."""
    status_annotation: ClassVar[str]
    """The pod annotation the SDN writes: what it has configured."""
    carries_ids: ClassVar[bool]
    """Whether a request entry keeps the network's `id` (parsed requests have None
    otherwise)."""
    kubevirt_owns_requests: ClassVar[bool]
    """Whether KubeVirt writes the request annotation itself (upstream KubeVirt with
    multus): then nicplug only reads it, on pods and on the KVVM template alike."""

    cluster_nad_namespace: str = DEFAULT_CLUSTER_NAD_NAMESPACE
    """Where the NetworkAttachmentDefinitions of ClusterNetworks live (multus)."""

    @abstractmethod
    def parse_requests(
        self, *, value: str | None, namespace: str, interfaces: Mapping[str, str] | None = None
    ) -> tuple[SDNRequest, ...]:
        """Read the request annotation of a pod in `namespace` (None: not set).

        `interfaces` maps pod-side interface names to the KubeVirt network names the
        VM's template and VMI give them, where users name them (the kubevirt flavour):
        an entry of one of those is that network's. Raises `MalformedAnnotation` for
        anything that is not a JSON array of entries of this dialect's shape.
        """

    @abstractmethod
    def parse_statuses(
        self, *, value: str | None, namespace: str, interfaces: Mapping[str, str] | None = None
    ) -> tuple[SDNStatus, ...]:
        """Read the status annotation the SDN wrote; entries not of nicplug's networks
        (the default network, foreign attachments) are left out. `interfaces`: as for
        `parse_requests`."""

    @abstractmethod
    def pod_interface(self, *, if_name: str) -> str:
        """The interface name inside the pod for the KubeVirt network `if_name`."""

    @abstractmethod
    def network_identity(
        self, *, network: KVVMNetwork, namespace: str, known: Mapping[str, str]
    ) -> str | None:
        """Which identity a KVVM/VMI network stands for; `known` maps the ifNames seen
        in the desired list and the annotations to identities. None: not nicplug's."""


class WritingDialect(Dialect):
    """A dialect whose request annotation and KVVM networks nicplug writes itself
    (Deckhouse's SDN: nicplug drives the whole order). Where KubeVirt writes them (the
    kubevirt flavour, multus), the dialect only reads: nicplug writes no pod and no KVVM
    there."""

    carries_macs: ClassVar[bool] = True
    """Whether a request entry keeps a known MAC (Deckhouse's never serializes one)."""
    empty_pod_requests: ClassVar[str | None] = None
    """What a launcher pod's request annotation holds once nothing but Main remains:
    None removes the key; a platform that writes a value itself (Deckhouse writes
    `[]`) gets that value, or the two writers would undo each other forever."""

    @abstractmethod
    def render_requests(
        self, *, requests: Sequence[SDNRequest], namespace: str
    ) -> str | None:
        """The request annotation value for `requests` in their order; Main is never
        listed. None when nothing but Main remains: the patch removes the key."""

    @abstractmethod
    def kubevirt_network(self, *, request: SDNRequest, namespace: str) -> dict[str, Any]:
        """The `spec.template.spec.networks[]` entry of the KVVM for `request`."""

    def kubevirt_interface(
        self, *, request: SDNRequest, current: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """The `spec.template.spec.domain.devices.interfaces[]` entry for `request`;
        `current` is the entry the KVVM holds (kept as it is by default)."""
        return dict(current) if current else {"name": request.if_name, "bridge": {}}
