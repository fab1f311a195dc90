"""What a running controller's `/metrics` exports, scraped over HTTP against the
simulated cluster after a plug that attaches and one the SDN never configures: the series the
docs, the alerts and the dashboard name, and none they do not want."""

from __future__ import annotations

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from nicplug.adapters.core.settings import Settings
from nicplug.simulator.fixtures import Fixtures
from nicplug.simulator.knobs import Failures, Knobs
from tests.deploy.monitoring import EXTERNAL, named_series
from tests.integration.conftest import QUICK, eventually

VM = "default/vm-00000"


async def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of `/metrics`, by sample name (`_bucket`, `_sum`, `_count` apart)."""
    async with aiohttp.ClientSession() as session, session.get(url + "/metrics") as response:
        assert response.status == 200
        text = await response.text()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples


def value(samples: dict[str, list[tuple[dict[str, str], float]]], name: str,
          **labels: str) -> float:
    return sum(v for got, v in samples.get(name, []) if labels.items() <= got.items())


async def test_the_anchors_series_after_a_plug_and_a_failure(
    start_cluster, start_controller, user_of
) -> None:
    knobs = Knobs(delays=QUICK, failures=Failures(sdn_networks=frozenset({"Network/broken-net"})))
    cluster = await start_cluster(knobs, Fixtures(vms=1, networks=("user-net", "broken-net")))
    ctl = await start_controller(cluster, backoff_base=300.0, sdn_ready_timeout=1.0)
    user = user_of(cluster)

    await user.add_networks(VM, ("Network", "user-net"), ("Network", "broken-net"))
    await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached"})
    await ctl.journal.wait_for(VM, "Network/broken-net", "plug", {"Failed"})

    async def counted() -> bool:
        got = await scrape(ctl.metrics_url)
        return value(got, "nicplug_operation_duration_seconds_count", outcome="Failed") == 1
    await eventually(counted, what="the failed plug's duration")
    got = await scrape(ctl.metrics_url)

    (build,) = got["nicplug_build_info"]
    assert build[1] == 1 and set(build[0]) == {"version", "python", "flavour"}
    assert build[0]["flavour"] == "deckhouse"
    assert value(got, "process_resident_memory_bytes") > 0
    assert "process_cpu_seconds_total" in got and "python_info" in got
    assert value(got, "nicplug_operation_duration_seconds_count", direction="plug",
                 flavour="deckhouse", outcome="Attached") == 1
    assert value(got, "nicplug_operation_duration_seconds_sum", outcome="Attached") > 0
    reasons = {labels["reason"] for labels, v in got["nicplug_operation_failures_total"] if v}
    assert reasons == {"SDNTimeout"}, got["nicplug_operation_failures_total"]
    assert value(got, "nicplug_pending_effects") == 0
    assert value(got, "nicplug_pending_effect_oldest_age_seconds") == 0
    # every request, not only effects: the lists, the watches, the Lease, the writes
    assert value(got, "nicplug_api_requests_total", verb="list",
                 resource="virtualmachines.virtualization.deckhouse.io", code="200") >= 1
    assert value(got, "nicplug_api_requests_total", verb="watch", resource="pods") >= 1
    assert value(got, "nicplug_api_requests_total", verb="patch", resource="pods",
                 code="200") >= 1
    assert value(got, "nicplug_api_requests_total",
                 resource="leases.coordination.k8s.io") >= 1
    assert value(got, "nicplug_api_request_duration_seconds_count", verb="patch") >= 1
    assert not [name for name in got if name.endswith("_created")]
    ctl.alive()


async def test_operations_are_served_apart_from_the_metrics(
    start_cluster, start_controller
) -> None:
    cluster = await start_cluster()
    ctl = await start_controller(cluster)
    queries = f"http://127.0.0.1:{ctl.controller.query_port}"
    async with aiohttp.ClientSession() as session:
        async with session.get(queries + "/operations") as response:
            assert response.status == 200
            assert (await response.json()) == {"operations": []}
        async with session.get(ctl.metrics_url + "/operations") as response:
            assert response.status == 404
        async with session.get(queries + "/metrics") as response:
            assert response.status == 404
    assert ctl.controller.query_port != ctl.controller.metrics_port
    assert Settings().query_addr.startswith("127.0.0.1:")  # loopback unless told


async def exported_names(url: str) -> set[str]:
    """The sample names `/metrics` declares (a family with no sample yet included): a
    histogram's `_bucket`, `_sum`, `_count`, a counter's `_total`."""
    async with aiohttp.ClientSession() as session, session.get(url + "/metrics") as response:
        text = await response.text()
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"),
                "summary": ("_sum", "_count", ""), "gauge": ("",), "info": ("_info",),
                "unknown": ("",)}
    return {family.name + suffix for family in text_string_to_metric_families(text)
            for suffix in suffixes[family.type]}


async def test_every_series_the_alerts_and_the_dashboard_name_is_exported(
    start_cluster, start_controller, user_of
) -> None:
    cluster = await start_cluster()
    ctl = await start_controller(cluster)
    await user_of(cluster).add_network(VM, "Network", "user-net")
    await ctl.journal.wait_for(VM, "Network/user-net", "plug", {"Attached"})
    exported = await exported_names(ctl.metrics_url)
    assert "nicplug_operation_duration_seconds_bucket" in exported  # the suffixes understood
    for where, names in named_series().items():
        missing = {n for n in names if n not in exported and n not in EXTERNAL}
        assert not missing, f"{where} names series no controller exports: {sorted(missing)}"
    named = set().union(*named_series().values())
    assert {"nicplug_leader", "nicplug_pending_effects", "process_resident_memory_bytes",
            "nicplug_operation_failures_total"} <= named  # the reading found them
