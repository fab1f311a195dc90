"""Observe mode (the deckhouse flavour where the platform hot-plugs): the same machines,
their transitions taken from what Deckhouse writes, and no effect but Events."""

from __future__ import annotations

from nicplug.machines.decider import HotplugDecider
from nicplug.machines.policy import MachineConfig, Timeouts
from nicplug.machines.world import KVVMInterface, SDNRequest, SDNStatus
from tests.unit.machines.sim import MAIN, Driver, Sim, net

X = net("x", 2)
PLUG = ["Requested", "AnnotationPatched", "SDNReady", "VMIPatched", "Attached"]


def observing(**timeouts: float) -> Driver:
    config = MachineConfig(mode="observe", timeouts=Timeouts(**timeouts))
    return Driver(HotplugDecider(config), Sim(networks=(MAIN,)))


def written(d: Driver) -> list[str]:
    return [e.type for e in d.effects if e.type != "EmitEvent"]


def deckhouse_annotates(d: Driver) -> None:
    """`patchPodNetworkAnnotation`: the networks-spec of the launcher pod."""
    d.sim.requested = [SDNRequest("Network/x", X.if_name, 2)]


def deckhouse_updates_kvvm(d: Driver) -> None:
    """`updateKVVM`, once the SDN reports the pod's networks ready."""
    d.sim.kvvm_ifaces = [KVVMInterface("default"), KVVMInterface(X.if_name)]
    d.sim.template = [SDNRequest("Network/x", X.if_name, 2)]


def test_a_plug_follows_the_platforms_writes_and_writes_nothing() -> None:
    d = observing()
    d.run(2)
    d.sim.networks = (MAIN, X)
    d.run(2)
    assert d.op("Network/x", "plug").state == "Requested"
    deckhouse_annotates(d)
    d.run(2)  # the SDN reports it ready a step later
    assert d.op("Network/x", "plug").state == "SDNReady"
    deckhouse_updates_kvvm(d)
    d.run(3)
    op = d.op("Network/x", "plug")
    assert list(op.history) == PLUG
    assert op.mode == "observe"
    assert written(d) == []
    assert [e.payload["reason"] for e in d.effects] == ["PlugAttached"]


def test_an_sdn_that_never_gets_ready_fails_with_its_message_and_a_warning() -> None:
    d = observing(sdn_ready_timeout=30)
    d.sim.networks = (MAIN, X)
    d.sim.sdn_silent = frozenset({"Network/x"})
    deckhouse_annotates(d)
    said = "NoIPAvailable: the subnet user-net has no free address"
    d.sim.reported = [SDNStatus("Network/x", X.if_name, False, message=said)]
    d.run(32)  # Deckhouse alone would wait forever ("Waiting for SDN...", no deadline)
    op = d.op("Network/x", "plug")
    assert (op.state, op.reason) == ("Failed", "SDNTimeout")
    assert "AnnotationPatched within 30s" in op.message and said in op.message
    assert written(d) == []
    warning = next(e for e in d.effects if e.payload["reason"] == "PlugFailed")
    assert warning.payload["type"] == "Warning"
    assert "SDNTimeout" in warning.payload["message"] and said in warning.payload["message"]
    waiting = next(e for e in d.effects if e.payload["reason"] == "PlugWaitingForSDN")
    assert said in waiting.payload["message"]  # said at once, as a Warning too


def test_an_unplug_is_followed_in_deckhouses_order() -> None:
    d = observing()
    d.sim.networks = (MAIN, X)
    deckhouse_annotates(d)
    d.run(2)
    deckhouse_updates_kvvm(d)
    d.run(3)
    assert d.op("Network/x", "plug").state == "Attached"
    d.sim.networks = (MAIN,)
    d.run(1)
    d.sim.requested = []  # the networks-spec without it first; the SDN lets go
    d.run(2)
    d.sim.kvvm_ifaces = [KVVMInterface("default"), KVVMInterface(X.if_name, True)]
    d.sim.template = []
    d.run(4)  # KubeVirt detaches it from the guest and forgets it
    op = d.op("Network/x", "unplug")
    assert list(op.history) == ["Requested", "AnnotationPatched", "VMIPatched",
                                "GuestDetached", "SDNReleased", "Detached"]
    assert written(d) == []


def test_removing_main_waits_for_the_platforms_restart_without_a_condition() -> None:
    d = observing()
    d.run(2)
    d.sim.networks = ()
    d.sim.networks = (X,)
    d.run(2)
    op = d.op("Main", "unplug")
    assert op.state == "RestartRequired"
    assert written(d) == []
    assert d.sim.vm_conditions == {}  # Deckhouse's AwaitingRestartToApplyConfiguration


def test_the_journal_says_the_mode() -> None:
    d = observing()
    d.sim.networks = (MAIN, X)
    d.run(1)
    opened = next(e for _, dec in d.log for e in dec.events if e.type == "Opened")
    assert opened.payload["mode"] == "observe"
    drive = Driver(HotplugDecider(MachineConfig()), Sim(networks=(MAIN, X)))
    drive.run(1)
    opened = next(e for _, dec in drive.log for e in dec.events if e.type == "Opened")
    assert "mode" not in opened.payload
