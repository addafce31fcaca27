"""Each package's public surface, locked: a name appears in or leaves an ``__all__`` on purpose.

Changing a surface means changing this file in the same commit, so a reviewer sees it. The
checks: ``__all__`` is exactly the list below; every listed name exists; and no public name
defined in the module itself is missing from ``__all__`` (a function added without export, or
exported by accident through a star import elsewhere).
"""

from __future__ import annotations

import importlib
import inspect

import pytest

SURFACES: dict[str, list[str]] = {
    "fleetscope.proto.vocabulary": [
        "ALERT_FIRING", "ALERT_PENDING", "ALERT_RESOLVED", "ALERT_STATES", "BINARY_BYTE_UNITS",
        "CAPABILITIES", "CAPABILITY_COLUMNAR",
        "CAPABILITY_COMPACT", "CAPABILITY_INCIDENTS", "CAPABILITY_LATENCY",
        "CAPABILITY_METRICS", "CLOCK_EVENT_REASONS", "ClockEventReason", "DERIVED_KINDS", "DEVICE_KINDS",
        "DEVICE_KIND_JETSON", "DEVICE_KIND_OTHER", "DEVICE_KIND_SERVER", "INCIDENT_KINDS", "INCIDENT_OPEN",
        "INCIDENT_ORIGINS", "INCIDENT_RESOLVED", "INCIDENT_STATES", "INVENTORY_ENVIRONMENT",
        "INVENTORY_ONNXRUNTIME_SESSION", "INVENTORY_TENSORRT_ENGINE", "KIND_AGENT_OFFLINE", "KIND_CUDA_OOM",
        "KIND_CUDA_UNAVAILABLE", "KIND_CUDNN_BENCHMARK_OFF", "KIND_DATALOADER_NO_PIN_MEMORY",
        "KIND_DATALOADER_NO_WORKERS", "KIND_GPU_LOST", "KIND_GPU_STARVED", "KIND_GPU_THROTTLING",
        "KIND_GPU_XID", "KIND_GRAD_SCALER_COLLAPSE", "KIND_HOST_OOM", "KIND_JETSON_MEMORY",
        "KIND_LATENCY_REGRESSION", "KIND_LATENCY_SLO", "KIND_MEMORY_ALLOC_FAILURE", "KIND_MEMORY_GROWTH",
        "KIND_MODEL_ON_CPU", "KIND_MODEL_SPLIT_DEVICES", "KIND_NAN_LOSS", "KIND_ONNXRUNTIME_CPU_FALLBACK",
        "KIND_ONNXRUNTIME_PROVIDER_MISSING", "KIND_PRECISION_UNSUPPORTED", "KIND_REPEATED_OOM",
        "KIND_TENSORRT_ERROR", "KIND_TF32_DISABLED", "KIND_TORCH_WITHOUT_CUDA", "KIND_TRT_BENCHMARK",
        "LOG_LEVELS", "LOG_LEVEL_RANK", "ORIGIN_AGENT", "ORIGIN_DETECTOR", "ORIGIN_IMPORT",
        "POWER_THROTTLE_MASK", "REBALANCE_DETAIL", "RECORD_KINDS", "SEVERITIES", "SEVERITY_CRITICAL", "SEVERITY_ERROR",
        "SEVERITY_INFO", "SEVERITY_RANK", "SEVERITY_WARNING", "SOURCE_KERNEL_LOG", "SOURCE_NVML",
        "SXID_CATALOG", "SxidInfo", "THERMAL_THROTTLE_MASK", "THROTTLE_REASON_BITS", "UNKNOWN_XID_SEVERITY",
        "XID_CATALOG", "XidInfo", "format_reading", "log_levels_at_least", "severities_at_least", "throttle_reason_names",
        "worst_severity", "xid_facts", "xid_severity",
    ],
    "fleetscope.agent.sdk": [
        "CudaMemory", "DEFAULT_SOCKET", "DataLoaderSettings", "EnvironmentReport",
        "FleetscopeTrtLogger", "GpuCapability", "Histogram", "LatencyBlock", "LatencySummary",
        "ModelPlacement", "OnnxSessionProviders", "OomInfo", "PrecisionSupport", "SOCKET_ENV",
        "SdkConfig", "SdkStats", "StepContext", "StepTotals", "TrainSteps", "TrtEngineInfo",
        "TrtTensorInfo", "check_environment", "classify_oom", "configure", "create_trt_logger",
        "cuda_memory", "current_step", "describe_engine", "doctor_main", "flush", "get_config",
        "inspect_session", "install_oom_hook", "invalid_values", "latency", "latency_summaries",
        "latency_summary", "log", "metric", "oom_guard", "precision_support", "record_duration",
        "report_incident", "report_inventory", "report_oom", "shutdown", "stats", "train_steps",
        "trt_logger_class", "trt_timed",
    ],
    "fleetscope.agent.classify": [
        "Classifier", "Finding", "Registry", "classify_event", "classify_text", "event_classifier", "gate_patterns", "registry",
    ],
    "fleetscope.agent.samplers": [
        "SampleSet", "Sampler", "SamplerRegistry", "SamplerSettings", "SourceUnavailable",
        "default_samplers",
    ],
    "fleetscope.agent.logs": [
        "EventGrouper", "LineGrouper", "LogSource", "LogSourceRegistry", "LogSourceSettings",
        "default_log_sources",
    ],
    "fleetscope.agent.daemon": [
        "Agent", "AgentSettings", "LogPipeline",
    ],
    "fleetscope.collector.observability": [
        "CollectorSelfMetrics", "DatabaseProbe", "FleetExposition", "Observability", "render_fleet",
    ],
    "fleetscope.collector.query": [
        "AlertPeriod", "AlertRow", "BenchmarkRecord", "Comparison", "ContextSummary", "DeviceCredentialRow", "DeviceMetrics",
        "DeviceSeries", "DeviceSummary", "Engine", "EnrolmentTokenRow", "FleetDevice", "FleetHealth", "FleetOverview", "FleetSparklines",
        "GpuAtIncident", "GpuHardware", "GpuLimits", "GpuPoint", "GpuProcess", "GpuStatePoint", "GroupComparison",
        "HostAtIncident", "HostPoint", "IncidentContext", "IncidentCount", "IncidentView", "JetsonReading",
        "JetsonView", "JobLag", "LatencySeries", "LatencyStats", "LatestReadings", "LogLine", "MAX_POINTS",
        "MetricSummary", "MetricsSummary", "NotificationAttempt", "NotificationRow", "ONLINE_WITHIN_NS",
        "POINTS_PER_CHART", "STATE_IMPORTED", "STATE_OFFLINE", "STATE_ONLINE", "STATE_REPLACED", "STATE_STOPPED", "SeriesTable",
        "Session", "SilenceRow", "UnknownDevice", "UnknownIncident", "UnknownIncidentKind", "alert_notifications",
        "alert_periods", "benchmark_records", "compare_groups", "compare_with_operations", "comparison_start", "count_devices", "count_samples",
        "describe_resolution", "device_groups", "device_installs", "device_metrics", "device_model", "device_series",
        "device_series_all_installs", "device_state", "fleet_health", "fleet_overview", "fleet_sparklines", "get_device", "get_incident",
        "gpu_hardware", "gpu_hardware_all_installs", "group_latency_series", "has_schema", "hide_password",
        "incident_counts", "incident_kinds", "incident_with_context", "incidents_with_context", "jetson_view",
        "jetson_view_all_installs", "job_lags", "labels_match", "last_sample_ns", "latency_operations",
        "latency_stats", "latest_readings", "list_alerts", "list_device_credentials", "list_devices",
        "list_enrolment_tokens", "list_silences", "metrics_summary", "missing_sqlite_file", "normalise_url",
        "open_database", "resolution_for", "schema_problem", "search_incidents", "search_logs",
        "search_logs_all_installs", "session_scope", "silence_matches", "to_jsonable",
    ],
    "fleetscope.collector.jobs.detectors": [
        "DETECTOR_NAMES", "DetectorJob", "DetectorReport", "DetectorSettings", "SloObjective",
    ],
    "fleetscope.collector.storage.incident_lifecycle": [
        "DerivedKey", "OpenIncident", "list_open", "open_incident", "refresh_incident", "resolve_incident",
        "resolve_quiet_incidents", "set_hints",
    ],
    "fleetscope.collector.errors": [
        "BatchInvalid", "CannotListen", "FleetscopeCollectorError", "StoreUnavailable", "UnknownDevice",
        "UnknownIncident", "UnknownIncidentKind",
    ],
    "fleetscope.cli": [
        "MissingExtra", "build_parser", "main", "require",
    ],
    "fleetscope.cli.extras": [
        "MissingExtra", "require",
    ],
}


@pytest.mark.parametrize("module_name", sorted(SURFACES))
def test_exported_names_are_exactly_the_locked_ones(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert sorted(module.__all__) == SURFACES[module_name]
    assert len(set(module.__all__)) == len(module.__all__), "a name is exported twice"


@pytest.mark.parametrize("module_name", sorted(SURFACES))
def test_every_exported_name_exists(module_name: str) -> None:
    module = importlib.import_module(module_name)
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert not missing


@pytest.mark.parametrize("module_name", sorted(SURFACES))
def test_public_names_defined_here_are_exported(module_name: str) -> None:
    module = importlib.import_module(module_name)
    defined_here = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isfunction(value) or inspect.isclass(value))
        and getattr(value, "__module__", None) == module_name
    }
    assert not defined_here - set(module.__all__), "defined here, public by name, but not exported"

