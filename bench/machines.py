"""`python -m bench machines [--quick] [--instructions]`: decisions per second, bytes per live
operation, and instructions per decision.

Ours: `HotplugDecider.decide` + `evolve` for 10k VMs with one plug each, fed the worlds
of a plug in order (pod annotated, SDN ready, KVVM patched) and then the same world
again, on one core. The naive design beside it: one `transitions` `AsyncMachine` with
one model per operation (`add_model` each), a decision being `await model.trigger()`
of the moves out of the model's state with the same guard functions. Memory is
measured with `tracemalloc`: our per-VM state rebuilt from its read-model rows versus
the machine with its models. The last line is one JSON object; besides the wall-clock
rate it gives the rate per CPU second of the process (`decisions_per_cpu_s`), which
other processes on a shared machine disturb much less.

Both designs decide under the controller's collector policy (`adapters/heap.py`): what
is built before the clock starts (the worlds, the initial states or models) is built
with the collector held off and then frozen, as the controller's load is, and the timed
loop runs with what survives each full collection frozen, as the controller's run does.
Left to CPython's default, the full collections walked the 50,000 unfrozen worlds the
bench keeps, a cost the controller does not pay; it was 20-40% of the measured time.

`--instructions` adds the one figure other processes do not move: the instructions a
decision executes, counted by valgrind's callgrind (which must be installed). Two
processes build the same 1,500 VMs' worlds and initial states, then decide the five
worlds of the first 100 and of the first 1,100 VMs under the same collector policy; the
difference of their counts over the 5,000 decisions between them leaves out start-up
and setup (about a minute; `instructions_per_decision` in the JSON line). Compare two
versions of the code by it on a shared machine, where decisions/s move with the load.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from transitions.extensions.asyncio import AsyncMachine

from nicplug.adapters.heap import frozen_after_full_collections
from nicplug.engine.model import Cause, Input, Key, Observed, RecordedEvent, StreamId
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.facts import facts_of
from nicplug.machines.graph import PLUG
from nicplug.machines.guards import GUARDS, Context
from nicplug.machines.operation import Operation, VMState
from nicplug.machines.policy import MachineConfig
from nicplug.machines.world import (
    KVVM,
    VMI,
    DesiredVM,
    KVVMInterface,
    LauncherPod,
    NetworkSpec,
    SDNRequest,
    SDNStatus,
    VMIInterfaceStatus,
    World,
)

X = NetworkSpec("Network", "user-net", 2)
MAIN = NetworkSpec("Main")
CAUSE = Observed(Cause("observation", "bench"))
STEPS = 5
"""The worlds each VM is fed (`worlds_of`)."""


@contextmanager
def built_long_lived() -> Iterator[None]:
    """What the block builds is long-lived, as the controller's load: built with the
    collector held off, then frozen (`heap.loading_long_lived`)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


@contextmanager
def as_the_controller_runs() -> Iterator[None]:
    """The timed loop under the controller's policy (`frozen_after_full_collections`);
    everything frozen is given back afterwards, so each round starts alike."""
    try:
        with frozen_after_full_collections():
            yield
    finally:
        gc.unfreeze()


def worlds_of(index: int) -> list[World]:
    """The worlds one VM goes through while X is plugged (it never attaches here)."""
    vm = DesiredVM(f"uid-{index}", "ns", f"vm-{index}", "1", (MAIN, X))
    request = SDNRequest(X.identity, X.if_name, 2)
    default = KVVMInterface("default")
    kvvm = KVVM("1", True, (default,))
    kvvm_x = KVVM("2", True, (default, KVVMInterface(X.if_name)), (), (request,))
    status = (VMIInterfaceStatus("default", info_source=frozenset({"domain"})),)
    pod = LauncherPod("ns", f"virt-launcher-{index}", f"pod-{index}", "1", "Running")
    vmi = VMI(f"vmi-{index}", "1", "Running", (default,), (), status, (), {pod.uid: "n"})
    annotated = LauncherPod(pod.namespace, pod.name, pod.uid, "2", "Running", "n", (request,))
    ready = LauncherPod(pod.namespace, pod.name, pod.uid, "3", "Running", "n", (request,),
                        (SDNStatus(X.identity, X.if_name, True),))  # fmt: skip
    vmi_x = VMI(vmi.uid, "2", "Running", kvvm_x.interfaces, (), status, (), {pod.uid: "n"})
    return [
        World(vm, kvvm, vmi, (pod,)),
        World(vm, kvvm, vmi, (annotated,)),
        World(vm, kvvm, vmi, (ready,)),
        World(vm, kvvm_x, vmi_x, (ready,)),
        World(vm, kvvm_x, vmi_x, (ready,)),
    ]


def run_ours(vms: int) -> tuple[float, float, int, dict[Key, VMState]]:
    """Seconds, CPU seconds, decisions, and the states they left."""
    decider = HotplugDecider(MachineConfig())
    gc.collect()
    with built_long_lived():
        keys = [Key(f"ns/vm-{i}") for i in range(vms)]
        worlds = [worlds_of(i) for i in range(vms)]
        states = {k: decider.initial(k) for k in keys}
    with as_the_controller_runs():
        start, cpu = time.perf_counter(), time.process_time()
        _decide_all(decider, keys, worlds, states)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    return elapsed, cpu, len(keys) * STEPS, states


def _decide_all(
    decider: HotplugDecider, keys: list[Key], worlds: list[list[World]],
    states: dict[Key, VMState],
) -> None:
    """Every VM through its five worlds, one step for all VMs at a time."""
    position = 0
    for step in range(STEPS):
        now = float(step)
        for key, seq in zip(keys, worlds, strict=True):
            state = states[key]
            decision = decider.decide(state, Input(key, seq[step], CAUSE), now)
            for e in decision.events:
                position += 1
                recorded = RecordedEvent(
                    e.stream, key, position, position, e.type, e.schema_version, e.payload,
                    CAUSE.cause, now, now,
                )  # fmt: skip
                state = decider.evolve(state, recorded)
            states[key] = state


def bytes_ours(states: dict[Key, VMState]) -> float:
    """Memory of the per-VM states, rebuilt from their read-model rows."""
    rows = {k: s.views() for k, s in states.items()}
    live = sum(1 for s in states.values() for op in s.ops.values() if not op.terminal)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    rebuilt = {k: VMState.restore(k, v) for k, v in rows.items()}
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(rebuilt) == len(states)
    return used / max(live, 1)


class NaiveOperation:
    """One `transitions` model per operation, guards as its methods."""

    def __init__(self, op: Operation, config: MachineConfig) -> None:
        self.op = op
        self.config = config
        self.context: Context | None = None


def _guard_method(name: str) -> Any:
    guard = GUARDS[name]

    def method(self: NaiveOperation) -> bool:
        assert self.context is not None
        return guard(self.context)

    return method


for _name in GUARDS:
    setattr(NaiveOperation, _name, _guard_method(_name))


def naive_models(count: int, config: MachineConfig) -> tuple[Any, list[NaiveOperation]]:
    machine = PLUG.machine(AsyncMachine, model=None)
    models = []
    for i in range(count):
        op = Operation(StreamId(f"uid-{i}/Network/user-net/plug/1"), f"ns/vm-{i}", f"uid-{i}",
                       X.identity, X.if_name, "plug", 1)  # fmt: skip
        model = NaiveOperation(op, config)
        machine.add_model(model, initial="Requested")
        models.append(model)
    return machine, models


async def run_naive(count: int) -> tuple[float, int, float, float]:
    config = MachineConfig()
    gc.collect()
    with built_long_lived():
        worlds = [worlds_of(i) for i in range(count)]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = naive_models(count, config)
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del kept
    gc.collect()
    start = time.perf_counter()
    with built_long_lived():
        machine, models = naive_models(count, config)
    add_model_s = time.perf_counter() - start
    moves = {state: list(machine.get_triggers(state)) for state in PLUG.states}
    decisions = 0
    with as_the_controller_runs():
        start = time.perf_counter()
        for step in range(5):
            for model, seq in zip(models, worlds, strict=True):
                facts = facts_of(seq[step])
                model.context = Context(model.op, facts, config, float(step), CAUSE)
                for trigger in moves[getattr(model, "state")]:  # noqa: B009  (by transitions)
                    if await getattr(model, "trigger")(trigger):  # noqa: B009
                        break
                decisions += 1
        elapsed = time.perf_counter() - start
    return elapsed, decisions, used / count, add_model_s / count


COUNTED_VMS = 1_500
"""The VMs whose worlds each counted process builds (`--instructions`)."""
COUNTED = (100, 1_100)
"""The VMs each counted process decides: the difference is 1,000 VMs' five worlds."""


def decide_counted(vms: int) -> None:
    """The counted process: build `COUNTED_VMS` VMs' worlds and states as `run_ours`
    does, then decide the five worlds of the first `vms`."""
    decider = HotplugDecider(MachineConfig())
    with built_long_lived():
        keys = [Key(f"ns/vm-{i}") for i in range(COUNTED_VMS)]
        worlds = [worlds_of(i) for i in range(COUNTED_VMS)]
        states = {k: decider.initial(k) for k in keys}
    with as_the_controller_runs():
        _decide_all(decider, keys[:vms], worlds[:vms], states)


def collected(callgrind_stderr: str) -> int:
    """The instructions callgrind counted, from its summary on stderr."""
    found = re.search(r"Collected\s*:\s*([\d,]+)", callgrind_stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no count: {callgrind_stderr[-500:]!r}")
    return int(found.group(1).replace(",", ""))


def instructions_per_decision() -> float:
    """Instructions per decision, counted by callgrind (`--instructions`)."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("--instructions needs valgrind (its callgrind tool) on the PATH")
    counts = []
    for vms in COUNTED:
        done = subprocess.run(
            [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
             "-m", "bench.machines", "--counted", str(vms)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        counts.append(collected(done.stderr))
    return (counts[1] - counts[0]) / ((COUNTED[1] - COUNTED[0]) * STEPS)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench machines", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="a smaller run: one round")
    parser.add_argument("--instructions", action="store_true",
                        help="also count the instructions per decision (valgrind)")  # fmt: skip
    parser.add_argument("--counted", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.counted is not None:
        decide_counted(args.counted)
        return 0
    quick = bool(args.quick)
    vms = 10_000
    rounds = 1 if quick else 3
    ours_rates = []
    ours_cpu_rates = []
    states: dict[Key, VMState] = {}
    for _ in range(rounds):
        elapsed, cpu, decisions, states = run_ours(vms)
        ours_rates.append(decisions / elapsed)
        ours_cpu_rates.append(decisions / cpu)
    live = sum(1 for s in states.values() for op in s.ops.values() if not op.terminal)
    ours_bytes = bytes_ours(states)
    naive_count = 2_000 if quick else vms
    naive_rates = []
    naive_bytes = add_cost = 0.0
    for _ in range(rounds):
        elapsed, decisions, naive_bytes, add_cost = asyncio.run(run_naive(naive_count))
        naive_rates.append(decisions / elapsed)
    ours = statistics.median(ours_rates)
    naive = statistics.median(naive_rates)
    print(f"{'design':<34}{'live ops':>10}{'decisions/s':>14}{'bytes/op':>10}")
    print(f"{'HotplugDecider (records)':<34}{live:>10}{ours:>14,.0f}{ours_bytes:>10,.0f}")
    print(f"{'AsyncMachine, add_model per op':<34}{naive_count:>10}{naive:>14,.0f}"
          f"{naive_bytes:>10,.0f}")  # fmt: skip
    print(f"add_model: {add_cost * 1e6:.0f} µs per model at {naive_count} models; "
          f"rounds: {rounds} (median)")  # fmt: skip
    print("targets: ≥50k decisions/s, ≤1 KB per live operation")
    result = {
        "decisions_per_s": round(ours),
        "decisions_per_cpu_s": round(statistics.median(ours_cpu_rates)),
        "ratio_vs_naive_transitions": round(ours / naive, 2),
        "bytes_per_operation": round(ours_bytes),
        "naive_bytes_per_operation": round(naive_bytes),
        "live_operations": live,
        "naive_operations": naive_count,
        "naive_decisions_per_s": round(naive),
        "naive_add_model_us": round(add_cost * 1e6, 1),
        "quick": quick,
    }
    if args.instructions:
        counted = instructions_per_decision()
        print(f"instructions per decision (callgrind): {counted:,.0f}")
        result["instructions_per_decision"] = round(counted)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
