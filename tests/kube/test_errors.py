"""Every failure of a Kubernetes call maps to exactly one of the adapter's error types."""

from __future__ import annotations

import email.utils

import aiohttp
import orjson
import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from nicplug.adapters.kube.errors import (
    AlreadyExists,
    Conflict,
    Expired,
    KubeError,
    NotFound,
    PatchRejected,
    Temporary,
    TestFailed,
    for_json_patch,
    translate,
)
from nicplug.engine.errors import PermanentError, RetryAfterObservation, TemporaryError


def _api(status: int, reason: str = "", *, headers: dict[str, str] | None = None,
          body: object = None) -> ApiException:
    exc = ApiException(status=status, reason="HTTP reason")
    exc.body = orjson.dumps(body) if body is not None else b""
    exc.headers = headers
    if reason and body is None:
        exc.body = orjson.dumps({"kind": "Status", "code": status, "reason": reason,
                                 "message": f"it is {reason}"})
    return exc


@pytest.mark.parametrize(
    ("status", "reason", "expected"),
    [
        (409, "Conflict", Conflict),
        (409, "AlreadyExists", AlreadyExists),
        (404, "NotFound", NotFound),
        (410, "Expired", Expired),
        (410, "Gone", Expired),
        (429, "TooManyRequests", Temporary),
        (500, "InternalError", Temporary),
        (503, "ServiceUnavailable", Temporary),
        (504, "Timeout", Temporary),
        (401, "Unauthorized", Temporary),
        (400, "BadRequest", PatchRejected),
        (403, "Forbidden", PatchRejected),
        (415, "UnsupportedMediaType", PatchRejected),
        (422, "Invalid", PatchRejected),
    ],
)
def test_status_codes_map_to_one_error_type(
    status: int, reason: str, expected: type[KubeError]
) -> None:
    error = translate(_api(status, reason))
    assert type(error) is expected
    assert error.status == status
    assert error.reason == reason
    assert reason in str(error)


def test_already_exists_is_a_conflict_for_callers_that_only_re_read() -> None:
    assert isinstance(translate(_api(409, "AlreadyExists")), Conflict)
    assert not isinstance(translate(_api(409, "Conflict")), AlreadyExists)


def test_retry_after_in_seconds_becomes_the_delay() -> None:
    error = translate(_api(429, "TooManyRequests", headers={"Retry-After": "7"}))
    assert isinstance(error, Temporary)
    assert error.delay == 7.0


def test_retry_after_as_an_http_date_is_relative_to_now() -> None:
    when = email.utils.formatdate(1_000_030.0, usegmt=True)
    error = translate(_api(503, "ServiceUnavailable", headers={"Retry-After": when}),
                      now=1_000_000.0)
    assert isinstance(error, Temporary)
    assert error.delay == pytest.approx(30.0)


def test_unreadable_retry_after_leaves_the_delay_to_the_caller() -> None:
    error = translate(_api(429, "TooManyRequests", headers={"Retry-After": "soon"}))
    assert isinstance(error, Temporary)
    assert error.delay is None
    plain = translate(_api(500, "InternalError"))
    assert isinstance(plain, Temporary)
    assert plain.delay is None


def test_a_body_that_is_not_a_status_keeps_the_http_reason() -> None:
    exc = ApiException(status=502, reason="Bad Gateway")
    exc.body = b"<html>proxy error</html>"
    error = translate(exc)
    assert isinstance(error, Temporary)
    assert error.reason == "Bad Gateway"
    assert "proxy error" in str(error)


@pytest.mark.parametrize(
    "exc",
    [
        TimeoutError(),
        aiohttp.ServerTimeoutError("read"),
        aiohttp.ClientConnectionError("refused"),
        aiohttp.ServerDisconnectedError(),
        ConnectionResetError(),
    ],
)
def test_timeouts_and_broken_connections_are_temporary(exc: BaseException) -> None:
    error = translate(exc)
    assert isinstance(error, Temporary)
    assert error.status == 0
    assert error.delay is None


def test_an_adapter_error_passes_through_unchanged() -> None:
    original = NotFound("gone", status=404)
    assert translate(original) is original


def test_programming_errors_are_not_disguised_as_api_errors() -> None:
    with pytest.raises(KeyError):
        translate(KeyError("spec"))


@pytest.mark.parametrize(
    ("status", "reason", "engine_type"),
    [
        (409, "Conflict", RetryAfterObservation),
        (404, "NotFound", RetryAfterObservation),
        (429, "TooManyRequests", TemporaryError),
        (503, "ServiceUnavailable", TemporaryError),
        (422, "Invalid", PermanentError),
    ],
)
def test_the_engine_decides_from_the_type_alone(
    status: int, reason: str, engine_type: type[Exception]
) -> None:
    error = translate(_api(status, reason, headers={"Retry-After": "2"}))
    assert isinstance(error, engine_type)
    if isinstance(error, TemporaryError) and not isinstance(error, RetryAfterObservation):
        assert error.delay == 2.0  # Retry-After, on a 429 or a 503 alike


def test_a_failed_test_op_is_a_conflict_only_for_a_json_patch_with_a_test() -> None:
    invalid = translate(_api(422, body=PATCH_DID_NOT_APPLY))
    swap = [{"op": "test", "path": "/a", "value": 1}, {"op": "replace", "path": "/a", "value": 2}]
    refined = for_json_patch(invalid, swap)
    assert isinstance(refined, TestFailed)
    assert isinstance(refined, Conflict)
    assert refined.status == 422
    assert for_json_patch(invalid, [{"op": "remove", "path": "/a"}]) is invalid
    bad_request = translate(_api(400, "BadRequest"))
    assert for_json_patch(bad_request, swap) is bad_request


# Status bodies as the API server sends them. A JSON patch that does not apply:
# `NewGenericServerResponse(422, ...)` of k8s.io/apimachinery, which drops the json-patch
# error; a ValidatingAdmissionPolicy denial without a `reason` (Deckhouse's
# `virtualization-restricted-access-policy`, templates/admission-policy.yaml): 422
# Invalid, the policy and binding named, one cause (the celAdmissionController's
# `admission.NewForbidden` with the reason and code replaced).
PATCH_DID_NOT_APPLY = {
    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
    "message": "the server rejected our request due to an error in our request",
    "reason": "Invalid", "details": {}, "code": 422,
}
_DENIAL = ("ValidatingAdmissionPolicy 'virtualization-restricted-access-policy' with binding "
           "'virtualization-restricted-access-policy' denied request: Operation forbidden for "
           "this user.")
POLICY_DENIAL = {
    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
    "message": 'internalvirtualizationvirtualmachines.internal.virtualization.deckhouse.io '
               f'"vm1" is forbidden: {_DENIAL}',
    "reason": "Invalid",
    "details": {"name": "vm1", "group": "internal.virtualization.deckhouse.io",
                "kind": "internalvirtualizationvirtualmachines",
                "causes": [{"message": _DENIAL}]},
    "code": 422,
}
RBAC_DENIAL = {
    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
    "message": 'pods "virt-launcher-vm1-abcde" is forbidden: User '
               '"system:serviceaccount:nicplug-system:nicplug" cannot patch resource "pods" '
               'in API group "" in the namespace "ns1"',
    "reason": "Forbidden", "details": {"name": "virt-launcher-vm1-abcde", "kind": "pods"},
    "code": 403,
}
SCHEMA_INVALID = {
    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
    "message": 'VirtualMachine.kubevirt.io "vm1" is invalid: spec.template.spec.domain.'
               'devices.interfaces[1].name: Invalid value: "": must not be empty',
    "reason": "Invalid",
    "details": {"name": "vm1", "group": "kubevirt.io", "kind": "VirtualMachine",
                "causes": [{"reason": "FieldValueInvalid", "message": 'Invalid value: ""',
                            "field": "spec.template.spec.domain.devices.interfaces[1].name"}]},
    "code": 422,
}
SWAP = [{"op": "test", "path": "/spec/template/spec/networks", "value": []},
        {"op": "replace", "path": "/spec/template/spec/networks", "value": [{"name": "x"}]}]


def test_the_servers_answer_to_a_patch_that_did_not_apply_is_a_lost_swap() -> None:
    error = for_json_patch(translate(_api(422, body=PATCH_DID_NOT_APPLY)), SWAP)
    assert isinstance(error, TestFailed)
    assert isinstance(error, RetryAfterObservation)
    # some servers keep the json-patch library's words
    worded = {**PATCH_DID_NOT_APPLY,
              "message": "testing value /spec/template/spec/networks failed: test failed"}
    assert isinstance(for_json_patch(translate(_api(422, body=worded)), SWAP), TestFailed)


@pytest.mark.parametrize("body", [POLICY_DENIAL, SCHEMA_INVALID, RBAC_DENIAL],
                         ids=["admission policy 422", "schema 422", "rbac 403"])
def test_a_refusal_of_a_swap_is_permanent_with_the_servers_message(body: dict[str, object]) -> None:
    error = for_json_patch(translate(_api(int(str(body["code"])), body=body)), SWAP)
    assert type(error) is PatchRejected
    assert isinstance(error, PermanentError)
    assert not isinstance(error, RetryAfterObservation)
    assert str(body["message"]) in str(error)
    assert error.server_message == body["message"]


def test_a_policy_denial_keeps_its_cause() -> None:
    error = translate(_api(422, body=POLICY_DENIAL))
    assert error.causes == (_DENIAL,)
    assert "Operation forbidden for this user." in str(error)
