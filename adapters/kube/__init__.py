"""The Kubernetes adapter: client, informers (list-then-watch), API calls, leader election.

Everything here talks to the API server through kubernetes_asyncio; nothing above it
sees HTTP statuses, aiohttp or kubernetes_asyncio types.
"""

from nicplug.adapters.kube.lean_import import install as _install_lean_import

_install_lean_import()  # before any module here imports kubernetes_asyncio
