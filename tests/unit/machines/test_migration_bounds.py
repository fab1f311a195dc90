"""A change's failed migrations are bounded: at most `migration_attempts` of them, a
backoff apart that doubles, then `Failed(MigrationFailed)` with KubeVirt's last words,
never retried on its own. Before the bound, a migration KubeVirt failed before nicplug
saw it run was created again under the next free name at every observation (about 600
in 1,200 simulated seconds here; the issue counted 1,200 against the simulated
cluster)."""

from __future__ import annotations

import itertools

import pytest

from nicplug.engine.model import EffectOutcome, EffectRequest
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.policy import MachineConfig, Timeouts
from tests.unit.machines.sim import Driver, Sim, net

NET = ("Network/fancy-net", "plug")
OPTED_IN = {"nicplug.io/migrations": "true"}


def kubevirt(sim: Sim, **config: object) -> Driver:
    decider = HotplugDecider(MachineConfig(dialect_kind="multus", **config))  # type: ignore[arg-type]
    return Driver(decider, sim, multus=True)


def created_at(d: Driver) -> list[float]:
    """When each migration was asked for (the simulation creates it at once)."""
    times: list[float] = []

    def note(request: EffectRequest) -> EffectOutcome | None:
        if request.type == "CreateMigration":
            times.append(d.now)
        return None

    d.answer = note
    return times


@pytest.mark.parametrize("refused", [True, False], ids=["failed-at-once", "failed-running"])
def test_a_vm_whose_migrations_always_fail_gets_the_cap_then_failed_with_kubevirts_words(
    refused: bool,
) -> None:
    sim = Sim(in_template=True, kubevirt_owns_pod=True, dynamic_networks=False,
              kvvm_labels=OPTED_IN, migration_refused="no node fits" if refused else "",
              migration_fails=not refused)
    d = kubevirt(sim, migrations="opt-in")
    times = created_at(d)
    d.run(1)
    sim.user_plugs("fancy-net", "fancy-net")
    d.run(1200)
    assert len(sim.migrations) == len(times) == 3  # the default cap
    plug = d.op(*NET)
    assert (plug.state, plug.reason, plug.retry_at) == ("Failed", "MigrationFailed", None)
    words = "no node fits" if refused else "the migration failed"
    assert words in plug.message and "nicplug gives up (--migration-attempts)" in plug.message
    assert plug.migrations_failed == 3
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps[1] > gaps[0]  # the backoff doubles between them
    said = [e.payload for e in d.effects
            if e.type == "EmitEvent" and e.payload["reason"] == "PlugFailed"]
    assert said[-1]["type"] == "Warning" and words in str(said[-1]["message"])
    d.run(3000)  # nothing more, however long it waits
    assert len(sim.migrations) == 3 and d.op(*NET).stream == plug.stream


def test_the_cap_is_a_setting_and_a_restart_that_applies_the_change_adopts_it() -> None:
    sim = Sim(in_template=True, kubevirt_owns_pod=True, dynamic_networks=False,
              migration_refused="no node fits")
    d = kubevirt(sim, migration_attempts=1)
    d.run(1)
    sim.user_plugs("fancy-net", "fancy-net")
    d.run(300)
    assert len(sim.migrations) == 1 and d.op(*NET).state == "Failed"
    sim.restart()  # the user restarts the VM: it boots with the interface
    d.run(10)
    plug = d.op(*NET)
    assert plug.state == "Attached" and plug.attempt == 2 and len(sim.migrations) == 1


def test_taking_the_change_back_and_asking_again_tries_again() -> None:
    sim = Sim(networks=(net("Main", 1, "Main"),), dynamic_networks=False,
              migration_refused="no node fits")
    d = Driver(HotplugDecider(MachineConfig(migration_attempts=2,
                                            timeouts=Timeouts(backoff_base=1))), sim)
    d.run(2)
    sim.networks = (net("Main", 1, "Main"), net("user-net", 2))
    d.run(200)
    assert len(sim.migrations) == 2 and d.op("Network/user-net", "plug").state == "Failed"
    sim.networks = (net("Main", 1, "Main"),)
    d.run(30)
    sim.networks = (net("Main", 1, "Main"), net("user-net", 2))
    d.run(5)
    assert len(sim.migrations) > 2  # asked again: a fresh count


def waits(d: Driver) -> list[str]:
    return [str(e.payload["message"]) for _, decision in d.log for e in decision.events
            if e.type == "Waiting"]


def test_migration_required_false_is_kubevirts_grace_not_a_migration() -> None:
    """With a dynamic-networks controller KubeVirt raises `MigrationRequired=False`
    (`AutoMigrationPending`) while the pod lacks the link; nicplug waits it out, says so
    (`explain` reads the `Waiting` message; no Warning Event for it) and migrates nothing."""
    sim = Sim(in_template=True, kubevirt_owns_pod=True, grace=3,
              sdn_silent=frozenset({NET[0]}))
    d = kubevirt(sim)
    d.run(1)
    sim.user_plugs("fancy-net", "fancy-net")
    d.run(6)
    plug = d.op(*NET)
    assert plug.state in ("VMIPatched", "AnnotationPatched")
    assert plug.waiting.startswith("KubeVirt gives the dynamic-networks controller until "
                                   "2026-12-04T10:00:15Z to plug the interface in place")
    sim.sdn_silent = frozenset()
    d.run(6)
    assert d.op(*NET).state == "Attached"
    assert not any(e.type == "CreateMigration" for e in d.effects)
    assert not any(e.type == "EmitEvent" and "Waiting" in str(e.payload["reason"])
                   for e in d.effects)


def test_without_a_dynamic_networks_controller_the_migration_waits_for_true() -> None:
    sim = Sim(in_template=True, kubevirt_owns_pod=True, dynamic_networks=False, grace=4)
    d = kubevirt(sim)
    d.run(1)
    sim.user_plugs("fancy-net", "fancy-net")
    d.run(4)
    assert d.op(*NET).state != "MigrationRequired" and not sim.migrations
    assert any(w.startswith("KubeVirt gives") for w in waits(d))
    d.run(12)
    plug = d.op(*NET)
    assert plug.state == "Attached" and "MigrationRequired" in plug.history
    assert len(sim.migrations) == 1


@pytest.mark.parametrize("policy", ["auto", "never"])
def test_with_live_migrate_kubevirt_migrates_and_nicplug_follows(policy: str) -> None:
    """KubeVirt's workload updater migrates the VMI (`workloadUpdateMethods:
    [LiveMigrate]`): nicplug creates none, adopts KubeVirt's and follows it to
    `Attached`; where its own policy would not migrate, a Warning says that KubeVirt
    will anyway and which setting decides it."""
    sim = Sim(in_template=True, kubevirt_owns_pod=True, dynamic_networks=False,
              workload_update=True, grace=2)
    d = kubevirt(sim, migrations=policy)
    d.run(1)
    sim.user_plugs("fancy-net", "fancy-net")
    d.run(20)
    plug = d.op(*NET)
    assert plug.state == "Attached" and "Migrating" in plug.history
    assert plug.migration == "kubevirt-workload-update-0"
    assert not any(e.type == "CreateMigration" for e in d.effects)
    (said,) = [e.payload for e in d.effects
               if e.type == "EmitEvent" and e.payload["reason"] == "PlugMigrationRequired"]
    if policy == "never":
        assert said["type"] == "Warning"
        assert "KubeVirt will migrate it anyway" in str(said["message"])
        assert "workloadUpdateMethods holds LiveMigrate" in str(said["message"])
        assert "not --migrations" in str(said["message"])
    else:
        assert said["type"] == "Normal" and "follows KubeVirt's" in str(said["message"])


def test_kubevirts_failed_migrations_count_against_the_cap() -> None:
    sim = Sim(in_template=True, kubevirt_owns_pod=True, dynamic_networks=False,
              workload_update=True, migration_fails=True)
    d = kubevirt(sim, migration_attempts=2)
    d.run(1)
    sim.user_plugs("fancy-net", "fancy-net")
    d.run(300)
    plug = d.op(*NET)
    assert (plug.state, plug.reason, plug.migrations_failed) == ("Failed", "MigrationFailed", 2)
    assert not any(e.type == "CreateMigration" for e in d.effects)


def test_an_interface_kubevirt_will_not_hot_plug_needs_a_restart_said_at_once() -> None:
    """KubeVirt hot-plugs bridge and SR-IOV interfaces only (`vm.go`): a passt one (a
    binding plugin) is reported at once as waiting for a restart, with the reason, not
    left to time out; the user's restart brings it."""
    sim = Sim(in_template=True, kubevirt_owns_pod=True)
    d = kubevirt(sim)
    d.run(1)
    sim.user_plugs("fancy-net", "fancy-net", binding="plugin/passt")
    d.run(2)
    plug = d.op(*NET)
    assert plug.state == "RestartRequired" and list(plug.history) == [
        "Requested", "RestartRequired"]
    assert "KubeVirt hot-plugs only bridge and SR-IOV interfaces" in plug.message
    assert "bound by plugin/passt" in plug.message and "next restart" in plug.message
    (said,) = [e.payload for e in d.effects
               if e.type == "EmitEvent" and e.payload["reason"] == "PlugRestartRequired"]
    assert said["type"] == "Warning" and "plugin/passt" in str(said["message"])
    d.run(400)  # no deadline ends the wait
    assert d.op(*NET).state == "RestartRequired" and not sim.migrations
    sim.restart()
    d.run(6)
    assert d.op(*NET).state == "Attached"


def test_a_migration_seen_failed_before_its_creation_is_reported_says_kubevirts_words() -> None:
    """The watch can bring the failed migration before the executor reports that it was
    created: the decision taken on that report (a success) gives the migration's own
    failure as the reason, not "CreateMigration was rejected"."""
    sim = Sim(in_template=True, kubevirt_owns_pod=True, dynamic_networks=False,
              kvvm_labels=OPTED_IN, migration_refused="no node fits")
    d = kubevirt(sim, migrations="opt-in", migration_attempts=1)

    def created_then_failed(request: EffectRequest) -> EffectOutcome | None:
        if request.type != "CreateMigration":
            return None
        sim.execute(request)
        sim.settle()  # KubeVirt refuses it before the executor's report arrives
        return EffectOutcome(effect_id=1, stream=request.stream, type=request.type, ok=True,
                             result={"created": True})

    d.answer = created_then_failed
    d.run(1)
    sim.user_plugs("fancy-net", "fancy-net")
    d.run(60)
    plug = d.op(*NET)
    assert (plug.state, plug.reason) == ("Failed", "MigrationFailed")
    assert "no node fits" in plug.message and "was rejected" not in plug.message
