"""Changes the platform finished before nicplug saw them in flight: recorded all the same.

Observing is level-triggered: an operation opens where the world differs from what is
desired. When the platform (KubeVirt with a dynamic-networks controller, Deckhouse)
plugs or unplugs faster than nicplug decides — a busy controller's observations of a
VM are folded into its latest world — the world nicplug decides from shows the change
already done, no difference is left, and nothing would record it. So each world carries
the VM's desired networks as this process first saw them (`World.first_seen`, kept by
the observing side), and each network's own operations say what nicplug last knew of it
(an attached plug, a detached unplug): a network desired and attached now that was
neither desired at first sight nor plugged since, or one no longer desired and gone
from everything that was, opens an operation that goes straight to its end
(`observed_done` in `graph.py`) with words saying so. Likewise an `id` change Deckhouse
applies to the running VM at once: a network the KVVM carries under the desired id that
nicplug last knew under another (the id its newest `update` was opened for, else the
first sight's) opens an `update` that goes straight to `Attached`.

What nicplug never saw is not guessed at: a change already done in the first world a
process assembles of a VM, with no operation of the journal saying otherwise, stays
unrecorded (docs/decisions/observed-done.md). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from nicplug.machines.comparator import Comparison, Direction, desired_networks
from nicplug.machines.facts import Facts
from nicplug.machines.guards import asked_signature, goal_shown_for, id_shown
from nicplug.machines.operation import Operation, VMState
from nicplug.machines.world import DesiredVM, FirstSeen

REASON = "observed done"


def first_seen_of(vm: DesiredVM) -> FirstSeen:
    """The desired networks of a VM as first seen (what `World.first_seen` carries)."""
    return tuple(sorted((d.identity, d.if_name, d.id) for d in desired_networks(vm.networks)
                        if d.type != "Main"))


def plugged(
    state: VMState, vm_uid: str, network: str, first_seen: Mapping[str, str]
) -> bool | None:
    """Was `network` in the VM as nicplug last knew it? Its newest operation of this VM
    (not of an earlier VM of the same name) says (an attached plug; an unplug that did
    not end detached), else the first sight does; None while an operation of it is
    live, or when a plug and an unplug opened at once. Newest is what the operation
    says it follows (`Operation.after`), never a clock: replicas' wall clocks differ
    and step, and an operation opened later may carry an earlier time."""
    found = [o for o in (state.ops.get((network, "plug")), state.ops.get((network, "unplug")))
             if o is not None and o.vm_uid == vm_uid]
    if not found:
        return network in first_seen
    if len(found) == 2:
        plug, unplug = found
        if plug.after == unplug.stream:
            latest = plug
        elif unplug.after == plug.stream:
            latest = unplug
        elif plug.opened_at == unplug.opened_at:
            return None
        else:  # opened before operations named what they follow: the clock decides
            latest = max(found, key=lambda o: o.opened_at)
    else:
        latest = found[0]
    if not latest.terminal:
        return None
    if latest.direction == "plug":
        return latest.state == "Attached"
    return latest.state != "Detached"


def observed_done(
    state: VMState, facts: Facts, comparison: Comparison, taken: set[tuple[str, str]]
) -> list[tuple[str, Direction, str]]:
    """(network, direction, interface name) of every change done without an operation
    of nicplug's, leaving out the slots another candidate has `taken` already."""
    world = facts.world
    if world.first_seen is None or world.vm is None:
        return []
    uid = world.vm.uid
    first = {network: if_name for network, if_name, _ in world.first_seen}
    first_ids = {network: id_ for network, _, id_ in world.first_seen}
    found: list[tuple[str, Direction, str]] = []
    names = dict(first)
    names.update(_names_of(o for o in state.ops.values() if o.vm_uid == uid))
    for spec in comparison.desired:
        if spec.type == "Main" or not spec.if_name or (spec.identity, "plug") in taken:
            continue
        if any(if_name == spec.if_name and network != spec.identity
               and plugged(state, uid, network, first) is True
               for network, if_name in names.items()):
            continue  # the interface nicplug knew on another network: a NAD swap, not a plug
        if plugged(state, uid, spec.identity, first) is False and goal_shown_for(
                "plug", spec.identity, spec.if_name, facts):
            found.append((spec.identity, "plug", spec.if_name))
    for network, if_name in sorted(names.items()):
        if network in facts.desired_identities or not if_name or (network, "unplug") in taken:
            continue
        if plugged(state, uid, network, first) is True and goal_shown_for(
                "unplug", network, if_name, facts):
            found.append((network, "unplug", if_name))
    for spec in comparison.desired:
        if spec.type == "Main" or spec.id is None or (spec.identity, "update") in taken:
            continue
        known = known_id(state, uid, spec.identity, first_ids)
        if known is not None and known != spec.id and id_shown(spec.identity, facts):
            found.append((spec.identity, "update", spec.if_name))
    return found


def known_id(
    state: VMState, vm_uid: str, network: str, first_ids: Mapping[str, int | None]
) -> int | None:
    """The id nicplug last knew `network` under: the one its newest operation of this VM
    was opened for (a plug's or an update's `target`), when it ended `Attached`, else
    the first sight's. None when not known: the newest is live, ended otherwise (what it
    left is not told), an unplug, or a plug that did not say its id; or two opened at
    once. Newest is by the time each opened (a plug and an update name nothing they
    follow): a clock stepped back between them leaves it unknown or older, and an
    older id tells at worst an `update` that is recorded once more."""
    ops = [o for o in (state.ops.get((network, d)) for d in ("plug", "unplug", "update"))
           if o is not None and o.vm_uid == vm_uid]
    if not ops:
        return first_ids.get(network)
    newest = max(ops, key=lambda o: o.opened_at)
    if any(o is not newest and o.opened_at == newest.opened_at for o in ops):
        return None
    if newest.direction == "unplug" or newest.state != "Attached":
        return None
    return _id_asked(asked_signature(newest))


def _id_asked(signature: str) -> int | None:
    """The id of an update's signature (`id=7;pos=1`), None where it names none."""
    for part in signature.split(";"):
        name, _, value = part.partition("=")
        if name == "id" and value.isdigit():
            return int(value)
    return None


def _names_of(ops: Iterable[Operation]) -> dict[str, str]:
    return {o.network: o.if_name for o in ops if o.direction != "update"}
