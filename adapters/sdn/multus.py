"""The multus dialect: `k8s.v1.cni.cncf.io/networks` / `network-status`.

A request entry names a NetworkAttachmentDefinition (`name`, `namespace`) and the
interface inside the pod, which KubeVirt derives from the KubeVirt network name:
`pod` + the first 11 hex digits of sha256(ifName). A `Network` has its NAD in the
VM's namespace under the network's name; a `ClusterNetwork`'s NAD lives in one
namespace that is a setting. The pod-side name tells the two apart when both
namespaces are the same. The SDN's status lists an entry `<ns>/<nad>` with that
interface once the attachment exists; that is all "ready" means here (multus
reports no failures in the annotation). The default network is never listed.

Must never import the deckhouse dialect: the dialects are independent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from nicplug.adapters.sdn.codec import (
    Entry,
    check_unique,
    dump_entries,
    entries_of,
    is_object_name,
    split_identity,
)
from nicplug.adapters.sdn.port import DEFAULT_CLUSTER_NAD_NAMESPACE, Dialect
from nicplug.machines.world import (
    MAIN_IF_NAME,
    KVVMNetwork,
    NetworkType,
    SDNRequest,
    SDNStatus,
    identity_of,
    if_name_of,
)


def kubevirt_pod_interface(if_name: str) -> str:
    """KubeVirt's hashed pod interface name for the network `if_name` (14 chars)."""
    return "pod" + hashlib.sha256(if_name.encode()).hexdigest()[:11]


class MultusDialect(Dialect):
    name: ClassVar[str] = "multus"
    request_annotation: ClassVar[str] = "k8s.v1.cni.cncf.io/networks"
    carries_ids: ClassVar[bool] = False
    status_annotation: ClassVar[str] = "k8s.v1.cni.cncf.io/network-status"

    def __init__(self, *, cluster_nad_namespace: str = DEFAULT_CLUSTER_NAD_NAMESPACE) -> None:
        if not is_object_name(cluster_nad_namespace):
            raise ValueError(f"not a namespace name: {cluster_nad_namespace!r}")
        self.cluster_nad_namespace = cluster_nad_namespace

    def parse_requests(self, *, value: str | None, namespace: str) -> tuple[SDNRequest, ...]:
        if value is None:
            return ()
        key = self.request_annotation
        requests = []
        for entry in entries_of(value, key=key):
            nad = entry.object_name("name", required=True)
            nad_namespace = entry.object_name("namespace") or namespace
            found = self._attribute(nad_namespace, nad, entry.interface("interface"), namespace)
            if isinstance(found, str):
                raise entry.fail(found)
            type_, name = found
            requests.append(
                SDNRequest(
                    identity=identity_of(type_, name),
                    if_name=if_name_of(type_, name),
                    mac=entry.text("mac"),
                )
            )
        check_unique([r.identity for r in requests], key=key, what="network")
        return tuple(requests)

    def render_requests(self, *, requests: Sequence[SDNRequest], namespace: str) -> str | None:
        entries = []
        for request in requests:
            type_, name = split_identity(request.identity)
            if type_ == "Main":
                continue
            entry: Entry = {
                "name": name,
                "namespace": self._nad_namespace(type_, namespace),
                "interface": kubevirt_pod_interface(request.if_name),
            }
            if request.mac is not None:
                entry["mac"] = request.mac
            entries.append(entry)
        return dump_entries(entries) if entries else None

    def parse_statuses(self, *, value: str | None, namespace: str) -> tuple[SDNStatus, ...]:
        if value is None:
            return ()
        key = self.status_annotation
        statuses = []
        for entry in entries_of(value, key=key):
            full_name = entry.text("name", required=True)
            interface = entry.interface("interface")
            default = entry.flag("default")
            nad_namespace, _, nad = full_name.rpartition("/")
            if default or interface is None or not nad_namespace:
                continue  # the default network, or an attachment nicplug never requests
            found = self._attribute(nad_namespace, nad, interface, namespace)
            if isinstance(found, str):
                continue  # an attachment of some other requester
            type_, name = found
            identity, if_name = identity_of(type_, name), if_name_of(type_, name)
            statuses.append(SDNStatus(identity=identity, if_name=if_name, ready=True))
        check_unique([s.identity for s in statuses], key=key, what="network")
        return tuple(statuses)

    def pod_interface(self, *, if_name: str) -> str:
        return kubevirt_pod_interface(if_name)

    def kubevirt_network(self, *, request: SDNRequest, namespace: str) -> dict[str, Any]:
        type_, name = split_identity(request.identity)
        if type_ == "Main":
            return {"name": MAIN_IF_NAME, "pod": {}}
        nad_namespace = self._nad_namespace(type_, namespace)
        return {"name": request.if_name, "multus": {"networkName": f"{nad_namespace}/{name}"}}

    def network_identity(
        self, *, network: KVVMNetwork, namespace: str, known: Mapping[str, str]
    ) -> str | None:
        if network.multus_network is None:
            return "Main" if network.name == MAIN_IF_NAME else None
        nad_namespace, _, nad = network.multus_network.rpartition("/")
        for type_ in self._types_in(nad_namespace or namespace, namespace):
            if if_name_of(type_, nad) == network.name:
                return identity_of(type_, nad)
        return known.get(network.name)

    def _nad_namespace(self, type_: NetworkType, namespace: str) -> str:
        return self.cluster_nad_namespace if type_ == "ClusterNetwork" else namespace

    def _types_in(self, nad_namespace: str, namespace: str) -> list[NetworkType]:
        types: list[NetworkType] = []
        if nad_namespace == namespace:
            types.append("Network")
        if nad_namespace == self.cluster_nad_namespace:
            types.append("ClusterNetwork")
        return types

    def _attribute(
        self, nad_namespace: str, nad: str, interface: str | None, namespace: str
    ) -> tuple[NetworkType, str] | str:
        """(type, name) of the network behind a NAD reference, or why there is none."""
        types = self._types_in(nad_namespace, namespace)
        if not types:
            return (
                f"NAD {nad_namespace}/{nad} is neither in the pod's namespace nor in the "
                f"cluster networks' namespace {self.cluster_nad_namespace}"
            )
        if interface is not None:
            types = [t for t in types if kubevirt_pod_interface(if_name_of(t, nad)) == interface]
            if not types:
                return f"interface {interface!r} is not KubeVirt's for NAD {nad_namespace}/{nad}"
        if len(types) > 1:
            return f"NAD {nad_namespace}/{nad} has no interface to tell its network type"
        return types[0], nad
