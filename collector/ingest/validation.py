"""Checking a batch against the wire contract before anything of it is stored.

A batch that breaks a rule is rejected whole with ``BatchInvalid`` naming the field (e.g.
``gpu.temp_c[3]: -400.0 is below -60``); the collector acknowledges it as REJECTED with
INVALID_ARGUMENT, so the agent stops resending it, and goes on with the stream. The checks are
written to avoid Python loops over values in the common case (see ``check_column``): they sit
on the ingest hot path.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from fleetscope.collector.errors import BatchInvalid
from fleetscope.collector.storage.decoded import Decoded
from fleetscope.proto.columns import (
    GPU_COLUMNS,
    HOST_COLUMNS,
    PROCESS_COLUMNS,
    ColumnError,
    check_values,
    column_values,
    with_nulls,
)
from fleetscope.proto.v1 import telemetry_pb2 as pb


@dataclass(frozen=True)
class Limits:
    max_rows: int = 50_000
    max_logs: int = 20_000
    max_incidents: int = 1_000
    max_message_chars: int = 65_536
    max_name_chars: int = 200
    max_labels: int = 64
    max_future_ns: int = 10 * 60 * 10**9  # a row stamped after the batch was sent, by more than this, is wrong
    max_age_ns: int = 30 * 86_400 * 10**9  # a drone may be offline for long; a month is the bound
    max_gpus: int = 256


# (minimum, maximum) per value column; None leaves a side open.
_HOST_RANGES: dict[str, tuple[float | None, float | None]] = {
    "cpu_percent": (0.0, 100.0),
    "load1": (0.0, None),
    "load5": (0.0, None),
    "load15": (0.0, None),
}
_GPU_RANGES: dict[str, tuple[float | None, float | None]] = {
    "util_gpu_percent": (0.0, 100.0),
    "util_memory_percent": (0.0, 100.0),
    "util_encoder_percent": (0.0, 100.0),
    "util_decoder_percent": (0.0, 100.0),
    "temp_c": (-60.0, 200.0),
    "memory_temp_c": (-60.0, 200.0),
    "power_w": (0.0, 10_000.0),
    "power_limit_w": (0.0, 10_000.0),
    "pstate": (0.0, 32.0),
    "fan_percent": (0.0, 255.0),
}


def _check_ts(values: Sequence[int], rows: int, field: str, sent_ns: int, limits: Limits) -> None:
    """``values``: a repeated int64 field (or a list of timestamps)."""
    if len(values) != rows:
        raise BatchInvalid(field, f"has {len(values)} timestamps for {rows} rows")
    if not rows:
        return
    lo, hi = min(values), max(values)
    if hi > sent_ns + limits.max_future_ns:
        raise BatchInvalid(field, f"timestamp {hi} is {(hi - sent_ns) / 1e9:.0f} s after the batch was sent")
    if lo < sent_ns - limits.max_age_ns:
        raise BatchInvalid(field, f"timestamp {lo} is {(sent_ns - lo) / 86_400e9:.1f} days before the batch was sent")


def _check_columns(msg: object, names: tuple[str, ...], rows: int, prefix: str, ranges: dict) -> dict[str, Sequence[float | None]]:
    """Check every value column of ``msg`` and return them decoded (lists, None at null rows).

    numpy reads each column's packed bytes in place, so the range checks cost microseconds per
    column; only a column that fails is walked in Python, to name the row at fault.
    """
    import numpy as np

    out: dict[str, Sequence[float | None]] = {}
    for name in names:
        column = getattr(msg, name)
        values = column_values(column)
        nulls = column.null_rows
        if not len(values):
            if nulls:
                raise BatchInvalid(f"{prefix}.{name}", "null_rows given without values")
            out[name] = [None] * rows
            continue
        lo, hi = ranges.get(name, (0.0, None))
        a = np.frombuffer(values, dtype="<f8") if isinstance(values, array) else np.asarray(values, dtype="<f8")
        bad = len(a) != rows or (nulls and max(nulls) >= rows) or not bool(np.isfinite(a).all())
        if not bad and lo is not None and a.min() < lo:
            bad = True
        if not bad and hi is not None and a.max() > hi:
            bad = True
        if bad:
            try:
                # The slow path names the field and row, and forgives a placeholder under a null row.
                check_values(values, nulls, rows, f"{prefix}.{name}", minimum=lo, maximum=hi)
            except ColumnError as exc:
                raise BatchInvalid(exc.field, str(exc).split(": ", 1)[1]) from None
        out[name] = with_nulls(values.tolist() if isinstance(values, array) else values, nulls, rows)
    return out


def _check_processes(
    table: pb.ProcessTable, counts: Sequence[int], rows: int, prefix: str, limits: Limits
) -> None:
    if not counts:
        return
    if len(counts) != rows:
        raise BatchInvalid(f"{prefix}.process_count", f"has {len(counts)} entries for {rows} rows")
    total = sum(counts)
    if len(table.pid) != total or len(table.name) != total:
        raise BatchInvalid(f"{prefix}.processes", f"holds {len(table.pid)} processes, process_count sums to {total}")
    _check_columns(table, PROCESS_COLUMNS, total, f"{prefix}.processes", {})
    for i, name in enumerate(table.name):
        if len(name) > limits.max_name_chars * 4:
            raise BatchInvalid(f"{prefix}.processes.name[{i}]", f"is {len(name)} characters long")


def validate_batch(batch: pb.Batch, limits: Limits) -> Decoded:
    """Raise BatchInvalid for the first broken rule; return the decoded sample columns."""
    if not batch.agent_id:
        raise BatchInvalid("agent_id", "is empty")
    if batch.seq == 0:
        raise BatchInvalid("seq", "must be 1 or more")
    decoded = Decoded()
    sent = batch.sent_ns or batch.created_ns
    host, gpu = batch.host, batch.gpu
    host_rows, gpu_rows = len(host.ts_ns), len(gpu.ts_ns)
    if host_rows + gpu_rows > limits.max_rows:
        raise BatchInvalid("host/gpu", f"{host_rows + gpu_rows} sample rows exceed the limit of {limits.max_rows}")
    if host_rows:
        _check_ts(host.ts_ns, host_rows, "host.ts_ns", sent, limits)
        decoded.host = _check_columns(host, HOST_COLUMNS, host_rows, "host", _HOST_RANGES)
        if host.core_count:
            if len(host.core_count) != host_rows:
                raise BatchInvalid("host.core_count", f"has {len(host.core_count)} entries for {host_rows} rows")
            cores = sum(host.core_count)
            if len(host.cpu_core_percent) != cores:
                raise BatchInvalid("host.cpu_core_percent", f"has {len(host.cpu_core_percent)} values, core_count sums to {cores}")
            if host.cpu_core_freq_mhz and len(host.cpu_core_freq_mhz) != cores:
                raise BatchInvalid("host.cpu_core_freq_mhz", f"has {len(host.cpu_core_freq_mhz)} values, core_count sums to {cores}")
        _check_processes(host.processes, host.process_count, host_rows, "host", limits)
    if gpu_rows:
        _check_ts(gpu.ts_ns, gpu_rows, "gpu.ts_ns", sent, limits)
        if len(gpu.gpu_index) != gpu_rows:
            raise BatchInvalid("gpu.gpu_index", f"has {len(gpu.gpu_index)} entries for {gpu_rows} rows")
        if max(gpu.gpu_index) >= limits.max_gpus:
            raise BatchInvalid("gpu.gpu_index", f"index {max(gpu.gpu_index)} is not below {limits.max_gpus}")
        decoded.gpu = _check_columns(gpu, GPU_COLUMNS, gpu_rows, "gpu", _GPU_RANGES)
        _check_processes(gpu.processes, gpu.process_count, gpu_rows, "gpu", limits)
    if len(batch.logs) > limits.max_logs:
        raise BatchInvalid("logs", f"{len(batch.logs)} events exceed the limit of {limits.max_logs}")
    for i, ev in enumerate(batch.logs):
        if len(ev.message) > limits.max_message_chars:
            raise BatchInvalid(f"logs[{i}].message", f"is {len(ev.message)} characters, above {limits.max_message_chars}")
        if len(ev.source) > 4096:
            raise BatchInvalid(f"logs[{i}].source", f"is {len(ev.source)} characters long")
    if batch.logs:
        _check_ts([e.ts_ns for e in batch.logs], len(batch.logs), "logs.ts_ns", sent, limits)
    if len(batch.incidents) > limits.max_incidents:
        raise BatchInvalid("incidents", f"{len(batch.incidents)} incidents exceed the limit of {limits.max_incidents}")
    for i, inc in enumerate(batch.incidents):
        if not inc.kind or len(inc.kind) > 64:
            raise BatchInvalid(f"incidents[{i}].kind", "must be 1 to 64 characters")
        if len(inc.title) > limits.max_message_chars or len(inc.excerpt) > limits.max_message_chars:
            raise BatchInvalid(f"incidents[{i}]", "title or excerpt too long")
        if len(inc.facts) > 256:
            raise BatchInvalid(f"incidents[{i}].facts", f"{len(inc.facts)} facts exceed 256")
    if batch.incidents:
        _check_ts([e.ts_ns for e in batch.incidents], len(batch.incidents), "incidents.ts_ns", sent, limits)
    for i, h in enumerate(batch.latency):
        if not h.name or len(h.name) > limits.max_name_chars:
            raise BatchInvalid(f"latency[{i}].name", f"must be 1 to {limits.max_name_chars} characters")
        if len(h.bucket_index) != len(h.bucket_count):
            raise BatchInvalid(f"latency[{i}].bucket_count", "must pair one-to-one with bucket_index")
        if sum(h.bucket_count) + h.zero_count != h.count:
            raise BatchInvalid(f"latency[{i}].count", f"{h.count} differs from the bucket counts' sum")
        if h.end_ns < h.start_ns:
            raise BatchInvalid(f"latency[{i}].end_ns", "is before start_ns")
        if len(h.labels) > limits.max_labels:
            raise BatchInvalid(f"latency[{i}].labels", f"more than {limits.max_labels} labels")
    for i, m in enumerate(batch.metrics):
        if not m.name or len(m.name) > limits.max_name_chars:
            raise BatchInvalid(f"metrics[{i}].name", f"must be 1 to {limits.max_name_chars} characters")
        if m.value != m.value or m.value in (float("inf"), float("-inf")):
            raise BatchInvalid(f"metrics[{i}].value", f"{m.value} is not a finite number")
    decoded.sample_rows = host_rows + gpu_rows
    return decoded
