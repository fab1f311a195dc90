"""The Deckhouse SDN dialect: `network.deckhouse.io/networks-spec` / `-status`.

The request entry names the network by type and name and carries the ifName the
SDN must create in the pod, plus the uid/gid the SDN hands the tap to (64535, the
unprivileged user of Deckhouse's virt-launcher). The value is written byte for byte
as Deckhouse's controller marshals its `InterfaceSpec` (`pkg/common/network/types.go`):
fields in the order `id,type,name,ifName,uid,gid`, then on a network with an IPAM pool
`ipAssignmentMode` and `ipAddressNames` (each only when set: `omitempty`), `id` always
(0 when unknown), never a MAC, `[]` on a pod once only Main remains. Which networks are
written with IPAM's fields, and which are left out until their address is allocated,
is `machines/ipam.py`'s judgement (`EnrichWithIPAM`); the dialect writes what it is
given. Deckhouse compares that string exactly,
so any other spelling of the same list would be rewritten back and forth forever.
The KVVM interface is Deckhouse's too (`pkg/controller/kvbuilder/kvvm.go`):
`{name, model: virtio, acpiIndex: <network id>, binding: {name: bpfbridge},
macAddress?}`. The status entry is ready once none of its `conditions[]`
(`Configured`, `Negotiated`) is other than `"True"`; a `"False"` one means "not yet"
(the SDN may still succeed), its message kept for the operator and for the
`SDNTimeout` that ends the wait. Main is never listed.

Must never import the multus dialect: the dialects are independent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from nicplug.adapters.sdn.codec import (
    Entry,
    EntryReader,
    check_unique,
    dump_entries,
    entries_of,
    split_identity,
)
from nicplug.adapters.sdn.port import WritingDialect
from nicplug.machines.world import (
    MAIN_IF_NAME,
    KVVMNetwork,
    NetworkType,
    SDNRequest,
    SDNStatus,
    identity_of,
)

SDN_UID = 64535
SDN_GID = 64535
INTERFACE_MODEL = "virtio"  # kvbuilder's presets, for every OS type but legacy Windows
BINDING = "bpfbridge"


class DeckhouseDialect(WritingDialect):
    name: ClassVar[str] = "deckhouse"
    request_annotation: ClassVar[str] = "network.deckhouse.io/networks-spec"
    carries_ids: ClassVar[bool] = True
    carries_macs: ClassVar[bool] = False
    empty_pod_requests: ClassVar[str | None] = "[]"
    kubevirt_owns_requests: ClassVar[bool] = False
    status_annotation: ClassVar[str] = "network.deckhouse.io/networks-status"

    def parse_requests(
        self, *, value: str | None, namespace: str, interfaces: Mapping[str, str] | None = None
    ) -> tuple[SDNRequest, ...]:
        if value is None:
            return ()
        key = self.request_annotation
        requests = []
        for entry in entries_of(value, key=key):
            type_, name = _network_of(entry)
            if type_ == "Main":
                raise entry.fail("Main is never listed")
            requests.append(
                SDNRequest(
                    identity=identity_of(type_, name),
                    if_name=entry.interface("ifName", required=True),
                    id=entry.id("id") or None,  # Deckhouse writes 0 for "no id"
                    mac=entry.text("mac"),
                    ip_assignment_mode=entry.text("ipAssignmentMode") or "",
                    ip_address_names=_names(entry, "ipAddressNames"),
                )
            )
        check_unique([r.identity for r in requests], key=key, what="network")
        check_unique([r.if_name for r in requests], key=key, what="ifName")
        return tuple(requests)

    def render_requests(self, *, requests: Sequence[SDNRequest], namespace: str) -> str | None:
        entries = []
        for request in requests:
            type_, name = split_identity(request.identity)
            if type_ == "Main":
                continue
            entry: Entry = {
                "id": request.id if request.id is not None else 0,  # Go: ptr.Deref(id, 0)
                "type": type_,
                "name": name,
                "ifName": request.if_name,
                "uid": SDN_UID,
                "gid": SDN_GID,
            }
            if request.ip_assignment_mode:
                entry["ipAssignmentMode"] = request.ip_assignment_mode
            if request.ip_address_names:
                entry["ipAddressNames"] = list(request.ip_address_names)
            entries.append(entry)
        return dump_entries(entries, sort_keys=False) if entries else None

    def parse_statuses(
        self, *, value: str | None, namespace: str, interfaces: Mapping[str, str] | None = None
    ) -> tuple[SDNStatus, ...]:
        if value is None:
            return ()
        key = self.status_annotation
        statuses = []
        for entry in entries_of(value, key=key):
            type_, name = _network_of(entry)
            if type_ == "Main":
                continue
            ready, message = _readiness(entry)
            statuses.append(
                SDNStatus(
                    identity=identity_of(type_, name),
                    if_name=entry.interface("ifName") or "",
                    ready=ready,
                    message=message,
                )
            )
        check_unique([s.identity for s in statuses], key=key, what="network")
        return tuple(statuses)

    def pod_interface(self, *, if_name: str) -> str:
        return if_name

    def kubevirt_network(self, *, request: SDNRequest, namespace: str) -> dict[str, Any]:
        return {"name": request.if_name, "pod": {}}

    def kubevirt_interface(
        self, *, request: SDNRequest, current: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """As Deckhouse's `SetNetworkInterface` builds it; a hot-plug binding its fork
        of KubeVirt accepts (`pkg/network/controllers/vm.go` in deckhouse/3p-kubevirt).
        A model or MAC the KVVM already holds is kept."""
        current = current or {}
        interface: dict[str, Any] = {
            "name": request.if_name,
            "model": current.get("model") or INTERFACE_MODEL,
        }
        acpi_index = request.id if request.id is not None else current.get("acpiIndex")
        if acpi_index is not None:
            interface["acpiIndex"] = acpi_index
        interface["binding"] = {"name": BINDING}
        mac = current.get("macAddress") or request.mac
        if mac:
            interface["macAddress"] = mac
        return interface

    def network_identity(
        self, *, network: KVVMNetwork, namespace: str, known: Mapping[str, str]
    ) -> str | None:
        if network.multus_network is not None:
            return None
        if network.name == MAIN_IF_NAME:
            return "Main"
        return known.get(network.name)


def _network_of(entry: EntryReader) -> tuple[NetworkType, str]:
    type_ = entry.text("type", required=True)
    if type_ == "Main":
        return "Main", ""
    if type_ not in ("Network", "ClusterNetwork"):
        raise entry.fail(f"unknown network type {type_!r}")
    name = entry.object_name("name", required=True)
    return ("Network" if type_ == "Network" else "ClusterNetwork"), name


def _names(entry: EntryReader, field: str) -> tuple[str, ...]:
    """A list of object names (absent or null: none)."""
    value = entry.entry.get(field)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise entry.fail(f"{field!r} is not a list of names")
    return tuple(value)


def _readiness(entry: EntryReader) -> tuple[bool, str]:
    """(ready, message), as Deckhouse's controller reads an entry
    (`pkg/controller/vm/internal/network.go`): listed with every condition `"True"` is
    ready, no condition at all included; any other condition means "not yet", never
    "failed", and its message (else its reason) is what the SDN says about it."""
    conditions = entry.entry.get("conditions")
    if conditions is None:
        return True, ""
    if not isinstance(conditions, list):
        raise entry.fail("'conditions' is not a list")
    ready = True
    said: list[str] = []
    for position, condition in enumerate(conditions):
        if not isinstance(condition, dict):
            raise entry.fail(f"condition {position} is not an object")
        type_ = condition.get("type")
        status = condition.get("status")
        reason = condition.get("reason") or ""
        message = condition.get("message") or ""
        if not all(isinstance(v, str) for v in (type_, status, reason, message)):
            raise entry.fail(f"condition {position}: type/status/reason/message not strings")
        if status != "True":
            ready = False
            said.append(f"{type_}={status}" + (f" ({reason}: {message})" if reason and message
                                                 else f" ({reason or message})"
                                                 if reason or message else ""))
    return ready, "; ".join(said)
