"""The comparator: what a change of `spec.networks` needs (DESIGN §3).

It compares the VM's desired networks with the entries the KVVM carries and sorts the
differences into changes applied now (hotplug / hot-unplug of `Network` and
`ClusterNetwork`) and changes only a restart can apply (adding or removing `Main`, an
`id` change, a reorder). A Deckhouse network carried under a name its MAC pool no
longer gives it is unplugged under that name, then plugged under the new one, as
Deckhouse's own KVVM rebuild does. A desired list with duplicate identities or ids is
invalid and yields no change at all. Pure functions; never looks at pods, the VMI or
the gating policy (that is `policy.py`'s job).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from nicplug.engine.records import quick_init
from nicplug.machines.world import KVVM, MAIN_IF_NAME, NetworkSpec

Direction = Literal["plug", "unplug", "update"]

MAIN = NetworkSpec("Main")


@quick_init
@dataclass(frozen=True, slots=True)
class CarriedNetwork:
    """An entry the KVVM carries (its interface is present and not `state: absent`)."""

    identity: str
    if_name: str
    id: int | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class Change:
    """One difference: `restart` when only a restart can apply it."""

    identity: str
    if_name: str
    direction: Direction
    restart: bool
    why: str
    id: int | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class Comparison:
    desired: tuple[NetworkSpec, ...]
    carried: tuple[CarriedNetwork, ...]
    changes: tuple[Change, ...] = ()
    invalid: str | None = None
    invalid_network: str = ""
    memo: Any = field(default=None, init=False, repr=False, compare=False, hash=False)
    """What the machines derive from this comparison alone, kept with it (as a world
    record's `derived`): the candidates its changes make (`candidates.py`). A
    comparison is kept with its KVVM while the KVVM and the desired list stay the same,
    so each decision of an unchanged KVVM reuses it; never part of its value."""

    @property
    def live(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if not c.restart)

    @property
    def restart(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.restart)

    def desired_entry(self, identity: str) -> NetworkSpec | None:
        for spec in self.desired:
            if spec.identity == identity:
                return spec
        return None

    def signature(self, identity: str) -> str:
        """What an `update` of `identity` asks for: its id and place in the list."""
        spec = self.desired_entry(identity)
        if spec is None:
            return ""
        return f"id={spec.id};pos={self.position(identity)}"

    def position(self, identity: str) -> int | None:
        """The index of `identity` in the desired list, None when not desired."""
        for index, spec in enumerate(self.desired):
            if spec.identity == identity:
                return index
        return None


def desired_networks(networks: tuple[NetworkSpec, ...] | None) -> tuple[NetworkSpec, ...]:
    """Missing or empty `spec.networks` is `[Main]`."""
    return networks if networks else (MAIN,)


def invalid_reason(desired: tuple[NetworkSpec, ...]) -> tuple[str, str] | None:
    """The offending entry's identity and why the desired list cannot be applied,
    or None when it can."""
    seen: set[str] = set()
    ids: dict[int, str] = {}
    for index, spec in enumerate(desired):
        if spec.type == "Main" and index != 0:
            return spec.identity, "Main must be the first network"
        if spec.type != "Main" and not spec.name:
            return spec.identity, f"a {spec.type} entry has no name"
        if spec.identity in seen:
            return spec.identity, f"duplicate network {spec.identity}"
        seen.add(spec.identity)
        if spec.id is not None:
            if spec.id in ids:
                return spec.identity, f"duplicate id {spec.id} ({ids[spec.id]}, {spec.identity})"
            ids[spec.id] = spec.identity
    return None


def carried_networks(kvvm: KVVM, desired: tuple[NetworkSpec, ...]) -> tuple[CarriedNetwork, ...]:
    """The KVVM's present entries, in order, with their identities.

    An interface name is matched to an identity through the KVVM template's SDN request
    entries (which carry identity and id), else through the desired list (the ifName is
    derived from the identity); an interface nicplug cannot identify is left out: it is
    not nicplug's to change. A KVVM with no interface at all has the default network.
    """
    by_if_name = {r.if_name: r for r in kvvm.template_requests}
    desired_by_if_name = {d.if_name: d for d in desired if d.if_name}
    present = [i.name for i in kvvm.interfaces if not i.absent]
    if not kvvm.interfaces:
        present = [MAIN_IF_NAME]
    carried: list[CarriedNetwork] = []
    for if_name in present:
        if if_name == MAIN_IF_NAME:
            carried.append(CarriedNetwork("Main", MAIN_IF_NAME))
        elif if_name in by_if_name:
            request = by_if_name[if_name]
            carried.append(CarriedNetwork(request.identity, if_name, request.id))
        elif if_name in desired_by_if_name:
            spec = desired_by_if_name[if_name]
            carried.append(CarriedNetwork(spec.identity, if_name, None))
    return tuple(carried)


def renamed(spec: NetworkSpec, if_name: str) -> bool:
    """Is the network `spec`, carried (or being unplugged) under `if_name`, named
    otherwise now? Deckhouse names an interface after the MAC its pool hands the
    network (`mac_pool.go`), which holds only the VM's `status.networks`: a network
    the status does not list yet (removed and added again, or added before another's
    MAC was recorded) may be handed another VMMAC. Not while no MAC is handed to it."""
    return spec.named_by_mac and bool(spec.if_name) and spec.if_name != if_name


def compare(
    networks: tuple[NetworkSpec, ...] | None, kvvm: KVVM, *, ordered: bool = True
) -> Comparison:
    """Sort the differences between the desired list and the KVVM into changes.

    `ordered=False` where order carries no meaning: a running VMI's spec, into which
    KubeVirt appends hot-plugged interfaces wherever the template has them."""
    desired = desired_networks(networks)
    carried = carried_networks(kvvm, desired)
    problem = invalid_reason(desired)
    if problem is not None:
        return Comparison(desired, carried, invalid=problem[1], invalid_network=problem[0])
    wanted = {d.identity: d for d in desired}
    present = {c.identity: c for c in carried}
    changes: list[Change] = []
    for spec in desired:
        if spec.identity not in present:
            restart = spec.type == "Main"
            why = "Main added" if restart else "added"
            changes.append(Change(spec.identity, spec.if_name, "plug", restart, why, spec.id))
    for entry in carried:
        if entry.identity not in wanted:
            restart = entry.identity == "Main"
            why = "Main removed" if restart else "removed"
            changes.append(Change(entry.identity, entry.if_name, "unplug", restart, why, entry.id))
    desired_order = [d.identity for d in desired if d.identity in present]
    carried_order = [c.identity for c in carried if c.identity in wanted]
    moved = {a for a, b in zip(desired_order, carried_order, strict=True) if a != b and ordered}
    for spec in desired:
        held = present.get(spec.identity)
        if held is None:
            continue
        if renamed(spec, held.if_name):
            # the interface goes, as Deckhouse's KVVM rebuild marks absent every name the
            # pool does not give (`setNetwork`); the network is plugged under its new
            # name once it is gone (then it is no longer carried)
            why = f"renamed: the MAC pool names it {spec.if_name} now"
            changes.append(Change(spec.identity, held.if_name, "unplug", False, why, held.id))
            continue
        whys = []
        if spec.id is not None and held.id is not None and spec.id != held.id:
            whys.append(f"id {held.id} → {spec.id}")
        if spec.identity in moved:
            whys.append("reordered")
        if whys:
            changes.append(
                Change(spec.identity, spec.if_name, "update", True, ", ".join(whys), spec.id)
            )
    return Comparison(desired, carried, tuple(changes))
