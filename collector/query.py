"""The query API: the one place that reads the database for people.

The CLI, the dashboard and the tests all call these functions. Each takes the SQLAlchemy
``session`` as a keyword (the caller owns the transaction) and returns frozen dataclasses;
none returns ORM objects or rows, so callers never depend on the schema.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from fleetscope.collector.errors import UnknownDevice
from fleetscope.collector.storage.schema import (
    GPU_SAMPLE_COLUMNS,
    GPU_STATE_COLUMNS,
    HOST_VALUE_COLUMNS,
    Device,
    Incident,
    gpu_samples,
    gpu_state,
    host_samples,
    latency_histograms,
    log_events,
)

ONLINE_WITHIN_NS = 60 * 10**9  # a device heard from within a minute is online


@dataclass(frozen=True)
class DeviceSummary:
    name: str
    agent_id: str
    kind: str
    hostname: str
    labels: dict[str, str]
    online: bool
    first_seen_ns: int
    last_seen_ns: int
    agent_version: str
    clock_skew_ns: int
    gpu_count: int
    gpus: list[str]
    inventory: dict[str, Any]
    batches_stored: int
    batches_rejected: int
    last_rejection: str
    counters: dict[str, Any]
    simulated: bool


@dataclass(frozen=True)
class HostPoint:
    ts_ns: int
    values: dict[str, float | None]
    cpu_cores: list | None = None
    top_processes: list | None = None


@dataclass(frozen=True)
class GpuPoint:
    ts_ns: int
    gpu_index: int
    values: dict[str, float | None]


@dataclass(frozen=True)
class GpuStatePoint:
    ts_ns: int
    gpu_index: int
    values: dict[str, float | None]
    processes: list | None = None


@dataclass(frozen=True)
class DeviceMetrics:
    device: str
    since_ns: int
    until_ns: int
    host: list[HostPoint] = field(default_factory=list)
    gpu: list[GpuPoint] = field(default_factory=list)
    gpu_state: list[GpuStatePoint] = field(default_factory=list)


@dataclass(frozen=True)
class LogLine:
    device: str
    ts_ns: int
    source: str
    level: str
    message: str


@dataclass(frozen=True)
class IncidentView:
    id: int
    device: str
    ts_ns: int
    kind: str
    severity: str
    title: str
    facts: dict[str, Any]
    source: str
    excerpt: str


def to_jsonable(obj: Any) -> Any:
    """Dataclasses (nested) to plain JSON-able structures."""
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(o) for o in obj]
    if isinstance(obj, dict):
        return {k: to_jsonable(v) for k, v in obj.items()}
    if hasattr(obj, "__dataclass_fields__"):
        return asdict(obj)
    return obj


def _device_row(session: Session, name: str) -> Device:
    device = session.scalars(select(Device).where((Device.name == name) | (Device.agent_id == name))).first()
    if device is None:
        known = session.scalars(select(Device.name).order_by(Device.name).limit(20)).all()
        hint = f" (known: {', '.join(known)})" if known else " (no devices have registered yet)"
        raise UnknownDevice(f"no device named {name!r}{hint}")
    return device


def list_devices(*, session: Session, now_ns: int, label: dict[str, str] | None = None) -> list[DeviceSummary]:
    out = []
    for d in session.scalars(select(Device).order_by(Device.name)):
        labels = dict(d.labels or {})
        if label and any(labels.get(k) != v for k, v in label.items()):
            continue
        gpus = (d.inventory or {}).get("gpus", [])
        out.append(
            DeviceSummary(
                name=d.name,
                agent_id=d.agent_id,
                kind=d.kind,
                hostname=d.hostname,
                labels=labels,
                online=now_ns - d.last_seen_ns <= ONLINE_WITHIN_NS,
                first_seen_ns=d.first_seen_ns,
                last_seen_ns=d.last_seen_ns,
                agent_version=d.agent_version,
                clock_skew_ns=d.clock_skew_ns,
                gpu_count=len(gpus),
                gpus=[g.get("name", "") for g in gpus],
                inventory=dict(d.inventory or {}),
                batches_stored=d.batches_stored,
                batches_rejected=d.batches_rejected,
                last_rejection=d.last_rejection,
                counters=dict(d.counters or {}),
                simulated=d.simulated,
            )
        )
    return out


def device_metrics(*, session: Session, device: str, since_ns: int, until_ns: int, limit: int = 200_000) -> DeviceMetrics:
    d = _device_row(session, device)
    out = DeviceMetrics(device=d.name, since_ns=since_ns, until_ns=until_ns)
    h = host_samples.c
    for row in session.execute(
        select(host_samples)
        .where(h.device_id == d.id, h.ts_ns >= since_ns, h.ts_ns < until_ns)
        .order_by(h.ts_ns)
        .limit(limit)
    ):
        m = row._mapping
        out.host.append(
            HostPoint(
                ts_ns=m["ts_ns"],
                values={c: m[c] for c in HOST_VALUE_COLUMNS},
                cpu_cores=json.loads(m["cpu_cores"]) if m["cpu_cores"] else None,
                top_processes=json.loads(m["top_processes"]) if m["top_processes"] else None,
            )
        )
    g = gpu_samples.c
    for row in session.execute(
        select(gpu_samples)
        .where(g.device_id == d.id, g.ts_ns >= since_ns, g.ts_ns < until_ns)
        .order_by(g.ts_ns, g.gpu_index)
        .limit(limit)
    ):
        m = row._mapping
        out.gpu.append(GpuPoint(ts_ns=m["ts_ns"], gpu_index=m["gpu_index"], values={c: m[c] for c in GPU_SAMPLE_COLUMNS}))
    s = gpu_state.c
    for row in session.execute(
        select(gpu_state).where(s.device_id == d.id, s.ts_ns < until_ns).order_by(s.ts_ns, s.gpu_index).limit(limit)
    ):
        m = row._mapping
        # State before the window still applies inside it: keep the latest per GPU from before `since`.
        out.gpu_state.append(
            GpuStatePoint(
                ts_ns=m["ts_ns"],
                gpu_index=m["gpu_index"],
                values={c: m[c] for c in GPU_STATE_COLUMNS},
                processes=json.loads(m["processes"]) if m["processes"] else None,
            )
        )
    if out.gpu_state:
        latest_before: dict[int, GpuStatePoint] = {}
        inside = []
        for p in out.gpu_state:
            if p.ts_ns < since_ns:
                latest_before[p.gpu_index] = p
            else:
                inside.append(p)
        out.gpu_state[:] = sorted(latest_before.values(), key=lambda p: p.gpu_index) + inside
    return out


def count_samples(*, session: Session, device: str | None = None) -> dict[str, int]:
    """Stored sample rows per table (all devices, or one)."""
    out = {}
    for name, table in (("host", host_samples), ("gpu", gpu_samples)):
        q = select(func.count()).select_from(table)
        if device is not None:
            q = q.where(table.c.device_id == _device_row(session, device).id)
        out[name] = int(session.execute(q).scalar_one())
    return out


def device_logs(
    *, session: Session, device: str, since_ns: int, until_ns: int, grep: str | None = None, level: str | None = None,
    limit: int = 1000,
) -> list[LogLine]:
    d = _device_row(session, device)
    c = log_events.c
    q = select(log_events).where(c.device_id == d.id, c.ts_ns >= since_ns, c.ts_ns < until_ns)
    if grep:
        q = q.where(c.message.contains(grep, autoescape=True))
    if level:
        q = q.where(c.level == level)
    rows = session.execute(q.order_by(c.ts_ns.desc()).limit(limit)).all()
    return [LogLine(d.name, r.ts_ns, r.source, r.level, r.message) for r in reversed(rows)]


def list_incidents(
    *, session: Session, since_ns: int, until_ns: int, device: str | None = None, kind: str | None = None, limit: int = 1000
) -> list[IncidentView]:
    q = (
        select(Incident, Device.name)
        .join(Device, Device.id == Incident.device_id)
        .where(Incident.ts_ns >= since_ns, Incident.ts_ns < until_ns)
    )
    if device is not None:
        q = q.where(Incident.device_id == _device_row(session, device).id)
    if kind is not None:
        q = q.where(Incident.kind == kind)
    rows = session.execute(q.order_by(Incident.ts_ns.desc()).limit(limit)).all()
    return [
        IncidentView(
            id=i.id, device=name, ts_ns=i.ts_ns, kind=i.kind, severity=i.severity, title=i.title,
            facts=dict(i.facts or {}), source=i.source, excerpt=i.excerpt,
        )
        for i, name in rows
    ]


@dataclass(frozen=True)
class LatencyView:
    """One named operation's latency over a range, from summed histogram buckets."""

    device: str
    name: str
    labels: dict[str, str]
    count: int
    errors: int
    mean_ms: float | None
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    p999_ms: float | None
    calls_per_s: float | None


def latency_percentiles(
    *, session: Session, device: str, since_ns: int, until_ns: int, name: str | None = None
) -> list[LatencyView]:
    """Percentiles per (operation, labels), computed from merged buckets (never averaged)."""
    from fleetscope.proto import buckets as bucket_scheme

    d = _device_row(session, device)
    c = latency_histograms.c
    q = select(latency_histograms).where(c.device_id == d.id, c.start_ns < until_ns, c.end_ns > since_ns)
    if name is not None:
        q = q.where(c.name == name)
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for row in session.execute(q):
        m = row._mapping
        g = groups.setdefault((m["name"], m["labels"]), {"buckets": {}, "count": 0, "errors": 0, "sum": 0, "zero": 0,
                                                         "start": m["start_ns"], "end": m["end_ns"]})
        for k, v in json.loads(m["buckets"]).items():
            g["buckets"][int(k)] = g["buckets"].get(int(k), 0) + v
        g["count"] += m["count"]
        g["errors"] += m["errors"]
        g["sum"] += m["sum_ns"]
        g["zero"] += m["zero_count"]
        g["start"], g["end"] = min(g["start"], m["start_ns"]), max(g["end"], m["end_ns"])
    out = []
    for (op, labels), g in sorted(groups.items()):
        def q_ms(p: float, g: dict[str, Any] = g) -> float | None:
            v = bucket_scheme.quantile(g["buckets"], p, zero_count=g["zero"])
            return None if v is None else v / 1e6

        span_s = max(1e-9, (g["end"] - g["start"]) / 1e9)
        out.append(LatencyView(
            device=d.name, name=op, labels=json.loads(labels), count=g["count"], errors=g["errors"],
            mean_ms=g["sum"] / g["count"] / 1e6 if g["count"] else None,
            p50_ms=q_ms(0.5), p90_ms=q_ms(0.9), p99_ms=q_ms(0.99), p999_ms=q_ms(0.999),
            calls_per_s=g["count"] / span_s,
        ))
    return out
