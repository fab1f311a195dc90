"""The Deckhouse SDN dialect: `network.deckhouse.io/networks-spec` / `-status`.

The request entry names the network by type and name and carries the ifName the
SDN must create in the pod, plus the uid/gid the SDN hands the tap to (64535, the
unprivileged user of Deckhouse's virt-launcher). When the VM's
`status.networks[].macAddress` knows the MAC, it travels in the entry as `mac`
(nicplug allocates no MACs). The status entry is ready once every one of its
`conditions[]` (`Configured`, `Negotiated`) is `"True"`. Main is never listed.

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
from nicplug.adapters.sdn.port import Dialect
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


class DeckhouseDialect(Dialect):
    name: ClassVar[str] = "deckhouse"
    request_annotation: ClassVar[str] = "network.deckhouse.io/networks-spec"
    carries_ids: ClassVar[bool] = True
    status_annotation: ClassVar[str] = "network.deckhouse.io/networks-status"

    def parse_requests(self, *, value: str | None, namespace: str) -> tuple[SDNRequest, ...]:
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
                    id=entry.id("id"),
                    mac=entry.text("mac"),
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
                "type": type_,
                "name": name,
                "ifName": request.if_name,
                "uid": SDN_UID,
                "gid": SDN_GID,
            }
            if request.id is not None:
                entry["id"] = request.id
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
            type_, name = _network_of(entry)
            if type_ == "Main":
                continue
            ready, error = _readiness(entry)
            statuses.append(
                SDNStatus(
                    identity=identity_of(type_, name),
                    if_name=entry.interface("ifName") or "",
                    ready=ready,
                    error=error,
                )
            )
        check_unique([s.identity for s in statuses], key=key, what="network")
        return tuple(statuses)

    def pod_interface(self, *, if_name: str) -> str:
        return if_name

    def kubevirt_network(self, *, request: SDNRequest, namespace: str) -> dict[str, Any]:
        return {"name": request.if_name, "pod": {}}

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


def _readiness(entry: EntryReader) -> tuple[bool, str | None]:
    """(ready, error): ready when there are conditions and all are `"True"`; an error
    when one is `"False"` with a reason or message (False alone is still pending)."""
    conditions = entry.entry.get("conditions")
    if conditions is None:
        return False, None
    if not isinstance(conditions, list):
        raise entry.fail("'conditions' is not a list")
    statuses = []
    error = None
    for position, condition in enumerate(conditions):
        if not isinstance(condition, dict):
            raise entry.fail(f"condition {position} is not an object")
        type_ = condition.get("type")
        status = condition.get("status")
        reason = condition.get("reason") or ""
        message = condition.get("message") or ""
        if not all(isinstance(v, str) for v in (type_, status, reason, message)):
            raise entry.fail(f"condition {position}: type/status/reason/message not strings")
        statuses.append(status)
        if status == "False" and (reason or message) and error is None:
            error = f"{type_}=False ({': '.join(p for p in (reason, message) if p)})"
    return bool(statuses) and all(s == "True" for s in statuses), error
