"""Building the client: kubeconfig loading, limits, and the bad-input errors."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest
from kubernetes_asyncio.client import ApiClient, Configuration, rest

from nicplug.adapters.kube.calls import KubeCalls, compare_and_swap, pointer
from nicplug.adapters.kube.client import (
    ApiConnection,
    ClientConfigError,
    ClientSettings,
    PlainHttpApiClient,
    connect,
)
from nicplug.adapters.kube.flavour import UPSTREAM
from nicplug.simulator import resources as sim
from tests.kube.conftest import ApiServer


async def test_many_concurrent_calls_share_one_sized_pool(api_server: ApiServer) -> None:
    api_server.store.create(sim.KVVMS, {"metadata": {"name": "vm1", "namespace": "ns1"}})
    connection = await connect(ClientSettings(kubeconfig=api_server.kubeconfig,
                                              max_connections=64))
    try:
        assert connection.client.rest_client.pool_manager.connector.limit == 64
        calls = KubeCalls(connection)
        got = await asyncio.gather(*(calls.get(UPSTREAM.kvvms, "ns1", "vm1") for _ in range(200)))
        assert {g["metadata"]["uid"] for g in got} == {
            api_server.store.get(sim.KVVMS, "ns1", "vm1")["metadata"]["uid"]}
    finally:
        await connection.close()


async def test_every_plain_call_carries_a_timeout() -> None:
    conn = ApiConnection(client=ApiClient(), settings=ClientSettings(connect_timeout=2,
                                                                     read_timeout=9))
    assert conn.request_timeout.total == 9
    assert conn.request_timeout.connect == 2
    watch = conn.watch_timeout(None)
    assert watch.total is None and watch.connect == 2
    await conn.close()


async def test_a_missing_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ClientConfigError, match="does not exist"):
        await connect(ClientSettings(kubeconfig=tmp_path / "nope"))


async def test_a_broken_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
    with pytest.raises(ClientConfigError, match="cannot load"):
        await connect(ClientSettings(kubeconfig=bad))


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="positive"):
        ClientSettings(read_timeout=0)
    with pytest.raises(ValueError, match="max_connections"):
        ClientSettings(max_connections=0)


def test_json_pointers_escape_annotation_keys() -> None:
    key = "network.deckhouse.io/networks-spec"
    assert pointer("metadata", "annotations", key) == (
        "/metadata/annotations/network.deckhouse.io~1networks-spec")
    assert pointer("a~b", 0) == "/a~0b/0"
    assert compare_and_swap("/x", 1, 2) == [
        {"op": "test", "path": "/x", "value": 1}, {"op": "replace", "path": "/x", "value": 2}]


async def test_without_a_proxy_requests_skip_the_environment_lookups(
    api_server: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY",
                 "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    connection = await connect(ClientSettings(kubeconfig=api_server.kubeconfig))
    try:
        session = connection.client.rest_client.pool_manager
        assert not session.trust_env
        assert session.connector.limit == ClientSettings().max_connections
        api_server.store.create(sim.KVVMS, {"metadata": {"name": "vm1", "namespace": "ns1"}})
        got = await KubeCalls(connection).get(UPSTREAM.kvvms, "ns1", "vm1")
        assert got["metadata"]["name"] == "vm1"
    finally:
        await connection.close()


async def test_a_proxy_for_the_api_server_is_still_honoured(
    api_server: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("http_proxy", "http://proxy.invalid:3128")
    connection = await connect(ClientSettings(kubeconfig=api_server.kubeconfig))
    try:
        assert connection.client.rest_client.pool_manager.trust_env
    finally:
        await connection.close()


async def test_a_plain_http_server_gets_a_client_that_builds_no_tls_context(
    api_server: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading the system's CA store costs tens of ms of CPU per client; an `http://`
    server never uses it."""

    def no_tls(*_: object, **__: object) -> ssl.SSLContext:
        raise AssertionError("a TLS context was built for a plain http server")

    monkeypatch.setattr(rest.ssl, "create_default_context", no_tls)
    connection = await connect(ClientSettings(kubeconfig=api_server.kubeconfig,
                                              user_agent="nicplug/test"))
    try:
        assert isinstance(connection.client, PlainHttpApiClient)
        assert connection.client.rest_client.pool_manager.connector.limit == 256
        api_server.store.create(sim.KVVMS, {"metadata": {"name": "vm1", "namespace": "ns1"}})
        got = await KubeCalls(connection).get(UPSTREAM.kvvms, "ns1", "vm1")
        assert got["metadata"]["name"] == "vm1"
        assert [r.user_agent for r in api_server.requests] == ["nicplug/test"]
    finally:
        await connection.close()


async def test_the_plain_http_client_is_set_up_as_a_stock_one() -> None:
    """The same attributes, with the same values, on the client and its REST client (a
    kubernetes_asyncio upgrade that adds one fails here), the TLS context aside."""
    configuration = Configuration(host="http://127.0.0.1:1")
    stock, plain = ApiClient(configuration), PlainHttpApiClient(configuration)
    try:
        assert vars(plain).keys() == vars(stock).keys()
        assert {k: v for k, v in vars(plain).items() if k != "rest_client"} == {
            k: v for k, v in vars(stock).items() if k != "rest_client"}
        mine, theirs = vars(plain.rest_client), vars(stock.rest_client)
        assert mine.keys() == theirs.keys()
        assert {k: v for k, v in mine.items() if k != "pool_manager"} == {
            k: v for k, v in theirs.items() if k != "pool_manager"}
        assert plain.rest_client.pool_manager.trust_env == stock.rest_client.pool_manager.trust_env
    finally:
        await stock.close()
        await plain.close()


async def test_an_https_server_keeps_the_tls_context(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n")
    connection = await connect(ClientSettings(kubeconfig=kubeconfig))
    try:
        assert not isinstance(connection.client, PlainHttpApiClient)
        assert isinstance(connection.client.rest_client.pool_manager.connector._ssl,
                          ssl.SSLContext)
    finally:
        await connection.close()
