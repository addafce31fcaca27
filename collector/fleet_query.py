"""Dashboard-facing queries: fleet overview, time series at the right resolution, latency
percentiles, incidents with context, group comparisons.

Same conventions as ``fleetscope.collector.query``: every function takes ``session=`` as a
keyword (the caller owns the transaction), reads only, and returns frozen dataclasses of plain
values. Time series come back columnar (``SeriesTable.columns``: one list per column) because
a chart wants columns and a week of points as objects would cost more than the query.

Resolution. A read asks for buckets of ``step_s`` seconds and gets them from the coarsest
source that can serve each stretch of time: hour rollups, then minute rollups, then the raw
samples grouped in SQL for what is not rolled up yet (see ``_plan``). A chart of the last 24 h
is ~1440 minute-rollup rows per GPU plus a minute or two of raw rows at its right edge, which
is how it reaches "now". Without rollup tables (a database no rollup job has touched) every
read falls back to grouping raw rows, which is correct and only slower.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import BigInteger, func, inspect, literal, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from fleetscope.collector.query import (
    DeviceSummary,
    IncidentView,
    LogLine,
    _device_row,
    list_devices,
)
from fleetscope.collector.storage.rollup_schema import latency_rollups
from fleetscope.collector.storage.rollups import (
    GPU,
    HOST,
    Source,
    bucket_of,
    merge_values,
    raw_aggregates,
    read_progress,
    rollup_aggregates,
)
from fleetscope.collector.storage.schema import (
    Device,
    Incident,
    gpu_samples,
    gpu_state,
    host_samples,
    latency_histograms,
    log_events,
)
from fleetscope.proto import buckets as bucket_math

NS = 10**9
MAX_POINTS = 1500  # per series: more than a chart's width in pixels buys nothing
POINTS_PER_CHART = 1500  # all series of one chart together (a device's GPUs): what Vega draws in well under a second
# Candidate steps per source; a source serves a step only if its buckets nest inside it.
# No automatic 1 s step: a bucket needs two samples (at the usual 1 s interval) for a counter's
# delta, hence a disk or network rate; a caller that wants single samples asks for step_s=1.
RAW_STEPS_S = (2, 5, 10)
ROLLUP_STEPS_S = (60, 120, 300, 600, 3600, 7200, 21600, 86400)
LEVELS = ("debug", "info", "warning", "error", "critical")
SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2, "critical": 3}
BENCHMARK_KIND = "trt_benchmark"  # records, not problems: never counted as open incidents


# ------------------------------------------------------------------------------ results


@dataclass(frozen=True)
class SeriesTable:
    """Columns of equal length; ``columns["ts_ns"]`` is each bucket's start."""

    columns: dict[str, list]

    def __len__(self) -> int:
        return len(self.columns.get("ts_ns", ()))


@dataclass(frozen=True)
class GpuLimits:
    gpu_index: int
    name: str
    memory_total_bytes: float | None
    power_limit_w: float | None
    sm_clock_max_mhz: float | None


@dataclass(frozen=True)
class LatencySeries:
    name: str
    labels: dict[str, str]
    ts_ns: list[int]
    count: list[int]
    errors: list[int]
    p50_ms: list[float | None]
    p90_ms: list[float | None]
    p99_ms: list[float | None]


@dataclass(frozen=True)
class LatencyStats:
    """One operation's merged histogram over a window."""

    name: str
    count: int
    errors: int
    window_s: float  # time the operation was measured (sum of histogram windows, per device)
    mean_ms: float | None
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    qps: float | None  # count / window_s summed per device: the group's total throughput


@dataclass(frozen=True)
class DeviceSeries:
    device: str
    since_ns: int
    until_ns: int
    step_s: int
    sources: tuple[str, ...]  # which tiers served it: "hour", "minute", "raw"
    gpu: SeriesTable  # gpu_index, ts_ns, n, span_ns and GPU_ROLLUP_COLUMNS
    host: SeriesTable  # ts_ns, n, span_ns and HOST_ROLLUP_COLUMNS
    gpus: list[GpuLimits]
    latency: list[LatencySeries]


@dataclass(frozen=True)
class FleetDevice:
    name: str
    kind: str
    model: str  # what a person calls it: "Jetson Orin Nano Developer Kit", "8x NVIDIA A100-SXM4-80GB"
    labels: dict[str, str]
    online: bool
    last_seen_ns: int
    gpu_count: int
    gpu_names: list[str]
    simulated: bool
    util_percent: float | None  # now: mean over the device's GPUs
    memory_used_bytes: float | None  # now: sum over GPUs
    memory_total_bytes: float | None
    temp_c: float | None  # now: hottest GPU
    power_w: float | None  # now: sum over GPUs
    cpu_percent: float | None
    host_mem_used_bytes: float | None
    host_mem_total_bytes: float | None
    spark_util: list[float | None]
    spark_mem_percent: list[float | None]
    spark_temp: list[float | None]
    spark_power: list[float | None]
    open_incidents: int
    worst_severity: str  # "" when none


@dataclass(frozen=True)
class FleetOverview:
    now_ns: int
    spark_step_s: int
    spark_ts_ns: list[int]
    devices: list[FleetDevice]
    open_incidents: list[IncidentView]
    open_window_ns: int


@dataclass(frozen=True)
class IncidentCount:
    bucket_ns: int
    kind: str
    count: int


@dataclass(frozen=True)
class IncidentContext:
    incident: IncidentView
    device: DeviceSummary | None
    series: DeviceSeries
    logs: list[LogLine]
    nearby: list[IncidentView]


@dataclass(frozen=True)
class GroupComparison:
    group: str
    devices: list[str]
    gpu_count: int
    latency: LatencyStats | None
    util_avg: float | None
    memory_used_per_gpu_bytes: float | None
    memory_total_per_gpu_bytes: float | None
    power_per_device_w: float | None  # mean over devices of (sum over its GPUs of mean power)
    power_per_gpu_w: float | None
    temp_avg_c: float | None
    temp_max_c: float | None
    energy_j: float | None  # GPU energy counters over the window, all devices
    energy_per_inference_j: float | None  # total GPU power / total throughput
    qps_per_watt: float | None
    qps_per_gpu: float | None


@dataclass(frozen=True)
class BenchmarkRecord:
    id: int
    device: str
    ts_ns: int
    title: str
    throughput_qps: float | None
    latency_mean_ms: float | None
    latency_p99_ms: float | None
    gpu_compute_mean_ms: float | None
    precision: str | None
    batch_size: int | None
    device_name: str | None
    facts: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------------------ helpers


def resolution_for(span_ns: int, *, max_points: int = MAX_POINTS) -> int:
    """The smallest step (s) that keeps a series of ``span_ns`` under ``max_points``."""
    span_s = max(1, span_ns // NS)
    for step in RAW_STEPS_S + ROLLUP_STEPS_S:
        if span_s / step <= max_points:
            return step
    return ROLLUP_STEPS_S[-1]


def describe_resolution(step_s: int, sources: Sequence[str]) -> str:
    """'1 min buckets from minute rollups + raw samples', for a chart caption."""
    if step_s % 3600 == 0:
        size = f"{step_s // 3600} h"
    elif step_s % 60 == 0:
        size = f"{step_s // 60} min"
    else:
        size = f"{step_s} s"
    names = {"hour": "hour rollups", "minute": "minute rollups", "raw": "raw samples"}
    return f"{size} buckets from " + " + ".join(names[s] for s in sources) if sources else f"{size} buckets"


def _floor(x: int, step: int) -> int:
    return x // step * step


def _ceil(x: int, step: int) -> int:
    return -(-x // step) * step


def _plan(lo: int, hi: int, tiers: Sequence[tuple[int, int | None]]) -> list[tuple[int, int, int]]:
    """Split [lo, hi) into (table step, lo, hi) stretches, coarsest source first.

    ``tiers`` is [(3600, hour progress), (60, minute progress)] (those allowed for this read);
    a tier serves only whole buckets of its own below its progress mark; the edges it cannot
    serve go to the next finer tier, and whatever is left to the raw samples (step 0).
    """
    if lo >= hi:
        return []
    if not tiers:
        return [(0, lo, hi)]
    (step_s, progress), rest = tiers[0], tiers[1:]
    step = step_s * NS
    a = _ceil(lo, step)
    b = min(_floor(hi, step), _floor(progress, step)) if progress else a
    if a >= b:
        return _plan(lo, hi, rest)
    return _plan(lo, a, rest) + [(step_s, a, b)] + _plan(b, hi, rest)


_rollups_seen: set[str] = set()


def _has_rollups(session: Session) -> bool:
    """Whether the rollup tables exist (a database older than them, or never rolled, has none)."""
    conn = session.connection()
    key = conn.engine.url.render_as_string(hide_password=True)
    if key in _rollups_seen:
        return True
    if inspect(conn).has_table("rollup_progress"):
        _rollups_seen.add(key)  # only a positive answer is cached: the job may create them later
        return True
    return False


def _progress(session: Session, device_ids: Sequence[int]) -> dict[tuple[int, int], int]:
    if not device_ids or not _has_rollups(session):
        return {}
    return read_progress(session.connection(), device_ids)


def _groups_by_plan(
    session: Session, device_ids: Sequence[int], lo: int, hi: int, step_s: int | None
) -> list[tuple[list[int], list[tuple[int, int, int]]]]:
    """Devices that share a read plan (same progress marks) are read with one query per stretch."""
    progress = _progress(session, device_ids)
    out: dict[tuple, list[int]] = {}
    plans: dict[tuple, list[tuple[int, int, int]]] = {}
    for d in device_ids:
        tiers = [(t, progress.get((d, t))) for t in (3600, 60) if step_s is None or step_s % t == 0]
        tiers = [(t, p) for t, p in tiers if p]
        key = tuple(tiers)
        out.setdefault(key, []).append(d)
        if key not in plans:
            plans[key] = _plan(lo, hi, tiers)
    return [(ids, plans[key]) for key, ids in out.items()]


def _fetch(
    session: Session,
    src: Source,
    device_ids: Sequence[int],
    lo: int,
    hi: int,
    step_s: int | None,
    per_gpu: bool,
    only: Sequence[str] | None = None,
) -> tuple[dict[tuple, list], set[str]]:
    """{(device_id, gpu_index|None, bucket_ns): [n, span_ns, values]} over [lo, hi), and the tiers used.

    ``step_s=None`` aggregates the whole window into one bucket (0) per device (and GPU);
    ``per_gpu=False`` on the GPU source aggregates a device's GPUs together; ``only`` limits
    the aggregates computed (each costs SQLite time on every row it groups).
    """
    acc: dict[tuple, list] = {}
    used: set[str] = set()
    if not device_ids or lo >= hi:
        return acc, used
    if only is not None:
        src = dataclasses.replace(src, aggs=tuple(a for a in src.aggs if a.name in only))
    names = [a.name for a in src.aggs]
    for ids, plan in _groups_by_plan(session, device_ids, lo, hi, step_s):
        for table_step, a, b in plan:
            if table_step == 0:
                t = src.raw.c  # type: ignore[attr-defined]
                ts, where = t.ts_ns, [t.device_id.in_(ids), t.ts_ns >= a, t.ts_ns < b]
                values = raw_aggregates(src)
                from_ = src.raw
                used.add("raw")
            else:
                t = src.rollup.c  # type: ignore[attr-defined]
                ts = t.bucket_ns
                where = [t.device_id.in_(ids), t.step_s == table_step, t.bucket_ns >= a, t.bucket_ns < b]
                values = rollup_aggregates(src)
                from_ = src.rollup
                used.add("hour" if table_step == 3600 else "minute")
            keys: list[ColumnElement] = [t.device_id]
            if per_gpu:
                keys.append(t.gpu_index)
            # A whole-window read selects a constant bucket but must not GROUP BY it (PostgreSQL
            # refuses constants there).
            bucket = bucket_of(ts, step_s * NS) if step_s else literal(0, BigInteger)
            group = [*keys, bucket] if step_s else keys
            q = select(*keys, bucket.label("b"), *values).select_from(from_).where(*where).group_by(*group)  # type: ignore[arg-type]
            for row in session.execute(q):
                m = row._mapping
                key = (m["device_id"], m["gpu_index"] if per_gpu else None, m["b"])
                vals = {n: m[n] for n in names}
                n, span = int(m["n"] or 0), int(m["span_ns"] or 0)
                old = acc.get(key)
                if old is None:
                    acc[key] = [n, span, vals]
                else:
                    old[2] = merge_values(src.aggs, old[0], old[2], n, vals)
                    old[0] += n
                    old[1] += span
    return acc, used


def _table(src: Source, acc: Mapping[tuple, list], per_gpu: bool) -> SeriesTable:
    cols: dict[str, list] = {"ts_ns": [], "n": [], "span_ns": []}
    if per_gpu:
        cols["gpu_index"] = []
    for a in src.aggs:
        cols[a.name] = []
    for key in sorted(acc, key=lambda k: (k[2], k[1] if k[1] is not None else -1)):
        n, span, vals = acc[key]
        cols["ts_ns"].append(key[2])
        cols["n"].append(n)
        cols["span_ns"].append(span)
        if per_gpu:
            cols["gpu_index"].append(key[1])
        for a in src.aggs:
            cols[a.name].append(vals.get(a.name))
    return SeriesTable(cols)


def _latency_fetch(
    session: Session, device_ids: Sequence[int], lo: int, hi: int, step_s: int | None, name: str | None = None
) -> dict[tuple, list]:
    """{(device_id, name, labels_json, bucket_ns): [count, sum_ns, errors, zero, window_ns, buckets]}."""
    acc: dict[tuple, list] = {}
    if not device_ids or lo >= hi:
        return acc
    step_ns = step_s * NS if step_s else None
    for ids, plan in _groups_by_plan(session, device_ids, lo, hi, step_s):
        for table_step, a, b in plan:
            if table_step == 0:
                h = latency_histograms.c
                q = select(
                    h.device_id,
                    h.start_ns,
                    h.name,
                    h.labels,
                    h.count,
                    h.sum_ns,
                    h.errors,
                    h.zero_count,
                    h.end_ns - h.start_ns,
                    h.buckets,
                ).where(h.device_id.in_(ids), h.start_ns >= a, h.start_ns < b)
                if name is not None:
                    q = q.where(h.name == name)
            else:
                r = latency_rollups.c
                q = select(
                    r.device_id,
                    r.bucket_ns,
                    r.name,
                    r.labels,
                    r.count,
                    r.sum_ns,
                    r.errors,
                    r.zero_count,
                    r.window_ns,
                    r.buckets,
                ).where(r.device_id.in_(ids), r.step_s == table_step, r.bucket_ns >= a, r.bucket_ns < b)
                if name is not None:
                    q = q.where(r.name == name)
            for d, ts, n, labels, count, sum_ns, errors, zero, window, buckets in session.execute(q):
                bucket = ts - ts % step_ns if step_ns else 0
                e = acc.setdefault((d, n, labels, bucket), [0, 0, 0, 0, 0, {}])
                e[0] += count
                e[1] += sum_ns
                e[2] += errors
                e[3] += zero
                e[4] += max(0, window)
                for k, v in json.loads(buckets).items():
                    i = int(k)
                    e[5][i] = e[5].get(i, 0) + v
    return acc


def _ms(ns: float | None) -> float | None:
    return None if ns is None else ns / 1e6


def _quantiles(buckets: Mapping[int, int], zero: int) -> tuple[float | None, float | None, float | None]:
    return (
        _ms(bucket_math.quantile(buckets, 0.50, zero_count=zero)),
        _ms(bucket_math.quantile(buckets, 0.90, zero_count=zero)),
        _ms(bucket_math.quantile(buckets, 0.99, zero_count=zero)),
    )


def _latency_series(acc: Mapping[tuple, list], *, by_labels: bool) -> list[LatencySeries]:
    """Merge across devices (and labels unless ``by_labels``) into one series per operation."""
    merged: dict[tuple[str, str], dict[int, list]] = {}
    for (_d, name, labels, bucket), e in acc.items():
        per = merged.setdefault((name, labels if by_labels else "{}"), {})
        m = per.setdefault(bucket, [0, 0, 0, {}])
        m[0] += e[0]
        m[1] += e[2]
        m[2] += e[3]
        for i, c in e[5].items():
            m[3][i] = m[3].get(i, 0) + c
    out = []
    for (name, labels), per in sorted(merged.items()):
        ts = sorted(per)
        qs = [_quantiles(per[t][3], per[t][2]) for t in ts]
        out.append(
            LatencySeries(
                name=name,
                labels=json.loads(labels),
                ts_ns=ts,
                count=[per[t][0] for t in ts],
                errors=[per[t][1] for t in ts],
                p50_ms=[q[0] for q in qs],
                p90_ms=[q[1] for q in qs],
                p99_ms=[q[2] for q in qs],
            )
        )
    return out


def _latency_stats(name: str, acc: Mapping[tuple, list]) -> LatencyStats | None:
    count = errors = zero = total_ns = 0
    buckets: dict[int, int] = {}
    per_device: dict[int, list[int]] = {}
    for (d, _n, _labels, _b), e in acc.items():
        count += e[0]
        total_ns += e[1]
        errors += e[2]
        zero += e[3]
        pd = per_device.setdefault(d, [0, 0])
        pd[0] += e[0]
        pd[1] += e[4]
        for i, c in e[5].items():
            buckets[i] = buckets.get(i, 0) + c
    if not count:
        return None
    p50, p90, p99 = _quantiles(buckets, zero)
    qps = sum(c / (w / NS) for c, w in per_device.values() if w > 0) or None
    window_s = sum(w for _c, w in per_device.values()) / NS
    return LatencyStats(
        name=name,
        count=count,
        errors=errors,
        window_s=window_s,
        mean_ms=total_ns / count / 1e6,
        p50_ms=p50,
        p90_ms=p90,
        p99_ms=p99,
        qps=qps,
    )


def _device_ids(session: Session, names: Iterable[str]) -> dict[str, int]:
    names = list(dict.fromkeys(names))
    if not names:
        return {}
    rows = session.execute(select(Device.name, Device.id).where(Device.name.in_(names))).all()
    return {n: i for n, i in rows}


def labels_match(labels: Mapping[str, str], selected: Iterable[str]) -> bool:
    """``selected`` are "key=value" strings: all keys must match, any value of one key will do."""
    wanted: dict[str, set[str]] = {}
    for s in selected:
        k, _, v = s.partition("=")
        wanted.setdefault(k, set()).add(v)
    return all(labels.get(k) in vs for k, vs in wanted.items())


def device_model(d: DeviceSummary) -> str:
    """What a person calls the device: the Jetson board, or the server's GPUs."""
    inv = d.inventory or {}
    board = str(inv.get("board_model") or "")
    if d.kind == "jetson" or board:
        return board.replace("NVIDIA ", "", 1) if board else "Jetson"
    if d.gpus:
        names = sorted(set(d.gpus))
        if len(names) == 1:
            return f"{len(d.gpus)}x {names[0]}"
        return ", ".join(f"{d.gpus.count(n)}x {n}" for n in names)
    return "no GPU" if d.kind == "server" else d.kind


def device_groups(devices: Sequence[DeviceSummary]) -> dict[str, list[str]]:
    """Ready-made comparison groups: by model, by GPU, by kind and by label, plus each device."""
    groups: dict[str, list[str]] = {}

    def add(key: str, name: str) -> None:
        groups.setdefault(key, [])
        if name not in groups[key]:
            groups[key].append(name)

    for d in devices:
        add(f"model: {device_model(d)}", d.name)
        for g in sorted(set(d.gpus)):
            add(f"GPU: {g}", d.name)
        add(f"kind: {d.kind}", d.name)
        for k, v in sorted(d.labels.items()):
            add(f"label: {k}={v}", d.name)
    for d in devices:
        add(f"device: {d.name}", d.name)
    return groups


# ------------------------------------------------------------------------------ device series


def _gpu_limits(
    session: Session, device: DeviceSummary, device_id: int, until_ns: int, indexes: Iterable[int]
) -> list[GpuLimits]:
    inv_gpus = {int(g.get("index", i)): g for i, g in enumerate((device.inventory or {}).get("gpus", []))}
    s = gpu_state.c
    out = []
    for gi in sorted(set(indexes) | set(inv_gpus)):
        row = session.execute(
            select(s.memory_total_bytes, s.power_limit_w, s.sm_clock_max_mhz)
            .where(s.device_id == device_id, s.gpu_index == gi, s.ts_ns < until_ns)
            .order_by(s.ts_ns.desc())
            .limit(1)
        ).first()
        inv = inv_gpus.get(gi, {})
        total = (row[0] if row else None) or inv.get("memory_total_bytes") or None
        out.append(
            GpuLimits(gi, str(inv.get("name", "")), total, row[1] if row else None, row[2] if row else None)
        )
    return out


def device_series(
    *,
    session: Session,
    device: str,
    since_ns: int,
    until_ns: int,
    step_s: int | None = None,
    latency: bool = True,
) -> DeviceSeries:
    """One device's GPU and host series (and latency percentiles) over [since, until)."""
    row = _device_row(session, device)
    # Every GPU is a line on the same chart: an 8-GPU server gets coarser buckets than a drone so
    # that a chart stays within what a browser draws quickly (24 h: 2 min instead of 1 min).
    gpus = len((row.inventory or {}).get("gpus", [])) or 1
    step_s = step_s or resolution_for(
        until_ns - since_ns, max_points=min(MAX_POINTS, POINTS_PER_CHART // gpus)
    )
    lo = _floor(since_ns, step_s * NS)
    gpu_acc, used_g = _fetch(session, GPU, [row.id], lo, until_ns, step_s, per_gpu=True)
    host_acc, used_h = _fetch(session, HOST, [row.id], lo, until_ns, step_s, per_gpu=False)
    gpu = _table(GPU, gpu_acc, per_gpu=True)
    summary = next((d for d in list_devices(session=session, now_ns=until_ns) if d.name == row.name), None)
    limits = _gpu_limits(session, summary, row.id, until_ns, set(gpu.columns["gpu_index"])) if summary else []
    lat = (
        _latency_series(_latency_fetch(session, [row.id], lo, until_ns, step_s), by_labels=True)
        if latency
        else []
    )
    order = [s for s in ("hour", "minute", "raw") if s in used_g | used_h]
    return DeviceSeries(
        device=row.name,
        since_ns=since_ns,
        until_ns=until_ns,
        step_s=step_s,
        sources=tuple(order),
        gpu=gpu,
        host=_table(HOST, host_acc, per_gpu=False),
        gpus=limits,
        latency=lat,
    )


# ------------------------------------------------------------------------------ fleet


def _severity_worst(a: str, b: str) -> str:
    return a if SEVERITY_RANK.get(a, -1) >= SEVERITY_RANK.get(b, -1) else b


def fleet_overview(
    *,
    session: Session,
    now_ns: int,
    spark_window_ns: int = 30 * 60 * NS,
    spark_step_s: int = 60,
    open_window_ns: int = 24 * 3600 * NS,
    current_window_ns: int = 20 * NS,
) -> FleetOverview:
    """Every device with its state, current readings, sparklines and open incidents.

    Open incidents are the last ``open_window_ns`` of warnings and worse (benchmark records
    excluded): incidents have no closed state yet, and a day is what an operator scans.
    """
    devices = list_devices(session=session, now_ns=now_ns)
    ids = _device_ids(session, [d.name for d in devices])
    by_id = {ids[d.name]: d for d in devices if d.name in ids}
    step_ns = spark_step_s * NS
    lo = _floor(now_ns - spark_window_ns, step_ns) + step_ns
    spark_ts = list(range(lo, now_ns + 1, step_ns))
    spark_index = {t: i for i, t in enumerate(spark_ts)}
    all_ids = list(by_id)
    # One row per device and bucket, its GPUs aggregated in SQL (200 devices x 30 buckets, not
    # 900 GPUs x 30): mean utilisation, hottest GPU, and memory and power as the per-GPU mean
    # times the device's GPU count (their sum when every GPU reports, as they do).
    gpu_acc, _ = _fetch(
        session, GPU, all_ids, lo, now_ns + 1, spark_step_s, per_gpu=False,
        only=("util_avg", "memory_used_avg", "temp_max", "power_avg"),
    )  # fmt: skip
    spark: dict[int, dict[str, list]] = {
        d: {k: [None] * len(spark_ts) for k in ("util", "mem", "temp", "power")} for d in all_ids
    }
    totals = {d: _memory_total(by_id[d]) for d in all_ids}
    for (d, _gi, b), (_n, _span, v) in gpu_acc.items():
        i = spark_index.get(b)
        if i is None:
            continue
        s = spark[d]
        gpus = max(1, by_id[d].gpu_count)
        mem = v["memory_used_avg"] * gpus if v["memory_used_avg"] is not None else None
        s["util"][i] = v["util_avg"]
        s["mem"][i] = 100.0 * mem / totals[d] if mem is not None and totals[d] else None
        s["temp"][i] = v["temp_max"]
        s["power"][i] = v["power_avg"] * gpus if v["power_avg"] is not None else None

    current = _current(
        session, [d for d in all_ids if by_id[d].online], now_ns - current_window_ns, now_ns + 1
    )
    open_counts: dict[int, tuple[int, str]] = {}
    q = (
        select(Incident.device_id, Incident.severity, func.count())
        .where(
            Incident.ts_ns >= now_ns - open_window_ns,
            Incident.kind != BENCHMARK_KIND,
            Incident.severity != "info",
        )
        .group_by(Incident.device_id, Incident.severity)
    )
    for d, sev, c in session.execute(q):
        n, worst = open_counts.get(d, (0, ""))
        open_counts[d] = (n + c, _severity_worst(sev, worst) if worst else sev)
    out = []
    for d in all_ids:
        s = by_id[d]
        cur = current.get(d, {})
        n, worst = open_counts.get(d, (0, ""))
        out.append(
            FleetDevice(
                name=s.name,
                kind=s.kind,
                model=device_model(s),
                labels=s.labels,
                online=s.online,
                last_seen_ns=s.last_seen_ns,
                gpu_count=s.gpu_count,
                gpu_names=s.gpus,
                simulated=s.simulated,
                util_percent=cur.get("util"),
                memory_used_bytes=cur.get("mem"),
                memory_total_bytes=totals[d],
                temp_c=cur.get("temp"),
                power_w=cur.get("power"),
                cpu_percent=cur.get("cpu"),
                host_mem_used_bytes=cur.get("host_mem"),
                host_mem_total_bytes=cur.get("host_mem_total")
                or (s.inventory or {}).get("memory_total_bytes")
                or None,
                spark_util=spark[d]["util"],
                spark_mem_percent=spark[d]["mem"],
                spark_temp=spark[d]["temp"],
                spark_power=spark[d]["power"],
                open_incidents=n,
                worst_severity=worst,
            )
        )
    recent = search_incidents(
        session=session,
        since_ns=now_ns - open_window_ns,
        until_ns=now_ns + 1,
        severities=["warning", "error", "critical"],
        exclude_kinds=[BENCHMARK_KIND],
        limit=50,
    )
    return FleetOverview(
        now_ns=now_ns,
        spark_step_s=spark_step_s,
        spark_ts_ns=spark_ts,
        devices=out,
        open_incidents=recent,
        open_window_ns=open_window_ns,
    )


def _memory_total(d: DeviceSummary) -> float | None:
    total = sum(float(g.get("memory_total_bytes") or 0) for g in (d.inventory or {}).get("gpus", []))
    return total or None


def _mean(xs: Iterable[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return sum(v) / len(v) if v else None


def _sum(xs: Iterable[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return sum(v) if v else None


def _max(xs: Iterable[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return max(v) if v else None


def _current(
    session: Session, device_ids: Sequence[int], lo: int, hi: int
) -> dict[int, dict[str, float | None]]:
    """The newest reading of each device (and GPU) within [lo, hi)."""
    out: dict[int, dict[str, float | None]] = {}
    if not device_ids:
        return out
    g = gpu_samples.c
    latest: dict[tuple[int, int], tuple] = {}
    q = select(
        g.device_id, g.gpu_index, g.ts_ns, g.util_gpu_percent, g.memory_used_bytes, g.temp_c, g.power_w
    ).where(g.device_id.in_(list(device_ids)), g.ts_ns >= lo, g.ts_ns < hi)
    for row in session.execute(q):
        key = (row[0], row[1])
        if key not in latest or row[2] > latest[key][2]:
            latest[key] = tuple(row)
    per_device: dict[int, list[tuple]] = {}
    for (d, _gi), row in latest.items():
        per_device.setdefault(d, []).append(row)
    for d, rows in per_device.items():
        out[d] = {
            "util": _mean(r[3] for r in rows),
            "mem": _sum(r[4] for r in rows),
            "temp": _max(r[5] for r in rows),
            "power": _sum(r[6] for r in rows),
        }
    h = host_samples.c
    host_latest: dict[int, tuple] = {}
    q = select(h.device_id, h.ts_ns, h.cpu_percent, h.mem_used_bytes, h.mem_total_bytes).where(
        h.device_id.in_(list(device_ids)), h.ts_ns >= lo, h.ts_ns < hi
    )
    for row in session.execute(q):
        if row[0] not in host_latest or row[1] > host_latest[row[0]][1]:
            host_latest[row[0]] = tuple(row)
    for d, row in host_latest.items():
        out.setdefault(d, {}).update({"cpu": row[2], "host_mem": row[3], "host_mem_total": row[4]})
    return out


# ------------------------------------------------------------------------------ incidents


def _incident_view(i: Incident, name: str) -> IncidentView:
    return IncidentView(
        id=i.id,
        device=name,
        ts_ns=i.ts_ns,
        kind=i.kind,
        severity=i.severity,
        title=i.title,
        facts=dict(i.facts or {}),
        source=i.source,
        excerpt=i.excerpt,
    )


def _incident_filters(
    q: Any,
    session: Session,
    since_ns: int,
    until_ns: int,
    kinds: Sequence[str] | None,
    devices: Sequence[str] | None,
    severities: Sequence[str] | None,
    exclude_kinds: Sequence[str] | None,
) -> Any:
    q = q.where(Incident.ts_ns >= since_ns, Incident.ts_ns < until_ns)
    if kinds:
        q = q.where(Incident.kind.in_(list(kinds)))
    if exclude_kinds:
        q = q.where(Incident.kind.not_in(list(exclude_kinds)))
    if devices is not None:
        q = q.where(Incident.device_id.in_(list(_device_ids(session, devices).values())))
    if severities:
        q = q.where(Incident.severity.in_(list(severities)))
    return q


def search_incidents(
    *,
    session: Session,
    since_ns: int,
    until_ns: int,
    kinds: Sequence[str] | None = None,
    devices: Sequence[str] | None = None,
    severities: Sequence[str] | None = None,
    exclude_kinds: Sequence[str] | None = None,
    text: str | None = None,
    limit: int = 500,
) -> list[IncidentView]:
    """Incidents newest first. ``devices=[]`` matches none (a label filter that matched nothing)."""
    q = select(Incident, Device.name).join(Device, Device.id == Incident.device_id)
    q = _incident_filters(q, session, since_ns, until_ns, kinds, devices, severities, exclude_kinds)
    if text:
        q = q.where(
            Incident.title.contains(text, autoescape=True) | Incident.excerpt.contains(text, autoescape=True)
        )
    rows = session.execute(q.order_by(Incident.ts_ns.desc()).limit(limit)).all()
    return [_incident_view(i, name) for i, name in rows]


def incident_counts(
    *,
    session: Session,
    since_ns: int,
    until_ns: int,
    step_s: int,
    kinds: Sequence[str] | None = None,
    devices: Sequence[str] | None = None,
    severities: Sequence[str] | None = None,
) -> list[IncidentCount]:
    """How many incidents of each kind per ``step_s`` bucket, counted in SQL."""
    bucket = bucket_of(Incident.ts_ns, step_s * NS)  # type: ignore[arg-type]
    q = select(bucket.label("b"), Incident.kind, func.count())
    q = _incident_filters(q, session, since_ns, until_ns, kinds, devices, severities, None)
    rows = session.execute(q.group_by(bucket, Incident.kind).order_by(bucket)).all()
    return [IncidentCount(int(b), k, int(c)) for b, k, c in rows]


def incident_kinds(*, session: Session) -> list[str]:
    return list(session.scalars(select(Incident.kind).distinct().order_by(Incident.kind)))


def get_incident(*, session: Session, incident_id: int) -> IncidentView | None:
    row = session.execute(
        select(Incident, Device.name)
        .join(Device, Device.id == Incident.device_id)
        .where(Incident.id == incident_id)
    ).first()
    return _incident_view(row[0], row[1]) if row else None


def search_logs(
    *,
    session: Session,
    device: str,
    since_ns: int,
    until_ns: int,
    min_level: str | None = None,
    text: str | None = None,
    limit: int = 500,
) -> list[LogLine]:
    """A device's log events, newest ``limit`` kept, in time order; ``min_level`` and above."""
    d = _device_row(session, device)
    c = log_events.c
    q = select(c.ts_ns, c.source, c.level, c.message).where(
        c.device_id == d.id, c.ts_ns >= since_ns, c.ts_ns < until_ns
    )
    if min_level and min_level in LEVELS:
        q = q.where(c.level.in_(list(LEVELS[LEVELS.index(min_level) :])))
    if text:
        q = q.where(c.message.contains(text, autoescape=True))
    rows = session.execute(q.order_by(c.ts_ns.desc()).limit(limit)).all()
    return [LogLine(d.name, r.ts_ns, r.source, r.level, r.message) for r in reversed(rows)]


def incident_context(
    *,
    session: Session,
    incident_id: int,
    before_ns: int = 60 * NS,
    after_ns: int = 60 * NS,
    logs_limit: int = 200,
) -> IncidentContext | None:
    """An incident with its device's samples around it (1 s buckets), its logs and its neighbours."""
    inc = get_incident(session=session, incident_id=incident_id)
    if inc is None:
        return None
    lo, hi = inc.ts_ns - before_ns, inc.ts_ns + after_ns
    series = device_series(
        session=session, device=inc.device, since_ns=lo, until_ns=hi, step_s=1, latency=True
    )
    logs = search_logs(session=session, device=inc.device, since_ns=lo, until_ns=hi, limit=logs_limit)
    nearby = [
        i
        for i in search_incidents(
            session=session,
            since_ns=lo - 9 * before_ns,
            until_ns=hi + 9 * after_ns,
            devices=[inc.device],
            limit=20,
        )
        if i.id != inc.id
    ]
    summary = next((d for d in list_devices(session=session, now_ns=hi) if d.name == inc.device), None)
    return IncidentContext(incident=inc, device=summary, series=series, logs=logs, nearby=nearby)


# ------------------------------------------------------------------------------ compare


def latency_operations(
    *, session: Session, devices: Sequence[str], since_ns: int, until_ns: int
) -> list[str]:
    """Names of the operations these devices timed in the window, most-counted first."""
    ids = list(_device_ids(session, devices).values())
    counts: dict[str, int] = {}
    for (_d, name, _labels, _b), e in _latency_fetch(session, ids, since_ns, until_ns, None).items():
        counts[name] = counts.get(name, 0) + e[0]
    return sorted(counts, key=lambda n: (-counts[n], n))


def compare_groups(
    *,
    session: Session,
    groups: Mapping[str, Sequence[str]],
    since_ns: int,
    until_ns: int,
    operation: str | None,
) -> list[GroupComparison]:
    """Side-by-side figures per group of devices over one window."""
    out = []
    for group, names in groups.items():
        ids = _device_ids(session, names)
        id_list = list(ids.values())
        gpu_acc, _ = _fetch(session, GPU, id_list, since_ns, until_ns, None, per_gpu=True)
        lat = (
            _latency_stats(operation, _latency_fetch(session, id_list, since_ns, until_ns, None, operation))
            if operation
            else None
        )
        n_all = sum(e[0] for e in gpu_acc.values())
        gpus = len(gpu_acc)

        wavg = _weighted(gpu_acc)
        power_by_device: dict[int, float] = {}
        for (d, _gi, _b), (_n, _span, v) in gpu_acc.items():
            if v.get("power_avg") is not None:
                power_by_device[d] = power_by_device.get(d, 0.0) + v["power_avg"]
        total_power = sum(power_by_device.values()) if power_by_device else None
        energy = _sum(v.get("energy_delta_j") for _n, _s, v in gpu_acc.values())
        summaries = {d.name: d for d in list_devices(session=session, now_ns=until_ns) if d.name in ids}
        mem_totals = [
            float(g.get("memory_total_bytes") or 0)
            for s in summaries.values()
            for g in (s.inventory or {}).get("gpus", [])
        ]
        qps = lat.qps if lat else None
        out.append(
            GroupComparison(
                group=group,
                devices=sorted(ids),
                gpu_count=gpus or sum(s.gpu_count for s in summaries.values()),
                latency=lat,
                util_avg=wavg("util_avg") if n_all else None,
                memory_used_per_gpu_bytes=wavg("memory_used_avg"),
                memory_total_per_gpu_bytes=(sum(mem_totals) / len(mem_totals)) if any(mem_totals) else None,
                power_per_device_w=(total_power / len(power_by_device)) if total_power is not None else None,
                power_per_gpu_w=wavg("power_avg"),
                temp_avg_c=wavg("temp_avg"),
                temp_max_c=_max(v.get("temp_max") for _n, _s, v in gpu_acc.values()),
                energy_j=energy,
                energy_per_inference_j=(total_power / qps) if total_power and qps else None,
                qps_per_watt=(qps / total_power) if qps and total_power else None,
                qps_per_gpu=(qps / gpus) if qps and gpus else None,
            )
        )
    return out


def group_latency_series(
    *,
    session: Session,
    groups: Mapping[str, Sequence[str]],
    operation: str,
    since_ns: int,
    until_ns: int,
    step_s: int | None = None,
) -> dict[str, LatencySeries | None]:
    """Per group, the operation's percentiles over time from histograms merged across its devices."""
    step_s = step_s or resolution_for(until_ns - since_ns, max_points=300)
    lo = _floor(since_ns, step_s * NS)
    out: dict[str, LatencySeries | None] = {}
    for group, names in groups.items():
        ids = list(_device_ids(session, names).values())
        series = _latency_series(
            _latency_fetch(session, ids, lo, until_ns, step_s, operation), by_labels=False
        )
        out[group] = series[0] if series else None
    return out


def _weighted(acc: Mapping[tuple, list]) -> Any:
    """A function giving the sample-weighted mean of one aggregate over ``acc``'s rows."""

    def mean(key: str) -> float | None:
        num = den = 0.0
        for n, _span, v in acc.values():
            if v.get(key) is not None:
                num += v[key] * n
                den += n
        return num / den if den else None

    return mean


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def benchmark_records(
    *, session: Session, since_ns: int, until_ns: int, devices: Sequence[str] | None = None, limit: int = 500
) -> list[BenchmarkRecord]:
    """trtexec performance summaries (incidents of kind trt_benchmark), newest first."""
    out = []
    for i in search_incidents(
        session=session,
        since_ns=since_ns,
        until_ns=until_ns,
        kinds=[BENCHMARK_KIND],
        devices=devices,
        limit=limit,
    ):
        f = i.facts
        if f.get("record", "performance_summary") != "performance_summary":
            continue  # a device-information block on its own carries no figures
        batch = f.get("batch_size")
        out.append(
            BenchmarkRecord(
                id=i.id,
                device=i.device,
                ts_ns=i.ts_ns,
                title=i.title,
                throughput_qps=_num(f.get("throughput_qps")),
                latency_mean_ms=_num(f.get("latency_mean_ms")),
                latency_p99_ms=_num(f.get("latency_p99_ms")),
                gpu_compute_mean_ms=_num(f.get("gpu_compute_mean_ms")),
                precision=str(f["precision"]) if f.get("precision") is not None else None,
                batch_size=int(batch)
                if isinstance(batch, (int, float)) and not isinstance(batch, bool)
                else None,
                device_name=str(f["device_name"]) if f.get("device_name") else None,
                facts=dict(f),
            )
        )
    return out
