"""What one simulated run does, drawn from a seed: the world it starts in and its steps.

A `Schedule` is plain data (JSON in and out), so a run can be printed, shrunk, saved
and replayed. `draw(seed, faults=...)` is the only place randomness enters: the same
seed and fault classes give the same schedule, and the run is a pure function of the
schedule (`simulation/run.py`). A step waits `wait` virtual seconds, during which the
cluster and the controller do whatever they do, and then acts: as the user (networks
added, removed, reverted, re-added, several at once; the VM stopped, started,
restarted, also once nicplug's own restart of it is under way; a migration asked
for), as the platform (a VMI recreated, a launcher pod
replaced, a migration failed in whatever phase it is, an SDN entry turning to error)
or as a fault (HTTP errors, slow answers, dropped, expired and stalled watches, a
journal that cannot commit, the controller killed, its Lease lost to a standby).
The deckhouse world comes in two: the API server speaking upstream KubeVirt's names
(where nicplug, finding no VirtualMachineOperations, leaves Deckhouse's `Manual` run
strategy alone and every restart to the user), or Deckhouse's renamed API, as a real
Deckhouse cluster serves it, where nicplug restarts through VirtualMachineOperations.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

FaultClass = Literal["vm", "user", "migration", "api", "watch", "crash", "journal",
                     "lease", "malformed", "sdn", "clock"]
FAULT_CLASSES: tuple[FaultClass, ...] = (
    "vm", "user", "migration", "api", "watch", "crash", "journal", "lease",
    "malformed", "sdn", "clock",
)
CLOCK_STEPS: tuple[float, ...] = (-7200.0, -600.0, -90.0, -5.0, 5.0, 90.0, 600.0, 3600.0)
"""Seconds the controllers' wall clock is stepped by (back and forward, seconds to
hours): a timer asleep across a step wakes early or late."""

# The networks a user may ask for, with the id each keeps (ids never change here: an id
# change is a restart-only update, which the `vm` class reaches through restarts).
NETWORKS: tuple[tuple[str, str, int], ...] = (
    ("Network", "user-net", 2), ("Network", "second-net", 3), ("ClusterNetwork", "storage", 4),
)


@dataclass(frozen=True, slots=True)
class Setup:
    """The world a run starts in."""

    dialect: Literal["deckhouse", "multus"] = "deckhouse"
    # the KubeVirt API the server speaks: upstream names (the store's), or Deckhouse's
    # renamed copy, where nicplug restarts through VirtualMachineOperations (deckhouse)
    kubevirt_api: Literal["upstream", "deckhouse"] = "upstream"
    dynamic_networks_controller: bool = False
    rollout: Literal["LiveUpdate", "Stage"] = "LiveUpdate"
    approval: Literal["Manual", "Automatic"] = "Manual"
    vms: int = 1
    standby: bool = False  # a second replica (own journal) stands for the Lease
    sdn_configure: float = 0.5
    restart_delay: float = 1.0
    migration_delay: float = 2.0
    # deckhouse: does KubeVirt detach a NIC marked absent from the running domain? Off
    # as Deckhouse's KubeVirt is for bpfbridge: the guest keeps it until a migration or
    # a restart (`Knobs.detaches_live`)
    detaches_live: bool = True


@dataclass(frozen=True, slots=True)
class Step:
    wait: float  # virtual seconds before acting
    action: str
    vm: int = 0
    arg: Any = None  # JSON-able, the action's own argument

    def describe(self) -> str:
        arg = "" if self.arg is None else f" {self.arg}"
        return f"+{self.wait:g}s {self.action} vm{self.vm}{arg}"


@dataclass(frozen=True, slots=True)
class Schedule:
    seed: int
    setup: Setup
    steps: tuple[Step, ...]
    faults: tuple[FaultClass, ...] = field(default=FAULT_CLASSES)

    def to_json(self) -> dict[str, Any]:
        return {"seed": self.seed, "setup": asdict(self.setup),
                "steps": [asdict(s) for s in self.steps], "faults": list(self.faults)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Schedule:
        return cls(
            seed=int(data["seed"]), setup=Setup(**data["setup"]),
            steps=tuple(Step(**s) for s in data["steps"]),
            faults=tuple(data.get("faults", FAULT_CLASSES)),
        )

    def with_steps(self, steps: tuple[Step, ...]) -> Schedule:
        return replace(self, steps=steps)


def _networks(rng: random.Random) -> list[str]:
    return sorted(f"{t}/{n}" for t, n, _ in NETWORKS if rng.random() < 0.5)


def _step(rng: random.Random, setup: Setup, faults: tuple[FaultClass, ...]) -> Step:
    vm = rng.randrange(setup.vms)
    wait = rng.choice((0.0, 0.0, 0.1, 0.3, 0.5, 1.0, 2.0, 5.0, 15.0, 40.0, 130.0))
    options: list[tuple[str, Any]] = []
    if "user" in faults:
        options += [("networks", _networks(rng))] * 4
        options += [("add", rng.choice(NETWORKS)[1]), ("remove", rng.choice(NETWORKS)[1]),
                    ("revert", None)]
    if "vm" in faults:
        options += [("stop", None), ("start", None), ("restart", None), ("replace_pod", None)]
    if "migration" in faults:
        options += [("migrate", None), ("fail_migration", None)]
    if "api" in faults:
        options += [("http_fault", {
            "code": rng.choice((409, 404, 429, 500, 503)),
            "verb": rng.choice(("patch", "create", "delete", "get", None)),
            "times": rng.choice((1, 2, 5)),
            "retry_after": rng.choice((0, 1, 3)),
        }), ("slow", rng.choice((1.0, 40.0)))]
    if "watch" in faults:
        options += [("drop_watches", None), ("expire_watches", None), ("stall_watches", None),
                    ("resume_watches", None)]
    if "crash" in faults:
        options += [("kill", rng.choice((0.0, 0.0, 1.0, 20.0)))]
    if "journal" in faults:
        options += [("journal_full", rng.choice((1, 2, 4)))]
    if "lease" in faults and setup.standby:
        options += [("partition", rng.choice((5.0, 20.0, 40.0)))]
    if "malformed" in faults:
        options += [("malform", rng.choice(("vm", "pod", "kubevirt"))),
                    ("heal", None)]
    if "sdn" in faults:
        options += [("sdn_error", rng.choice(NETWORKS)[1])]
    if not options:
        options = [("networks", _networks(rng))]
    action, arg = options[rng.randrange(len(options))]
    return Step(wait=wait, action=action, vm=vm, arg=arg)


INTENT_ACTS: tuple[str, ...] = ("Start", "Stop", "Restart")
INTENT_DELAYS: tuple[float, ...] = (0.0, 0.0, 0.3, 1.0, 5.0, 40.0)


def _intent(rng: random.Random) -> dict[str, Any]:
    """What the user does once nicplug's restart of the VM is under way (its `Stop`
    created: `stopping`, or completed: `stopped`): one to three operations of their
    own, each some seconds after the one before."""
    return {"when": rng.choice(("stopping", "stopped")),
            "acts": [[rng.choice(INTENT_ACTS), rng.choice(INTENT_DELAYS)]
                     for _ in range(rng.randint(1, 3))]}


def draw(seed: int, *, faults: tuple[FaultClass, ...] = FAULT_CLASSES,
         steps: int | None = None) -> Schedule:
    """The schedule of `seed`: its setup and between 3 and 12 steps (or `steps`)."""
    rng = random.Random(seed)
    dialect: Literal["deckhouse", "multus"] = rng.choice(("deckhouse", "deckhouse", "multus"))
    setup = Setup(
        dialect=dialect,
        # from a stream of its own: a seed's other draws stay what they were
        kubevirt_api="deckhouse" if dialect == "deckhouse"
        and random.Random(f"api/{seed}").random() < 0.5 else "upstream",
        dynamic_networks_controller=dialect == "multus" and rng.random() < 0.5,
        rollout=rng.choice(("LiveUpdate", "LiveUpdate", "Stage")),
        approval=rng.choice(("Manual", "Automatic")),
        vms=rng.choice((1, 1, 2)),
        standby="lease" in faults and rng.random() < 0.3,
        sdn_configure=rng.choice((0.0, 0.5, 2.0)),
        restart_delay=rng.choice((0.0, 1.0, 5.0)),
        migration_delay=rng.choice((0.5, 2.0, 10.0)),
    )
    count = steps if steps is not None else rng.randint(3, 12)
    drawn = [_step(rng, setup, faults) for _ in range(count)]
    if setup.kubevirt_api == "deckhouse" and setup.approval == "Automatic" and "vm" in faults:
        # the user's own start, stop and restart while nicplug restarts the VM: from a
        # stream of its own too, and only where nicplug restarts one
        user = random.Random(f"intent/{seed}")
        if user.random() < 0.5:
            drawn.insert(user.randrange(count + 1), Step(
                wait=0.0, action="intend", vm=user.randrange(setup.vms),
                arg=_intent(user)))
    if "clock" in faults:
        # from a stream of its own: a seed's other steps stay what they were before
        # the clock stepped in the schedules
        clock = random.Random(f"clock/{seed}")
        for index in reversed(range(count)):
            if clock.random() < 0.15:
                drawn.insert(index, Step(wait=0.0, action="clock_step",
                                         arg=clock.choice(CLOCK_STEPS)))
    return Schedule(seed=seed, setup=setup, steps=tuple(drawn), faults=faults)
