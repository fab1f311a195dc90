"""deploy/ is valid Kubernetes, renders with kustomize, and agrees with the controller.

Schemas come from `kubernetes-validate`, which ships them (no network). The checks
after validation are the ones a schema cannot make: the security settings the issue
asks for, probes on the port the controller serves, the journal where the volume is,
selectors that select, and environment variables that `nicplug run` really reads.
"""

from __future__ import annotations

import posixpath
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml
from kubernetes_validate.utils import ValidationError, validate

from nicplug.adapters.cli import app
from nicplug.adapters.core.observability import parse_addr
from tests.deploy import manifests

# The oldest Kubernetes the manifests are for (PodDisruptionBudget's
# unhealthyPodEvictionPolicy is GA since 1.31) and the newest the schemas know.
KUBERNETES_VERSIONS = ("1.31", "1.37")


def run_options() -> dict[str, Any]:
    """The options of `nicplug run`, by environment variable."""
    command = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    return {p.envvar: p for p in command.params if p.envvar}


def pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = manifests.one("Deployment")["spec"]["template"]["spec"]
    return spec


def container() -> dict[str, Any]:
    containers = pod_spec()["containers"]
    assert len(containers) == 1
    found: dict[str, Any] = containers[0]
    return found


def test_the_kustomization_lists_every_manifest() -> None:
    listed = {p.name for p in manifests.resource_files()}
    on_disk = {p.name for p in manifests.BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_manifest_validates_against_the_kubernetes_schemas(version: str) -> None:
    count = 0
    for path, doc in manifests.documents():
        try:
            validate(doc, version, strict=True)
        except ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{path.name}: {doc['kind']} {where}: {exc.message}")
        count += 1
    assert count >= 11


def test_the_validator_rejects_what_the_api_server_would() -> None:
    """A misspelt field fails: the validation above is not vacuous."""
    broken = manifests.one("Deployment")
    broken["spec"]["template"]["spec"]["containers"][0]["securityContext"][
        "readOnlyRootFileSystem"] = True
    with pytest.raises(ValidationError):
        validate(broken, KUBERNETES_VERSIONS[0], strict=True)


@pytest.mark.slow
def test_kubectl_kustomize_renders_valid_objects_in_one_namespace() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: `kubectl kustomize deploy/` cannot be checked")
    rendered = subprocess.run(
        [kubectl, "kustomize", str(manifests.DEPLOY)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert rendered.returncode == 0, rendered.stderr
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    assert {d["kind"] for _, d in manifests.documents()} == {d["kind"] for d in docs}
    ns = manifests.namespace()
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding",
                      "CustomResourceDefinition"}
    for doc in docs:
        validate(doc, KUBERNETES_VERSIONS[0], strict=True)
        if doc["kind"] not in cluster_scoped:
            assert doc["metadata"]["namespace"] == ns, doc["metadata"]
        for subject in doc.get("subjects") or ():
            assert subject["namespace"] == ns
        if doc["kind"] == "Deployment":
            image = doc["spec"]["template"]["spec"]["containers"][0]["image"]
            assert image.startswith("nicplug:"), image


def test_the_pod_runs_without_privilege() -> None:
    pod = pod_spec()["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] > 0
    assert pod["seccompProfile"]["type"] == "RuntimeDefault"
    box = container()["securityContext"]
    assert box["allowPrivilegeEscalation"] is False
    assert box["readOnlyRootFilesystem"] is True
    assert box["capabilities"]["drop"] == ["ALL"]
    assert not box["capabilities"].get("add")
    assert box["seccompProfile"]["type"] == "RuntimeDefault"
    assert not pod_spec().get("hostNetwork") and not pod_spec().get("hostPID")
    namespace = manifests.one("Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_probes_and_the_service_reach_the_metrics_address() -> None:
    config = manifests.config()
    host, port = parse_addr(config["NICPLUG_METRICS_ADDR"])
    assert host in ("0.0.0.0", "::"), "the kubelet probes the pod's IP, not loopback"
    ports = {p["name"]: p["containerPort"] for p in container()["ports"]}
    assert ports["metrics"] == port
    assert container()["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container()["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    service = manifests.one("Service")
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["metrics"]


def test_selectors_select_the_controllers_pods() -> None:
    deployment = manifests.one("Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    selectors = [
        deployment["spec"]["selector"]["matchLabels"],
        manifests.one("Service")["spec"]["selector"],
        manifests.one("PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
    ]
    for selector in selectors:
        assert selector.items() <= labels.items(), selector


def test_one_replica_owns_the_journal_volume() -> None:
    """ReadWriteOnce is one node: a second replica would never start (Multi-Attach), and
    a rolling update would start the new pod before the old one lets go."""
    deployment = manifests.one("Deployment")["spec"]
    assert deployment["replicas"] == 1
    assert deployment["strategy"]["type"] == "Recreate"
    claim = manifests.one("PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    volumes = {v["name"]: v for v in pod_spec()["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container()["volumeMounts"]}
    journal_dir = posixpath.dirname(manifests.config()["NICPLUG_JOURNAL"])
    volume = volumes[mounts[journal_dir]]
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    pdb = manifests.one("PodDisruptionBudget")["spec"]
    assert pdb.get("maxUnavailable") == 1 and "minAvailable" not in pdb, \
        "a budget must never block the drain of the only replica"


def test_resources_are_requested_and_limited() -> None:
    resources = container()["resources"]
    for key in ("cpu", "memory"):
        assert resources["requests"][key] and resources["limits"][key]


def test_the_configuration_names_only_real_options() -> None:
    options = run_options()
    env = {e["name"] for e in container().get("env") or ()}
    for name in set(manifests.config()) | env:
        assert name in options, f"{name} is not an option of `nicplug run`"
    assert env.isdisjoint(manifests.config()), "set in two places"


def test_the_role_names_the_lease_the_controller_uses() -> None:
    lease = manifests.config()["NICPLUG_LEASE_NAME"]
    for rule in manifests.rules_of(manifests.one("Role")):
        assert rule.get("resourceNames", [lease]) == [lease]


def containerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) of deploy/Containerfile, continuation lines joined."""
    text = (manifests.DEPLOY / "Containerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    instructions = [line for line in lines if line and not line.startswith("#")]
    return [
        (word.upper(), rest.strip())
        for word, _, rest in (line.partition(" ") for line in instructions)
    ]


def test_the_image_runs_nicplug_as_the_deployments_user_with_the_journal_on_the_volume() -> None:
    steps = containerfile()
    final = steps[max(i for i, (op, _) in enumerate(steps) if op == "FROM"):]
    args = dict(steps[: next(i for i, (op, _) in enumerate(steps) if op == "FROM")])
    assert "-slim" in args["ARG"], "a slim Python base"
    user = [a for op, a in final if op == "USER"]
    assert user == [f"{pod_spec()['securityContext']['runAsUser']}:"
                    f"{pod_spec()['securityContext']['runAsGroup']}"]
    assert [a for op, a in final if op == "ENTRYPOINT"] == ['["nicplug", "run"]']
    env = " ".join(a for op, a in final if op == "ENV")
    journal = manifests.config()["NICPLUG_JOURNAL"]
    assert f"NICPLUG_JOURNAL={journal}" in env
    assert [a for op, a in final if op == "VOLUME"] == [f'["{posixpath.dirname(journal)}"]']
    installs = " ".join(a for op, a in steps if op == "RUN" and "pip install" in a)
    assert "pip install ." in installs and "[dev]" not in installs


@pytest.mark.slow
def test_hadolint_finds_nothing_in_the_containerfile() -> None:
    """No container engine runs here to build the image; hadolint (the `dev` extra
    ships it) checks the Containerfile the way a reviewer would."""
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) \
        or shutil.which("hadolint")
    if found is None:
        pytest.skip("hadolint is not installed (pip install -e '.[dev]' installs it)")
    linted = subprocess.run([found, "--no-color", str(manifests.DEPLOY / "Containerfile")],
                            capture_output=True, text=True, timeout=60, check=False)
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_the_build_context_holds_only_what_the_image_needs() -> None:
    ignored = (manifests.ROOT / ".dockerignore").read_text().splitlines()
    assert ignored[1] == "*"
    sources = [w for op, a in containerfile() if op == "COPY" and "--from" not in a
               for w in a.split()[:-1]]
    assert sources
    for source in sources:
        assert f"!{source.rstrip('/')}" in {line.rstrip("/") for line in ignored}, source


def test_the_image_installs_every_runtime_dependency_and_no_dev_one() -> None:
    """The build stage installs `.`: pyproject's runtime list, which must not carry a
    test or lint tool (they belong to the `dev` extra)."""
    import tomllib

    project = tomllib.loads((manifests.ROOT / "pyproject.toml").read_text())["project"]
    runtime = {_name(d) for d in project["dependencies"]}
    dev = {_name(d) for d in project["optional-dependencies"]["dev"]}
    assert runtime.isdisjoint(dev)
    assert not runtime & {"pytest", "mypy", "ruff", "hypothesis", "kubernetes-validate"}


def _name(requirement: str) -> str:
    for stop in "<>=!~[; ":
        requirement = requirement.split(stop, 1)[0]
    return requirement.strip().lower().replace("_", "-")
