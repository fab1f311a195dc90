"""`ReadMemo`: the same worlds with and without it; a new body is read again."""

from __future__ import annotations

from dataclasses import replace

from nicplug.adapters.kube.translate.assemble import ReadMemo, assemble_world
from nicplug.adapters.sdn import dialect_for
from tests.unit.translate import bodies as b
from tests.unit.translate.test_assemble import DECKHOUSE, plugging_storage


def test_a_memo_changes_no_world() -> None:
    objects = plugging_storage()
    memo = ReadMemo()
    plain = assemble_world(objects, dialect=DECKHOUSE)
    assert assemble_world(objects, dialect=DECKHOUSE, memo=memo) == plain
    assert assemble_world(objects, dialect=DECKHOUSE, memo=memo) == plain  # from the memo


def test_a_new_body_of_the_same_object_is_read_again() -> None:
    memo = ReadMemo()
    objects = plugging_storage()
    before = assemble_world(objects, dialect=DECKHOUSE, memo=memo).world
    changed = replace(objects, vm=b.deckhouse_vm([{"type": "Main", "id": 1}]))
    after = assemble_world(changed, dialect=DECKHOUSE, memo=memo).world
    assert after == assemble_world(changed, dialect=DECKHOUSE).world
    assert after.vm != before.vm


def test_a_malformed_body_is_reported_every_time() -> None:
    memo = ReadMemo()
    objects = replace(plugging_storage(), vmi={"metadata": {"name": b.VM, "namespace": b.NS}})
    for _ in range(2):
        world = assemble_world(objects, dialect=dialect_for("deckhouse"), memo=memo).world
        assert world.observation_errors
