"""Raw samples: a device's host, GPU and GPU-state rows over a window, one row per sample.

``device_metrics`` (``fleetscope metrics``) and the incident context read through the same three
readers, each over a half-open window [lo, hi). Charts read aggregated buckets instead (``series``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from fleetscope.collector.query._common import device_row
from fleetscope.collector.query.types import GpuPoint, GpuStatePoint, HostPoint
from fleetscope.collector.storage.schema import (
    GPU_SAMPLE_COLUMNS,
    GPU_STATE_COLUMNS,
    HOST_VALUE_COLUMNS,
    gpu_samples,
    gpu_state,
    host_samples,
)


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
    """A device's samples in [since, until), at most ``limit`` rows per table, oldest first."""
    d = device_row(session, device)
    return DeviceMetrics(
        device=d.name,
        since_ns=since_ns,
        until_ns=until_ns,
        host=list(host_points(session, d.id, since_ns, until_ns, limit)),
        gpu=list(gpu_points(session, d.id, since_ns, until_ns, limit)),
        gpu_state=list(gpu_state_points(session, d.id, since_ns, until_ns, limit)),
    )


def count_samples(*, session: Session, device: str | None = None) -> dict[str, int]:
    """Stored sample rows per table (all devices, or one)."""
    out = {}
    for name, table in (("host", host_samples), ("gpu", gpu_samples)):
        q = select(func.count()).select_from(table)
        if device is not None:
            q = q.where(table.c.device_id == device_row(session, device).id)
        out[name] = int(session.execute(q).scalar_one())
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
    return tuple(out)


def gpu_points(session: Session, device_id: int, lo: int, hi: int, limit: int) -> tuple[GpuPoint, ...]:
    g = gpu_samples.c
    rows = session.execute(
        select(gpu_samples)
        .where(g.device_id == device_id, g.ts_ns >= lo, g.ts_ns < hi)
        .order_by(g.ts_ns, g.gpu_index)
        .limit(limit)
    )
    return tuple(
        GpuPoint(
            ts_ns=r._mapping["ts_ns"],
            gpu_index=r._mapping["gpu_index"],
            values={c: r._mapping[c] for c in GPU_SAMPLE_COLUMNS},
        )
        for r in rows
    )


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
    sampled = session.scalars(
        select(g.gpu_index).where(g.device_id == device_id, g.ts_ns >= lo, g.ts_ns < hi).distinct()
    ).all()
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
