"""The read API: the one way to read the fleet's stored data, for people and programs.

The CLI's query commands, the dashboard, the benchmarks and the tests all read through these
functions, so the same question gets the same answer wherever it is asked. Each takes the
SQLAlchemy ``session`` as a keyword (the caller owns the transaction) and returns frozen
dataclasses of plain values; none returns ORM objects or rows, so callers never depend on the
schema. A reader opens the database with ``open_database`` (read-only) and ``session_scope``.

By subject:

* ``database``: opening a database to read it;
* ``devices``: the registered devices, one device, how people name and group them;
* ``installs``: a name's whole history across reinstalls (a reflashed drone keeps its name and
  gets a new agent id) for the readers that take one install: logs, series, hardware;
* ``samples``: a device's raw samples over a window, and min/mean/max/last per metric;
* ``series``: a device's readings in buckets at a resolution (``planning``: which resolution,
  and which source, rollups or raw rows, serves each stretch);
* ``latency``: percentiles from merged histograms, per window or per bucket;
* ``logs``: log search;
* ``incidents``: incident search, counts, kinds, one incident; ``context``: the device around
  one incident;
* ``compare``: groups of devices side by side, and benchmark records;
* ``fleet``: the fleet overview;
* ``hardware``: per GPU its processes, ECC, PCIe and limits; a Jetson's engines, rails, nvpmodel;
* ``alerts``: alerts (live and history), silences, notifications and their attempts;
* ``identity``: enrolment tokens and device credentials (digests only: never a secret);
* ``latest``: the newest reading of every device (the Prometheus exposition) and the fleet's
  health (``fleetscope status``).
"""

from __future__ import annotations

from fleetscope.collector.errors import UnknownDevice, UnknownIncident, UnknownIncidentKind
from fleetscope.collector.query.alerts import (
    AlertPeriod,
    AlertRow,
    NotificationAttempt,
    NotificationRow,
    SilenceRow,
    alert_notifications,
    alert_periods,
    list_alerts,
    list_silences,
    silence_matches,
)
from fleetscope.collector.query.compare import (
    BenchmarkRecord,
    Comparison,
    GroupComparison,
    benchmark_records,
    compare_groups,
    compare_with_operations,
    comparison_start,
)
from fleetscope.collector.query.context import (
    ContextSummary,
    GpuAtIncident,
    HostAtIncident,
    IncidentContext,
    incident_with_context,
    incidents_with_context,
)
from fleetscope.collector.query.database import (
    Engine,
    Session,
    has_schema,
    hide_password,
    missing_sqlite_file,
    normalise_url,
    open_database,
    schema_problem,
    session_scope,
)
from fleetscope.collector.query.devices import (
    ONLINE_WITHIN_NS,
    STATE_IMPORTED,
    STATE_OFFLINE,
    STATE_ONLINE,
    STATE_REPLACED,
    STATE_STOPPED,
    count_devices,
    device_groups,
    device_installs,
    device_model,
    device_state,
    get_device,
    labels_match,
    list_devices,
)
from fleetscope.collector.query.fleet import (
    FleetDevice,
    FleetOverview,
    FleetSparklines,
    fleet_overview,
    fleet_sparklines,
)
from fleetscope.collector.query.hardware import (
    GpuHardware,
    GpuProcess,
    JetsonReading,
    JetsonView,
    gpu_hardware,
    jetson_view,
)
from fleetscope.collector.query.identity import (
    DeviceCredentialRow,
    EnrolmentTokenRow,
    list_device_credentials,
    list_enrolment_tokens,
)
from fleetscope.collector.query.incidents import (
    IncidentCount,
    get_incident,
    incident_counts,
    incident_kinds,
    search_incidents,
)
from fleetscope.collector.query.installs import (
    device_series_all_installs,
    gpu_hardware_all_installs,
    jetson_view_all_installs,
    search_logs_all_installs,
)
from fleetscope.collector.query.jsonable import to_jsonable
from fleetscope.collector.query.latency import (
    LatencySeries,
    LatencyStats,
    group_latency_series,
    latency_operations,
    latency_stats,
)
from fleetscope.collector.query.latest import (
    FleetHealth,
    JobLag,
    LatestReadings,
    fleet_health,
    job_lags,
    latest_readings,
)
from fleetscope.collector.query.logs import search_logs
from fleetscope.collector.query.planning import (
    MAX_POINTS,
    POINTS_PER_CHART,
    describe_resolution,
    resolution_for,
)
from fleetscope.collector.query.samples import (
    DeviceMetrics,
    MetricsSummary,
    MetricSummary,
    count_samples,
    device_metrics,
    last_sample_ns,
    metrics_summary,
)
from fleetscope.collector.query.series import DeviceSeries, GpuLimits, SeriesTable, device_series
from fleetscope.collector.query.types import (
    DeviceSummary,
    GpuPoint,
    GpuStatePoint,
    HostPoint,
    IncidentView,
    LogLine,
)

__all__ = [
    # opening a database
    "Engine",
    "Session",
    "open_database",
    "session_scope",
    "has_schema",
    "schema_problem",
    "normalise_url",
    "missing_sqlite_file",
    "hide_password",
    # errors
    "UnknownDevice",
    "UnknownIncident",
    "UnknownIncidentKind",
    # devices
    "ONLINE_WITHIN_NS",
    "DeviceSummary",
    "list_devices",
    "get_device",
    "device_installs",
    "device_state",
    "STATE_ONLINE",
    "STATE_OFFLINE",
    "STATE_STOPPED",
    "STATE_IMPORTED",
    "STATE_REPLACED",
    "count_devices",
    "device_model",
    "device_groups",
    "labels_match",
    # raw samples
    "HostPoint",
    "GpuPoint",
    "GpuStatePoint",
    "DeviceMetrics",
    "device_metrics",
    "count_samples",
    "MetricSummary",
    "MetricsSummary",
    "metrics_summary",
    "last_sample_ns",
    # series at a resolution
    "MAX_POINTS",
    "POINTS_PER_CHART",
    "SeriesTable",
    "GpuLimits",
    "DeviceSeries",
    "device_series",
    "resolution_for",
    "describe_resolution",
    # every install of a name (a reinstalled device: same name, new agent id)
    "device_series_all_installs",
    "search_logs_all_installs",
    "gpu_hardware_all_installs",
    "jetson_view_all_installs",
    # latency
    "LatencySeries",
    "LatencyStats",
    "latency_stats",
    "latency_operations",
    "group_latency_series",
    # logs
    "LogLine",
    "search_logs",
    # incidents
    "IncidentView",
    "IncidentCount",
    "search_incidents",
    "incident_counts",
    "incident_kinds",
    "get_incident",
    # the device around an incident
    "IncidentContext",
    "ContextSummary",
    "GpuAtIncident",
    "HostAtIncident",
    "incident_with_context",
    "incidents_with_context",
    # alerts
    "AlertRow",
    "SilenceRow",
    "NotificationRow",
    "NotificationAttempt",
    "AlertPeriod",
    "list_alerts",
    "list_silences",
    "silence_matches",
    "alert_notifications",
    "alert_periods",
    # identity
    "EnrolmentTokenRow",
    "DeviceCredentialRow",
    "list_enrolment_tokens",
    "list_device_credentials",
    # comparisons
    "GroupComparison",
    "Comparison",
    "BenchmarkRecord",
    "compare_groups",
    "compare_with_operations",
    "comparison_start",
    "benchmark_records",
    # hardware: processes, ECC, PCIe, limits; the Jetson board
    "GpuHardware",
    "GpuProcess",
    "JetsonReading",
    "JetsonView",
    "gpu_hardware",
    "jetson_view",
    # the fleet
    "FleetDevice",
    "FleetOverview",
    "FleetSparklines",
    "fleet_overview",
    "fleet_sparklines",
    # latest readings (the Prometheus exposition) and the fleet's health (`fleetscope status`)
    "LatestReadings",
    "latest_readings",
    "FleetHealth",
    "JobLag",
    "fleet_health",
    "job_lags",
    # output
    "to_jsonable",
]
