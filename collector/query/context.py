"""What the device looked like around an incident: samples, a summary at the incident, log lines,
the device's other incidents nearby and, for charts, the window in 1 s buckets.

An OOM or Xid alone says *that* something failed; the GPU and host samples of the minute around
it say *why* (memory full for a minute, or a sudden spike; thermal throttling; swap). Everything
here is read from the existing tables (nothing is stored): the window is ``before_s`` before to
``after_s`` after the incident, both ends included, and the device's log lines within
``log_window_s`` of it.

"At the incident" is, per GPU and for the host, the latest sample at or before the incident's
time in the window, or the first one after it when there is none before. A GPU's total memory
comes from ``gpu_state`` (stored only when it changes): the row in force then, or the first row
after it when none was stored before (a row is stamped with the last sample of its batch).

An incident that groups repeats spans from its start to its last occurrence: the window and the
log lines then run from ``before_s`` / ``log_window_s`` before the start to as long after the
last occurrence, the span itself capped at ``max_span_s`` (an hour) after the start so that a
long flapping incident does not read a day of samples. Nothing else changes for an incident of
one occurrence.

``fleetscope incident ID`` (and its ``--json``) and the dashboard's incident page draw one:
all read it here (``fleetscope incidents --json`` lists incidents without their context).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from fleetscope.collector.errors import UnknownIncident
from fleetscope.collector.query.incidents import incident_view, search_incidents
from fleetscope.collector.query.logs import log_lines
from fleetscope.collector.query.samples import gpu_points, gpu_state_points, host_points
from fleetscope.collector.query.series import DeviceSeries, device_series
from fleetscope.collector.query.types import GpuPoint, GpuStatePoint, HostPoint, IncidentView, LogLine
from fleetscope.collector.storage.schema import (
    GPU_SAMPLE_COLUMNS,
    HOST_VALUE_COLUMNS,
    Device,
    Incident,
    incident_gpu_samples,
    incident_host_samples,
)
from fleetscope.proto.vocabulary import throttle_reason_names

_S = 10**9


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
    incident: IncidentView
    since_ns: int
    until_ns: int  # inclusive
    summary: ContextSummary
    host: tuple[HostPoint, ...]
    gpu: tuple[GpuPoint, ...]
    # The state in force at ``since_ns`` per GPU, the changes inside the window, and for a GPU with
    # no row until after the window, its first row (see ``samples.gpu_state_points``).
    gpu_state: tuple[GpuStatePoint, ...]
    logs: tuple[LogLine, ...]  # within ``log_window_s`` of the incident, oldest first
    nearby: tuple[IncidentView, ...]  # the device's other incidents within ``nearby_s``, newest first
    series: DeviceSeries | None  # the window in 1 s buckets, for charts: with ``with_series=True``


def incident_with_context(
    *,
    session: Session,
    incident_id: int,
    before_s: float = 60,
    after_s: float = 60,
    log_window_s: float = 10,
    log_limit: int = 1000,
    nearby_s: float = 600,
    with_series: bool = False,
    limit: int = 20_000,
    max_span_s: float = 3600,
) -> IncidentContext:
    """One incident whole (its facts, hints and lifecycle in ``incident``) and the device around
    it: samples, a summary at its start, log lines, its neighbours; ``UnknownIncident`` when
    there is no such id."""
    row = session.execute(
        select(Incident, Device.name)
        .join(Device, Device.id == Incident.device_id)
        .where(Incident.id == incident_id)
    ).first()
    if row is None:
        raise UnknownIncident(f"no incident with id {incident_id}")
    incident, device = row
    return _context(
        session,
        incident_view(incident, device),
        incident.device_id,
        before_s=before_s,
        after_s=after_s,
        log_window_s=log_window_s,
        log_limit=log_limit,
        nearby_s=nearby_s,
        with_series=with_series,
        limit=limit,
        max_span_s=max_span_s,
    )


def incidents_with_context(
    *,
    session: Session,
    since_ns: int,
    until_ns: int,
    kinds: Sequence[str] | None = None,
    devices: Sequence[str] | None = None,
    limit: int = 100,
    before_s: float = 60,
    after_s: float = 60,
    log_window_s: float = 10,
    open_only: bool = False,
    labels: Mapping[str, str] | None = None,
) -> list[IncidentContext]:
    """``search_incidents`` (same filters, newest first), each with its context.

    Each context costs a few indexed range queries, hence the smaller default ``limit``.
    """
    views = search_incidents(
        session=session,
        since_ns=since_ns,
        until_ns=until_ns,
        kinds=kinds,
        devices=devices,
        limit=limit,
        open_only=open_only,
        labels=labels,
    )
    if not views:
        return []
    device_of = dict(
        session.execute(
            select(Incident.id, Incident.device_id).where(Incident.id.in_([v.id for v in views]))
        ).all()
    )
    return [
        _context(
            session,
            v,
            device_of[v.id],
            before_s=before_s,
            after_s=after_s,
            log_window_s=log_window_s,
            log_limit=1000,
            nearby_s=600,
            with_series=False,
            limit=20_000,
            max_span_s=3600,
        )
        for v in views
    ]


def _context(
    session: Session,
    incident: IncidentView,
    device_id: int,
    *,
    before_s: float,
    after_s: float,
    log_window_s: float,
    log_limit: int,
    nearby_s: float,
    with_series: bool,
    limit: int,
    max_span_s: float,
) -> IncidentContext:
    ts_ns, device = incident.ts_ns, incident.device
    # The last occurrence of a grouped incident, the span capped.
    last_ns = min(max(incident.last_seen_ns, ts_ns), ts_ns + int(max_span_s * _S))
    since, until = ts_ns - int(before_s * _S), last_ns + int(after_s * _S)
    host = host_points(session, device_id, since, until + 1, limit)
    gpu = gpu_points(session, device_id, since, until + 1, limit)
    host, gpu = _with_kept_samples(session, device_id, since, until + 1, limit, host, gpu)
    state = gpu_state_points(session, device_id, since, until + 1, limit)
    log_from, log_to = ts_ns - int(log_window_s * _S), last_ns + int(log_window_s * _S)
    logs = log_lines(session, device_id, device, log_from, log_to + 1, limit=log_limit)
    nearby = search_incidents(
        session=session,
        since_ns=ts_ns - int(nearby_s * _S),
        until_ns=ts_ns + int(nearby_s * _S),
        devices=[device],
        limit=20,
    )
    series = (
        device_series(session=session, device=device, since_ns=since, until_ns=until + 1, step_s=1)
        if with_series
        else None
    )
    return IncidentContext(
        incident=incident,
        since_ns=since,
        until_ns=until,
        summary=_summary(ts_ns, host, gpu, state),
        host=host,
        gpu=gpu,
        gpu_state=state,
        logs=tuple(logs),
        nearby=tuple(i for i in nearby if i.id != incident.id),
        series=series,
    )


def _with_kept_samples(
    session: Session, device_id: int, lo: int, hi: int, limit: int, host: tuple[HostPoint, ...], gpu: tuple[GpuPoint, ...]
) -> tuple[tuple[HostPoint, ...], tuple[GpuPoint, ...]]:
    """The window's samples with those the retention job kept for incidents
    (``incident_*_samples``, ``jobs.retention``) where the raw tier no longer has them; a raw
    sample wins over its kept copy."""
    kh, kg = incident_host_samples.c, incident_gpu_samples.c
    kept_host = session.execute(
        select(incident_host_samples).where(kh.device_id == device_id, kh.ts_ns >= lo, kh.ts_ns < hi).order_by(kh.ts_ns).limit(limit)
    ).all()
    kept_gpu = session.execute(
        select(incident_gpu_samples).where(kg.device_id == device_id, kg.ts_ns >= lo, kg.ts_ns < hi)
        .order_by(kg.ts_ns, kg.gpu_index).limit(limit)
    ).all()
    if kept_host:
        have = {p.ts_ns for p in host}
        extra = [HostPoint(ts_ns=m["ts_ns"], values={c: m[c] for c in HOST_VALUE_COLUMNS},
                           cpu_cores=json.loads(m["cpu_cores"]) if m["cpu_cores"] else None,
                           top_processes=json.loads(m["top_processes"]) if m["top_processes"] else None)
                 for m in (r._mapping for r in kept_host) if m["ts_ns"] not in have]
        host = tuple(sorted((*host, *extra), key=lambda p: p.ts_ns))[:limit]
    if kept_gpu:
        have_gpu = {(p.ts_ns, p.gpu_index) for p in gpu}
        extra_gpu = [GpuPoint(ts_ns=m["ts_ns"], gpu_index=m["gpu_index"], values={c: m[c] for c in GPU_SAMPLE_COLUMNS})
                     for m in (r._mapping for r in kept_gpu) if (m["ts_ns"], m["gpu_index"]) not in have_gpu]
        gpu = tuple(sorted((*gpu, *extra_gpu), key=lambda p: (p.ts_ns, p.gpu_index)))[:limit]
    return host, gpu


# ------------------------------------------------------------------------------ summary


_Point = TypeVar("_Point", HostPoint, GpuPoint, GpuStatePoint)


def _at(points: Sequence[_Point], ts_ns: int) -> _Point | None:
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
    for index, points in sorted(by_gpu.items()):
        at = _at(points, ts_ns)
        if at is None:
            continue
        st = _at(state_by_gpu.get(index, []), ts_ns)
        v = at.values
        mask = v.get("throttle_reasons")
        gpus.append(
            GpuAtIncident(
                gpu_index=index,
                sample_ts_ns=at.ts_ns,
                memory_used_bytes=v.get("memory_used_bytes"),
                memory_total_bytes=st.values.get("memory_total_bytes") if st is not None else None,
                temp_c=v.get("temp_c"),
                sm_clock_mhz=v.get("sm_clock_mhz"),
                util_gpu_percent=v.get("util_gpu_percent"),
                power_w=v.get("power_w"),
                throttle_reasons=tuple(throttle_reason_names(int(mask))) if mask is not None else (),
            )
        )
    temps = [t for t in (g.temp_c for g in gpus) if t is not None]
    window_temps = [t for t in (p.values.get("temp_c") for p in gpu) if t is not None]
    h = _at(host, ts_ns)
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
        host=host_at,
    )
