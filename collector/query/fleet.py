"""The fleet at a glance: every device with its state, current readings, sparklines and open incidents."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from fleetscope.collector.gc_pause import builds_with_paused_gc
from fleetscope.collector.query._common import NS, floor_to, max_of, mean_of, sum_of
from fleetscope.collector.query.devices import STATE_REPLACED, device_model, device_states, list_devices
from fleetscope.collector.query.incidents import search_incidents
from fleetscope.collector.query.series import fetch_samples
from fleetscope.collector.query.types import DeviceSummary, IncidentView
from fleetscope.collector.storage.chunk_reader import read_samples
from fleetscope.collector.storage.id_lists import in_ids
from fleetscope.collector.storage.rollups import GPU
from fleetscope.collector.storage.schema import Device, Incident, gpu_latest, host_latest
from fleetscope.proto.vocabulary import (
    INCIDENT_OPEN,
    KIND_TRT_BENCHMARK,
    ORIGIN_IMPORT,
    SEVERITY_INFO,
    SEVERITY_WARNING,
    severities_at_least,
    worst_severity,
)


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
    # devices.device_state: "online", "offline", "stopped" (its agent said it stopped cleanly), or
    # "imported" (made by `scan --db`: history from files, never an agent; neither online nor offline). Earlier installs of a name that registered
    # again under a new agent id ("replaced") are not rows: their open incidents count on the newest.
    state: str = "online"
    agent_id: str = ""


@dataclass(frozen=True)
class FleetOverview:
    now_ns: int
    spark_step_s: int
    spark_ts_ns: list[int]
    devices: list[FleetDevice]
    open_incidents: list[IncidentView]
    open_window_ns: int


@dataclass(frozen=True)
class FleetSparklines:
    """One device's sparklines: the last ``spark_window`` in ``spark_step_s`` buckets, at ``spark_ts_ns``."""

    util: list[float | None]
    mem_percent: list[float | None]
    temp: list[float | None]
    power: list[float | None]


@builds_with_paused_gc  # every device's summary and readings: 10,000 at a time
def fleet_overview(
    *,
    session: Session,
    now_ns: int,
    spark_window_ns: int = 30 * 60 * NS,
    spark_step_s: int = 60,
    open_window_ns: int = 24 * 3600 * NS,
    current_window_ns: int = 20 * NS,
    sparklines: Collection[str] | None = None,
) -> FleetOverview:
    """Every device with its state, current readings, sparklines and open incidents.

    Open incidents are those still open that started in the last ``open_window_ns``, warnings and
    worse (benchmark records and imported incidents, stored resolved, excluded).

    ``sparklines``: the agent ids whose sparklines to read (``None``: every device's). A fleet of
    thousands shows a page of its devices at a time: the others' sparklines are empty lists
    (``fleet_sparklines`` reads a page's later), which spares reading 30 minute rollups of every
    GPU in the fleet.
    """
    every = list_devices(session=session, now_ns=now_ns)
    id_of = {str(a): int(i) for a, i in session.execute(select(Device.agent_id, Device.id))}
    states = device_states(every)
    devices = [d for d in every if states[d.agent_id] != STATE_REPLACED and d.agent_id in id_of]
    by_id = {id_of[d.agent_id]: d for d in devices}
    # A replaced install's incidents count on the newest install of its name.
    newest_of_name: dict[str, int] = {}
    for shown in sorted(devices, key=lambda x: (x.first_seen_ns, id_of[x.agent_id])):
        newest_of_name[shown.name] = id_of[shown.agent_id]
    row_of = {
        id_of[x.agent_id]: newest_of_name.get(x.name, id_of[x.agent_id]) for x in every if x.agent_id in id_of
    }
    all_ids = list(by_id)
    totals = {d: _memory_total(by_id[d]) for d in all_ids}
    if sparklines is None:
        wanted = all_ids
    else:
        asked = set(sparklines)
        wanted = [d for d in all_ids if by_id[d].agent_id in asked]
    spark_ts, spark = _sparklines(
        session, {d: (by_id[d].gpu_count, totals[d]) for d in wanted}, now_ns, spark_window_ns, spark_step_s
    )
    none = FleetSparklines([], [], [], [])

    current = _current(
        session, [d for d in all_ids if by_id[d].online], now_ns - current_window_ns, now_ns + 1
    )
    open_counts: dict[int, tuple[int, str]] = {}
    q = (
        select(Incident.device_id, Incident.severity, func.count())
        .where(
            Incident.ts_ns >= now_ns - open_window_ns,
            Incident.kind != KIND_TRT_BENCHMARK,
            Incident.severity != SEVERITY_INFO,
            Incident.state == INCIDENT_OPEN,
            Incident.origin != ORIGIN_IMPORT,
        )
        .group_by(Incident.device_id, Incident.severity)
    )
    for dev, sev, c in session.execute(q):
        d = row_of.get(dev, dev)
        n, worst = open_counts.get(d, (0, ""))
        open_counts[d] = (n + c, worst_severity(sev, worst) if worst else sev)
    out = []
    for d in all_ids:
        summary = by_id[d]
        cur = current.get(d, {})
        n, worst = open_counts.get(d, (0, ""))
        out.append(
            FleetDevice(
                name=summary.name,
                kind=summary.kind,
                model=device_model(summary),
                labels=summary.labels,
                online=summary.online,
                last_seen_ns=summary.last_seen_ns,
                gpu_count=summary.gpu_count,
                gpu_names=summary.gpus,
                simulated=summary.simulated,
                util_percent=cur.get("util"),
                memory_used_bytes=cur.get("mem"),
                memory_total_bytes=totals[d],
                temp_c=cur.get("temp"),
                power_w=cur.get("power"),
                cpu_percent=cur.get("cpu"),
                host_mem_used_bytes=cur.get("host_mem"),
                host_mem_total_bytes=cur.get("host_mem_total")
                or (summary.inventory or {}).get("memory_total_bytes")
                or None,
                spark_util=spark.get(d, none).util,
                spark_mem_percent=spark.get(d, none).mem_percent,
                spark_temp=spark.get(d, none).temp,
                spark_power=spark.get(d, none).power,
                open_incidents=n,
                worst_severity=worst,
                state=states[summary.agent_id],
                agent_id=summary.agent_id,
            )
        )
    recent = search_incidents(
        session=session,
        since_ns=now_ns - open_window_ns,
        until_ns=now_ns + 1,
        severities=severities_at_least(SEVERITY_WARNING),
        exclude_kinds=[KIND_TRT_BENCHMARK],
        open_only=True,
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


def fleet_sparklines(
    *,
    session: Session,
    now_ns: int,
    agent_ids: Sequence[str],
    spark_window_ns: int = 30 * 60 * NS,
    spark_step_s: int = 60,
) -> tuple[list[int], dict[str, FleetSparklines]]:
    """The sparklines ``fleet_overview`` draws, for these devices only (agent ids: a page of the
    Fleet table): the bucket times, and {agent id: sparklines} (unknown ids left out)."""
    if not agent_ids:
        return _spark_times(now_ns, spark_window_ns, spark_step_s), {}
    rows = session.execute(
        select(Device.id, Device.agent_id, Device.inventory).where(Device.agent_id.in_(list(agent_ids)))
    ).all()
    agent_of = {int(i): str(a) for i, a, _inv in rows}
    gpus = {
        int(i): (len((inv or {}).get("gpus", []) or []), _inventory_memory_total(inv)) for i, _a, inv in rows
    }
    ts, by_id = _sparklines(session, gpus, now_ns, spark_window_ns, spark_step_s)
    return ts, {agent_of[d]: s for d, s in by_id.items()}


def _spark_times(now_ns: int, window_ns: int, step_s: int) -> list[int]:
    step_ns = step_s * NS
    lo = floor_to(now_ns - window_ns, step_ns) + step_ns
    return list(range(lo, now_ns + 1, step_ns))


def _sparklines(
    session: Session, devices: dict[int, tuple[int, float | None]], now_ns: int, window_ns: int, step_s: int
) -> tuple[list[int], dict[int, FleetSparklines]]:
    """({device id: (GPU count, GPU memory total)} -> the bucket times, {device id: sparklines})."""
    spark_ts = _spark_times(now_ns, window_ns, step_s)
    if not devices or not spark_ts:
        return spark_ts, {d: FleetSparklines([], [], [], []) for d in devices}
    spark_index = {t: i for i, t in enumerate(spark_ts)}
    # One row per device and bucket, its GPUs aggregated in SQL (200 devices x 30 buckets, not
    # 900 GPUs x 30): mean utilisation, hottest GPU, and memory and power as the per-GPU mean
    # times the device's GPU count (their sum when every GPU reports, as they do).
    gpu_acc, _ = fetch_samples(
        session, GPU, list(devices), spark_ts[0], now_ns + 1, step_s, per_gpu=False,
        only=("util_avg", "memory_used_avg", "temp_max", "power_avg"),
    )  # fmt: skip

    def empty() -> list[float | None]:
        return [None] * len(spark_ts)

    out = {d: FleetSparklines(empty(), empty(), empty(), empty()) for d in devices}
    for (d, _gi, b), (_n, _span, v) in gpu_acc.items():
        i = spark_index.get(b)
        if i is None or d not in out:
            continue
        s = out[d]
        gpus, total = devices[d]
        gpus = max(1, gpus)
        mem = v["memory_used_avg"] * gpus if v["memory_used_avg"] is not None else None
        s.util[i] = v["util_avg"]
        s.mem_percent[i] = 100.0 * mem / total if mem is not None and total else None
        s.temp[i] = v["temp_max"]
        s.power[i] = v["power_avg"] * gpus if v["power_avg"] is not None else None
    return spark_ts, out


def _inventory_memory_total(inventory: dict | None) -> float | None:
    total = sum(float(g.get("memory_total_bytes") or 0) for g in (inventory or {}).get("gpus", []) or [])
    return total or None


def _memory_total(d: DeviceSummary) -> float | None:
    total = sum(float(g.get("memory_total_bytes") or 0) for g in (d.inventory or {}).get("gpus", []))
    return total or None


def _current(session: Session, ids: Sequence[int], lo: int, hi: int) -> dict[int, dict[str, float | None]]:
    """The newest reading of each device (and GPU) within [lo, hi).

    Read from ``gpu_latest`` / ``host_latest`` (one row per device and GPU, upserted with each
    batch), so the newest seconds show at once wherever the samples sit. A latest row newer than
    ``hi`` (a device whose clock runs ahead of the asked "now") says nothing of the window: that
    device's newest rows within it are read from the samples (tail and chunks) instead."""
    out: dict[int, dict[str, float | None]] = {}
    if not ids:
        return out
    ids = list(ids)
    # SQLite gets bounded IN lists; PostgreSQL one array parameter, all devices in one statement
    # (on Citus each statement fans out to every worker: 20 of them for 10,000 devices cost more
    # than the rows).
    batch = 500 if session.get_bind().dialect.name == "sqlite" else max(1, len(ids))
    gpu_cols = ("util_gpu_percent", "memory_used_bytes", "temp_c", "power_w")
    g = gpu_latest.c
    latest: dict[tuple[int, int], tuple] = {}
    ahead: set[int] = set()
    for start in range(0, len(ids), batch):
        q = select(g.device_id, g.gpu_index, g.ts_ns, *[g[c] for c in gpu_cols]).where(
            in_ids(g.device_id, ids[start : start + batch]), g.ts_ns >= lo
        )
        for row in session.execute(q).all():  # at once: not a fetch per row
            if row[2] >= hi:
                ahead.add(int(row[0]))
            else:
                latest[(int(row[0]), int(row[1]))] = tuple(row)
    if ahead:
        latest = {k: v for k, v in latest.items() if k[0] not in ahead}
        rows = read_samples(session, "gpu", sorted(ahead), lo, hi, columns=gpu_cols)
        for i in range(len(rows)):  # in time order: the last of each GPU is its newest
            key = (int(rows.device_id[i]), int(rows.gpu_index[i]))
            latest[key] = (*key, int(rows.ts_ns[i]), *[rows.value(c, i) for c in gpu_cols])
    per_device: dict[int, list[tuple]] = {}
    for (d, _gi), newest in latest.items():
        per_device.setdefault(d, []).append(newest)
    for d, rows_of in per_device.items():
        out[d] = {
            "util": mean_of(r[3] for r in rows_of),
            "mem": sum_of(r[4] for r in rows_of),
            "temp": max_of(r[5] for r in rows_of),
            "power": sum_of(r[6] for r in rows_of),
        }
    host_cols = ("cpu_percent", "mem_used_bytes", "mem_total_bytes")
    h = host_latest.c
    hosts: dict[int, tuple] = {}
    ahead = set()
    for start in range(0, len(ids), batch):
        q = select(h.device_id, h.ts_ns, *[h[c] for c in host_cols]).where(
            in_ids(h.device_id, ids[start : start + batch]), h.ts_ns >= lo
        )
        for hrow in session.execute(q).all():
            if hrow[1] >= hi:
                ahead.add(int(hrow[0]))
            else:
                hosts[int(hrow[0])] = tuple(hrow)
    if ahead:
        hrows = read_samples(session, "host", sorted(ahead), lo, hi, columns=host_cols)
        for i in range(len(hrows)):
            d = int(hrows.device_id[i])
            hosts[d] = (d, int(hrows.ts_ns[i]), *[hrows.value(c, i) for c in host_cols])
    for d, newest in hosts.items():
        out.setdefault(d, {}).update({"cpu": newest[2], "host_mem": newest[3], "host_mem_total": newest[4]})
    return out
