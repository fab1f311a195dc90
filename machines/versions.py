"""The schema versions of everything the machines persist, and the upcasters that read
older ones.

Events, the operation snapshot and effect payloads each have a version; this is the one
place they are bumped. A change of shape adds the new version here with a pure upcaster
from the one before, so a journal written by an older nicplug reads as if written
today. Versions so far:

* `EffectsIssued` 2: the digests of the issued effects are `digests` (1: `keys`, which
  read as if they were idempotency keys).
* snapshot 2: `digests` likewise (1: `issued`); a snapshot is a cache, so recovery folds
  the events again rather than trusting an older one (`nicplug.engine.recovery`).
* snapshot 3: `paused_at` and `credit` (deadlines count only time the VM was live); a
  version-2 snapshot reads with none (`paused_at` None, `credit` 0).
* `Paused`, `Resumed` 1: as first written.
* effects 1: as first written; members added since are optional and read with their
  defaults: `PatchPodNetworks.observed` and `PatchVirtualMachine.observed` / `pods` / `stopped`
  (none: no precondition), `RestartVM.step` / `resumes` (a pending restart of an older
  nicplug reads as a halt whose precondition fails, so it is decided again),
  `RestartVM.by` (absent: `run-strategy`, as before restarts through Deckhouse's
  `VirtualMachineOperation`s), `RestartVM.for` (absent: the operations a restart is
  for are not said, as before; a `Stop` the user took the VM back from then holds
  nothing back).
* `Opened` 1 carries `flavour` only for an operation not of the deckhouse flavour (absent:
  deckhouse); snapshots (2 and 3) likewise `flavour` and `bypassed_vmi` (absent: none), so older
  journals read unchanged.
* `RolloutBypassed` 1: `{at, strategy, vmi}`.
* `Waiting` 1: `{at, message}`; snapshots carry `waiting` only when it is not empty
  (absent: nothing said), so older journals read unchanged.
* `Named` 1: `{at, if_name, mac}`; an `Opened` whose `if_name` is `""` is a plug whose
  network had no name yet (its MAC not allocated).
* `MigrationHeld` 1: `{at, in_flight, cap}`; snapshots carry `held` (`[in_flight, cap]`)
  only when set (absent: not held).
* `Opened` 2 and snapshot 4: the upstream KubeVirt flavour is recorded as `kubevirt`, the
  name the flavour is known by (`Opened` 1 and snapshots up to 3 said `multus`, its SDN
  dialect's name); an older payload saying `multus` reads as `kubevirt`.
* `Opened` 2 and snapshot 4 carry `mode: observe` for an operation whose steps the
  platform wrote and nicplug followed (absent: `drive`), so older journals read unchanged.
* No version bump for a change the platform finished before nicplug decided on it: a
  plug or unplug opened with `target: observed-done` (the field plugs and unplugs left
  empty) and its `Transitioned` `Requested → Attached` / `Detached` (`observed_done`);
  older journals read unchanged (docs/decisions/observed-done.md).
* No version bump either for an id change finished unseen: an `update` opened with
  `target: observed-done:id=7;pos=1` and its `Transitioned` `Requested → Attached`; a
  plug's `target` says the id it plugs under (`id=2`, observed done
  `observed-done:id=2`; `""` or `observed-done`, as older journals hold it: not said,
  and nicplug then guesses no id change from it).
"""

from __future__ import annotations

from typing import Any

from nicplug.engine.upcasting import SNAPSHOT, Payload, Schemas, Upcasters
from nicplug.machines.effects import EFFECT_TYPES
from nicplug.machines.operation import (
    EFFECTS_ISSUED,
    GRACE_EXPIRED,
    MIGRATION_HELD,
    NAMED,
    OPENED,
    PAUSED,
    RESUMED,
    ROLLOUT_BYPASSED,
    SNAPSHOT_SCHEMA,
    TRANSITIONED,
    WAITING,
)

EVENT_SCHEMAS = {
    OPENED: 2, TRANSITIONED: 1, EFFECTS_ISSUED: 2, GRACE_EXPIRED: 1, ROLLOUT_BYPASSED: 1,
    PAUSED: 1, RESUMED: 1, NAMED: 1, WAITING: 1, MIGRATION_HELD: 1,
}
EFFECT_SCHEMAS = dict.fromkeys(EFFECT_TYPES, 1)


def _renamed(payload: Payload, old: str, new: str) -> dict[str, Any]:
    renamed = {k: v for k, v in payload.items() if k != old}
    renamed[new] = payload[old]
    return renamed


def _kubevirt_flavour(payload: Payload) -> Payload:
    """`flavour: multus` (what the kubevirt flavour was recorded as) reads `kubevirt`."""
    if payload.get("flavour") != "multus":
        return payload
    return {**payload, "flavour": "kubevirt"}


def schemas() -> Schemas:
    """The registries a journal of nicplug's machines is read through."""
    events = Upcasters(EVENT_SCHEMAS)
    events.register(EFFECTS_ISSUED, 1, lambda p: _renamed(p, "keys", "digests"))
    events.register(OPENED, 1, _kubevirt_flavour)
    snapshots = Upcasters({SNAPSHOT: SNAPSHOT_SCHEMA})
    snapshots.register(SNAPSHOT, 1, lambda p: _renamed(p, "issued", "digests"))
    snapshots.register(SNAPSHOT, 2, lambda p: {"paused_at": None, "credit": 0.0, **p})
    snapshots.register(SNAPSHOT, 3, _kubevirt_flavour)
    return Schemas(events=events, snapshots=snapshots, effects=Upcasters(EFFECT_SCHEMAS))
