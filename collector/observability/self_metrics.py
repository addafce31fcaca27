"""The collector's own metrics (``/metrics``), read at scrape time from state that already exists.

``CollectorSelfMetrics`` is a ``prometheus_client`` collector: each scrape reads the ingest
service's acknowledgement counters and open streams, the writer's queue depth, groups and
database errors, the database probe, and the jobs' last reports; job lag is one small query
(cached a second). The only work added to the ingest path is one histogram observation per
committed group (``fleetscope_collector_group_commit_seconds``), done by the writer thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry
from sqlalchemy import Engine

from fleetscope.collector import query
from fleetscope.collector.observability.health import DatabaseProbe
from fleetscope.collector.query.latest import JobLag, job_lags
from fleetscope.collector.storage.shares import JOB_SHARES

if TYPE_CHECKING:
    from fleetscope.collector.ingest.registration_gate import RegistrationGate

# Group commits take from a fraction of a millisecond (SQLite, a few batches) to seconds
# (PostgreSQL under a flood, 100,000 rows).
COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Not "job": Prometheus gives every scraped series the scrape config's ``job`` label, and renames
# a target's own to ``exported_job`` (honor_labels off), so ``{job="rollup"}`` matched nothing.
JOB_LABEL = "collector_job"
SCRAPE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class CollectorSelfMetrics:
    """Reads a running collector's parts; any of them may be None (not started, or turned off)."""

    def __init__(
        self,
        *,
        engine: Engine,
        service: Callable[[], Any],  # the IngestService once serving, else None
        writer: Any,
        jobs: Mapping[str, Any],  # name -> job with ``last_report`` (seconds, ran)
        probe: DatabaseProbe | None,
        max_connections: int | None,
        registry: CollectorRegistry,
        lag_cache_s: float = 1.0,
    ) -> None:
        self._engine = engine
        self._service = service
        self._writer = writer
        self._jobs = jobs
        self._probe = probe
        self._max_connections = max_connections
        self._lag_cache_s = lag_cache_s
        self._lags: tuple[float, list[JobLag]] | None = None
        self._lock = threading.Lock()
        self.commit_seconds = Histogram(
            "fleetscope_collector_group_commit_seconds", "Time to write and commit one group of batches (one transaction).",
            buckets=COMMIT_BUCKETS, registry=registry,
        )  # fmt: skip
        self.fleet_scrape_seconds = Histogram(
            "fleetscope_collector_fleet_scrape_seconds", "Time to read and render /metrics/fleet (cache misses only).",
            buckets=SCRAPE_BUCKETS, registry=registry,
        )  # fmt: skip
        registry.register(self)

    def describe(self) -> list[Metric]:
        return []

    def _job_lags(self) -> list[JobLag]:
        with self._lock:
            now = time.monotonic()
            if self._lags is not None and now - self._lags[0] < self._lag_cache_s:
                return self._lags[1]
            try:
                with query.session_scope(self._engine) as session:
                    lags = job_lags(session=session, now_ns=time.time_ns())
            except Exception:  # the database is away: the probe says so; no lag to show
                lags = []
            self._lags = (now, lags)
            return lags

    def collect(self) -> Iterator[Metric]:
        service = self._service()
        batches = CounterMetricFamily("fleetscope_collector_ingest_batches", "Batches acknowledged, by status.", labels=["status"])
        acks = dict(service.acks) if service is not None else {}
        for status in ("stored", "duplicate", "rejected"):
            batches.add_metric([status], acks.get(status, 0))
        yield batches
        yield CounterMetricFamily("fleetscope_collector_ingest_rows", "Sample rows stored (host, GPU, latency, metric, log rows).",
                                  value=service.rows_stored if service is not None else 0)
        yield CounterMetricFamily("fleetscope_collector_batches_reanchored",
                                  "Batches placed by the device's monotonic clock after its wall clock stepped.",
                                  value=service.reanchored if service is not None else 0)
        yield GaugeMetricFamily("fleetscope_collector_streams_open", "Agent streams open now (about one per connected agent).",
                                value=service.streams_open if service is not None else 0)
        yield from _budget_metrics(getattr(service, "budget", None))
        yield from _registration_metrics(getattr(service, "registrations", None))
        yield from _balance_metrics(getattr(service, "balancer", None))
        if self._max_connections is not None:
            yield GaugeMetricFamily("fleetscope_collector_connections_max", "The most connections this collector accepts at once.",
                                    value=self._max_connections)
        w = self._writer
        yield GaugeMetricFamily("fleetscope_collector_writer_queue_batches", "Batches waiting for the group-commit writer.",
                                value=w.queue_depth)
        yield CounterMetricFamily("fleetscope_collector_writer_groups", "Groups (transactions) the writer committed.", value=w.groups)
        yield CounterMetricFamily("fleetscope_collector_writer_batches", "Batches the writer committed (stored, duplicate or recorded rejection).",
                                  value=w.batches)
        errors = CounterMetricFamily("fleetscope_collector_database_errors",
                                     "Database failures: a group the writer could not commit, a health probe that failed.",
                                     labels=["source"])
        errors.add_metric(["writer"], w.errors)
        errors.add_metric(["probe"], self._probe.failures if self._probe is not None else 0)
        yield errors
        if self._probe is not None:
            yield GaugeMetricFamily("fleetscope_collector_database_up", "1 while the database answers the health probe.",
                                    value=1 if self._probe.reachable else 0)
        last = GaugeMetricFamily("fleetscope_collector_job_last_pass_seconds", "How long the job's last pass took.",
                                 labels=[JOB_LABEL])
        ran = GaugeMetricFamily("fleetscope_collector_job_holds_lease", "1 when this collector ran the job's last pass (it held the job's lease, or some of its device shares).",
                                labels=[JOB_LABEL])
        for name, job in sorted(self._jobs.items()):
            report = getattr(job, "last_report", None)
            if report is not None:
                last.add_metric([name], report.seconds)
                ran.add_metric([name], 1 if report.ran else 0)
        yield last
        yield ran
        shares = GaugeMetricFamily("fleetscope_collector_job_share_held",
                                   "1 for each device share of a shared job (rollup, compaction) this collector holds now.",
                                   labels=[JOB_LABEL, "share"])
        for name, job in sorted(self._jobs.items()):
            job_shares = getattr(job, "shares", None)
            if job_shares is not None:
                held = job_shares.held
                for k in range(JOB_SHARES):
                    shares.add_metric([name, str(k)], 1 if k in held else 0)
        yield shares
        lag = GaugeMetricFamily("fleetscope_collector_job_lag_seconds",
                                "How far a job is behind the data: rollup (worst recent device's newest data minus its "
                                "newest minute rolled up), detector:<name> (seconds since its last complete pass).",
                                labels=[JOB_LABEL])
        for jl in self._job_lags():
            if jl.lag_s is not None:
                lag.add_metric([jl.job], jl.lag_s)
        yield lag


def _budget_metrics(budget: Any) -> Iterator[Metric]:
    """The ingest budget across all streams (``IngestBudget``, ``--max-unacked``): bytes of batches
    read and not yet acknowledged against the cap, and the streams waiting for room (flow control
    holding agents back). Read as they are at scrape time; zeros before the service serves."""
    yield GaugeMetricFamily("fleetscope_collector_ingest_budget_held_bytes",
                            "Bytes of batches read from agent streams and not yet acknowledged (all streams).",
                            value=budget.held if budget is not None else 0)
    yield GaugeMetricFamily("fleetscope_collector_ingest_budget_reserved_bytes",
                            "Bytes reserved for batches being read now (estimates from each stream's previous batch).",
                            value=budget.reserved if budget is not None else 0)
    yield GaugeMetricFamily("fleetscope_collector_ingest_budget_waiting_streams",
                            "Agent streams waiting for room in the ingest budget before reading their next batch.",
                            value=budget.waiting if budget is not None else 0)
    if budget is not None:
        yield GaugeMetricFamily("fleetscope_collector_ingest_budget_cap_bytes",
                                "The most bytes of unacknowledged batches held at once (--max-unacked).", value=budget.cap)
        yield GaugeMetricFamily("fleetscope_collector_ingest_budget_peak_bytes",
                                "The most bytes of unacknowledged batches held at once since the collector started.",
                                value=budget.peak)


__all__ = ["COMMIT_BUCKETS", "JOB_LABEL", "CollectorSelfMetrics"]


def _balance_metrics(balancer: Any) -> Iterator[Metric]:
    """A ``--workers N`` collector's agents per worker (every worker's, from the file they share,
    so the one worker serving /metrics shows the whole group) and this worker's turned-away agents."""
    if balancer is None:
        return
    agents = GaugeMetricFamily("fleetscope_collector_worker_agents",
                               "Agent connections each worker of this --workers collector holds now.", labels=["worker"])
    for i, count in enumerate(balancer.loads.counts()):
        if count is not None:  # a worker not alive has no count
            agents.add_metric([str(i)], count)
    yield agents
    moved = CounterMetricFamily("fleetscope_collector_worker_rebalanced",
                                "Agents this worker asked onto a new connection to even the workers' loads: at "
                                "registration, or while streaming.", labels=["when"])
    moved.add_metric(["registration"], balancer.refused)
    moved.add_metric(["streaming"], balancer.shed)
    yield moved


def _registration_metrics(gate: RegistrationGate | None) -> Iterator[Metric]:
    """The registration gate (ingest/registration_gate.py): what it holds now and what it shed."""
    yield GaugeMetricFamily("fleetscope_collector_registrations_in_flight", "Agent registrations being written now.",
                            value=gate.in_flight if gate is not None else 0)
    yield GaugeMetricFamily("fleetscope_collector_registrations_waiting", "Agent registrations waiting for a slot.",
                            value=gate.waiting if gate is not None else 0)
    shed = CounterMetricFamily("fleetscope_collector_registrations_shed",
                               "Registrations not written: their deadline passed while they waited (expired), or too "
                               "many were waiting and they were refused with a retry-after (queue_full).",
                               labels=["reason"])
    for reason in ("expired", "queue_full"):
        shed.add_metric([reason], gate.shed[reason] if gate is not None else 0)
    yield shed
