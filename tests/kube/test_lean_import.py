"""kubernetes_asyncio's generated models stay unloaded in `nicplug run`, and code that
asks the packages for any of their names still gets it (`adapters/kube/lean_import.py`).
Each case runs in a fresh interpreter: this one has imported the whole package already."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_controller_loads_no_generated_model_and_few_api_classes() -> None:
    out = _python(
        "import sys, nicplug.adapters.core.controller, nicplug.adapters.cli.run\n"
        "loaded = [m for m in sys.modules if m.startswith('kubernetes_asyncio.client.')]\n"
        "print(sum(m.startswith('kubernetes_asyncio.client.models.') for m in loaded),"
        " sum(m.startswith('kubernetes_asyncio.client.api.') for m in loaded))"
    )
    models, apis = map(int, out.split())
    assert models == 0
    assert apis <= 4  # core, custom objects, coordination (and what they import)


def test_names_of_the_whole_package_still_resolve_after_the_lean_import() -> None:
    out = _python(
        "import nicplug.adapters.kube.client\n"
        "from kubernetes_asyncio import client, config, watch\n"
        "from kubernetes_asyncio.client import ApiException, V1ObjectMeta, rest\n"
        "print(client.V1Pod.__name__, client.models.V1Pod.__name__, client.AppsV1Api.__name__,"
        " watch.Watch.__name__, V1ObjectMeta.__name__, rest.__name__,"
        " config.load_kube_config.__name__, ApiException.__name__)"
    )
    assert out.split() == ["V1Pod", "V1Pod", "AppsV1Api", "Watch", "V1ObjectMeta",
                           "kubernetes_asyncio.client.rest", "load_kube_config",
                           "ApiException"]


def test_a_package_imported_whole_first_is_left_alone() -> None:
    out = _python(
        "import kubernetes_asyncio.client as whole\n"
        "import nicplug.adapters.kube.client\n"
        "import kubernetes_asyncio.client as after\n"
        "print(whole is after, hasattr(whole, 'V1Pod'))"
    )
    assert out == "True True"
