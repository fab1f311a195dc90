"""deploy/overlays/deckhouse-drive/ installs nicplug as an identity Deckhouse's
admission policy admits to the internal KubeVirt groups, driving the hotplug itself."""

from __future__ import annotations

import pytest

from nicplug.simulator.admission_policy import admitted
from nicplug.simulator.identity import service_account
from tests.deploy import manifests
from tests.deploy.test_layout import check, kubectl_or_skip, render

OVERLAY = manifests.DEPLOY / "overlays" / "deckhouse-drive"


@pytest.mark.slow
def test_the_overlay_runs_nicplug_as_a_d8_system_service_account_in_drive_mode() -> None:
    docs = render(kubectl_or_skip(), OVERLAY)
    check(docs, str(OVERLAY))
    by_kind: dict[str, list[dict[str, object]]] = {}
    for doc in docs:
        by_kind.setdefault(str(doc["kind"]), []).append(doc)
    assert "Namespace" not in by_kind  # d8-system is Deckhouse's, never created or owned
    (account,) = by_kind["ServiceAccount"]
    namespace = account["metadata"]["namespace"]  # type: ignore[index]
    name = account["metadata"]["name"]  # type: ignore[index]
    assert namespace == "d8-system"
    assert admitted(service_account(namespace, name))
    assert not admitted(service_account("nicplug-system", name))  # the base's identity
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        for binding in by_kind[kind]:
            assert binding["subjects"] == [  # type: ignore[comparison-overlap]
                {"kind": "ServiceAccount", "name": name, "namespace": "d8-system"}]
    (deployment,) = by_kind["Deployment"]
    spec = deployment["spec"]["template"]["spec"]  # type: ignore[index]
    assert spec["serviceAccountName"] == name
    (config,) = by_kind["ConfigMap"]
    assert config["data"]["NICPLUG_MODE"] == "drive"  # type: ignore[index]
