"""Deckhouse's `virtualization-restricted-access-policy`, as the API server enforces it.

Deckhouse (deckhouse/virtualization, `templates/admission-policy.yaml`) installs a
ValidatingAdmissionPolicy that refuses every CREATE, UPDATE (a PATCH is one) and DELETE
of the `*.internal.virtualization.deckhouse.io` groups' resources — not their
subresources: `resources: ["*"]` matches none — unless the requester is a service
account of `kube-system` or `d8-system`, or one of the listed `d8-virtualization`
accounts. Its validation sets no `reason`, so the API server answers the denial as
422 `Invalid` with the wording of `admission.NewForbidden`
(`<resource>.<group> "<name>" is forbidden: ...`) and the policy's message as the
single cause (kubernetes/kubernetes,
`staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating/dispatcher.go`:
"ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s", the reason
defaulting to `StatusReasonInvalid` and the code to `reasonToCode(reason)`).

The simulator's API speaks only `internal.virtualization.deckhouse.io` of those groups,
and only in the deckhouse API (upstream names match nothing). Decides nothing else.
"""

from __future__ import annotations

from nicplug.simulator.errors import Invalid
from nicplug.simulator.resources import Resource

POLICY = "virtualization-restricted-access-policy"
BINDING = "virtualization-restricted-access-policy-binding"
MESSAGE = "Operation forbidden for this user."
GROUPS = frozenset({
    "clone.internal.virtualization.deckhouse.io",
    "export.internal.virtualization.deckhouse.io",
    "instancetype.internal.virtualization.deckhouse.io",
    "internal.virtualization.deckhouse.io",
    "pool.internal.virtualization.deckhouse.io",
    "snapshot.internal.virtualization.deckhouse.io",
    "migrations.internal.virtualization.deckhouse.io",
    "nodeusbdevice.internal.virtualization.deckhouse.io",
})
ADMITTED_PREFIXES = ("system:serviceaccount:kube-system:", "system:serviceaccount:d8-system:")
ADMITTED_USERS = frozenset({
    "system:serviceaccount:d8-virtualization:kubevirt-internal-virtualization-apiserver",
    "system:serviceaccount:d8-virtualization:kubevirt-internal-virtualization-controller",
    "system:serviceaccount:d8-virtualization:kubevirt-internal-virtualization-exportproxy",
    "system:serviceaccount:d8-virtualization:kubevirt-internal-virtualization-handler",
    "system:serviceaccount:d8-virtualization:kubevirt-operator",
    "system:serviceaccount:d8-virtualization:virtualization-controller",
    "system:serviceaccount:d8-virtualization:virtualization-api",
    "system:serviceaccount:d8-virtualization:pre-delete-hook",
    "system:serviceaccount:d8-virtualization:vm-route-forge",
})
OPERATIONS = {"create": "CREATE", "update": "UPDATE", "patch": "UPDATE",
              "delete": "DELETE", "deletecollection": "DELETE"}


def admitted(username: str) -> bool:
    """Does the policy's validation expression hold for `username`?"""
    return username.startswith(ADMITTED_PREFIXES) or username in ADMITTED_USERS


def check(served: Resource, verb: str, subresource: str | None, name: str | None,
          username: str) -> None:
    """Raise the API server's denial when the policy refuses this request; `served` is
    the resource as the client addressed it."""
    if served.group not in GROUPS or subresource is not None or verb not in OPERATIONS:
        return
    if admitted(username):
        return
    cause = (f"ValidatingAdmissionPolicy '{POLICY}' with binding '{BINDING}' denied request: "
             f"{MESSAGE}")
    resource = f"{served.plural}.{served.group}"
    message = (f'{resource} "{name}" is forbidden: {cause}' if name
               else f"{resource} is forbidden: {cause}")
    details: dict[str, object] = {"name": name} if name else {}
    details |= {"group": served.group, "kind": served.plural, "causes": [{"message": cause}]}
    raise Invalid(message, details=details)
