"""A kubeconfig pointing kubectl and kubernetes_asyncio at the simulated API server.

Plain http on loopback with a bearer token that names the user the simulated server
takes the client for (`identity`): a service account's username, or the default user
when none is given. Both clients accept an `http://` server without TLS settings. It
writes one file and never reads or changes the user's own kubeconfig.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nicplug.simulator.identity import LEGACY_TOKEN, token_for

CONTEXT = "nicplug-sim"


def kubeconfig(server_url: str, *, namespace: str = "default", user: str | None = None
               ) -> dict[str, Any]:
    """The kubeconfig document for `server_url` (e.g. `http://127.0.0.1:41234`), whose
    requests the server attributes to `user` (a username such as
    `system:serviceaccount:nicplug-system:nicplug`; None: the default user)."""
    token = token_for(user) if user is not None else LEGACY_TOKEN
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": {"server": server_url}}],
        "users": [{"name": CONTEXT, "user": {"token": token}}],
        "contexts": [
            {
                "name": CONTEXT,
                "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace},
            }
        ],
        "current-context": CONTEXT,
        "preferences": {},
    }


def write_kubeconfig(path: Path, server_url: str, *, namespace: str = "default",
                     user: str | None = None) -> Path:
    """Write the kubeconfig (JSON is valid YAML) to `path`, readable by the owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    document = kubeconfig(server_url, namespace=namespace, user=user)
    path.write_text(json.dumps(document, indent=2) + "\n")
    path.chmod(0o600)
    return path
