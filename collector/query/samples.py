"""Raw samples: a device's host, GPU and GPU-state rows over a window, one row per sample.

``device_metrics`` (``fleetscope metrics``) and the incident context read through the same three
readers, each over a half-open window [lo, hi). Charts read aggregated buckets instead (``series``).

Raw rows sit in two places: the recent tail (``host_samples``, ``gpu_samples``) and, once the
compaction job folded them, chunks (``host_chunks``, ``gpu_chunks``; read by
``storage.chunk_reader``). Every reader here reads both and merges them, so it gives the same
answer before and after compaction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from fleetscope.collector.query._common import device_rows
from fleetscope.collector.query.types import GpuPoint, GpuStatePoint, HostPoint
from fleetscope.collector.storage.chunk_reader import (
    ChunkRows,
    chunked_row_counts,
    newest_chunked_ns,
    read_gpu_chunk_rows,
    read_host_chunk_rows,
)
from fleetscope.collector.storage.id_lists import in_ids
from fleetscope.collector.storage.schema import (
    GPU_SAMPLE_COLUMNS,
    GPU_STATE_COLUMNS,
    HOST_VALUE_COLUMNS,
    gpu_samples,
    gpu_state,
    host_samples,
)

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class DeviceMetrics:
    device: str
    since_ns: int
    until_ns: int
    host: list[HostPoint] = field(default_factory=list)
    gpu: list[GpuPoint] = field(default_factory=list)
    gpu_state: list[GpuStatePoint] = field(default_factory=list)


def device_metrics(
    *, session: Session, device: str, since_ns: int, until_ns: int, limit: int = 200_000
) -> DeviceMetrics:
    """A device's samples in [since, until), at most ``limit`` rows per table, oldest first. A name
    reads every install of that name (a device reinstalled under a new agent id) as one history."""
    rows = device_rows(session, device)
    if len(rows) == 1:
        d = rows[0]
        return DeviceMetrics(
            device=d.name,
            since_ns=since_ns,
            until_ns=until_ns,
            host=list(host_points(session, d.id, since_ns, until_ns, limit)),
            gpu=list(gpu_points(session, d.id, since_ns, until_ns, limit)),
            gpu_state=list(gpu_state_points(session, d.id, since_ns, until_ns, limit)),
        )
    host = sorted((p for d in rows for p in host_points(session, d.id, since_ns, until_ns, limit)), key=lambda p: p.ts_ns)
    gpu = sorted((p for d in rows for p in gpu_points(session, d.id, since_ns, until_ns, limit)),
                 key=lambda p: (p.ts_ns, p.gpu_index))
    state = sorted((p for d in rows for p in gpu_state_points(session, d.id, since_ns, until_ns, limit)),
                   key=lambda p: (p.ts_ns, p.gpu_index))
    return DeviceMetrics(device=rows[0].name, since_ns=since_ns, until_ns=until_ns,
                         host=host[:limit], gpu=gpu[:limit], gpu_state=state[:limit])


# What ``metrics_summary`` sums up: (column, unit, the column or GPU-state column of its total).
HOST_SUMMARY: tuple[tuple[str, str, str | None], ...] = (
    ("cpu_percent", "%", None),
    ("load1", "", None),
    ("mem_used_bytes", "bytes", "mem_total_bytes"),
    ("swap_used_bytes", "bytes", "swap_total_bytes"),
    ("disk_used_bytes", "bytes", "disk_total_bytes"),
)
GPU_SUMMARY: tuple[tuple[str, str, str | None], ...] = (
    ("util_gpu_percent", "%", None),
    ("memory_used_bytes", "bytes", "memory_total_bytes"),
    ("temp_c", "C", None),
    ("power_w", "W", "power_limit_w"),
    ("sm_clock_mhz", "MHz", "sm_clock_max_mhz"),
    ("fan_percent", "%", None),
)


@dataclass(frozen=True)
class MetricSummary:
    """One metric over a window: ``scope`` is "host" or "GPU n"; ``total`` what it is a part of
    (memory's total, the power limit, the clock's maximum), None when not known."""

    scope: str
    metric: str
    unit: str
    samples: int
    min: float | None
    mean: float | None
    max: float | None
    last: float | None
    last_ts_ns: int | None
    total: float | None = None


@dataclass(frozen=True)
class MetricsSummary:
    device: str
    since_ns: int
    until_ns: int
    host_samples: int
    gpu_samples: int
    metrics: list[MetricSummary] = field(default_factory=list)


def metrics_summary(*, session: Session, device: str, since_ns: int, until_ns: int) -> MetricsSummary:
    """min, mean, max and last of each metric of a device (every install of a name) in [since,
    until), host and per GPU, computed in SQL over every sample of the window (no row limit)."""
    rows = device_rows(session, device)
    ids = [d.id for d in rows]
    out: list[MetricSummary] = []
    host_n = _aggregate(session, host_samples, ids, since_ns, until_ns, None, HOST_SUMMARY, out)
    gpu_n = _aggregate(session, gpu_samples, ids, since_ns, until_ns, gpu_samples.c.gpu_index, GPU_SUMMARY, out)
    return MetricsSummary(device=rows[0].name, since_ns=since_ns, until_ns=until_ns, host_samples=host_n,
                          gpu_samples=gpu_n, metrics=out)


def _aggregate(
    session: Session, table: Any, ids: list[int], lo: int, hi: int, key: Any,
    metrics: tuple[tuple[str, str, str | None], ...], out: list[MetricSummary],
) -> int:
    """Per GPU (``key``) or for the host: count, min, mean and max of each metric, over the
    tail in SQL (sums rather than means, so that the chunks' part adds in), plus the chunks' rows."""
    import numpy as np

    c = table.c
    where = (in_ids(c.device_id, ids), c.ts_ns >= lo, c.ts_ns < hi)
    cols: list[Any] = [func.count()]
    for name, _unit, _of in metrics:
        col = c[name]
        cols += [func.count(col), func.min(col), func.sum(col), func.max(col)]
    q = select(*([key] if key is not None else []), *cols).where(*where)
    if key is not None:
        q = q.group_by(key).order_by(key)
    # {index: [n, [count, min, sum, max] per metric]}
    stats: dict[Any, list[Any]] = {}
    for row in session.execute(q).all():
        r = tuple(row)
        index = r[0] if key is not None else None
        vals = r[1:] if key is not None else r
        if not int(vals[0] or 0):
            continue
        stats[index] = [int(vals[0]), [list(vals[1 + 4 * i : 5 + 4 * i]) for i in range(len(metrics))]]
    chunked = _chunk_rows(session, table, ids, lo, hi, [m[0] for m in metrics] + [m[2] for m in metrics if m[2]])
    for index, sel in _chunk_groups(chunked, key is not None):
        acc = stats.setdefault(index, [0, [[0, None, None, None] for _ in metrics]])
        acc[0] += int(sel.size)
        for i, (name, _unit, _of) in enumerate(metrics):
            v = chunked.values[name][sel]
            v = v[~np.isnan(v)]
            if not v.size:
                continue
            m = acc[1][i]
            m[0] = int(m[0] or 0) + int(v.size)
            m[1] = float(v.min()) if m[1] is None else min(float(m[1]), float(v.min()))
            m[2] = float(v.sum()) + float(m[2] or 0.0)
            m[3] = float(v.max()) if m[3] is None else max(float(m[3]), float(v.max()))
    total_n = 0
    for index in sorted(stats, key=lambda k: -1 if k is None else k):
        n, per_metric = stats[index]
        total_n += n
        scope = "host" if index is None else f"GPU {index}"
        for i, (name, unit, total_col) in enumerate(metrics):
            count, lo_v, sum_v, hi_v = per_metric[i]
            if not count:
                continue
            last_ts, last_v = _last(session, table, ids, lo, hi, key, index, name, chunked)
            total = _total(session, table, ids, lo, hi, key, index, total_col, chunked) if total_col else None
            mean = None if sum_v is None else float(sum_v) / int(count)
            out.append(MetricSummary(scope, name, unit, int(count), _f(lo_v), mean, _f(hi_v), _f(last_v),
                                     last_ts, total))
    return total_n


def _chunk_rows(session: Session, table: Any, ids: list[int], lo: int, hi: int, columns: list[str]) -> ChunkRows:
    if table is gpu_samples:
        return read_gpu_chunk_rows(session, ids, lo, hi, columns=columns)
    return read_host_chunk_rows(session, ids, lo, hi, columns=columns, texts=())


def _chunk_groups(chunked: ChunkRows, per_gpu: bool) -> list[tuple[Any, np.ndarray]]:
    """(GPU index or None, the rows' positions) of chunk rows."""
    import numpy as np

    if not len(chunked):
        return []
    if not per_gpu:
        return [(None, np.arange(len(chunked)))]
    return [(int(g), np.flatnonzero(chunked.gpu_index == g)) for g in np.unique(chunked.gpu_index)]


def _f(v: Any) -> float | None:
    return None if v is None else float(v)


def _last(session: Session, table: Any, ids: list[int], lo: int, hi: int, key: Any, index: Any,
          name: str, chunked: ChunkRows) -> tuple[int | None, Any]:
    import numpy as np

    c = table.c
    q = select(c.ts_ns, c[name]).where(in_ids(c.device_id, ids), c.ts_ns >= lo, c.ts_ns < hi, c[name].is_not(None))
    if key is not None:
        q = q.where(key == index)
    row = session.execute(q.order_by(c.ts_ns.desc()).limit(1)).first()
    best = (None, None) if row is None else (int(row[0]), row[1])
    if len(chunked):
        present = ~np.isnan(chunked.values[name])
        if key is not None:
            present &= chunked.gpu_index == index
        at = np.flatnonzero(present)
        if at.size:
            i = int(at[-1])  # rows are in time order
            ts = int(chunked.ts_ns[i])
            if best[0] is None or ts > best[0]:
                best = (ts, float(chunked.values[name][i]))
    return best


def _total(session: Session, table: Any, ids: list[int], lo: int, hi: int, key: Any, index: Any,
           total_col: str, chunked: ChunkRows) -> float | None:
    """The total in force over the window: host totals ride on the samples, GPU ones on the GPU state
    (the latest row up to the window's end, else its first after)."""
    import numpy as np

    if key is None:
        c = table.c
        v = session.execute(select(func.max(c[total_col])).where(in_ids(c.device_id, ids), c.ts_ns >= lo, c.ts_ns < hi)).scalar()
        if len(chunked) and total_col in chunked.values:
            in_chunks = chunked.values[total_col]
            if not np.isnan(in_chunks).all():
                top = float(np.nanmax(in_chunks))
                v = top if v is None else max(float(v), top)
        return _f(v) or None
    s = gpu_state.c
    base = select(s[total_col]).where(in_ids(s.device_id, ids), s.gpu_index == index, s[total_col].is_not(None))
    v = session.execute(base.where(s.ts_ns < hi).order_by(s.ts_ns.desc()).limit(1)).scalar()
    if v is None:
        v = session.execute(base.where(s.ts_ns >= hi).order_by(s.ts_ns).limit(1)).scalar()
    return _f(v) or None


def last_sample_ns(*, session: Session, device: str) -> int | None:
    """When the newest host or GPU sample of a device (every install of a name) was taken; None: none."""
    ids = [d.id for d in device_rows(session, device)]
    times = [session.execute(select(func.max(t.c.ts_ns)).where(in_ids(t.c.device_id, ids))).scalar()
             for t in (host_samples, gpu_samples)]
    times.append(newest_chunked_ns(session, ids))  # the tail keeps the newest rows; all may be folded
    present = [int(t) for t in times if t is not None]
    return max(present) if present else None


def count_samples(*, session: Session, device: str | None = None) -> dict[str, int]:
    """Stored sample rows per table (all devices, or one), in the tail and in chunks."""
    ids = None if device is None else [d.id for d in device_rows(session, device)]
    out = chunked_row_counts(session, ids)
    for name, table in (("host", host_samples), ("gpu", gpu_samples)):
        q = select(func.count()).select_from(table)
        if ids is not None:
            q = q.where(in_ids(table.c.device_id, ids))
        out[name] += int(session.execute(q).scalar_one())
    return out


# ------------------------------------------------------------------------------ readers


def _json_list(text: str | None) -> list | None:
    return json.loads(text) if text else None


def host_points(session: Session, device_id: int, lo: int, hi: int, limit: int) -> tuple[HostPoint, ...]:
    h = host_samples.c
    rows = session.execute(
        select(host_samples)
        .where(h.device_id == device_id, h.ts_ns >= lo, h.ts_ns < hi)
        .order_by(h.ts_ns)
        .limit(limit)
    )
    out = []
    for row in rows:
        m = row._mapping
        out.append(
            HostPoint(
                ts_ns=m["ts_ns"],
                values={c: m[c] for c in HOST_VALUE_COLUMNS},
                cpu_cores=_json_list(m["cpu_cores"]),
                top_processes=_json_list(m["top_processes"]),
            )
        )
    chunked = read_host_chunk_rows(session, [device_id], lo, hi)
    if not len(chunked):
        return tuple(out)
    for i in range(min(len(chunked), limit)):
        out.append(
            HostPoint(
                ts_ns=int(chunked.ts_ns[i]),
                values={c: chunked.value(c, i) for c in HOST_VALUE_COLUMNS},
                cpu_cores=_json_list(chunked.texts["cpu_cores"][i]),
                top_processes=_json_list(chunked.texts["top_processes"][i]),
            )
        )
    out.sort(key=lambda p: p.ts_ns)
    return tuple(out[:limit])


def gpu_points(session: Session, device_id: int, lo: int, hi: int, limit: int) -> tuple[GpuPoint, ...]:
    g = gpu_samples.c
    rows = session.execute(
        select(gpu_samples)
        .where(g.device_id == device_id, g.ts_ns >= lo, g.ts_ns < hi)
        .order_by(g.ts_ns, g.gpu_index)
        .limit(limit)
    )
    out = [
        GpuPoint(
            ts_ns=r._mapping["ts_ns"],
            gpu_index=r._mapping["gpu_index"],
            values={c: r._mapping[c] for c in GPU_SAMPLE_COLUMNS},
        )
        for r in rows
    ]
    chunked = read_gpu_chunk_rows(session, [device_id], lo, hi)
    if not len(chunked):
        return tuple(out)
    for i in range(min(len(chunked), limit)):
        out.append(GpuPoint(ts_ns=int(chunked.ts_ns[i]), gpu_index=int(chunked.gpu_index[i]),
                            values={c: chunked.value(c, i) for c in GPU_SAMPLE_COLUMNS}))
    out.sort(key=lambda p: (p.ts_ns, p.gpu_index))
    return tuple(out[:limit])


def _state_point(row: Any) -> GpuStatePoint:
    m = row._mapping
    return GpuStatePoint(
        ts_ns=m["ts_ns"],
        gpu_index=m["gpu_index"],
        values={c: m[c] for c in GPU_STATE_COLUMNS},
        processes=_json_list(m["processes"]),
    )


def gpu_state_points(
    session: Session, device_id: int, lo: int, hi: int, limit: int
) -> tuple[GpuStatePoint, ...]:
    """The GPU state (stored only when it changes) that applies to samples in [lo, hi).

    Per GPU, the row in force at ``lo`` (the latest at or before it), then the changes inside,
    oldest first; and for a GPU with samples here but no row yet, its first row after the
    window: a state row is stamped with the last sample of its batch, so a GPU's first row can
    come after samples it describes, and it is the best knowledge of their totals.
    """
    s = gpu_state.c
    latest = (
        select(s.gpu_index, func.max(s.ts_ns).label("ts"))
        .where(s.device_id == device_id, s.ts_ns <= lo)
        .group_by(s.gpu_index)
        .subquery()
    )
    before = session.execute(
        select(gpu_state)
        .join(latest, (s.gpu_index == latest.c.gpu_index) & (s.ts_ns == latest.c.ts))
        .where(s.device_id == device_id)
        .order_by(s.gpu_index)
    ).all()
    inside = session.execute(
        select(gpu_state)
        .where(s.device_id == device_id, s.ts_ns > lo, s.ts_ns < hi)
        .order_by(s.ts_ns, s.gpu_index)
        .limit(limit)
    ).all()
    have = {r._mapping["gpu_index"] for r in (*before, *inside)}
    g = gpu_samples.c
    sampled = set(session.scalars(
        select(g.gpu_index).where(g.device_id == device_id, g.ts_ns >= lo, g.ts_ns < hi).distinct()
    ).all())
    sampled |= {int(i) for i in read_gpu_chunk_rows(session, [device_id], lo, hi, columns=()).gpu_index.tolist()}
    later = []
    for index in sorted(set(sampled) - have):
        row = session.execute(
            select(gpu_state)
            .where(s.device_id == device_id, s.gpu_index == index, s.ts_ns >= hi)
            .order_by(s.ts_ns)
            .limit(1)
        ).first()
        if row is not None:
            later.append(row)
    return tuple(_state_point(r) for r in (*before, *inside, *later))
