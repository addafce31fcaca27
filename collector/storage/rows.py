"""A validated wire batch turned into table rows (in the tables' column order).

This is the per-row Python work of ingest, so it leans on C-level builtins and no per-value
loop runs unless a column has nulls. The two sample tables, which are nearly all the rows,
stay columnar (``ColumnBlock``): SQLite's writer interleaves the columns into one flat
parameter list with one slice assignment per column, and only PostgreSQL's COPY, which
takes a row at a time, zips them into tuples. Building a tuple per row and then flattening
the tuples again cost about a third of the SQLite write path.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fleetscope.collector.storage.decoded import Decoded
from fleetscope.collector.storage.schema import GPU_SAMPLE_COLUMNS, GPU_STATE_COLUMNS, HOST_VALUE_COLUMNS
from fleetscope.proto.columns import read_column
from fleetscope.proto.v1 import telemetry_pb2 as pb
from fleetscope.proto.vocabulary import SEVERITY_CRITICAL, SEVERITY_ERROR, SEVERITY_INFO, SEVERITY_WARNING

LEVEL_NAMES = {
    pb.LEVEL_UNSPECIFIED: SEVERITY_INFO,
    pb.LEVEL_DEBUG: "debug",  # the one log level that is not a severity (LOG_LEVELS[0])
    pb.LEVEL_INFO: SEVERITY_INFO,
    pb.LEVEL_WARNING: SEVERITY_WARNING,
    pb.LEVEL_ERROR: SEVERITY_ERROR,
    pb.LEVEL_CRITICAL: SEVERITY_CRITICAL,
}


def fact_value(fv: pb.FactValue) -> object:
    which = fv.WhichOneof("value")
    return getattr(fv, which) if which else None


def facts_dict(facts: object) -> dict[str, object]:
    return {k: fact_value(v) for k, v in facts.items()}  # type: ignore[attr-defined]


def canonical_labels(labels: object) -> str:
    return json.dumps(dict(labels), sort_keys=True, separators=(",", ":"))  # type: ignore[call-overload]


def _processes(table: pb.ProcessTable, counts: object, rows: int) -> list[str | None]:
    """One JSON text (or None) per row from a flattened process table."""
    if not counts:
        return [None] * rows
    columns = _process_columns(table)
    out: list[str | None] = []
    start = 0
    for c in counts:  # type: ignore[attr-defined]
        out.append(_process_text(table, columns, start, c))
        start += c
    return out


def _process_columns(table: pb.ProcessTable) -> tuple[list[float | None], ...]:
    n = len(table.pid)
    return read_column(table.cpu_percent, n), read_column(table.rss_bytes, n), read_column(table.gpu_memory_bytes, n)


def _process_text(table: pb.ProcessTable, columns: tuple[list[float | None], ...], start: int, count: int) -> str | None:
    """The JSON text of one row's processes: entries ``start`` to ``start + count`` of the table."""
    if not count:
        return None
    cpu, rss, gmem = columns
    procs = []
    for j in range(start, start + count):
        p: dict[str, object] = {"pid": table.pid[j], "name": table.name[j]}
        if cpu[j] is not None:
            p["cpu_percent"] = cpu[j]
        if rss[j] is not None:
            p["rss_bytes"] = int(rss[j])  # type: ignore[arg-type]
        if gmem[j] is not None:
            p["gpu_memory_bytes"] = int(gmem[j])  # type: ignore[arg-type]
        if table.container_id and table.container_id[j]:
            p["container_id"] = table.container_id[j]
        procs.append(p)
    return json.dumps(procs, separators=(",", ":"))


@dataclass(frozen=True)
class ColumnBlock:
    """Rows of one table held as columns: ``columns[j][i]`` is row i's value of column j."""

    columns: tuple[Sequence[object], ...]
    n: int

    def __len__(self) -> int:
        return self.n

    def rows(self) -> list[tuple]:
        return list(zip(*self.columns))

    def flat(self) -> list[object]:
        """Row-major values (row 0's columns, then row 1's, ...), as SQL parameters want them."""
        width = len(self.columns)
        out: list[object] = [None] * (self.n * width)
        for j, column in enumerate(self.columns):
            out[j::width] = column
        return out


_NO_ROWS = ColumnBlock((), 0)


@dataclass
class BatchRows:
    host: ColumnBlock = _NO_ROWS
    gpu: ColumnBlock = _NO_ROWS
    gpu_state: list[tuple] = field(default_factory=list)
    latency: list[tuple] = field(default_factory=list)
    metrics: list[tuple] = field(default_factory=list)
    inventory: list[tuple] = field(default_factory=list)
    logs: list[tuple] = field(default_factory=list)
    incidents: list[dict] = field(default_factory=list)

    @property
    def sample_rows(self) -> int:
        return len(self.host) + len(self.gpu)

    def total_rows(self) -> int:
        return (
            len(self.host) + len(self.gpu) + len(self.gpu_state) + len(self.latency) + len(self.metrics)
            + len(self.inventory) + len(self.logs) + len(self.incidents)
        )


class GpuStateCache:
    """The last stored ``gpu_state`` per (device, GPU), so a state row is written only on change.

    Only the writer's transaction consults it, in commit order: whether a state row is new
    depends on what the batches before it stored, which is known only once they are claimed
    (a replayed batch stores nothing). A collector restart forgets it and writes each GPU's
    state once more: harmless.
    """

    def __init__(self) -> None:
        self._last: dict[tuple[int, int], tuple] = {}

    def keep_changed(self, candidates: list[tuple]) -> tuple[list[tuple], list[tuple[int, int]]]:
        """The candidate state rows that differ from the last stored, and their keys (to
        ``forget`` should their transaction not commit). A row is (device_id, ts_ns,
        gpu_index, *values)."""
        rows, keys = [], []
        for row in candidates:
            key, values = (row[0], row[2]), row[3:]
            if self._last.get(key) != values:
                self._last[key] = values
                rows.append(row)
                keys.append(key)
        return rows, keys

    def forget(self, keys: list[tuple[int, int]]) -> None:
        for k in keys:
            self._last.pop(k, None)


def _shift(ts: Iterable[int], correction_ns: int) -> list[int]:
    return list(ts) if not correction_ns else [t + correction_ns for t in ts]


def host_texts(host: pb.HostSamples, n: int) -> tuple[list[str | None], list[str | None]]:
    """The host rows' text columns: per-core load and frequency (``cpu_cores``) and the top
    processes (``top_processes``), one JSON text or None per row."""
    cores: list[str | None] = [None] * n
    if host.core_count:
        pct = list(host.cpu_core_percent)
        freq = list(host.cpu_core_freq_mhz) or None
        start = 0
        for i, c in enumerate(host.core_count):
            if c:
                cores[i] = _cores_text(pct[start : start + c], freq[start : start + c] if freq else None)
            start += c
    return cores, _processes(host.processes, host.process_count, n)


def host_texts_of_row(host: pb.HostSamples, n: int, i: int) -> tuple[str | None, str | None]:
    """Row ``i``'s two text columns, as ``host_texts`` gives them, without building the other
    rows' (the writer keeps only the newest row's, in ``host_latest``)."""
    cores = procs = None
    if len(host.core_count) == n and host.core_count[i]:
        start, c = sum(host.core_count[:i]), host.core_count[i]
        freq = host.cpu_core_freq_mhz[start : start + c] if host.cpu_core_freq_mhz else None
        cores = _cores_text(host.cpu_core_percent[start : start + c], freq)
    if len(host.process_count) == n and host.process_count[i]:
        start = sum(host.process_count[:i])
        procs = _process_text(host.processes, _process_columns(host.processes), start, host.process_count[i])
    return cores, procs


def _cores_text(percent: Sequence[float], freq_mhz: Sequence[float] | None) -> str:
    f = freq_mhz if freq_mhz else [None] * len(percent)
    return json.dumps(
        [[round(p, 1), None if m is None else round(m)] for p, m in zip(percent, f)], separators=(",", ":")
    )


def batch_rows(
    batch: pb.Batch, decoded: Decoded, *, device_id: int, correction_ns: int, received_ns: int, samples: bool = True
) -> BatchRows:
    """The batch's rows; ``gpu_state`` holds each GPU's last state in the batch, a candidate
    that ``GpuStateCache.keep_changed`` filters when the batch is written. ``samples=False``
    leaves the host and GPU sample rows out (the writer stores them as chunks:
    ``storage.batch_chunks``)."""
    out = BatchRows()
    host, gpu = decoded.host_fields, decoded.gpu_fields
    n = len(decoded.host_ts)
    if n and samples:
        cols = [decoded.host[name] for name in HOST_VALUE_COLUMNS]
        cores, procs = host_texts(host, n)
        out.host = ColumnBlock(([device_id] * n, _shift(decoded.host_ts.tolist(), correction_ns), *cols, cores, procs), n)
    gpu_ts, index = decoded.gpu_ts, decoded.gpu_index
    n = len(gpu_ts)
    if n:
        if samples:
            cols = [decoded.gpu[name] for name in GPU_SAMPLE_COLUMNS]
            out.gpu = ColumnBlock(([device_id] * n, _shift(gpu_ts.tolist(), correction_ns), index.tolist(), *cols), n)
        # State: the last row of each GPU in this batch (stored only if it differs from the last stored).
        state_cols = [decoded.gpu[name] for name in GPU_STATE_COLUMNS]
        gpu_procs = _processes(gpu.processes, gpu.process_count, n) if gpu.process_count else None
        reversed_index = index[::-1]
        gpus, first_from_end = np.unique(reversed_index, return_index=True)  # sorted by GPU
        for gi, i in zip(gpus.tolist(), (n - 1 - first_from_end).tolist()):
            values = tuple(c[i] for c in state_cols) + (gpu_procs[i] if gpu_procs else None,)
            if any(v is not None for v in values):
                out.gpu_state.append((device_id, int(gpu_ts[i]) + correction_ns, gi, *values))
    for h in batch.latency:
        buckets = json.dumps(dict(zip(h.bucket_index, h.bucket_count)), separators=(",", ":"))
        out.latency.append(
            (device_id, h.start_ns + correction_ns, h.end_ns + correction_ns, h.name, canonical_labels(h.labels),
             h.count, h.sum_ns, h.errors, h.zero_count, buckets, h.scheme)
        )
    for m in batch.metrics:
        out.metrics.append((device_id, m.ts_ns + correction_ns, m.name, m.value, canonical_labels(m.labels)))
    for r in batch.inventory_records:
        out.inventory.append((device_id, r.ts_ns + correction_ns, r.kind, r.name, json.dumps(facts_dict(r.facts))))
    for ev in batch.logs:
        out.logs.append((device_id, ev.ts_ns + correction_ns, ev.source, LEVEL_NAMES.get(ev.level, SEVERITY_INFO), ev.message))
    for inc in batch.incidents:
        out.incidents.append(
            {
                "device_id": device_id,
                "ts_ns": inc.ts_ns + correction_ns,
                "received_ns": received_ns,
                "kind": inc.kind,
                "severity": LEVEL_NAMES.get(inc.severity, SEVERITY_ERROR),
                "title": inc.title,
                "facts": facts_dict(inc.facts),
                "source": inc.source,
                "excerpt": inc.excerpt,
                "context": {},
            }
        )
    return out


def counters_dict(c: pb.AgentCounters, *, final: bool = False) -> dict[str, object]:
    """The device's ``counters`` column: the agent's counters as its newest batch reported them,
    and ``stopped: true`` when that batch was its last before a clean stop (``Batch.final``); the
    next batch (a restarted agent) replaces them, and with them the mark."""
    return {
        **({"stopped": True} if final else {}),
        "spool_batches": c.spool_batches,
        "spool_bytes": c.spool_bytes,
        "dropped_batches": c.dropped_batches,
        "dropped_samples": c.dropped_samples,
        "dropped_logs": c.dropped_logs,
        "dropped_incidents": c.dropped_incidents,
        "reconnects": c.reconnects,
        "rejected_batches": c.rejected_batches,
        "last_rejection": c.last_rejection,
        "sampler_errors": c.sampler_errors,
        "rss_bytes": c.rss_bytes,
        "cpu_seconds": c.cpu_seconds,
    }
