"""Time series at a resolution: a device's GPU and host readings in buckets, served by the
coarsest source that has them (see ``planning``), and the aggregate read behind every chart.

Series come back columnar (``SeriesTable.columns``: one list per column) because a chart wants
columns, and a week of points as objects would cost more than the query.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import BigInteger, literal, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from fleetscope.collector.query._common import NS, device_row, floor_to
from fleetscope.collector.query.devices import summary_of
from fleetscope.collector.query.latency import LatencySeries, latency_series
from fleetscope.collector.query.planning import (
    MAX_POINTS,
    POINTS_PER_CHART,
    TIER_NAMES,
    TIER_ORDER,
    groups_by_plan,
    resolution_for,
)
from fleetscope.collector.query.types import DeviceSummary
from fleetscope.collector.storage.id_lists import in_ids
from fleetscope.collector.storage.rollups import (
    GPU,
    HOST,
    Source,
    add_partial,
    bucket_of,
    raw_buckets,
    rollup_aggregates,
)
from fleetscope.collector.storage.schema import gpu_state


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
class DeviceSeries:
    device: str
    since_ns: int
    until_ns: int
    step_s: int
    sources: tuple[str, ...]  # which tiers served it: "day", "hour", "minute", "raw"
    gpu: SeriesTable  # gpu_index, ts_ns, n, span_ns and GPU_ROLLUP_COLUMNS
    host: SeriesTable  # ts_ns, n, span_ns and HOST_ROLLUP_COLUMNS
    gpus: list[GpuLimits]
    latency: list[LatencySeries]


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
    row = device_row(session, device)
    # Every GPU is a line on the same chart: an 8-GPU server gets coarser buckets than a drone so
    # that a chart stays within what a browser draws quickly (24 h: 2 min instead of 1 min).
    gpus = len((row.inventory or {}).get("gpus", [])) or 1
    step_s = step_s or resolution_for(
        until_ns - since_ns, max_points=min(MAX_POINTS, POINTS_PER_CHART // gpus)
    )
    lo = floor_to(since_ns, step_s * NS)
    gpu_acc, used_g = fetch_samples(session, GPU, [row.id], lo, until_ns, step_s, per_gpu=True)
    host_acc, used_h = fetch_samples(session, HOST, [row.id], lo, until_ns, step_s, per_gpu=False)
    gpu = series_table(GPU, gpu_acc, per_gpu=True)
    limits = _gpu_limits(session, summary_of(row, until_ns), row.id, until_ns, set(gpu.columns["gpu_index"]))
    lat = latency_series(session, [row.id], lo, until_ns, step_s, by_labels=True) if latency else []
    order = [s for s in TIER_ORDER if s in used_g | used_h]
    return DeviceSeries(
        device=row.name,
        since_ns=since_ns,
        until_ns=until_ns,
        step_s=step_s,
        sources=tuple(order),
        gpu=gpu,
        host=series_table(HOST, host_acc, per_gpu=False),
        gpus=limits,
        latency=lat,
    )


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


# ------------------------------------------------------------------------------ aggregate reads


def fetch_samples(
    session: Session,
    src: Source,
    all_ids: Sequence[int],
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
    if not all_ids or lo >= hi:
        return acc, used
    if only is not None:
        src = dataclasses.replace(src, aggs=tuple(a for a in src.aggs if a.name in only))
    names = [a.name for a in src.aggs]
    for ids, stretches in groups_by_plan(session, all_ids, lo, hi, step_s):
        for table_step, a, b in stretches:
            if table_step == 0:  # raw samples, tail rows and chunks alike: what the rollup job computes
                raw_buckets(session, src, ids, a, b, step_s, per_gpu, acc)
                used.add("raw")
                continue
            t = src.rollup.c
            where = [in_ids(t.device_id, ids), t.step_s == table_step, t.bucket_ns >= a, t.bucket_ns < b]
            used.add(TIER_NAMES[table_step])
            keys: list[ColumnElement] = [t.device_id]
            if per_gpu:
                keys.append(t.gpu_index)
            # A whole-window read selects a constant bucket but must not GROUP BY it (PostgreSQL
            # refuses constants there).
            bucket = bucket_of(t.bucket_ns, step_s * NS) if step_s else literal(0, BigInteger)
            group = [*keys, bucket] if step_s else keys
            q = (
                select(*keys, bucket.label("b"), *rollup_aggregates(src))
                .select_from(src.rollup)
                .where(*where)
                .group_by(*group)
            )
            for row in session.execute(q):
                m = row._mapping
                key = (m["device_id"], m["gpu_index"] if per_gpu else None, m["b"])
                add_partial(
                    src.aggs, acc, key, int(m["n"] or 0), int(m["span_ns"] or 0), {n: m[n] for n in names}
                )
    return acc, used


def series_table(src: Source, acc: Mapping[tuple, list], per_gpu: bool) -> SeriesTable:
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
