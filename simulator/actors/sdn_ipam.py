"""The simulated Deckhouse SDN's IPAM: allocates the IPAddresses of its pools.

An `IPAddress` (`network.deckhouse.io/v1alpha1`) names the network it is for
(`spec.networkRef`); `delays.ip_allocate` after it appears, the SDN gives it an address
of that network's pool: `status.address`, phase `Allocated` and the condition
`Allocated` True, which is what Deckhouse's virtualization controller reads
(`pkg/common/network/ipaddress.go`, `GetSDNIPAddressStatus`). A network named in
`failures.ip_pools_exhausted` has no free address: its IPAddresses stay `Pending` with
`Allocated` False, reason `NoFreeIPAddress`. It writes only IPAddress statuses.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from nicplug.simulator import objects as ob
from nicplug.simulator.actors.reactor import Reactor, VMKey
from nicplug.simulator.networking import Json
from nicplug.simulator.resources import IP_ADDRESSES


def _status(status: Json) -> Callable[[Json], None]:
    def change(obj: Json) -> None:
        obj["status"] = status
    return change


class DeckhouseIPAM(Reactor):
    watches = (IP_ADDRESSES,)
    indexed = (IP_ADDRESSES,)

    def reconcile(self, key: VMKey) -> None:
        for address in self.members(IP_ADDRESSES, key):
            if ob.dig(address, "status", "phase") == "Allocated":
                continue
            ref = ob.dig(address, "spec", "networkRef") or {}
            identity = f"{ref.get('kind')}/{ref.get('name')}"
            if identity in self.knobs.failures.ip_pools_exhausted:
                status: Json = {"phase": "Pending", "conditions": [{
                    "type": "Allocated", "status": "False", "reason": "NoFreeIPAddress",
                    "message": f"the pool of {identity} has no free address"}]}
            else:
                token = (address["metadata"]["uid"], "allocate")
                if not self.due(token, self.knobs.delays.ip_allocate, key):
                    continue
                self.forget(token)
                status = {"phase": "Allocated", "address": _address(address),
                          "conditions": [{"type": "Allocated", "status": "True",
                                          "reason": "Allocated", "message": ""}]}
            self.edit(IP_ADDRESSES, address, _status(status), status=True)


def _address(address: Json) -> str:
    """A stable address of a 192.168.0.0/16 pool for this IPAddress."""
    meta = address["metadata"]
    digest = hashlib.sha256(f"{meta['namespace']}/{meta['name']}".encode()).digest()
    return f"192.168.{digest[0]}.{digest[1] % 253 + 1}"
