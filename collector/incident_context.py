"""What the device looked like around an incident: samples, a summary at the incident, log lines.

An OOM or Xid alone says *that* something failed; the GPU and host samples of the minute around
it say *why* (memory full for a minute, or a sudden spike; thermal throttling; swap). Everything
here is read from the existing tables (nothing is stored): the window is ``before_s`` before to
``after_s`` after the incident, both ends included, and the device's log lines within
``log_window_s`` of it.

"At the incident" is, per GPU and for the host, the latest sample at or before the incident's
time in the window, or the first one after it when there is none before. A GPU's total memory
comes from ``gpu_state`` (stored only when it changes): the row in force then, or the first row
after it when none was stored before (a row is stamped with the last sample of its batch).

Follows the query API's conventions: ``session`` keyword, frozen dataclasses out, no ORM rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from fleetscope.agent.records import throttle_reason_names
from fleetscope.collector.errors import FleetscopeCollectorError
from fleetscope.collector.query import (
    GpuPoint,
    GpuStatePoint,
    HostPoint,
    IncidentView,
    LogLine,
    list_incidents,
)
from fleetscope.collector.storage.schema import (
    GPU_SAMPLE_COLUMNS,
    GPU_STATE_COLUMNS,
    HOST_VALUE_COLUMNS,
    Device,
    Incident,
    gpu_samples,
    gpu_state,
    host_samples,
    log_events,
)

__all__ = [
    "UnknownIncident",
    "GpuAtIncident",
    "HostAtIncident",
    "ContextSummary",
    "IncidentContext",
    "IncidentWithContext",
    "incident_context",
    "incidents_with_context",
]

_S = 10**9


class UnknownIncident(FleetscopeCollectorError, LookupError):
    pass


@dataclass(frozen=True)
class GpuAtIncident:
    gpu_index: int
    sample_ts_ns: int  # the sample this row was read from
    memory_used_bytes: float | None
    memory_total_bytes: float | None
    temp_c: float | None
    sm_clock_mhz: float | None
    util_gpu_percent: float | None
    power_w: float | None
    throttle_reasons: tuple[str, ...]  # names, e.g. ("sw_power_cap", "hw_thermal_slowdown")


@dataclass(frozen=True)
class HostAtIncident:
    sample_ts_ns: int
    mem_total_bytes: float | None
    mem_used_bytes: float | None
    mem_available_bytes: float | None
    swap_total_bytes: float | None
    swap_used_bytes: float | None
    cpu_percent: float | None


@dataclass(frozen=True)
class ContextSummary:
    gpus: tuple[GpuAtIncident, ...]
    max_temp_c: float | None  # hottest GPU at the incident
    window_max_temp_c: float | None  # hottest reading anywhere in the window
    host: HostAtIncident | None


@dataclass(frozen=True)
class IncidentContext:
    incident_id: int
    device: str
    ts_ns: int
    since_ns: int
    until_ns: int  # inclusive
    summary: ContextSummary
    host: tuple[HostPoint, ...]
    gpu: tuple[GpuPoint, ...]
    # The state in force at ``since_ns`` per GPU, the changes inside the window, and for a GPU with
    # no row until after the window, its first row (see ``_state``).
    gpu_state: tuple[GpuStatePoint, ...]
    logs: tuple[LogLine, ...]


@dataclass(frozen=True)
class IncidentWithContext(IncidentView):
    """An ``IncidentView`` with its ``context``: usable wherever an IncidentView is."""

    context: IncidentContext


def incident_context(
    *,
    session: Session,
    incident_id: int,
    before_s: float = 60,
    after_s: float = 60,
    log_window_s: float = 10,
    limit: int = 20_000,
    log_limit: int = 1000,
) -> IncidentContext:
    row = session.execute(
        select(Incident.id, Incident.ts_ns, Incident.device_id, Device.name)
        .join(Device, Device.id == Incident.device_id)
        .where(Incident.id == incident_id)
    ).first()
    if row is None:
        raise UnknownIncident(f"no incident with id {incident_id}")
    return _context(
        session,
        row.id,
        row.device_id,
        row.name,
        row.ts_ns,
        before_s=before_s,
        after_s=after_s,
        log_window_s=log_window_s,
        limit=limit,
        log_limit=log_limit,
    )


def incidents_with_context(
    *,
    session: Session,
    since_ns: int,
    until_ns: int,
    device: str | None = None,
    kind: str | None = None,
    limit: int = 100,
    before_s: float = 60,
    after_s: float = 60,
    log_window_s: float = 10,
) -> list[IncidentWithContext]:
    """``list_incidents`` (same filters, newest first), each with its context.

    Each context costs a few indexed range queries, hence the smaller default ``limit``.
    """
    views = list_incidents(
        session=session, since_ns=since_ns, until_ns=until_ns, device=device, kind=kind, limit=limit
    )
    if not views:
        return []
    device_ids = dict(
        session.execute(
            select(Incident.id, Incident.device_id).where(Incident.id.in_([v.id for v in views]))
        ).all()
    )
    out = []
    for v in views:
        ctx = _context(
            session,
            v.id,
            device_ids[v.id],
            v.device,
            v.ts_ns,
            before_s=before_s,
            after_s=after_s,
            log_window_s=log_window_s,
            limit=20_000,
            log_limit=1000,
        )
        out.append(
            IncidentWithContext(
                id=v.id,
                device=v.device,
                ts_ns=v.ts_ns,
                kind=v.kind,
                severity=v.severity,
                title=v.title,
                facts=v.facts,
                source=v.source,
                excerpt=v.excerpt,
                context=ctx,
            )
        )
    return out


# ------------------------------------------------------------------------------ reading


def _context(
    session: Session,
    incident_id: int,
    device_id: int,
    device: str,
    ts_ns: int,
    *,
    before_s: float,
    after_s: float,
    log_window_s: float,
    limit: int,
    log_limit: int,
) -> IncidentContext:
    since, until = ts_ns - int(before_s * _S), ts_ns + int(after_s * _S)
    host = _host(session, device_id, since, until, limit)
    gpu = _gpu(session, device_id, since, until, limit)
    state = _state(session, device_id, since, until, limit)
    logs = _logs(
        session, device_id, device, ts_ns - int(log_window_s * _S), ts_ns + int(log_window_s * _S), log_limit
    )
    return IncidentContext(
        incident_id=incident_id,
        device=device,
        ts_ns=ts_ns,
        since_ns=since,
        until_ns=until,
        summary=_summary(ts_ns, host, gpu, state),
        host=host,
        gpu=gpu,
        gpu_state=state,
        logs=logs,
    )


def _host(session: Session, device_id: int, since: int, until: int, limit: int) -> tuple[HostPoint, ...]:
    h = host_samples.c
    rows = session.execute(
        select(host_samples)
        .where(h.device_id == device_id, h.ts_ns >= since, h.ts_ns <= until)
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
                cpu_cores=json.loads(m["cpu_cores"]) if m["cpu_cores"] else None,
                top_processes=json.loads(m["top_processes"]) if m["top_processes"] else None,
            )
        )
    return tuple(out)


def _gpu(session: Session, device_id: int, since: int, until: int, limit: int) -> tuple[GpuPoint, ...]:
    g = gpu_samples.c
    rows = session.execute(
        select(gpu_samples)
        .where(g.device_id == device_id, g.ts_ns >= since, g.ts_ns <= until)
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


def _state_point(m: object) -> GpuStatePoint:
    mm = m._mapping  # type: ignore[attr-defined]
    return GpuStatePoint(
        ts_ns=mm["ts_ns"],
        gpu_index=mm["gpu_index"],
        values={c: mm[c] for c in GPU_STATE_COLUMNS},
        processes=json.loads(mm["processes"]) if mm["processes"] else None,
    )


def _state(session: Session, device_id: int, since: int, until: int, limit: int) -> tuple[GpuStatePoint, ...]:
    s = gpu_state.c
    # The row in force at `since` per GPU (the latest at or before it), then the changes inside.
    latest = (
        select(s.gpu_index, func.max(s.ts_ns).label("ts"))
        .where(s.device_id == device_id, s.ts_ns <= since)
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
        .where(s.device_id == device_id, s.ts_ns > since, s.ts_ns <= until)
        .order_by(s.ts_ns, s.gpu_index)
        .limit(limit)
    ).all()
    # A state row is stamped with the last sample of its batch, so a GPU's first row can come
    # after samples it describes. For a GPU with samples here but no row yet, the first row later
    # is the best knowledge of its totals.
    have = {r._mapping["gpu_index"] for r in (*before, *inside)}
    sampled = session.scalars(
        select(gpu_samples.c.gpu_index)
        .where(
            gpu_samples.c.device_id == device_id, gpu_samples.c.ts_ns >= since, gpu_samples.c.ts_ns <= until
        )
        .distinct()
    ).all()
    later = []
    for index in sorted(set(sampled) - have):
        row = session.execute(
            select(gpu_state)
            .where(s.device_id == device_id, s.gpu_index == index, s.ts_ns > until)
            .order_by(s.ts_ns)
            .limit(1)
        ).first()
        if row is not None:
            later.append(row)
    return tuple(_state_point(r) for r in (*before, *inside, *later))


def _logs(
    session: Session, device_id: int, device: str, since: int, until: int, limit: int
) -> tuple[LogLine, ...]:
    c = log_events.c
    rows = session.execute(
        select(log_events)
        .where(c.device_id == device_id, c.ts_ns >= since, c.ts_ns <= until)
        .order_by(c.ts_ns)
        .limit(limit)
    ).all()
    return tuple(LogLine(device, r.ts_ns, r.source, r.level, r.message) for r in rows)


# ------------------------------------------------------------------------------ summary


def _at(points: list, ts_ns: int):  # type: ignore[no-untyped-def]
    """The latest point at or before ``ts_ns``, else the first after it (points sorted by time)."""
    before = [p for p in points if p.ts_ns <= ts_ns]
    if before:
        return before[-1]
    return points[0] if points else None


def _summary(
    ts_ns: int, host: tuple[HostPoint, ...], gpu: tuple[GpuPoint, ...], state: tuple[GpuStatePoint, ...]
) -> ContextSummary:
    by_gpu: dict[int, list[GpuPoint]] = {}
    for p in gpu:
        by_gpu.setdefault(p.gpu_index, []).append(p)
    state_by_gpu: dict[int, list[GpuStatePoint]] = {}
    for sp in state:
        state_by_gpu.setdefault(sp.gpu_index, []).append(sp)
    gpus = []
    for index in sorted(by_gpu):
        p = _at(by_gpu[index], ts_ns)
        st = _at(state_by_gpu.get(index, []), ts_ns)
        v = p.values
        mask = v.get("throttle_reasons")
        gpus.append(
            GpuAtIncident(
                gpu_index=index,
                sample_ts_ns=p.ts_ns,
                memory_used_bytes=v.get("memory_used_bytes"),
                memory_total_bytes=st.values.get("memory_total_bytes") if st is not None else None,
                temp_c=v.get("temp_c"),
                sm_clock_mhz=v.get("sm_clock_mhz"),
                util_gpu_percent=v.get("util_gpu_percent"),
                power_w=v.get("power_w"),
                throttle_reasons=tuple(throttle_reason_names(int(mask))) if mask is not None else (),
            )
        )
    temps = [g.temp_c for g in gpus if g.temp_c is not None]
    window_temps = [p.values["temp_c"] for p in gpu if p.values.get("temp_c") is not None]
    h = _at(list(host), ts_ns)
    host_at = None
    if h is not None:
        hv = h.values
        host_at = HostAtIncident(
            sample_ts_ns=h.ts_ns,
            mem_total_bytes=hv.get("mem_total_bytes"),
            mem_used_bytes=hv.get("mem_used_bytes"),
            mem_available_bytes=hv.get("mem_available_bytes"),
            swap_total_bytes=hv.get("swap_total_bytes"),
            swap_used_bytes=hv.get("swap_used_bytes"),
            cpu_percent=hv.get("cpu_percent"),
        )
    return ContextSummary(
        gpus=tuple(gpus),
        max_temp_c=max(temps) if temps else None,
        window_max_temp_c=max(window_temps) if window_temps else None,
        host=host_at,  # type: ignore[type-var]
    )
