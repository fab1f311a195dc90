"""Walking an operation's graph as far as the world already allows.

Each live operation moves from state to state while the first move whose guards all
hold (`guards.py`, asked in order, lazily) says where to; so an operation adopted at any
point skips what is done. Each move is journaled as a `Transitioned` event with the
words an operator reads in `explain` and the Events (why a restart or a migration is
needed, what the SDN said, which migration failed), a failed operation's retry time
(`Timeouts.backoff`) and its count of failed migrations. Where no move holds, the SDN's
"not yet" is journaled when it changes (`Waiting`). The graphs come from `graph.py`,
compiled once per decider with their guards. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from nicplug.engine.model import EffectOutcome, Trigger
from nicplug.machines.facts import FINISHED_PHASES, SDN_SAYS, Facts, sdn_messages
from nicplug.machines.graph import GUEST_KEEPS, NOT_RETRIED, STRANDED, Move, moves_of
from nicplug.machines.guards import (
    GUARDS,
    SWAP,
    Context,
    budget,
    carried_for_another,
    is_swap,
    network_problem,
    not_hot_pluggable,
    renamed_to,
    restart_only,
)
from nicplug.machines.operation import (
    AWAITING_MAC,
    NAMED,
    ROLLOUT_BYPASSED,
    TRANSITIONED,
    WAITING,
    Operation,
)
from nicplug.machines.policy import MachineConfig
from nicplug.machines.session import Session
from nicplug.machines.targets import (
    WORKLOAD_UPDATER,
    grace_wait,
    kubevirt_migrates,
    kubevirt_overrides,
    migration_blocked,
    own_failed_migration,
)

APPLIED_LIVE = frozenset({"sync_vmi", "patch_vm", "mark_absent"})
"""The moves by which a running VMI took a NIC change (not at a boot)."""
NOT_HOT_PLUGGED = "KubeVirt hot-plugs only bridge and SR-IOV interfaces"
NEXT_BOOT = (
    "it is applied at the VM's next restart (a migration does not bring it: the target "
    "runs the VMI's spec, which KubeVirt never gave it)"
)

Guard = Callable[[Context], bool]
CompiledMoves = Mapping[str, Mapping[str, tuple[tuple[Move, tuple[Guard, ...]], ...]]]


class Walker:
    """The graphs of one configuration (flavour and mode), compiled with their guards,
    and the walk of one operation through them."""

    def __init__(self, config: MachineConfig) -> None:
        self.config = config
        self._moves: CompiledMoves = {
            direction: {
                state: tuple((m, tuple(GUARDS[g] for g in m.guards)) for m in moves)
                for state, moves in by_state.items()
            }
            for direction, by_state in moves_of(config.flavour, config.mode).items()
        }

    def walk(
        self, session: Session, op: Operation, facts: Facts, now: float, trigger: Trigger
    ) -> None:
        """Move `op` while a move's guards hold, journaling each move; a plug first
        takes the interface name its MAC allocation gave it."""
        by_state = self._moves[op.direction]
        if op.direction == "plug" and facts.comparison is not None:
            spec = facts.comparison.desired_entry(op.network)
            if spec is not None and spec.if_name and spec.if_name != op.if_name and (
                not op.if_name or not _written_anywhere(op.if_name, facts)
                or carried_for_another(op.network, op.if_name, facts)
            ):  # its MAC is allocated (or another one is, before anything used the first
                # for it: the pool may hand a MAC to one network and, once another's
                # KVVM interface is named after it, to that one)
                named = {"if_name": spec.if_name, "mac": spec.mac, "at": now}
                op = session.append(op.stream, NAMED, named)
        for _ in range(16):
            ctx = Context(op, facts, self.config, now, trigger)
            move = _first_move(by_state[op.state], ctx)
            if move is None:
                said = _not_yet(op, facts)
                if said != op.waiting:  # the SDN's "not yet", journaled as soon as it changes
                    session.append(op.stream, WAITING, {"message": said, "at": now})
                return
            payload: dict[str, Any] = {
                "from": op.state,
                "to": move.dest,
                "trigger": move.trigger,
                "at": now,
                "reason": None,
                "message": self._message(move, ctx),
            }
            if move.dest in ("Failed", "Cancelled"):
                payload["reason"] = move.trigger
            if move.dest == "Failed" and move.trigger not in NOT_RETRIED:
                payload["retry_at"] = now + self.config.timeouts.backoff(op.attempt)
            if move.trigger == "MigrationFailed":
                self._count_failed_migration(op, payload)
            if move.dest == "Migrating":
                running = facts.running_migration()
                payload["migration"] = running.name if running else None
            op = session.append(op.stream, TRANSITIONED, payload)
            vmi = facts.world.vmi
            if (
                move.trigger in APPLIED_LIVE
                and facts.live
                and vmi is not None
                and facts.world.cluster.rollout_strategy == "Stage"
            ):
                # KubeVirt applies NIC changes to the running VMI whatever the strategy
                bypass = {"at": now, "strategy": "Stage", "vmi": vmi.uid}
                op = session.append(op.stream, ROLLOUT_BYPASSED, bypass)
        raise RuntimeError(f"{op.stream}: the walk does not settle")  # a graph with a cycle

    def _count_failed_migration(self, op: Operation, payload: dict[str, Any]) -> None:
        """A migration of the change failed: counted, and at the cap the operation is
        not retried (`migration_attempts`), so no migration follows it."""
        failed = op.migrations_failed + 1
        cap = self.config.migration_attempts
        payload["migrations_failed"] = failed
        if failed >= cap:
            payload["retry_at"] = None
            payload["message"] = (
                f"{payload['message']}; {failed} of at most {cap} migrations failed, nicplug "
                f"gives up (--migration-attempts)"
            )

    def _message(self, move: Move, c: Context) -> str:
        said = self._said(move, c)
        if not is_swap(c.op) or move.dest in ("Failed", "Cancelled"):
            return said
        swapped = f"NAD swap of {c.op.if_name}: {c.op.target.removeprefix(SWAP)} → {c.op.network}"
        if move.dest == "RestartRequired":
            said = ("the VMI cannot migrate, so KubeVirt applies it at the next restart "
                    "(RestartRequired)")
        return f"{swapped}; {said}" if said else swapped

    def _said(self, move: Move, c: Context) -> str:
        op, facts = c.op, c.facts
        if move.dest == "RestartRequired":
            change = next(
                (
                    ch
                    for ch in (facts.comparison.changes if facts.comparison else ())
                    if ch.identity == op.network and ch.direction == op.direction
                ),
                None,
            )
            why = change.why if change else op.direction
            binding = not_hot_pluggable(op, facts)
            if binding is not None:
                return f"{NOT_HOT_PLUGGED}: {op.if_name} is bound by {binding}; {NEXT_BOOT}"
            if not restart_only(op):
                why += f", vmRolloutStrategy is {facts.world.cluster.rollout_strategy}"
            return why
        if move.dest == "MigrationRequired":
            if kubevirt_migrates(facts):
                return kubevirt_overrides(facts, self.config) or (
                    f"{WORKLOAD_UPDATER}: nicplug creates no migration and follows KubeVirt's")
            blocked = migration_blocked(facts, self.config)
            return f"nicplug will not migrate the VM: {blocked}" if blocked else ""
        if move.trigger == "SDNError":
            return facts.errors.get(op.network, "")
        if move.trigger in ("NetworkNotFound", "NetworkNotReady"):
            return network_problem(op.network, move.trigger, facts.world.vm, facts.world.kvvm)
        if move.trigger == STRANDED:
            return stranded_in_words(op, facts, budget(op, facts, self.config) or 0.0)
        if move.trigger == GUEST_KEEPS:
            return guest_keeps_in_words(op, budget(op, facts, self.config) or 0.0)
        if move.trigger.endswith("Timeout"):
            limit = budget(op, facts, self.config) or 0.0
            reason = f"no progress in {op.state} within {limit:g}s"
            if not op.if_name and op.direction == "plug":
                reason += f"; {AWAITING_MAC}"
            # (an SDN error after the KVVM patch ends a plug's attach wait: say it too)
            said = sdn_messages(facts, op.network) if op.direction == "plug" else ""
            return f"{reason}; {SDN_SAYS}{said}" if said else reason
        if move.trigger in ("PatchRejected", "MigrationFailed") and isinstance(
            c.trigger, EffectOutcome
        ) and not c.trigger.ok:
            # (a creation reported done after the watch showed its migration failed is
            # no rejection: KubeVirt's words below say why)
            return c.trigger.error or f"{c.trigger.type} was rejected"
        if move.trigger == "MigrationFailed":
            failed = own_failed_migration(facts, op) if op.state == "MigrationRequired" else (
                facts.migration(op.migration))
            name = failed.name if failed is not None else op.migration
            said = f": {failed.failure}" if failed is not None and failed.failure else ""
            return f"migration {name} failed{said}"
        if move.trigger == "InvalidSpec" and facts.comparison is not None:
            return facts.comparison.invalid or ""
        if move.trigger == "Reverted":
            return "the desired networks no longer ask for it"
        if move.trigger == "observed_done":
            done = {"plug": "plugged", "unplug": "unplugged"}.get(
                op.direction, "applied the new id of")
            return (f"observed done: the platform {done} it before nicplug saw it in "
                    f"flight; nicplug saw it completed")
        new_name = renamed_to(c)
        if new_name:
            return (f"{op.if_name} is replaced: Deckhouse's MAC pool names {op.network} "
                    f"{new_name} now, and it is plugged under that name next")
        return ""


def _written_anywhere(if_name: str, facts: Facts) -> bool:
    """Does a KVVM or VMI hold this interface name?"""
    return (
        if_name in facts.kvvm_present
        or if_name in facts.vmi_present
        or if_name in facts.attached
    )  # not a launcher pod's request: the pod is rewritten as the pool names it


SDN_WAITS = frozenset({"Requested", "AnnotationPatched"})
"""The plug states in which the SDN's readiness is awaited (in either flavour's order)."""


def _not_yet(op: Operation, facts: Facts) -> str:
    """What the SDN says of a plug still waiting for it ("" when it says nothing), or
    that KubeVirt still gives the dynamic-networks controller its grace."""
    grace = grace_wait(facts, op)
    if grace:
        return grace
    if op.direction != "plug" or op.state not in SDN_WAITS:
        return ""
    return sdn_messages(facts, op.network)


def _first_move(moves: tuple[tuple[Move, tuple[Guard, ...]], ...], ctx: Context) -> Move | None:
    """The first move whose guards all hold (guards are asked in order, lazily)."""
    for move, guards in moves:
        for guard in guards:
            if not guard(ctx):
                break
        else:
            return move
    return None


def stranded_in_words(op: Operation, facts: Facts, limit: float) -> str:
    """Why an unplug ends `LinkStranded`, and what the operator can do about it."""
    pods = sorted({p.name for p in facts.world.pods
                   if any(s.identity == op.network for s in p.reported)})
    where = ", ".join(pods) or "the launcher pod"
    if op.flavour == "deckhouse":
        return (
            f"no progress in {op.state} within {limit:g}s: the guest and the VM's KubeVirt "
            f"spec no longer have {op.if_name}, yet {where} still reports its link on "
            f"{op.network} in network.deckhouse.io/networks-status, which no pod's "
            f"networks-spec asks for; the SDN agent did not release it and nothing asks "
            f"a migration that would: migrate (VirtualMachineOperation Migrate) or "
            f"restart the VM to release the link (nicplug follows the unplug to Detached "
            f"once it is gone)"
        )
    asking = sorted({p.name for p in facts.world.pods if p.phase not in FINISHED_PHASES
                     and any(r.identity == op.network for r in p.requested)})
    if asking:
        linked = ", and reports its link" if pods else ""
        return (
            f"no progress in {op.state} within {limit:g}s: KubeVirt no longer knows "
            f"{op.if_name} (neither the VM's template nor the VMI holds it, and the guest "
            f"does not have it), yet {', '.join(asking)} still asks for {op.network} in "
            f"its k8s.v1.cni.cncf.io/networks annotation{linked}; KubeVirt rewrites that "
            f"annotation only while an interface of the VMI is being plugged or "
            f"unplugged, and asks no migration that would replace the pod: migrate or "
            f"restart the VM to drop it (nicplug follows the unplug to Detached once it "
            f"is gone)"
        )
    return (
        f"no progress in {op.state} within {limit:g}s: KubeVirt no longer knows "
        f"{op.if_name} (neither the VM's template nor the VMI holds it, and the guest "
        f"does not have it), yet {where} still reports its link on {op.network}, which "
        f"no pod requests; no dynamic-networks controller released it and KubeVirt asks "
        f"no migration that would: migrate or restart the VM to release the link "
        f"(nicplug follows the unplug to Detached once it is gone)"
    )


def guest_keeps_in_words(op: Operation, limit: float) -> str:
    """Why an unplug ends `GuestKeepsInterface`, and what the operator can do about it."""
    return (
        f"no progress in {op.state} within {limit:g}s: the VMI holds {op.if_name} absent, "
        f"yet the guest still has it; Deckhouse's KubeVirt does not detach a bpfbridge "
        f"interface from a running domain, and nothing asks a migration that would: "
        f"migrate (VirtualMachineOperation Migrate) or restart the VM to remove the NIC "
        f"of {op.network} (nicplug follows the unplug to Detached once the guest no "
        f"longer has it)"
    )
