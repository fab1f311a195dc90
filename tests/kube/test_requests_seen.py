"""Requests named as the API server names them: verb from method and path, resource
with its group and subresource."""

from __future__ import annotations

import pytest
from yarl import URL

from nicplug.adapters.kube.requests_seen import verb_and_resource

DH = "/apis/virtualization.deckhouse.io/v1alpha2"


@pytest.mark.parametrize(("method", "path", "expected"), [
    ("GET", "/api/v1/pods", ("list", "pods")),
    ("GET", "/api/v1/pods?watch=True&resourceVersion=5", ("watch", "pods")),
    ("GET", "/api/v1/namespaces/ns/pods/p", ("get", "pods")),
    ("PATCH", "/api/v1/namespaces/ns/pods/p", ("patch", "pods")),
    ("GET", "/api/v1/namespaces", ("list", "namespaces")),
    ("GET", "/api/v1/namespaces/ns", ("get", "namespaces")),
    ("GET", f"{DH}/virtualmachines", ("list", "virtualmachines.virtualization.deckhouse.io")),
    ("PATCH", f"{DH}/namespaces/ns/virtualmachines/vm/status",
     ("patch", "virtualmachines.virtualization.deckhouse.io/status")),
    ("POST", "/apis/events.k8s.io/v1/namespaces/ns/events", ("create", "events.events.k8s.io")),
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/nicplug",
     ("update", "leases.coordination.k8s.io")),
    ("DELETE", "/api/v1/namespaces/ns/pods/p", ("delete", "pods")),
    ("DELETE", "/api/v1/namespaces/ns/pods", ("deletecollection", "pods")),
    ("GET", "/version", ("get", "version")),
])
def test_verb_and_resource(method: str, path: str, expected: tuple[str, str]) -> None:
    assert verb_and_resource(method, URL("https://api.example:6443" + path)) == expected
