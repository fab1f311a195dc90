"""Who is asking: the username the simulated API server gives each request.

A real API server authenticates a bearer token to a user; a service account's username
is `system:serviceaccount:<namespace>:<name>`. The simulator's tokens carry the
username itself (`token_for`), so a kubeconfig written for a service account names it
to any simulated server without a shared table. A request with no token, or the
kubeconfig's historic `nicplug-sim` token, is `DEFAULT_USER`: a `kube-system` service
account that every admission policy admits, as the clients written before identities
existed assume. Pure functions; nothing here touches the store.
"""

from __future__ import annotations

import base64
import binascii

DEFAULT_USER = "system:serviceaccount:kube-system:nicplug-sim"
LEGACY_TOKEN = "nicplug-sim"
_PREFIX = "sim-user."


def service_account(namespace: str, name: str) -> str:
    """The username of a service account, as the API server's token authenticator
    gives it."""
    if not namespace or not name or ":" in namespace or ":" in name:
        raise ValueError(f"a service account is <namespace>:<name>, not {namespace!r}:{name!r}")
    return f"system:serviceaccount:{namespace}:{name}"


def token_for(username: str) -> str:
    """The bearer token that authenticates as `username` to a simulated server."""
    if not username:
        raise ValueError("a username must not be empty")
    encoded = base64.urlsafe_b64encode(username.encode()).decode().rstrip("=")
    return _PREFIX + encoded


def username_of(authorization: str | None) -> str:
    """The username of a request's `Authorization` header (`DEFAULT_USER` without one,
    or with a token the simulator did not issue)."""
    if not authorization:
        return DEFAULT_USER
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token.startswith(_PREFIX):
        return DEFAULT_USER
    encoded = token[len(_PREFIX):]
    try:
        decoded = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return DEFAULT_USER
    return decoded or DEFAULT_USER
