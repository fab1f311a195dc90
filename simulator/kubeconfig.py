"""A kubeconfig pointing kubectl and kubernetes_asyncio at the simulated API server.

Plain http on loopback with a dummy bearer token: the simulator authenticates nobody,
and both clients accept an `http://` server without TLS settings. It writes one file
and never reads or changes the user's own kubeconfig.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CONTEXT = "nicplug-sim"


def kubeconfig(server_url: str, *, namespace: str = "default") -> dict[str, Any]:
    """The kubeconfig document for `server_url` (e.g. `http://127.0.0.1:41234`)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": {"server": server_url}}],
        "users": [{"name": CONTEXT, "user": {"token": "nicplug-sim"}}],
        "contexts": [
            {
                "name": CONTEXT,
                "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace},
            }
        ],
        "current-context": CONTEXT,
        "preferences": {},
    }


def write_kubeconfig(path: Path, server_url: str, *, namespace: str = "default") -> Path:
    """Write the kubeconfig (JSON is valid YAML) to `path`, readable by the owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(kubeconfig(server_url, namespace=namespace), indent=2) + "\n")
    path.chmod(0o600)
    return path
