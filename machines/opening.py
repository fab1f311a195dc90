"""Opening operations: for a change nobody handles, or a desired spec nicplug refuses.

`candidates.py` says which changes need an operation; here each is opened (`Opened`,
its stream numbered by attempt) unless one is live for the same network and direction,
or the last one failed and its retry time (`Timeouts.backoff`) has not come (unless
the failure is dated later than now: a wall clock set back since), or its
migrations failed as often as nicplug allows, or it failed in a way no retry mends
(`LinkStranded`, `GuestKeepsInterface`), or it timed out waiting for the SDN, which
still says what it said then (`_sdn_says_the_same`) — in each case unless the world
already shows the goal, which an attempt then adopts. An invalid desired spec opens an
`update` operation that fails at once, so `explain` and the Events say why. Pure: no
I/O.
"""

from __future__ import annotations

from nicplug.machines.candidates import Candidate
from nicplug.machines.comparator import Comparison, Direction
from nicplug.machines.facts import SDN_SAYS, Facts, sdn_messages
from nicplug.machines.graph import STRANDED_REASONS
from nicplug.machines.operation import OPENED, Operation, stream_of
from nicplug.machines.policy import MachineConfig
from nicplug.machines.session import Session
from nicplug.machines.targets import asked_as


def open_operation(
    config: MachineConfig, session: Session, c: Candidate, facts: Facts, now: float
) -> Operation | None:
    latest = session.state.ops.get((c.network, c.direction))
    if latest is not None:
        if not latest.terminal:
            return None
        if _gave_up(config, session, latest) and not c.goal_shown:
            return None
        if (_sdn_says_the_same(latest, facts, c) and not _changed_mind_since(session, latest)
                and not c.goal_shown):
            return None
        if (
            latest.state == "Failed"
            and latest.retry_at is not None
            and now < latest.retry_at
            and not _failed_later_than(latest, now)
            and not c.goal_shown
        ):
            return None
    return _append_opened(
        config, session, c.network, c.direction, c.if_name, c.target, latest, now
    )


def _sdn_says_the_same(latest: Operation, facts: Facts, c: Candidate) -> bool:
    """The plug timed out waiting for the SDN, and the SDN still says of its network,
    on the same pods, what it said then (a `ConfigurationError` it keeps reporting),
    of the entry the next attempt would ask for. A new attempt writes nothing new (the
    pod asks for the entry already) and would only wait for the same SDN again, for
    ever, each failure a Warning Event: Deckhouse itself reads a condition other than
    True as "not yet" and waits (extractNetworkStatusFromPods,
    pkg/controller/vm/internal/network.go). The failure rests, with the SDN's words on
    the VM, until those words change (the error ends or changes, another pod runs the
    VM) or the user changes their mind; then the next attempt opens after its backoff,
    as any. A network the MAC pool names anew since (Deckhouse: not yet in the VM's
    `status.networks`) is asked for under another interface name: the attempt writes
    the pod's entry anew, which the SDN has not answered yet."""
    if latest.state != "Failed" or latest.direction != "plug" or latest.reason not in (
            "SDNTimeout", "AttachTimeout"):
        return False
    said = sdn_messages(facts, latest.network)
    return (bool(said) and latest.message.endswith(f"{SDN_SAYS}{said}")
            and _asked_as_now(facts, c))


def _asked_as_now(facts: Facts, c: Candidate) -> bool:
    """Every pod asks the SDN for the candidate's network under the interface name it
    has now, when that name comes from its MAC (`targets.asked_as`)."""
    spec = facts.comparison.desired_entry(c.network) if facts.comparison is not None else None
    if spec is None or not spec.named_by_mac or not c.if_name:
        return True
    return asked_as(facts, c.network, c.if_name)


def _failed_later_than(latest: Operation, now: float) -> bool:
    """The failure is dated after `now`: the wall clock ran ahead when it failed and has
    been set back since. Its retry time lies as far off as the clock's step (an hour),
    and its retry timer may have fired already, under the clock that ran ahead, while
    nobody asked for the change: waiting for that time would leave the change the user
    asks again without an attempt and without a timer. It is retried now, as its
    backoff has passed as far as anyone can tell."""
    return latest.entered_at > now


def _gave_up(config: MachineConfig, session: Session, latest: Operation) -> bool:
    """Did the change's migrations fail as often as nicplug allows, or did it end on a
    failure no retry mends (`LinkStranded`: a link left on the pod;
    `GuestKeepsInterface`: a NIC Deckhouse's KubeVirt does not detach from a running
    domain)? Then it is not tried again, until the user changes their mind (the
    opposite operation opened since) or the world shows it done (a restart or a
    migration applied it). The opposite operation this one was opened after (`after`)
    is older whatever the clocks said: a wall clock that ran ahead and was set back
    leaves it a later time than this failure, which must not count as a change of
    mind at every failure."""
    if latest.state != "Failed":
        return False
    if (latest.migrations_failed < config.migration_attempts
            and latest.reason not in STRANDED_REASONS):
        return False
    return not _changed_mind_since(session, latest)


def _changed_mind_since(session: Session, latest: Operation) -> bool:
    """The opposite operation (plug or unplug) of the same network opened after
    `latest` failed: the user changed their mind since."""
    opposite = "unplug" if latest.direction == "plug" else "plug"
    other = session.state.ops.get((latest.network, opposite))
    if other is None or latest.after == other.stream:
        return False
    return other.opened_at > latest.entered_at


def open_invalid(
    config: MachineConfig, session: Session, comparison: Comparison, now: float) -> None:
    network = comparison.invalid_network
    target = f"invalid:{comparison.invalid}"
    latest = session.state.ops.get((network, "update"))
    if latest is not None and (not latest.terminal or latest.target == target):
        return
    spec = comparison.desired_entry(network)
    if_name = spec.if_name if spec else ""
    _append_opened(config, session, network, "update", if_name, target, latest, now)


def _append_opened(
    config: MachineConfig,
    session: Session,
    network: str,
    direction: Direction,
    if_name: str,
    target: str,
    latest: Operation | None,
    now: float,
) -> Operation:
    attempt = latest.attempt + 1 if latest else 1
    stream = stream_of(session.vm_uid, network, direction, attempt)
    payload = {
        "vm": session.vm,
        "vm_uid": session.vm_uid,
        "network": network,
        "if_name": if_name,
        "direction": direction,
        "attempt": attempt,
        "target": target,
        "at": now,
    }
    if config.flavour != "deckhouse":
        payload["flavour"] = config.flavour
    if config.observes:
        payload["mode"] = "observe"
    if latest is not None and latest.state == "Failed" and latest.migrations_failed:
        payload["migrations_failed"] = latest.migrations_failed  # the change's, so far
    if direction in ("plug", "unplug"):
        other = session.state.ops.get((network, "unplug" if direction == "plug" else "plug"))
        if other is not None:
            payload["after"] = other.stream  # which is newer, told without a clock
    return session.append(stream, OPENED, payload)
