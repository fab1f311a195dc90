"""Every declared move of every machine of every flavour is taken by some scenario.

Each scenario drives the simulated world into one situation; the test collects the
(flavour, direction, trigger, destination) of every journaled transition and compares
them with the graphs, so a move no observation can trigger fails here. Every scenario
runs in both flavours: in the multus one the simulated KubeVirt writes the pods'
networks annotation itself (`Sim.kubevirt_owns_pod`).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from nicplug.engine.model import EffectOutcome, EffectRequest
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.graph import FLAVOURS
from nicplug.machines.policy import MachineConfig, Timeouts
from nicplug.machines.world import SDNRequest, SDNStatus
from tests.unit.machines.sim import MAIN, Driver, Sim, net

X = net("x", 2)
FAST = Timeouts(sdn_ready_timeout=5, attach_timeout=5, detach_timeout=5, migration_timeout=5,
                dynamic_networks_grace=3, backoff_base=100)  # fmt: skip


FLAVOUR = ["deckhouse"]
"""The flavour `make` builds drivers for (set while the scenarios run)."""


def make(sim: Sim, **config: object) -> Driver:
    config.setdefault("timeouts", FAST)
    multus = FLAVOUR[0] == "kubevirt"
    if multus:  # the user edits the KubeVirt VM's template; KubeVirt does the plumbing
        config["dialect_kind"] = "multus"
        sim.kubevirt_owns_pod = sim.in_template = True
    decider = HotplugDecider(MachineConfig(**config))  # type: ignore[arg-type]
    return Driver(decider, sim, multus=multus)


def plugged(**sim: object) -> Driver:
    d = make(Sim(networks=(MAIN, X), **sim))  # type: ignore[arg-type]
    d.run(8)
    return d


def reject(kind: str) -> Callable[[EffectRequest], EffectOutcome | None]:
    def answer(request: EffectRequest) -> EffectOutcome | None:
        if request.type != kind:
            return None
        return EffectOutcome(1, request.stream, request.type, False, True, "denied")

    return answer


def happy_plug() -> Driver:
    d = make(Sim(networks=(MAIN, X)))
    d.run(8)
    return d


def plug_migrations(**sim: object) -> Driver:
    d = make(Sim(networks=(MAIN, X), dynamic_networks=False, **sim))  # type: ignore[arg-type]
    d.run(10)
    return d


def plug_migration_rejected() -> Driver:
    d = make(Sim(networks=(MAIN, X), dynamic_networks=False))
    d.answer = reject("CreateMigration")
    d.run(8)
    return d


def plug_attached_without_migration() -> Driver:
    d = make(Sim(networks=(MAIN, X), dynamic_networks=False), migrations="manual")
    d.run(6)
    d.sim.migration_required = False
    d.sim.attached.add(X.if_name)
    d.run(2)
    return d


def plug_kubevirt_stuck() -> Driver:
    d = make(Sim(networks=(MAIN, X), kubevirt_stuck="sync"))
    d.run(10)  # the VMI never gets it
    d.sim.kubevirt_stuck = "annotation"
    d.now += 500  # past the backoff
    d.run(10)  # the pod never gets it
    return d


def plug_failures() -> Driver:
    d = make(Sim(networks=(MAIN, X), sdn_silent=frozenset({"Network/x"})))
    d.run(10)  # SDNTimeout
    d.sim.sdn_silent, d.sim.sdn_fails = frozenset(), frozenset({"Network/x"})
    d.now += 200
    d.run(4)  # SDNError
    return d


def plug_network_problems() -> Driver:
    d = make(Sim(networks=(MAIN, X), networks_missing=frozenset({"Network/x"})))
    d.run(4)  # NetworkNotFound, at once
    d.sim.networks_missing, d.sim.networks_not_ready = frozenset(), frozenset({"Network/x"})
    d.now += 200
    d.run(4)  # NetworkNotReady, the next attempt
    return d


def plug_attach_timeout() -> Driver:
    d = make(Sim(networks=(MAIN, X), handler_stuck=True))
    d.run(12)
    return d


def plug_rejected() -> Driver:
    d = make(Sim(networks=(MAIN, X)))
    d.answer = reject("PatchVirtualMachine")
    d.run(4)
    return d


def plug_restarts() -> Driver:
    d = make(Sim(networks=(MAIN, X), strategy="Stage"))
    d.run(2)
    d.sim.strategy = "LiveUpdate"
    d.run(2)  # go_live
    d.sim.networks = (MAIN, X, net("y", 3))
    d.sim.strategy = "Stage"
    d.run(2)
    d.sim.restart()
    d.run(6)  # write_for_boot
    return d


def plug_on_a_stopped_vm_and_cancels() -> Driver:
    d = make(Sim(networks=(MAIN,), running=False, vmi_uid=None))
    d.sim.networks = (MAIN, X)
    d.run(2)
    d.sim.vm_deleted = True
    d.run(1)
    return d


def plug_reverted() -> Driver:
    d = make(Sim(networks=(MAIN, X), sdn_silent=frozenset({"Network/x"})))
    d.run(2)
    d.sim.networks = (MAIN,)
    d.run(6)
    return d


def unplug_paths() -> Driver:
    d = plugged()
    d.sim.networks = (MAIN,)
    d.run(8)  # the happy path
    d.sim.networks = (MAIN, X)
    d.run(8)
    d.sim.strategy = "Stage"
    d.sim.networks = (MAIN,)
    d.run(2)  # defer
    d.sim.strategy = "LiveUpdate"
    d.run(1)  # go_live
    d.sim.networks = (MAIN, X)
    d.run(8)  # Reverted
    return d


def unplug_stopped_restart() -> Driver:
    d = plugged()
    d.sim.strategy = "Stage"
    d.sim.networks = (MAIN,)
    d.run(2)
    d.sim.restart()
    d.run(6)
    return d


def unplug_migrations(**sim: object) -> Driver:
    d = plugged(**sim)
    d.sim.dynamic_networks = False
    d.sim.networks = (MAIN,)
    d.run(12)
    return d


def unplug_migration_after_detach() -> Driver:
    d = plugged()
    d.sim.dynamic_networks, d.sim.pod_keeps_links = False, True
    d.sim.networks = (MAIN,)
    d.run(14)
    return d


def unplug_migration_rejected() -> Driver:
    d = plugged()
    d.sim.dynamic_networks = False
    d.answer = reject("CreateMigration")
    d.sim.networks = (MAIN,)
    d.run(6)
    return d


def unplug_failures() -> Driver:
    d = plugged()
    d.sim.handler_stuck = True  # deckhouse: the guest keeps the NIC (GuestKeepsInterface)
    d.sim.networks = (MAIN,)
    d.run(10)  # DetachTimeout
    return d


def lost(kind: str) -> Callable[[EffectRequest], EffectOutcome | None]:
    """Every `kind` effect answered done and never applied: a write lost each time."""
    def answer(request: EffectRequest) -> EffectOutcome | None:
        if request.type != kind:
            return None
        return EffectOutcome(1, request.stream, request.type, True, False, "")

    return answer


def unplug_detach_timeout() -> Driver:
    """The pod's request never loses the entry: nothing shows that the platform will
    not finish the unplug, so it fails `DetachTimeout`, and is retried."""
    d = plugged()
    d.answer = lost("PatchPodNetworks")
    d.sim.networks = (MAIN,)
    d.run(10)
    return d


def unplug_link_kept() -> Driver:
    """The SDN agent keeps the link the networks-spec let go: `LinkStranded`."""
    d = plugged()
    d.sim.sdn_keeps = frozenset({X.identity})
    d.sim.networks = (MAIN,)
    d.run(10)
    return d


def unplug_rejected() -> Driver:
    d = plugged()
    d.answer = reject("PatchVirtualMachine")
    d.sim.networks = (MAIN,)
    d.run(3)
    d.answer = None
    d.sim.vm_deleted = True
    d.run(1)
    return d


def unplug_vm_deleted() -> Driver:
    d = plugged(handler_stuck=True)
    d.sim.networks = (MAIN,)
    d.run(2)
    d.sim.vm_deleted = True
    d.run(1)
    return d


def updates() -> Driver:
    d = plugged()
    d.sim.networks = (MAIN, net("x", 7))
    d.run(2)
    d.sim.networks = (MAIN, X)
    d.run(1)  # Reverted
    d.sim.networks = (MAIN, X, net("z", 2))
    d.run(1)  # InvalidSpec
    d.sim.networks = (MAIN, net("x", 8))
    d.run(2)
    d.sim.restart()
    d.run(6)  # write_for_boot, attach
    d.sim.networks = (MAIN, net("x", 9))
    d.answer = reject("PatchVirtualMachine")
    d.sim.restart()
    d.run(3)  # PatchRejected
    d.answer = None
    d.now += 500  # past the backoff
    d.sim.networks = (MAIN, net("x", 10))
    d.run(2)
    d.sim.vm_deleted = True
    d.run(1)  # VMDeleted
    return d


def updates_by_order() -> Driver:
    """A reorder needs a restart in every flavour (ids exist only in deckhouse's)."""
    y = net("y", 3)
    d = make(Sim(networks=(MAIN, X, y)))
    d.run(10)
    d.sim.networks = (MAIN, y, X)
    d.run(2)
    d.sim.networks = (MAIN, X, y)
    d.run(1)  # Reverted
    d.sim.networks = (MAIN, y, X)
    d.run(2)
    d.sim.restart()
    d.run(6)  # write_for_boot, attach
    d.sim.networks = (MAIN, X, y)
    d.answer = reject("PatchVirtualMachine")
    d.sim.restart()
    d.run(3)  # PatchRejected
    d.answer = None
    d.now += 500  # past the backoff: the reorder is asked again
    d.run(2)
    d.sim.vm_deleted = True
    d.run(1)  # VMDeleted
    return d


def adopted_lingering_entry() -> Driver:
    d = plugged()
    d.sim.requested = [SDNRequest("Network/old", "veth_nold", 9)]
    d.sim.reported = [SDNStatus("Network/old", "veth_nold", True)]
    d.run(4)
    return d


def kubevirt_main_and_reverts() -> Driver:
    """The kubevirt flavour's own paths: an unplug taken back while KubeVirt has not
    synced it; Main removed (restart only: deferred; KubeVirt refuses `absent` on the
    pod network, so the user deletes it from the template and the running VMI keeps it),
    the VM restarted (written for the boot while down, booted without it); Main back (a
    plug only a restart applies: deferred);
    the VM deleted while that plug waits."""
    if FLAVOUR[0] != "kubevirt":
        return make(Sim(networks=(MAIN,)))
    d = plugged()
    d.sim.kubevirt_stuck = "sync"
    d.sim.networks = (MAIN,)
    d.run(2)
    d.sim.networks = (MAIN, X)
    d.run(2)  # Reverted
    d.sim.kubevirt_stuck = ""
    d.sim.networks = (X,)
    d.run(8)  # defer: the VMI keeps the pod network until a restart
    d.sim.restart()
    d.run(4)  # write_for_boot (the template lacks it while the VM is down), then booted without it
    d.sim.networks = (MAIN, X)
    d.run(2)  # defer (a plug of Main)
    d.sim.vm_deleted = True
    d.run(1)  # VMDeleted
    return d


def kubevirt_same_nad_twice() -> Driver:
    """The kubevirt flavour: a second interface on the same NAD is a list nicplug
    cannot read (InvalidSpec)."""
    if FLAVOUR[0] != "kubevirt":
        return make(Sim(networks=(MAIN,)))
    d = plugged()
    d.sim.user_plugs("x", "second")
    d.run(2)
    return d


def kubevirt_unplug_taken_back_late() -> Driver:
    """The kubevirt flavour without a dynamic-networks controller: an unplug taken back
    once KubeVirt had unplugged the interface; the VMI keeps it absent until a migration
    leaves the old pod's link behind (need_migration from Requested), then KubeVirt
    plugs it anew (replug) and another migration brings the link."""
    if FLAVOUR[0] != "kubevirt":
        return make(Sim(networks=(MAIN,)))
    d = plug_migrations()
    d.sim.networks = (MAIN,)
    d.run(1)
    d.sim.networks = (MAIN, X)
    d.run(12)
    return d


def kubevirt_link_stranded() -> Driver:
    """The kubevirt flavour without a dynamic-networks controller: a pod reports a link
    of X that nothing requests and KubeVirt no longer knows (a migration's target pod
    was made while X was asked for, the user took it back before the guest had it).
    KubeVirt asks no migration for it: the unplug ends `LinkStranded`, not retried."""
    if FLAVOUR[0] != "kubevirt":
        return make(Sim(networks=(MAIN,)))
    d = make(Sim(networks=(MAIN,), dynamic_networks=False,
                 reported=[SDNStatus(X.identity, X.if_name, True)]))
    d.run(12)
    return d


def kubevirt_nad_swap(then: str = "", **sim: object) -> Driver:
    """The kubevirt flavour: the interface of X pointed at another NAD (`networkName`).
    A migratable VMI takes it, KubeVirt asks for a migration (which may fail or hang);
    `unnoticed`: KubeVirt never asks; `restart`: a VMI that cannot migrate waits for a
    restart; `revert`: the user takes it back, asks again, deletes the VM."""
    if FLAVOUR[0] != "kubevirt":
        return make(Sim(networks=(MAIN,)))
    d = plugged(**sim)
    d.sim.user_swaps(X.if_name, "y")
    d.run(3)
    if then == "restart":
        d.sim.restart()
        d.run(6)
    elif then == "revert":
        d.sim.user_swaps(X.if_name, "x")
        d.run(2)
        d.sim.user_swaps(X.if_name, "y")
        d.run(2)
        d.sim.vm_deleted = True
        d.run(1)
    else:
        d.run(10)
    return d


def observed_done() -> Driver:
    """The platform plugged X, then unplugged it, each time before nicplug decided: the
    world nicplug sees jumps from before the change to after it (another simulation
    that went through it, whose objects are the same VM's)."""
    d = make(Sim(networks=(MAIN,)))
    d.run(2)
    sight = d.sim.first_sight
    d.sim = plugged(first_sight=sight).sim
    d.run(1)
    gone = plugged(first_sight=sight)
    gone.sim.networks = (MAIN,)
    gone.run(8)
    d.sim = gone.sim
    d.run(1)
    return d


def observed_id_change() -> Driver:
    """Deckhouse applied X's new id before nicplug decided: the world nicplug sees jumps
    from X under id 2, as it first saw it, to X under id 7 (another simulation's)."""
    d = make(plugged().sim)  # a journal that never saw X plugged: its first sight has it
    d.run(1)
    changed = plugged(first_sight=d.sim.first_sight)
    changed.sim.networks = (MAIN, net("x", 7))
    changed.run(8)
    d.sim = changed.sim
    d.run(1)
    return d


SCENARIOS: dict[str, Callable[[], Driver]] = {
    "observed done": observed_done,
    "observed done: an id": observed_id_change,
    "kubevirt: a NAD swap migrated": kubevirt_nad_swap,
    "kubevirt: a NAD swap's migration fails": lambda: kubevirt_nad_swap(migration_fails=True),
    "kubevirt: a NAD swap's migration hangs": lambda: kubevirt_nad_swap(migration_stuck=True),
    "kubevirt: a NAD swap unnoticed": lambda: kubevirt_nad_swap(evaluator_off=True),
    "kubevirt: a NAD swap at restart": lambda: kubevirt_nad_swap(
        "restart", live_migratable=False),
    "kubevirt: a NAD swap taken back": lambda: kubevirt_nad_swap(
        "revert", live_migratable=False),
    "happy plug": happy_plug,
    "unplug, a detach that never lands": unplug_detach_timeout,
    "unplug, a link the SDN keeps": unplug_link_kept,
    "plug migrations": plug_migrations,
    "plug migration fails": lambda: plug_migrations(migration_fails=True),
    "plug migration stuck": lambda: plug_migrations(migration_stuck=True),
    "plug migration rejected": plug_migration_rejected,
    "plug attached without migration": plug_attached_without_migration,
    "plug, KubeVirt stuck": plug_kubevirt_stuck,
    "plug failures": plug_failures,
    "plug, network missing or not ready": plug_network_problems,
    "plug attach timeout": plug_attach_timeout,
    "plug rejected": plug_rejected,
    "plug restarts": plug_restarts,
    "plug stopped, VM deleted": plug_on_a_stopped_vm_and_cancels,
    "plug reverted": plug_reverted,
    "unplug paths": unplug_paths,
    "unplug at restart": unplug_stopped_restart,
    "unplug migrations": unplug_migrations,
    "unplug migration after detach": unplug_migration_after_detach,
    "unplug migration fails": lambda: unplug_migrations(migration_fails=True),
    "unplug migration stuck": lambda: unplug_migrations(migration_stuck=True),
    "unplug migration rejected": unplug_migration_rejected,
    "unplug failures": unplug_failures,
    "unplug rejected": unplug_rejected,
    "unplug VM deleted": unplug_vm_deleted,
    "updates": updates,
    "updates by order": updates_by_order,
    "lingering entry": adopted_lingering_entry,
    "kubevirt: Main and reverts": kubevirt_main_and_reverts,
    "kubevirt: the same NAD twice": kubevirt_same_nad_twice,
    "kubevirt: an unplug taken back late": kubevirt_unplug_taken_back_late,
    "kubevirt: a link left on the pod": kubevirt_link_stranded,
}


def taken(d: Driver) -> set[tuple[str, str, str, str]]:
    moves = set()
    flavours = {}
    for _, decision in d.log:
        for event in decision.events:
            if event.type == "Opened":
                flavours[event.stream] = str(event.payload.get("flavour", "deckhouse"))
            if event.type == "Transitioned":
                direction = event.stream.split("/")[-2]
                move = (direction, str(event.payload["trigger"]), str(event.payload["to"]))
                moves.add((flavours[event.stream], *move))
    return moves


@pytest.fixture(scope="module")
def exercised() -> dict[tuple[str, str, str, str], list[str]]:
    found: dict[tuple[str, str, str, str], list[str]] = {}
    for flavour in FLAVOURS:
        FLAVOUR[0] = flavour
        try:
            for name, scenario in SCENARIOS.items():
                for move in taken(scenario()):
                    found.setdefault(move, []).append(name)
        finally:
            FLAVOUR[0] = "deckhouse"
    return found


@pytest.mark.parametrize(
    "move",
    sorted(
        {
            (flavour, g.name, e.trigger, e.dest)
            for flavour, graphs in FLAVOURS.items()
            for g in graphs.values()
            for e in g.edges
        }
    ),
    ids=lambda m: "-".join(m),
)
def test_move_is_exercised(
    move: tuple[str, str, str, str], exercised: dict[tuple[str, str, str, str], list[str]]
) -> None:
    assert move in exercised, f"no scenario takes {move}"
