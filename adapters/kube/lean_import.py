"""kubernetes_asyncio without the generated client it does not use: ~30 MB of RSS.

`import kubernetes_asyncio` (and so any of its modules) runs the package's
`__init__`, which imports every generated API class and every one of its ~800 models:
about 40 MB of RSS, a tenth of the controller's at 10,000 VMs, of which nicplug uses
the `ApiClient`, its `Configuration`, three API classes and the kubeconfig loader
(bodies are read and written as JSON, never as models). `install()` registers the
packages `kubernetes_asyncio`, `.client`, `.client.api` and `.client.models` as
modules whose `__init__` has not run yet, so importing one of their modules loads
that module and what it imports, nothing more (8 MB). Whatever asks a package for a
name it does not have gets the package's real `__init__` run first, so code written
against the whole package (a test, `kubernetes_asyncio.client.V1Pod`) still works,
at the old price. When the package is already imported, `install()` does nothing.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

_DEFERRED = (
    "kubernetes_asyncio",
    "kubernetes_asyncio.client",
    "kubernetes_asyncio.client.api",
    "kubernetes_asyncio.client.models",
)


def install() -> None:
    """Defer the package `__init__`s of kubernetes_asyncio (see the module's docstring)."""
    if any(name in sys.modules for name in _DEFERRED):
        return
    for name in _DEFERRED:
        _defer(name)
    from kubernetes_asyncio.client.api_client import ApiClient
    from kubernetes_asyncio.client.configuration import Configuration

    client = sys.modules["kubernetes_asyncio.client"]
    # the kubeconfig loader imports these two by name from the package
    client.ApiClient = ApiClient  # type: ignore[attr-defined]
    client.Configuration = Configuration  # type: ignore[attr-defined]


def _defer(name: str) -> None:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(f"no package {name}")
    module = importlib.util.module_from_spec(spec)
    initialised = False

    def getattr_(attribute: str) -> Any:
        nonlocal initialised
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        if importlib.util.find_spec(f"{name}.{attribute}") is not None:
            return importlib.import_module(f"{name}.{attribute}")  # a module: just it
        if not initialised:  # a name the real __init__ defines: run it, once
            initialised = True
            assert spec.loader is not None
            spec.loader.exec_module(module)
            if attribute in module.__dict__:
                return module.__dict__[attribute]
        raise AttributeError(f"module {name!r} has no attribute {attribute!r}")

    setattr(module, "__getattr__", getattr_)  # noqa: B010  (PEP 562, on the module)
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)

