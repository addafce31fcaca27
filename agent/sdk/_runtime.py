"""The process-wide SDK: its settings, its transport, and the record functions built on them."""

from __future__ import annotations

import dataclasses
import math
import os
import threading
import time
from collections.abc import Mapping

from fleetscope.agent.sdk import _latency, _registry
from fleetscope.agent.sdk._config import SdkConfig, config_from_env, normalize_target
from fleetscope.agent.sdk._facts import fill_facts, level
from fleetscope.agent.sdk._histogram import LatencySummary
from fleetscope.agent.sdk._transport import SdkStats, Transport
from fleetscope.proto.v1 import telemetry_pb2 as pb

_config: SdkConfig = config_from_env()
_config_lock = threading.Lock()
_invalid_values = 0


def get_config() -> SdkConfig:
    return _config


def _before_collect() -> None:
    _latency.resolve_cuda_events()


transport = Transport(get_config, _registry.collect, _before_collect)
_registry.set_new_shard_hook(transport.ensure_started)


def configure(
    *,
    socket: str | None = None,
    flush_interval_s: float | None = None,
    rpc_timeout_s: float | None = None,
    max_queue: int | None = None,
    max_records_per_report: int | None = None,
    exit_flush_timeout_s: float | None = None,
    oom_flush_timeout_s: float | None = None,
    process_name: str | None = None,
    labels: Mapping[str, object] | None = None,
    disabled: bool | None = None,
) -> SdkConfig:
    """Change how the SDK reports; arguments left out keep their value. Returns the new settings.

    Calling it also (re)enables reporting after ``shutdown()`` and in a forked child process,
    which otherwise stays silent (see docs/sdk/pytorch-training.md on DataLoader workers).
    """
    global _config
    changes: dict[str, object] = {}
    if socket is not None:
        changes["socket"] = normalize_target(socket)
    for key, value in (
        ("flush_interval_s", flush_interval_s),
        ("rpc_timeout_s", rpc_timeout_s),
        ("max_queue", max_queue),
        ("max_records_per_report", max_records_per_report),
        ("exit_flush_timeout_s", exit_flush_timeout_s),
        ("oom_flush_timeout_s", oom_flush_timeout_s),
        ("process_name", process_name),
        ("disabled", disabled),
    ):
        if value is not None:
            changes[key] = value
    if labels is not None:
        changes["labels"] = {str(k): str(v) for k, v in labels.items()}
    with _config_lock:
        _config = dataclasses.replace(_config, **changes)  # type: ignore[arg-type]
        transport.reopen()
    # Threads that already record never ask for the reporter again (they ask once, on their
    # first block), so after a shutdown or a fork it has to be started here.
    transport.ensure_started()
    return _config


def flush(timeout: float = 2.0) -> bool:
    """Send everything pending now, waiting at most ``timeout`` s; True when it reached the agent."""
    try:
        return transport.flush(timeout)
    except Exception:
        return False


def shutdown(timeout: float = 2.0) -> None:
    """Send what is pending (waiting at most ``timeout`` s) and stop reporting; atexit does this."""
    try:
        transport.shutdown(timeout)
    except Exception:
        pass


def stats() -> SdkStats:
    """The SDK's own counters: what was sent, dropped and why."""
    return transport.stats()


def latency_summaries(name: str | None = None) -> list[LatencySummary]:
    """Per-series totals and percentiles of everything timed in this process so far."""
    return _registry.summaries(name)


def latency_summary(name: str, **labels: object) -> LatencySummary | None:
    """The summary of one series, or None when nothing was timed under that name and labels."""
    want = {str(k): str(v) for k, v in labels.items()}
    for summary in _registry.summaries(name):
        if dict(summary.labels) == want:
            return summary
    return None


def invalid_values() -> int:
    """Metric values that were dropped because they were not finite numbers."""
    return _invalid_values


def metric(name: str, value: object, *, ts_ns: int | None = None, **labels: object) -> None:
    """Report one scalar (a loss, an accuracy, a learning rate) as a MetricPoint.

    ``value`` is anything ``float()`` accepts; a CUDA tensor works too, but ``float()`` waits for
    the GPU, so pass ``loss.item()`` where the program already has it. NaN and Inf are not sent
    (the wire never carries them): ``TrainSteps.loss`` turns them into incidents instead.
    """
    metric_with_labels(name, value, labels, ts_ns=ts_ns)


def metric_with_labels(name: str, value: object, labels: Mapping[str, object], *, ts_ns: int | None = None) -> None:
    """``metric`` with its labels as a mapping: for callers whose label names are data (a label
    called ``ts_ns`` stays a label here instead of becoming the timestamp)."""
    global _invalid_values
    try:
        v = float(value)  # type: ignore[arg-type]
    except Exception:
        _invalid_values += 1
        return
    if not math.isfinite(v):
        _invalid_values += 1
        return
    label_items = tuple((str(k), str(val)) for k, val in labels.items()) if labels else ()
    transport.emit((str(name), time.time_ns() if ts_ns is None else ts_ns, v, label_items))


def log(message: str, level_name: str = "info", *, source: str = "sdk", ts_ns: int | None = None) -> None:
    """Report one log line (level "debug", "info", "warning", "error" or "critical")."""
    try:
        event = pb.LogEvent(
            ts_ns=time.time_ns() if ts_ns is None else ts_ns,
            source=source,
            level=level(level_name),
            message=str(message),
        )
    except Exception:
        return
    transport.emit(event)


def report_incident(
    kind: str,
    severity: str,
    title: str,
    facts: Mapping[str, object] | None = None,
    *,
    excerpt: str = "",
    source: str = "sdk",
    ts_ns: int | None = None,
) -> None:
    """Report one incident (``kind`` from fleetscope.agent.classify or fleetscope.agent.sdk kinds)."""
    try:
        incident = pb.Incident(
            ts_ns=time.time_ns() if ts_ns is None else ts_ns,
            kind=kind,
            severity=level(severity),
            title=title,
            source=source,
            excerpt=excerpt,
        )
        fill_facts(incident.facts, facts or {})
    except Exception:
        return
    transport.emit(incident)


def report_inventory(kind: str, name: str, facts: Mapping[str, object], *, ts_ns: int | None = None) -> None:
    """Report one description that is not a time series (an engine, an environment)."""
    try:
        record = pb.InventoryRecord(kind=kind, name=name, ts_ns=time.time_ns() if ts_ns is None else ts_ns)
        fill_facts(record.facts, facts)
    except Exception:
        return
    transport.emit(record)


def _after_fork_in_child() -> None:
    global _config_lock
    _config_lock = threading.Lock()  # the parent may have held it at the fork
    _registry.reset_after_fork()
    _latency.reset_after_fork()
    transport.reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
