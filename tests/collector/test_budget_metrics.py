"""The ingest budget across all streams (``IngestBudget``, ``--max-unacked``) is on the collector's
/metrics: bytes held (read, not yet acknowledged), reserved, the streams waiting for room, the cap
and the peak, as they are at the scrape."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
from prometheus_client.registry import CollectorRegistry

from fleetscope.collector.ingest.server import Collector, CollectorSettings
from fleetscope.collector.ingest.service import IngestBudget
from fleetscope.collector.observability.self_metrics import CollectorSelfMetrics
from tests.collector.test_observability import scrape, value


def gauges(registry: CollectorRegistry) -> dict[str, float]:
    return {s.name: s.value for fam in registry.collect() for s in fam.samples if "ingest_budget" in s.name}


def self_metrics(service: Any) -> CollectorRegistry:
    registry = CollectorRegistry()
    writer = SimpleNamespace(queue_depth=0, groups=0, batches=0, errors=0)
    CollectorSelfMetrics(engine=mock.Mock(), service=lambda: service, writer=writer, jobs={}, probe=None,
                         max_connections=None, registry=registry, lag_cache_s=3600)
    return registry


def test_held_bytes_and_waiting_streams_follow_the_budget() -> None:
    budget = IngestBudget(1000)
    registry = self_metrics(SimpleNamespace(acks={}, rows_stored=0, reanchored=0, streams_open=3, budget=budget))
    assert gauges(registry) == {
        "fleetscope_collector_ingest_budget_held_bytes": 0, "fleetscope_collector_ingest_budget_reserved_bytes": 0,
        "fleetscope_collector_ingest_budget_waiting_streams": 0, "fleetscope_collector_ingest_budget_cap_bytes": 1000,
        "fleetscope_collector_ingest_budget_peak_bytes": 0,
    }

    async def two_streams_past_the_cap() -> dict[str, float]:
        first = await budget.admit(600)
        release = budget.hold(1200, first)  # a batch larger than its estimate: the budget is full
        waiters = [asyncio.create_task(budget.admit(300)) for _ in range(2)]
        await asyncio.sleep(0.01)
        while_full = gauges(registry)
        release()
        await asyncio.gather(*waiters)
        return while_full

    while_full = asyncio.run(two_streams_past_the_cap())
    assert while_full["fleetscope_collector_ingest_budget_held_bytes"] == 1200
    assert while_full["fleetscope_collector_ingest_budget_waiting_streams"] == 2
    after = gauges(registry)
    assert after["fleetscope_collector_ingest_budget_held_bytes"] == 0
    assert after["fleetscope_collector_ingest_budget_waiting_streams"] == 0
    assert after["fleetscope_collector_ingest_budget_reserved_bytes"] == 600  # the two admitted readers
    assert after["fleetscope_collector_ingest_budget_peak_bytes"] == 1200


def test_before_the_service_serves_the_budget_reads_zero() -> None:
    got = gauges(self_metrics(None))
    assert got["fleetscope_collector_ingest_budget_held_bytes"] == 0
    assert "fleetscope_collector_ingest_budget_cap_bytes" not in got


@pytest.mark.server
@pytest.mark.parametrize("cap", [3 << 20])
def test_a_running_collector_exports_its_budget(tmp_path: Any, cap: int) -> None:
    collector = Collector(CollectorSettings(listen="127.0.0.1:0", db_url=f"sqlite:///{tmp_path / 'c.db'}",
                                            metrics_listen="127.0.0.1:0", max_unacked_bytes=cap, detectors=None,
                                            retention=None, compaction=False))
    collector.start()
    try:
        got = scrape(collector.observability.metrics_port)
        assert value(got, "fleetscope_collector_ingest_budget_cap_bytes") == cap
        assert ("fleetscope_collector_ingest_budget_held_bytes", ()) in got
        assert ("fleetscope_collector_ingest_budget_waiting_streams", ()) in got
    finally:
        collector.stop()
