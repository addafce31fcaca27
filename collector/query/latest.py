"""The latest reading of every device, and the fleet's health at a glance.

``latest_readings`` is what an exporter needs (``/metrics/fleet``): per device its newest GPU
sample (every GPU of the device's newest sample time), the newest GPU state (memory total, ECC,
retired pages...), the newest host sample and the newest Jetson metric points, plus incident and
Xid tallies. The newest samples are the rows of ``gpu_latest`` / ``host_latest`` (revision 0011:
the writer upserts each batch's newest row per device and GPU there, in the batch's
transaction, and never over a newer one), so they are there at once wherever the samples
themselves sit (chunks, the tail). The other "newest" reads are one index seek per device (a
correlated ``max(ts_ns)`` on the ``(device_id, ts_ns)`` indexes), never a scan of a window, so
1,000 devices cost a few queries whatever the table sizes.

``fleet_health`` is what ``fleetscope status`` shows: devices online and offline, the recent
ingest rate, how far the rollup and detector jobs are behind the data, the spool depths the
agents report, the database's size and open incidents.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from sqlalchemy import BigInteger, Engine, and_, bindparam, case, cast, func, select, text, tuple_
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session

from fleetscope.collector.gc_pause import builds_with_paused_gc, paused_gc
from fleetscope.collector.query._common import is_pass_key, last_passes
from fleetscope.collector.query.devices import (
    ONLINE_WITHIN_NS,
    STATE_OFFLINE,
    STATE_ONLINE,
    STATE_STOPPED,
    liveness,
    offline_rule,
)
from fleetscope.collector.storage.id_lists import in_ids
from fleetscope.collector.storage.rollup_schema import rollup_progress
from fleetscope.collector.storage.schema import (
    GPU_SAMPLE_COLUMNS,
    GPU_STATE_COLUMNS,
    HOST_VALUE_COLUMNS,
    Device,
    Incident,
    detector_progress,
    gpu_latest,
    gpu_state,
    host_latest,
    ingested_batches,
    metric_points,
)
from fleetscope.proto.vocabulary import DEVICE_KIND_JETSON, KIND_GPU_XID

NS = 10**9

# The Jetson metric points the agent's sysfs and tegrastats samplers write (agent/samplers/).
JETSON_POINT_NAMES = (
    "jetson.power_mw",
    "jetson.power_avg_mw",
    "jetson.temp_c",
    "jetson.fan_percent",
    "jetson.emc_mhz",
    "jetson.emc_load_percent",
    "jetson.engine_mhz",
    "jetson.jetson_clocks",
    "jetson.nvpmodel_id",
)


@dataclass(frozen=True)
class GpuIdentity:
    index: int
    name: str
    uuid: str
    pci_bus_id: str
    memory_total_bytes: int | None


@dataclass(frozen=True)
class LatestDevice:
    name: str
    agent_id: str
    kind: str
    hostname: str
    labels: dict[str, str]
    online: bool
    last_seen_ns: int
    driver_version: str
    gpus: list[GpuIdentity]
    clock_skew_ns: int
    counters: dict[str, Any]  # as the agent last reported them (spool depth, drops, ...)
    state: str = STATE_ONLINE  # online, offline or stopped (query.devices.liveness)


@dataclass(frozen=True)
class GpuReading:
    device: str
    gpu_index: int
    ts_ns: int
    values: dict[str, float | None]  # GPU_SAMPLE_COLUMNS, and GPU_STATE_COLUMNS from the newest state row


@dataclass(frozen=True)
class HostReading:
    device: str
    ts_ns: int
    values: dict[str, float | None]  # HOST_VALUE_COLUMNS


@dataclass(frozen=True)
class PointReading:
    device: str
    name: str
    labels: dict[str, str]
    ts_ns: int
    value: float


@dataclass(frozen=True)
class IncidentTally:
    device: str
    kind: str
    severity: str
    occurrences: int  # every report folded into the incidents (their ``count``), resolved ones too
    open: int  # incidents not resolved


@dataclass(frozen=True)
class XidTally:
    device: str
    gpu_index: int | None
    xid: int
    occurrences: int
    last_seen_ns: int


@dataclass(frozen=True)
class LatestReadings:
    now_ns: int
    fresh_within_ns: int
    devices: list[LatestDevice]
    gpus: list[GpuReading]
    hosts: list[HostReading]
    points: list[PointReading]
    incidents: list[IncidentTally]
    xids: list[XidTally]


def _newest(session: Session, table: Any, ids: list[int], *extra: Any) -> dict[int, int]:
    """{device id: its newest ts_ns in ``table``} (one index seek per device). Citus refuses a
    subquery correlated with a reference table (``devices``): there the devices' rows are
    grouped, each worker reading its devices' index entries."""
    if not ids:
        return {}
    from fleetscope.collector.storage.citus import is_citus

    if is_citus(session.connection()):
        grouped = (
            select(table.c.device_id, func.max(table.c.ts_ns))
            .where(in_ids(table.c.device_id, ids), *extra)
            .group_by(table.c.device_id)
        )
        return {int(d): int(ts) for d, ts in session.execute(grouped).all() if ts is not None}
    newest = (
        select(func.max(table.c.ts_ns)).where(table.c.device_id == Device.id, *extra).correlate(Device).scalar_subquery()
    )
    rows = session.execute(select(Device.id, newest).where(in_ids(Device.id, ids))).all()
    return {int(d): int(ts) for d, ts in rows if ts is not None}


def _rows_at(session: Session, table: Any, newest: dict[int, int], *extra: Any) -> list[Any]:
    """The rows at each device's time in ``newest``: ``(device_id, ts_ns) IN (...)``, one bound
    list per statement (an OR of a clause per device cost more to build than to run: 5,000
    Jetsons times the nine point names), which the database runs as an index seek per pair."""
    if not newest:
        return []
    pairs = list(newest.items())
    if session.get_bind().dialect.name == "postgresql":
        # A join with the pairs unnested from two array parameters: an index seek per pair, and
        # a plan made once. ``(device_id, ts_ns) IN (...)`` is planned as an OR of one arm per
        # pair, and PostgreSQL's planning time grows with the square of the arms (500: 0.2 s,
        # 2,000: 2.8 s), nine times over for the nine Jetson point names.
        k = (
            func.unnest(
                cast(bindparam("newest_ids", [d for d, _ in pairs]), ARRAY(BigInteger)),
                cast(bindparam("newest_ts", [t for _, t in pairs]), ARRAY(BigInteger)),
            )
            .table_valued("device_id", "ts_ns")
            .render_derived(name="newest")
        )
        q = select(table).join(k, and_(table.c.device_id == k.c.device_id, table.c.ts_ns == k.c.ts_ns)).where(*extra)
        return list(session.execute(q).all())
    key = tuple_(table.c.device_id, table.c.ts_ns)
    out: list[Any] = []
    for i in range(0, len(pairs), 500):  # bounded statements
        out.extend(session.execute(select(table).where(*extra).where(key.in_(pairs[i : i + 500]))).all())
    return out


def _latest_rows(session: Session, table: Any, ids: list[int]) -> list[Any]:
    """The rows of a latest table (``gpu_latest``, ``host_latest``: one per device, and GPU) of
    the devices: a primary-key read, whatever the sample tables hold."""
    out: list[Any] = []
    # Bounded IN lists on SQLite; one array parameter on PostgreSQL (on Citus a statement fans out
    # to every worker: one for the fleet, not one per 500 devices).
    batch = 500 if session.get_bind().dialect.name == "sqlite" else max(1, len(ids))
    for i in range(0, len(ids), batch):
        out.extend(session.execute(select(table).where(in_ids(table.c.device_id, ids[i : i + batch]))).all())
    return out


def _newest_point_rows(session: Session, ids: list[int], names: Sequence[str]) -> list[Any]:
    """The ``metric_points`` rows of each name at its device's newest time for that name."""
    if not ids:
        return []
    from fleetscope.collector.storage.citus import is_citus

    if not is_citus(session.connection()):
        out: list[Any] = []
        for name in names:  # an index seek per device (a correlated max) for each name
            cond = metric_points.c.name == name
            out.extend(_rows_at(session, metric_points, _newest(session, metric_points, ids, cond), cond))
        return out
    # Citus reads all the devices' rows of a name on the workers anyway (see ``_newest``): one
    # statement ranks every name's rows there (a window by device: pushed down to each shard),
    # where two per name each went to every worker.
    mp = metric_points.c
    ranked = (
        select(
            metric_points,
            func.rank().over(partition_by=(mp.device_id, mp.name), order_by=mp.ts_ns.desc()).label("newest_first"),
        )
        .where(in_ids(mp.device_id, ids), mp.name.in_(list(names)))
        .subquery()
    )
    return list(session.execute(select(*[ranked.c[c.name] for c in metric_points.columns]).where(ranked.c.newest_first == 1)).all())


def _values_getter(table: Any, columns: Sequence[str]) -> Callable[[Any], tuple[Any, ...]]:
    """The values of ``columns``, in that order, from a row of ``select(table)`` (whose columns
    are the table's, in order)."""
    position = {c.name: i for i, c in enumerate(table.columns)}
    get = itemgetter(*[position[c] for c in columns])
    if len(columns) == 1:
        return lambda row: (get(row),)
    return get


def _newest_gpu_rows(session: Session, ids: list[int]) -> list[Any]:
    """Every GPU's reading at its device's newest GPU sample time (a GPU that stopped reporting
    keeps an older ``gpu_latest`` row; it is not "now" and is left out, as the samples at the
    device's newest time leave it out)."""
    rows = _latest_rows(session, gpu_latest, ids)
    newest: dict[int, int] = {}
    for r in rows:
        newest[int(r.device_id)] = max(newest.get(int(r.device_id), int(r.ts_ns)), int(r.ts_ns))
    return [r for r in rows if int(r.ts_ns) == newest[int(r.device_id)]]


def _device_part(session: Session, now_ns: int) -> tuple[list[LatestDevice], dict[int, str]]:
    """Every device, by name: its identity, labels, inventory and liveness; and {id: name}."""
    rule = offline_rule(session)
    names: dict[int, str] = {}
    columns = (Device.id, Device.name, Device.agent_id, Device.kind, Device.hostname, Device.labels, Device.inventory,
               Device.last_seen_ns, Device.counters, Device.clock_skew_ns)  # fmt: skip
    devices: list[LatestDevice] = []
    for d in session.execute(select(*columns).order_by(Device.name)).all():  # rows at once, not ORM objects: 10,000
        inv = d.inventory or {}
        gpus = [
            GpuIdentity(
                index=int(g.get("index", i)), name=str(g.get("name", "")), uuid=str(g.get("uuid", "")),
                pci_bus_id=str(g.get("pci_bus_id", "")), memory_total_bytes=int(g["memory_total_bytes"]) if g.get("memory_total_bytes") else None,
            )
            for i, g in enumerate(inv.get("gpus", []) or [])
        ]  # fmt: skip
        state = liveness(last_seen_ns=d.last_seen_ns, now_ns=now_ns, inventory=inv, counters=d.counters, rule=rule)
        devices.append(
            LatestDevice(
                name=d.name, agent_id=d.agent_id, kind=d.kind, hostname=d.hostname, labels=dict(d.labels or {}),
                online=state == STATE_ONLINE, last_seen_ns=d.last_seen_ns, driver_version=str(inv.get("driver_version", "") or ""),
                gpus=gpus, clock_skew_ns=d.clock_skew_ns, counters=dict(d.counters or {}), state=state,
            )
        )  # fmt: skip
        names[int(d.id)] = d.name
    return devices, names


def _gpu_part(session: Session, fresh: list[int]) -> list[tuple[int, int, int, dict[str, float | None]]]:
    """(device id, GPU index, time, values) of every GPU at its device's newest GPU sample time,
    with the newest GPU state's values."""
    gpu_rows = _newest_gpu_rows(session, fresh)
    pairs = {(int(r.device_id), int(r.gpu_index)) for r in gpu_rows}
    states: dict[tuple[int, int], Any] = {}
    if pairs:
        newest_state = (
            select(gpu_state.c.device_id, gpu_state.c.gpu_index, func.max(gpu_state.c.ts_ns).label("ts"))
            .where(in_ids(gpu_state.c.device_id, sorted({d for d, _ in pairs})))
            .group_by(gpu_state.c.device_id, gpu_state.c.gpu_index)
            .subquery()
        )
        q = select(gpu_state).join(
            newest_state,
            and_(
                gpu_state.c.device_id == newest_state.c.device_id,
                gpu_state.c.gpu_index == newest_state.c.gpu_index,
                gpu_state.c.ts_ns == newest_state.c.ts,
            ),
        )
        for r in session.execute(q).all():  # fetched at once: a row at a time cost 45,000 fetches
            states[(int(r.device_id), int(r.gpu_index))] = r
    # Values by position (one C-level getter per row), not an attribute lookup per column:
    # 45,000 GPUs times 32 columns is 1.4 million lookups a scrape.
    sample_values = _values_getter(gpu_latest, GPU_SAMPLE_COLUMNS)
    state_values = _values_getter(gpu_state, GPU_STATE_COLUMNS)
    no_state = dict.fromkeys(GPU_STATE_COLUMNS)
    out = []
    for r in gpu_rows:
        values: dict[str, float | None] = dict(zip(GPU_SAMPLE_COLUMNS, sample_values(r)))
        st = states.get((int(r.device_id), int(r.gpu_index)))
        values.update(zip(GPU_STATE_COLUMNS, state_values(st)) if st is not None else no_state)
        out.append((int(r.device_id), int(r.gpu_index), int(r.ts_ns), values))
    return out


def _host_part(session: Session, fresh: list[int]) -> list[tuple[int, int, dict[str, float | None]]]:
    """(device id, time, values) of every fresh device's newest host sample."""
    host_values = _values_getter(host_latest, HOST_VALUE_COLUMNS)
    return [(int(r.device_id), int(r.ts_ns), dict(zip(HOST_VALUE_COLUMNS, host_values(r))))
            for r in _latest_rows(session, host_latest, fresh)]


def _point_part(session: Session, jetsons: list[int]) -> list[tuple[int, str, dict[str, str], int, float]]:
    """(device id, name, labels, time, value) of each Jetson's newest metric points."""
    out = []
    parsed: dict[str, dict[str, str]] = {}  # a few label sets repeat over every Jetson: parsed once each
    for r in _newest_point_rows(session, jetsons, JETSON_POINT_NAMES):
        text_ = r.labels or "{}"
        labels = parsed.get(text_)
        if labels is None:
            try:
                labels = {str(k): str(v) for k, v in json.loads(text_).items()}
            except (ValueError, AttributeError):
                labels = {}
            parsed[text_] = labels
        out.append((int(r.device_id), str(r.name), labels, int(r.ts_ns), float(r.value)))
    return out


def _incident_part(session: Session) -> tuple[list[tuple[int, str, str, int, int]], list[tuple[int, int | None, int, int, int]]]:
    """Incident tallies (device id, kind, severity, occurrences, open) and Xid tallies (device
    id, GPU, Xid, occurrences, last seen)."""
    q = select(
        Incident.device_id, Incident.kind, Incident.severity,
        func.sum(Incident.count), func.sum(case((Incident.state != "resolved", 1), else_=0)),
    ).group_by(Incident.device_id, Incident.kind, Incident.severity)  # fmt: skip
    tallies = [(int(d), kind, sev, int(n or 0), int(n_open or 0)) for d, kind, sev, n, n_open in session.execute(q)]
    by_xid = (
        select(Incident.device_id, Incident.gpu_index, Incident.group_key, func.sum(Incident.count), func.max(Incident.last_seen_ns))
        .where(Incident.kind == KIND_GPU_XID)
        .group_by(Incident.device_id, Incident.gpu_index, Incident.group_key)
    )
    xids = []
    for d, gi, key, n, last in session.execute(by_xid):
        prefix, _, code = (key or "").partition(":")
        if prefix == "xid" and code.isdigit():
            xids.append((int(d), gi, int(code), int(n or 0), int(last or 0)))
    return tallies, xids


# Runs a part with a session of its own (``latest_readings``' ``run_apart``): returns its future.
RunApart = Callable[[Callable[[Session], Any]], Future[Any]]


@contextmanager
def parallel_parts(engine: Engine, workers: int = 4) -> Iterator[RunApart]:
    """``latest_readings``' ``run_apart``: each part in a thread of a pool, with a session of
    its own on ``engine`` (a connection from its pool). For a server database; SQLite gains
    nothing from it."""
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fleetscope-latest") as pool:

        def run(part: Callable[[Session], Any]) -> Future[Any]:
            def in_a_session() -> Any:
                with paused_gc(), Session(engine) as own:
                    return part(own)

            return pool.submit(in_a_session)

        yield run


@builds_with_paused_gc  # 45,000 GPU readings at 10,000 devices
def latest_readings(
    *, session: Session, now_ns: int, fresh_within_ns: int = ONLINE_WITHIN_NS, incidents: bool = True,
    run_apart: RunApart | None = None,
) -> LatestReadings:
    """Every device, and the newest readings of those heard from within ``fresh_within_ns``
    (an exporter shows what is current, not a reading from a device gone for a week).

    With ``run_apart`` (``parallel_parts``), the reads after the first (devices, GPUs, hosts,
    Jetson points, incidents) run at once, each in a session of its own: one read's database
    work (on Citus, on the coordinator and every worker) goes on while another's rows are
    decoded here. They read from separate snapshots, milliseconds apart."""
    since = now_ns - fresh_within_ns
    fresh_rows = session.execute(select(Device.id, Device.kind).where(Device.last_seen_ns >= since)).all()
    fresh = sorted(int(d) for d, _ in fresh_rows)
    jetsons = sorted(int(d) for d, kind in fresh_rows if kind == DEVICE_KIND_JETSON)

    def at_once(part: Callable[[Session], Any]) -> Callable[[], Any]:
        if run_apart is None:
            result = part(session)
            return lambda: result
        return run_apart(part).result

    # The slowest reads first: the others' database work overlaps their decoding.
    gpus_of = at_once(lambda s: _gpu_part(s, fresh))
    devices_of = at_once(lambda s: _device_part(s, now_ns))
    hosts_of = at_once(lambda s: _host_part(s, fresh))
    points_of = at_once(lambda s: _point_part(s, jetsons))
    incidents_of = at_once(_incident_part) if incidents else (lambda: ([], []))
    devices, names = devices_of()

    gpus_out = [GpuReading(device=names[d], gpu_index=gi, ts_ns=ts, values=values)
                for d, gi, ts, values in sorted(gpus_of(), key=lambda g: (names[g[0]], g[1])) if d in names]
    hosts_out = [HostReading(device=names[d], ts_ns=ts, values=values)
                 for d, ts, values in sorted(hosts_of(), key=lambda h: names[h[0]]) if d in names]
    points_out = [PointReading(device=names[d], name=name, labels=dict(labels), ts_ns=ts, value=value)
                  for d, name, labels, ts, value in points_of() if d in names]
    points_out.sort(key=lambda p: (p.device, p.name, sorted(p.labels.items())))
    incident_rows, xid_rows = incidents_of()
    tallies = sorted((IncidentTally(device=names[d], kind=kind, severity=sev, occurrences=n, open=n_open)
                      for d, kind, sev, n, n_open in incident_rows if d in names),
                     key=lambda t: (t.device, t.kind, t.severity))
    xids = sorted((XidTally(device=names[d], gpu_index=gi, xid=xid, occurrences=n, last_seen_ns=last)
                   for d, gi, xid, n, last in xid_rows if d in names),
                  key=lambda x: (x.device, -1 if x.gpu_index is None else x.gpu_index, x.xid))
    return LatestReadings(
        now_ns=now_ns, fresh_within_ns=fresh_within_ns, devices=devices, gpus=gpus_out, hosts=hosts_out,
        points=points_out, incidents=tallies, xids=xids,
    )  # fmt: skip


# -- the fleet's health --------------------------------------------------------------------------


@dataclass(frozen=True)
class JobLag:
    job: str  # "rollup" (minute rollups) or "detector:<name>"
    lag_s: float | None  # how far its progress is behind the newest data, worst device heard from recently
    device: str  # the device furthest behind ("" when none)


@dataclass(frozen=True)
class FleetHealth:
    now_ns: int
    devices: int
    online: int
    offline: list[str]
    rows_per_min: float  # sample rows stored over the last ``rate_window_s``
    batches_per_min: float
    rate_window_s: float
    lags: list[JobLag]
    spools: dict[str, dict[str, int]] = field(default_factory=dict)  # device -> {batches, bytes} as reported, non-empty ones
    database_bytes: int | None = None
    open_incidents: dict[str, int] = field(default_factory=dict)  # severity -> open incidents
    stopped: list[str] = field(default_factory=list)  # devices whose agents said they stopped cleanly


def fleet_health(*, session: Session, now_ns: int, rate_window_s: float = 300.0, recent_ns: int = 600 * NS) -> FleetHealth:
    """Devices online/offline, the recent ingest rate, job lag, reported spools, size, open incidents."""
    rows = session.execute(select(Device.id, Device.name, Device.last_seen_ns, Device.counters, Device.inventory)).all()
    rule = offline_rule(session)
    states = {r.id: liveness(last_seen_ns=r.last_seen_ns, now_ns=now_ns, inventory=r.inventory, counters=r.counters,
                             rule=rule) for r in rows}
    online = [r for r in rows if states[r.id] == STATE_ONLINE]
    offline = sorted(r.name for r in rows if states[r.id] == STATE_OFFLINE)
    stopped = sorted(r.name for r in rows if states[r.id] == STATE_STOPPED)
    since = now_ns - int(rate_window_s * NS)
    n_batches, n_rows = session.execute(
        select(func.count(), func.coalesce(func.sum(ingested_batches.c.rows), 0)).where(ingested_batches.c.received_ns >= since)
    ).one()
    minutes = rate_window_s / 60.0
    lags = job_lags(session=session, now_ns=now_ns, recent_ns=recent_ns)
    spools = {}
    for r in rows:
        c = r.counters or {}
        if int(c.get("spool_batches", 0) or 0) > 0:
            spools[r.name] = {"batches": int(c.get("spool_batches", 0) or 0), "bytes": int(c.get("spool_bytes", 0) or 0)}
    open_by_sev = {
        str(sev): int(n)
        for sev, n in session.execute(
            select(Incident.severity, func.count()).where(Incident.state != "resolved").group_by(Incident.severity)
        )
    }
    return FleetHealth(
        now_ns=now_ns, devices=len(rows), online=len(online), offline=offline,
        rows_per_min=float(n_rows) / minutes, batches_per_min=float(n_batches) / minutes, rate_window_s=rate_window_s,
        lags=lags, spools=dict(sorted(spools.items())), database_bytes=database_bytes(session=session),
        open_incidents=dict(sorted(open_by_sev.items())), stopped=stopped,
    )  # fmt: skip


def job_lags(*, session: Session, now_ns: int, recent_ns: int = 600 * NS) -> list[JobLag]:
    """How far the rollup job (minute rollups) and each detector are behind the data.

    ``rollup``: the worst device heard from within ``recent_ns``, its newest data minus the end
    of its newest minute rolled up (a minute is rolled once it is over: about 60-120 s normally).
    ``detector:<name>``: now minus the detector's last complete pass (its oldest share's), the
    age of the newest data it has looked at for every device: about the pass interval normally,
    growing when its passes stop or cannot keep up. Not a device's data minus the detector's mark
    for it: a detector moves a device's mark only when it reads rows of its own (GPU detectors
    never do on a GPU-less device), so that difference grew for ever on a healthy collector."""
    by_id = {int(r.id): r for r in session.execute(select(Device.id, Device.name, Device.last_seen_ns))}
    recent = {i: r for i, r in by_id.items() if now_ns - r.last_seen_ns <= recent_ns}
    lags: list[JobLag] = []
    marks = {int(d): int(u) for d, u in session.execute(
        select(rollup_progress.c.device_id, rollup_progress.c.rolled_until_ns).where(rollup_progress.c.step_s == 60)
    )}  # fmt: skip
    lags.append(_worst("rollup", recent, marks))
    p = detector_progress.c
    passes = last_passes(session.execute(select(p.detector, p.key, p.until_ns).where(p.device_id == 0, is_pass_key(p.key))))
    for det, until in sorted(passes.items()):
        lags.append(JobLag(job=f"detector:{det}", lag_s=max(0.0, (now_ns - int(until)) / NS), device=""))
    return lags


def _worst(job: str, devices: dict[int, Any], marks: dict[int, int]) -> JobLag:
    worst: tuple[float, str] | None = None
    for i, r in devices.items():
        mark = marks.get(i)
        lag = (r.last_seen_ns - mark) / NS if mark is not None else None
        if lag is None:
            continue
        lag = max(0.0, lag)
        if worst is None or lag > worst[0]:
            worst = (lag, r.name)
    return JobLag(job=job, lag_s=None if worst is None else worst[0], device="" if worst is None else worst[1])


def database_bytes(*, session: Session) -> int | None:
    """The database's size on disk (SQLite: pages in use x page size; PostgreSQL: pg_database_size)."""
    dialect = session.get_bind().dialect.name
    try:
        if dialect == "sqlite":
            pages = session.execute(text("PRAGMA page_count")).scalar()
            size = session.execute(text("PRAGMA page_size")).scalar()
            return int(pages) * int(size) if pages is not None and size is not None else None
        if dialect == "postgresql":
            v = session.execute(text("SELECT pg_database_size(current_database())")).scalar()
            return int(v) if v is not None else None
    except Exception:  # not allowed to ask (permissions): the size is simply unknown
        return None
    return None


__all__ = [
    "JETSON_POINT_NAMES",
    "FleetHealth",
    "GpuIdentity",
    "GpuReading",
    "HostReading",
    "IncidentTally",
    "JobLag",
    "LatestDevice",
    "LatestReadings",
    "PointReading",
    "XidTally",
    "database_bytes",
    "job_lags",
    "fleet_health",
    "latest_readings",
    "parallel_parts",
]
