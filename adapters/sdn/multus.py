"""The multus dialect: `k8s.v1.cni.cncf.io/networks` / `network-status`.

A request entry names a NetworkAttachmentDefinition (`name`, `namespace`) and the
interface inside the pod, which KubeVirt derives from the KubeVirt network name:
`pod` + the first 11 hex digits of sha256(ifName). A `Network` has its NAD in the
VM's namespace under the network's name; a `ClusterNetwork`'s NAD lives in one
namespace that is a setting. The pod-side name tells the two apart when both
namespaces are the same. The SDN's status lists an entry `<ns>/<nad>` with that
interface once the attachment exists; that is all "ready" means here (multus
reports no failures in the annotation). The default network is never listed.

On an upstream KubeVirt cluster virt-controller owns the networks annotation
(`pkg/network/pod/annotations/generator.go`) and others write into it too, so
reading it must not take what it finds there for nicplug's or for garbage:

* `""` is what KubeVirt writes once the last secondary interface is gone: nothing.
* an entry of a network binding plugin (`cni-args`, no `interface`), an entry whose
  pod interface is KubeVirt's name for some network nicplug did not name (a user's
  own `dyniface1`), or a NAD in a namespace nicplug never uses, belongs to someone
  else: it is left out, never reported as malformed.
* pods born before KubeVirt hashed its pod interface names use ordinal ones
  (`net1`, `net2`: `pkg/network/namescheme`); those say nothing about the network,
  so such an entry is attributed by its NAD alone, and left out when the NAD could
  stand for both a Network and a ClusterNetwork.

It only reads: KubeVirt writes the networks annotation and the user the template's
networks (the kubevirt flavour), so it is no `WritingDialect`. Must never import the
deckhouse dialect: the dialects are independent.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import ClassVar

from nicplug.adapters.sdn.codec import (
    check_unique,
    entries_of,
    is_object_name,
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
    nad_network,
)

ORDINAL_POD_INTERFACE = re.compile(r"net[0-9]+")
"""KubeVirt's older secondary pod interface names (`namescheme.OrdinalSecondaryInterfaceName`)."""


def kubevirt_pod_interface(if_name: str) -> str:
    """KubeVirt's hashed pod interface name for the network `if_name` (14 chars)."""
    return "pod" + hashlib.sha256(if_name.encode()).hexdigest()[:11]


class MultusDialect(Dialect):
    name: ClassVar[str] = "multus"
    request_annotation: ClassVar[str] = "k8s.v1.cni.cncf.io/networks"
    carries_ids: ClassVar[bool] = False
    kubevirt_owns_requests: ClassVar[bool] = True
    status_annotation: ClassVar[str] = "k8s.v1.cni.cncf.io/network-status"

    def __init__(self, *, cluster_nad_namespace: str = DEFAULT_CLUSTER_NAD_NAMESPACE) -> None:
        if not is_object_name(cluster_nad_namespace):
            raise ValueError(f"not a namespace name: {cluster_nad_namespace!r}")
        self.cluster_nad_namespace = cluster_nad_namespace

    def parse_requests(
        self, *, value: str | None, namespace: str, interfaces: Mapping[str, str] | None = None
    ) -> tuple[SDNRequest, ...]:
        if value is None or value == "":
            return ()  # KubeVirt writes "" once no secondary network is left
        key = self.request_annotation
        requests = []
        for entry in entries_of(value, key=key):
            nad = entry.object_name("name", required=True)
            nad_namespace = entry.object_name("namespace") or namespace
            interface = entry.interface("interface")
            mac = entry.text("mac")
            if interface is None and "cni-args" in entry.entry:
                continue  # a network binding plugin's entry, not an attachment
            found = self._attribute(nad_namespace, nad, interface, namespace, interfaces)
            if found is None:
                continue  # someone else's attachment
            identity, if_name = found
            requests.append(SDNRequest(identity=identity, if_name=if_name, mac=mac))
        check_unique([r.identity for r in requests], key=key, what="network")
        return tuple(requests)

    def parse_statuses(
        self, *, value: str | None, namespace: str, interfaces: Mapping[str, str] | None = None
    ) -> tuple[SDNStatus, ...]:
        if value is None or value == "":
            return ()
        key = self.status_annotation
        statuses = []
        for entry in entries_of(value, key=key):
            full_name = entry.text("name", required=True)
            interface = entry.interface("interface")
            default = entry.flag("default")
            if default or interface is None:
                continue  # the pod's primary network
            nad_namespace, _, nad = full_name.rpartition("/")
            if not is_object_name(nad) or (nad_namespace and not is_object_name(nad_namespace)):
                continue  # not a NAD reference: some other CNI's own name for a network
            nad_namespace = nad_namespace or entry.object_name("namespace") or namespace
            found = self._attribute(nad_namespace, nad, interface, namespace, interfaces)
            if found is None:
                continue  # an attachment of some other requester
            identity, if_name = found
            statuses.append(SDNStatus(identity=identity, if_name=if_name, ready=True))
        check_unique([s.identity for s in statuses], key=key, what="network")
        return tuple(statuses)

    def pod_interface(self, *, if_name: str) -> str:
        return kubevirt_pod_interface(if_name)

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
        self,
        nad_namespace: str,
        nad: str,
        interface: str | None,
        namespace: str,
        interfaces: Mapping[str, str] | None,
    ) -> tuple[str, str] | None:
        """(identity, KubeVirt network name) of the nicplug network behind a NAD
        reference; None when the entry is not one nicplug can account for as its own.
        A pod interface the VM's spec names (`interfaces`) is that network's, whatever
        the user called it; the NAD says which network (`nad_network`)."""
        if interfaces and interface is not None and interface in interfaces:
            found = nad_network(f"{nad_namespace}/{nad}", namespace, self.cluster_nad_namespace,
                                interfaces[interface])
            return (identity_of(*found), interfaces[interface]) if found is not None else None
        types = self._types_in(nad_namespace, namespace)
        if interface is not None and ORDINAL_POD_INTERFACE.fullmatch(interface) is None:
            types = [t for t in types if kubevirt_pod_interface(if_name_of(t, nad)) == interface]
        if len(types) != 1:
            return None
        return identity_of(types[0], nad), if_name_of(types[0], nad)
