"""The NetworkInterfaceOperation CRD of deploy/base is the kind nicplug writes, the
simulated API server serves, and tenants read through the aggregated view role."""

from __future__ import annotations

from nicplug.adapters.kube.resources import OPERATIONS as WRITTEN
from nicplug.adapters.queries.operation_object import API_VERSION, KIND, PLURAL
from nicplug.simulator.resources import OPERATIONS as SERVED
from tests.deploy import manifests


def test_the_crd_names_what_nicplug_writes_and_the_simulator_serves() -> None:
    crd = manifests.one("CustomResourceDefinition", "networkinterfaceoperations.nicplug.io")
    spec = crd["spec"]
    (version,) = spec["versions"]
    assert f"{spec['group']}/{version['name']}" == API_VERSION == WRITTEN.api_version
    assert (spec["names"]["kind"], spec["names"]["plural"]) == (KIND, PLURAL)
    assert (WRITTEN.kind, WRITTEN.plural) == (SERVED.kind, SERVED.plural) == (KIND, PLURAL)
    assert spec["scope"] == "Namespaced" and SERVED.namespaced
    assert tuple(spec["names"]["shortNames"]) == SERVED.short_names == ("nicops", "nicop")
    assert tuple(spec["names"]["categories"]) == SERVED.categories == ("nicplug",)
    columns = [(c["name"], c["jsonPath"], c["type"]) for c in version["additionalPrinterColumns"]]
    assert columns == [(c.name, c.json_path, c.type) for c in SERVED.columns]
    assert [c[0] for c in columns] == ["VM", "Interface", "Network", "Direction", "State",
                                       "Reason", "Age"]
    assert "subresources" not in version and not SERVED.has_status  # written whole


def test_tenants_may_read_operations_and_nobody_but_nicplug_writes_them() -> None:
    view = manifests.one("ClusterRole", "nicplug-operations-view")
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    (rule,) = view["rules"]
    assert (rule["apiGroups"], rule["resources"], rule["verbs"]) == (
        ["nicplug.io"], ["networkinterfaceoperations"], ["get", "list", "watch"])
    controller = [g.permission for g in manifests.controller_grants()
                  if g.permission.group == "nicplug.io"]
    assert sorted(p.verb for p in controller) == ["create", "delete", "list", "patch"]
