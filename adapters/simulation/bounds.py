"""How much one operation may do: the bounds the invariants hold every run to, in one
place.

An operation that retries a failing effect for ever, or creates a migration on every
observation, always has a timer armed: judged only by "is something armed", it looks
at rest. These bounds make such a livelock a violation (`effects-unbounded`,
`effect-livelock`, `attempts-unbounded`, `liveness.py`). Each is what a correct
controller needs in the worst schedule the simulation draws, with room: over seeds
0–119 no operation came near them (the most seen is in the comment).
"""

from __future__ import annotations

from collections.abc import Mapping

EFFECTS_PER_OPERATION: Mapping[str, int] = {
    "CreateMigration": 2,  # one, and one more after it failed (seen: 1); counted per
    # migration asked for: the same create repeated is a re-issue (`REISSUED_ALIKE`)
    # halt and start for a change, and once more for a later change while it waits; a
    # create refused (an injected 404) is decided again (seen: 6 in the deckhouse world,
    # seed 1353: a halt refused four times, then its start)
    "RestartVM": 8,
    "PatchPodNetworks": 4,  # per launcher pod (`PER_OBJECT`): the request, asked again
    # 30 and 60 s on while the informers do not show it, one re-decided after a 409
    # (seen: 2 per pod; seed 498 wrote 5 to two pods while the reissues were not spaced);
    # counted per request (entries and what they were decided from): the same request
    # repeated is a re-issue (`REISSUED_ALIKE`; seed 37870: one pod patch refused by its
    # `test` while the watches stalled, asked again as each refusal was decided, 4 times
    # in 93 s, beside one other request)
    "PatchVirtualMachine": 6,  # attach or detach, for the next boot, re-decided (seen: 4);
    # counted per template asked for: the same patch repeated is a re-issue
    # (`REISSUED_ALIKE`; seed 28759: one written for the next boot, re-issued blind 6
    # times over 300 s while the VM's watches stalled, each refused by its `test`;
    # seed 30502 the same over 450 s)
    "SetVMCondition": 8,  # a condition kept current through the waits (seen: 5), each
    # condition once (the same write repeated is a re-issue: `REISSUED_ALIKE`); one
    # the informers do not show is written again 30, 60, 120 s... into its operation's
    # state, at most every backoff_max (the harness's: 60 s), not every 30 s (seed 458:
    # a VM watch stalled four minutes, 9 writes of one landed condition, now 6)
    "RemoveVMCondition": 4,  # (seen: 1)
    "EmitEvent": 8,  # one per transition worth a person's notice (seen: 3)
}
"""Effects of each type one operation (one attempt: one stream) may issue."""

PER_OBJECT: Mapping[str, str] = {"PatchPodNetworks": "pod_uid"}
"""Effects whose bound counts per object they write (the payload's field naming it),
not per operation: a plug needs its request on every launcher pod it lives through,
and a schedule replaces the pod as often as it likes (a lost node, the user's restart,
a migration's target: seed 498 wrote one request to each of two pods, both needed).
Per pod the bound still catches requests changing for ever; one request repeated for
ever is held to the re-issues' spacing (`REISSUED_ALIKE`)."""

ATTEMPTS_PER_EFFECT = 10
"""Tries of one effect (the outbox's retries of a temporary failure; seen: 7, under a
fault answering 500 five times). An effect still retrying once the faults have been
gone for the quiet period is a livelock whatever its count (`effect-livelock`)."""

ATTEMPTS_PER_INTERFACE = 6
"""Operations (attempts) on one interface of one VM in one direction, over a whole
run: a failed one is retried with a backoff, a user's change starts another (seen: 3)."""

REISSUED_ALIKE: frozenset[str] = frozenset(
    {"CreateMigration", "PatchPodNetworks", "PatchVirtualMachine", "SetVMCondition"})
"""Effects whose same request, repeated, does nothing twice: a migration of one name
(the API server answers a second create 409 AlreadyExists, which the executor takes as
done, and creates nothing), a condition of the same status, reason and message, a KVVM
patch of the same template (it pins the resourceVersion of the KVVM the informers hold
in a JSON-patch `test`: once one landed, its repeat built on that copy is refused, 422
PATCH_NOT_APPLIED, `kube.errors.failed_test`; and it replaces the whole interface and
network lists, so one applied twice leaves the template as once), a pod patch of the
same entries (it pins the pod's uid and the request annotation, or the resourceVersion
when there was none, of the pod the informers hold, `executor/pods.py`: built on a copy
that does not show a landed write it is refused, 422 again; one the informers show is
not sent, the annotation already holding it; and it replaces the whole list). For
these the bound of `EFFECTS_PER_OPERATION` counts different requests (per object for
those of `PER_OBJECT`); the same request
asked again is a blind re-issue (docs/decisions/stranded-links-and-blind-reissues.md):
while the informers do not show a write that landed, nicplug asks it again 30, 60,
120 s into its state and then every `backoff_max`, for as long as the world does not
show it, since a write lost or undone out of sight must still be asked again. A count
cannot bound that (seeds 2865, 4332: a migration created while the VM's watches
stalled, asked again 5 times over 240 s; seed 7467: one condition 8 times over 6
minutes), so the re-issues of one request are bounded by their spacing instead:
at most `REISSUES_AT_ONCE` plus one per `REISSUE_PERIOD` of the time between the first
and the last. A request repeated faster than that is a livelock still."""

REISSUE_PERIOD = 60.0
"""The longest spacing of blind re-issues: the harness's `backoff_max`."""

REISSUES_AT_ONCE = 2
"""Re-issues allowed beyond one per `REISSUE_PERIOD`: the first two come 30 s apart
(`effect_reissue_after`), before the spacing reaches `REISSUE_PERIOD`."""
