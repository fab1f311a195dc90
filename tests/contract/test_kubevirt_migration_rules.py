"""nicplug's reading of KubeVirt's `MigrationRequired`, and the simulated KubeVirt's
evaluator and workload updater, held to the values and test inputs of kubevirt/kubevirt
(`tests/fixtures/kubevirt/migration/conditions.json`, with the source of each)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nicplug.adapters.kube.resources import WORKLOAD_UPDATE_ANNOTATION
from nicplug.machines.facts import facts_of, migration_asked
from nicplug.machines.operation import Operation
from nicplug.machines.targets import KUBEVIRT_GRACE, grace_wait
from nicplug.machines.world import KVVM, VMI, Condition, DesiredVM, World
from nicplug.simulator.actors import workload_updater
from nicplug.simulator.clock import VirtualSimClock
from nicplug.simulator.cluster import SimulatedCluster
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Delays, Knobs
from tests.simulator import driving as d

FIXTURE = json.loads((Path(__file__).parents[1] / "fixtures" / "kubevirt" / "migration"
                      / "conditions.json").read_text())
TIMED = FIXTURE["time_based"]


def _condition(shape: dict[str, Any], status: str | None = None) -> Condition:
    return Condition(shape["type"], status or shape["status"], shape.get("reason", ""), "",
                     shape.get("lastTransitionTime", ""))


def _vmi(*conditions: Condition) -> VMI:
    return VMI("vmi-1", "1", "Running", conditions=conditions)


def test_only_true_asks_for_a_migration() -> None:
    pending = _condition(TIMED["condition"])
    assert pending.type == FIXTURE["condition_type"]["value"]
    assert pending.reason == FIXTURE["reasons"]["False"]["value"]
    assert migration_asked(_vmi(pending)) is False
    due = Condition(pending.type, "True", FIXTURE["reasons"]["True"]["value"])
    assert migration_asked(_vmi(due)) is True
    assert migration_asked(_vmi()) is False


def test_the_grace_ends_where_kubevirts_evaluator_turns_it_true() -> None:
    assert FIXTURE["grace_seconds"]["value"] == KUBEVIRT_GRACE
    vm = DesiredVM("uid", "ns", "vm", "1", (), in_template=True)
    world = World(vm, KVVM("1", True), _vmi(_condition(TIMED["condition"])))
    op = Operation("uid/Network/x/plug/1", "ns/vm", "uid", "Network/x", "x", "plug", 1,
                   state="VMIPatched", flavour="kubevirt")
    said = grace_wait(facts_of(world), op)
    still_false, turned_true = TIMED["entries"]
    assert (still_false["expected"], turned_true["expected"]) == ("False", "True")
    # the grace ends between the two instants the source's test checks
    assert still_false["now"] < "2025-01-01T00:00:15Z" < turned_true["now"]
    assert "until 2025-01-01T00:00:15Z" in said


def test_the_simulated_workload_updater_uses_kubevirts_names_and_limits() -> None:
    updater = FIXTURE["workload_updater"]
    assert updater["annotation"]["value"] == workload_updater.ANNOTATION
    assert updater["annotation"]["value"] == WORKLOAD_UPDATE_ANNOTATION
    assert updater["generate_name"] == workload_updater.GENERATE_NAME
    assert updater["parallel_migrations_per_cluster"]["value"] == workload_updater.PARALLEL_DEFAULT
    assert Delays().workload_update == updater["throttle_seconds"]["value"]
    assert workload_updater.live_migrate(
        {"spec": {"workloadUpdateStrategy": {"workloadUpdateMethods": [updater["method"]]}}})


async def test_the_simulated_evaluator_turns_true_as_the_source_does() -> None:
    knobs = Knobs(dialect="multus", delays=Delays(sdn_configure=0.5, attach=0.1))
    assert knobs.migration_required_grace == FIXTURE["grace_seconds"]["value"]
    cluster = SimulatedCluster(knobs, clock=VirtualSimClock(), serve=False,
                               fixtures=Fixtures(vms=1))
    await cluster.start()
    ns, vm = cluster.vms[0]
    d.plug_kvvm(cluster.store, knobs, ns, vm, "Network", "user-net")
    await cluster.advance(14.0)  # the source's "timeout hasn't expired"
    reasons = FIXTURE["reasons"]
    assert d.condition(cluster.store, ns, vm, "MigrationRequired") == (
        "False", reasons["False"]["value"])
    await cluster.advance(2.0)  # "timeout has expired"
    assert d.condition(cluster.store, ns, vm, "MigrationRequired") == (
        "True", reasons["True"]["value"])
    assert cluster.actor_errors == []
    await cluster.stop()
