"""The retention job: deletes what is older than its tier keeps, without blocking ingest.

Tiers (``RetentionSettings``; the collector's ``--retention raw=7d,minute=90d,...``):

| tier | default | tables |
| --- | --- | --- |
| ``raw`` | 7 days | ``gpu_samples``, ``host_samples`` (the tail), ``gpu_chunks``, ``host_chunks``, ``metric_points``, ``latency_histograms``; ``gpu_state`` rows superseded before the cutoff; ``ingested_batches`` (the exactly-once claims), by when the batch was received |
| ``minute`` | 90 days | minute rollups (``gpu_rollups``, ``host_rollups``, ``latency_rollups`` at step 60) |
| ``hour`` | 2 years | hour rollups (step 3600) |
| ``day`` | 5 years | day rollups (step 86400) |
| ``incidents`` | 2 years | resolved incidents, by when they ended (last seen); open ones are never deleted; the samples kept around them (``incident_*_samples``) |
| ``logs`` | 30 days | ``log_events``: chatty, and the incident keeps its own excerpt |
| ``alerts`` | 1 year | resolved alerts, their notifications and delivery attempts |

A tier set to ``off`` keeps its data for ever. ``ingested_batches`` (the exactly-once claims)
follows the raw tier: with it ``off``, the claims are kept for ever too.

How it stays off ingest's way:

* **PostgreSQL**: the time-series tables are partitioned by day (``storage.partitions``); a
  day whose every row is older than the cutoff is one ``DROP TABLE`` (no row-by-row delete, no
  vacuum). A day that straddles the cutoff waits until it is wholly older (data lives up to a
  day past its tier). Rows in the default partition (late or far-future rows) and tables that
  are not partitioned are deleted in batches, as on SQLite.
* **SQLite**: deletes of at most ``batch_rows`` rows per statement, per device (so each finds
  its rows by the (device, time) index), each its own short transaction under the writers'
  lock (``write_lock``), so the ingest writer waits at most one batch.

The samples around each incident stay as long as the incident: before the raw tier removes
anything, the rows of each kept incident's context window (``query.context``: from
``before_s`` before its start to ``after_s`` after its last occurrence, the span capped at
``max_span_s``) are copied, read through the same readers the incident page uses (tail and
chunks alike), into ``incident_host_samples`` / ``incident_gpu_samples``; the incident page
reads them there once the raw rows are gone. They are deleted with the incident tier.

One collector at a time runs it, under the ``retention`` lease, renewed in each transaction.
``ensure_partitions_ahead`` runs at every pass of every collector (it is idempotent).
"""

from __future__ import annotations

import functools
import json
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from sqlalchemy import Connection, Engine, text
from sqlalchemy.orm import Session

from fleetscope.collector.storage.lease import Lease, LeaseLost, default_owner
from fleetscope.collector.storage.partitions import (
    LOCK_TIMEOUT,
    default_partition_name,
    ensure_partitions_ahead,
    is_partitioned,
    partitions_of,
)
from fleetscope.collector.storage.schema import (
    GPU_SAMPLE_COLUMNS,
    HOST_VALUE_COLUMNS,
)
from fleetscope.collector.storage.write_lock import WriteLock

log = logging.getLogger(__name__)

LEASE_NAME = "retention"
NS = 10**9
DAY_S = 86_400
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": DAY_S, "w": 7 * DAY_S, "y": 365 * DAY_S}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdwy])$")


@dataclass(frozen=True)
class RetentionSettings:
    """How long each tier keeps its data, in seconds; None keeps it for ever."""

    raw_s: float | None = 7 * DAY_S
    minute_s: float | None = 90 * DAY_S
    hour_s: float | None = 730 * DAY_S
    day_s: float | None = 5 * 365 * DAY_S  # a day row per GPU is small: years of trends for little
    incidents_s: float | None = 730 * DAY_S
    logs_s: float | None = 30 * DAY_S
    alerts_s: float | None = 365 * DAY_S
    interval_s: float = 600.0  # between passes
    # The first pass waits this long after the collector starts: a start (or a restart loop)
    # is not held up by a pass over a large database.
    start_delay_s: float = 60.0
    batch_rows: int = 5_000  # rows per delete statement (one short transaction each)
    days_ahead: int = 2  # PostgreSQL partitions created ahead of today

    @property
    def days_behind(self) -> int:
        """Past days given partitions: those the raw tier keeps (a spooled backlog lands there)."""
        return 0 if self.raw_s is None else int(-(-self.raw_s // DAY_S))
    # The incident context window (query.context's defaults): what is kept around each incident.
    context_before_s: float = 60.0
    context_after_s: float = 60.0
    context_max_span_s: float = 3600.0


TIERS = ("raw", "minute", "hour", "day", "incidents", "logs", "alerts")


def parse_duration(value: str) -> float | None:
    """'7d', '90d', '2y', '12h', '30m', '45s', '1w' -> seconds; 'off' -> None (kept for ever)."""
    v = value.strip().lower()
    if v in ("off", "never", "forever"):
        return None
    m = _DURATION.match(v)
    if m is None or float(m.group(1)) <= 0:
        raise ValueError(f"{value!r} is not a duration: use a number and a unit (s, m, h, d, w, y), e.g. 7d, or 'off'")
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse_retention(spec: str, base: RetentionSettings | None = None) -> RetentionSettings:
    """``raw=7d,minute=90d,hour=2y,day=5y,incidents=2y,logs=30d,alerts=1y`` (any subset) over ``base``;
    ValueError with one line naming what is wrong."""
    settings = base or RetentionSettings()
    changes: dict[str, float | None] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        tier, sep, value = part.partition("=")
        tier = tier.strip().lower()
        if not sep or tier not in TIERS:
            raise ValueError(f"--retention: {part!r}: expected TIER=DURATION with TIER one of {', '.join(TIERS)}")
        try:
            changes[f"{tier}_s"] = parse_duration(value)
        except ValueError as exc:
            raise ValueError(f"--retention {tier}: {exc}") from None
    return replace(settings, **changes)  # type: ignore[arg-type]


def describe(settings: RetentionSettings) -> str:
    def fmt(s: float | None) -> str:
        if s is None:
            return "off"
        for unit, n in (("y", 365 * DAY_S), ("d", DAY_S), ("h", 3600), ("m", 60)):
            if s >= n and s % n == 0:
                return f"{int(s // n)}{unit}"
        return f"{s:g}s"

    return ",".join(f"{t}={fmt(getattr(settings, f'{t}_s'))}" for t in TIERS)


@dataclass
class RetentionReport:
    ran: bool
    holder: str
    deleted: dict[str, int] = field(default_factory=dict)  # rows deleted per table
    dropped: dict[str, int] = field(default_factory=dict)  # partitions dropped per table
    kept: int = 0  # sample rows copied to the incident keep tables this pass
    partitions_created: list[str] = field(default_factory=list)
    seconds: float = 0.0


# (table, time key, end column or None): the raw tier. A row goes when its end is older too.
_RAW = (
    ("gpu_samples", "ts_ns", None),
    ("host_samples", "ts_ns", None),
    ("gpu_chunks", "start_ns", "end_ns"),
    ("host_chunks", "start_ns", "end_ns"),
    ("metric_points", "ts_ns", None),
    ("latency_histograms", "start_ns", "end_ns"),
)
_ROLLUPS = ("gpu_rollups", "host_rollups", "latency_rollups")


class RetentionJob:
    """Enforces the tiers on a thread (``start``/``stop``) or on demand (``run_once``)."""

    def __init__(
        self,
        engine: Engine,
        settings: RetentionSettings | None = None,
        *,
        owner: str | None = None,
        lease_s: float = 300.0,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.engine = engine
        self.settings = settings or RetentionSettings()
        self.owner = owner or default_owner()
        self.lease = Lease(engine, LEASE_NAME, self.owner, ttl_s=lease_s, clock=clock)
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._write_lock = WriteLock(engine)
        self._sqlite = engine.dialect.name == "sqlite"
        self.last_report: RetentionReport | None = None
        self._kept_until_ns: int | None = None  # incidents whose window ends before this were kept already
        self._column_cache: dict[str, set[str]] = {}
        self._devices: list[int] = []
        self._tables: set[str] = set()
        self._citus_keys: dict[str, str] = {}  # on Citus: the unique key of each distributed table that has one

    # -- thread ----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="fleetscope-retention", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.lease.release()

    def _loop(self) -> None:
        if self._stop.wait(self.settings.start_delay_s):
            return
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception as exc:  # the database away, a lock timeout: the next pass tries again
                log.warning("retention pass failed: %s", exc)
            self._stop.wait(self.settings.interval_s)

    # -- one pass --------------------------------------------------------------------------

    def run_once(self, now_ns: int | None = None) -> RetentionReport:
        started = time.monotonic()
        now_ns = self._clock() if now_ns is None else now_ns
        created = ensure_partitions_ahead(self.engine, now_ns, self.settings.days_ahead, days_behind=self.settings.days_behind)
        if not self.lease.acquire(now_ns):
            return RetentionReport(ran=False, holder=self.lease.holder(now_ns) or "?", partitions_created=created)
        report = RetentionReport(ran=True, holder=self.owner, partitions_created=created)
        s = self.settings
        try:
            with self.engine.connect() as conn:
                self._devices = [int(d) for d in conn.execute(text("SELECT id FROM devices ORDER BY id")).scalars()]
                self._tables = set(self._table_names(conn))
                self._citus_keys = _citus_keys(conn)
            if s.raw_s is not None:
                raw_cutoff = now_ns - int(s.raw_s * NS)
                incident_cutoff = None if s.incidents_s is None else now_ns - int(s.incidents_s * NS)
                report.kept = self._keep_incident_context(raw_cutoff, incident_cutoff)
                for table, key, end in _RAW:
                    if table in self._tables:
                        self._purge(table, key, end, raw_cutoff, report)
                self._purge_gpu_state(raw_cutoff, report)
                self._purge_claims(raw_cutoff, report)
            if s.logs_s is not None:
                self._purge("log_events", "ts_ns", None, now_ns - int(s.logs_s * NS), report)
            for step, tier_s in ((60, s.minute_s), (3600, s.hour_s), (86400, s.day_s)):
                if tier_s is not None:
                    for table in _ROLLUPS:
                        self._purge(table, "bucket_ns", None, now_ns - int(tier_s * NS), report, where=f"step_s = {step}")
            if s.incidents_s is not None:
                self._purge_incidents(now_ns - int(s.incidents_s * NS), report)
            if s.alerts_s is not None:
                self._purge_alerts(now_ns - int(s.alerts_s * NS), report)
        except LeaseLost:
            log.info("retention lease lost; stopping this pass")
        report.seconds = time.monotonic() - started
        self.last_report = report
        return report

    @staticmethod
    def _table_names(conn: Connection) -> list[str]:
        from sqlalchemy import inspect

        return list(inspect(conn).get_table_names())

    # -- transactions ------------------------------------------------------------------------

    def _txn(self, work: Callable[[Connection], int]) -> int:
        """One short transaction that renews the lease; under the writers' lock on SQLite."""
        with self._write_lock, self.engine.begin() as conn:
            self.lease.renew_in(conn)
            return work(conn)

    def _batched(self, sql: str, params: dict, report: RetentionReport, table: str) -> None:
        """Run a bounded DELETE until it deletes fewer than a batch."""
        while not self._stop.is_set():
            n = self._txn(lambda conn: int(conn.execute(text(sql), params).rowcount or 0))
            report.deleted[table] = report.deleted.get(table, 0) + n
            if n < self.settings.batch_rows:
                return

    def _bounded_delete(self, table: str, condition: str, *, one_device: bool = False) -> str:
        """A DELETE of at most ``batch_rows`` rows of ``table`` matching ``condition``;
        ``one_device``: ``condition`` holds ``device_id = :d``.

        On PostgreSQL the rows are found by ``ctid``. Citus plans that only for a statement routed
        to one device's worker: a device's delete says its device in the outer WHERE too, and a
        delete over every device (claims, incidents) names the rows by their unique key instead."""
        n = self.settings.batch_rows
        if self._sqlite:
            return f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} WHERE {condition} LIMIT {n})"
        if one_device:
            return (f"DELETE FROM {table} WHERE device_id = :d"
                    f" AND ctid = ANY(ARRAY(SELECT ctid FROM {table} WHERE {condition} LIMIT {n}))")
        key = self._citus_keys.get(table)
        if key is not None:
            return f"DELETE FROM {table} WHERE ({key}) IN (SELECT {key} FROM {table} WHERE {condition} LIMIT {n})"
        return f"DELETE FROM {table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {table} WHERE {condition} LIMIT {n}))"

    # -- tiers -------------------------------------------------------------------------------

    def _purge(
        self, table: str, key: str, end: str | None, cutoff: int, report: RetentionReport, *, where: str = ""
    ) -> None:
        if table not in self._tables:
            return
        target = table
        if not self._sqlite:
            with self.engine.connect() as conn:
                partitioned = is_partitioned(conn, table)
            if partitioned:
                self._drop_old_partitions(table, end, cutoff, report)
                target = default_partition_name(table)  # what is left: rows no day partition took
        condition = f"{key} < :cutoff" + (f" AND {end} < :cutoff" if end else "") + (f" AND {where}" if where else "")
        if "device_id" in self._columns(table):
            for device_id in self._devices:
                self._batched(self._bounded_delete(target, f"device_id = :d AND {condition}", one_device=True),
                              {"d": device_id, "cutoff": cutoff}, report, table)
        else:
            self._batched(self._bounded_delete(target, condition), {"cutoff": cutoff}, report, table)

    def _columns(self, table: str) -> set[str]:
        cols = self._column_cache.get(table)
        if cols is None:
            from sqlalchemy import inspect

            cols = {c["name"] for c in inspect(self.engine).get_columns(table)}
            self._column_cache[table] = cols
        return cols

    def _drop_old_partitions(self, table: str, end: str | None, cutoff: int, report: RetentionReport) -> None:
        """Drop each day partition wholly older than ``cutoff``, one transaction each. For a table
        whose rows span time (chunks, histograms), only when its rows' ends are older too."""
        with self.engine.connect() as conn:
            parts = [p for p in partitions_of(conn, table) if not p.is_default and p.end_ns is not None and p.end_ns <= cutoff]
        for p in parts:

            def drop(conn: Connection, name: str = p.name) -> int:
                if end is not None:
                    newest = conn.execute(text(f"SELECT max({end}) FROM {name}")).scalar()
                    if newest is not None and newest >= cutoff:
                        return 0
                return _drop_one(conn, name)

            try:
                n = self._txn(drop)
            except LeaseLost:
                raise
            except Exception as exc:  # a lock timeout (a long reader): the next pass drops it
                log.info("retention: partition %s not dropped this pass: %s", p.name, exc)
                continue
            report.dropped[table] = report.dropped.get(table, 0) + n

    def _purge_gpu_state(self, cutoff: int, report: RetentionReport) -> None:
        """GPU state rows older than the cutoff that a later row (still at or before it)
        supersedes: the row in force at the cutoff stays, whatever its age, since a GPU whose
        state never changes has only that one."""
        if "gpu_state" not in self._tables:
            return
        cond = (
            "device_id = :d AND ts_ns < :cutoff AND EXISTS (SELECT 1 FROM gpu_state n WHERE n.device_id = gpu_state.device_id"
            " AND n.gpu_index = gpu_state.gpu_index AND n.ts_ns > gpu_state.ts_ns AND n.ts_ns <= :cutoff)"
        )
        for device_id in self._devices:
            self._batched(self._bounded_delete("gpu_state", cond, one_device=True), {"d": device_id, "cutoff": cutoff}, report, "gpu_state")

    def _purge_claims(self, cutoff: int, report: RetentionReport) -> None:
        """The exactly-once claims of batches received before the raw cutoff, found by
        ``ingested_batches_received`` (revision 0008).

        Why this is safe: a claim only serves to recognise a batch resent after its
        acknowledgement was lost. A claim older than the raw tier protects only rows that are
        themselves older than the raw cutoff (a batch's samples are taken before it is received,
        give or take the clock-skew tolerance), so a batch resent after its claim went would land
        below the cutoff and be deleted by the next pass. Keeping claims for ever costs a row per
        batch (86 million a day at 1,000 devices sending a batch a second). The exception: what
        such a batch carries for a longer tier (its log events, incidents, inventory) would be
        stored twice; that takes an agent holding a batch unacknowledged for longer than the raw
        tier."""
        if "ingested_batches" not in self._tables:
            return
        self._batched(self._bounded_delete("ingested_batches", "received_ns < :cutoff"), {"cutoff": cutoff}, report,
                      "ingested_batches")

    def _purge_incidents(self, cutoff: int, report: RetentionReport) -> None:
        """Resolved incidents that ended before the cutoff, then the kept samples no incident
        left needs (older than the oldest remaining incident's window)."""
        self._batched(
            self._bounded_delete("incidents", "state <> 'open' AND COALESCE(ended_ns, last_seen_ns) < :cutoff"),
            {"cutoff": cutoff}, report, "incidents",
        )
        with self.engine.connect() as conn:
            oldest = conn.execute(text("SELECT min(ts_ns) FROM incidents")).scalar()
        before = int(self.settings.context_before_s * NS)
        keep_from = (cutoff if oldest is None else min(cutoff, int(oldest))) - before
        for table in ("incident_host_samples", "incident_gpu_samples"):
            if table in self._tables:
                for device_id in self._devices:
                    self._batched(self._bounded_delete(table, "device_id = :d AND ts_ns < :cutoff", one_device=True),
                                  {"d": device_id, "cutoff": keep_from}, report, table)

    def _purge_alerts(self, cutoff: int, report: RetentionReport) -> None:
        if "alerts" not in self._tables:
            return
        old = "SELECT id FROM alerts WHERE state = 'resolved' AND resolved_ns < :cutoff"
        notes = f"SELECT id FROM notifications WHERE alert_id IN ({old})"
        self._batched(self._bounded_delete("notification_attempts", f"notification_id IN ({notes})"),
                      {"cutoff": cutoff}, report, "notification_attempts")
        self._batched(self._bounded_delete("notifications", f"alert_id IN ({old})"), {"cutoff": cutoff}, report, "notifications")
        self._batched(self._bounded_delete("alerts", "state = 'resolved' AND resolved_ns < :cutoff"),
                      {"cutoff": cutoff}, report, "alerts")

    # -- the samples around incidents ------------------------------------------------------

    def _keep_incident_context(self, raw_cutoff: int, incident_cutoff: int | None) -> int:
        """Copy the context window of every incident that outlives the raw tier into the keep
        tables, before the raw tier deletes anything of it; returns the rows copied.

        Idempotent: a window already copied (any kept row in it) is skipped, so a pass after a
        crash or on another collector copies nothing twice. Each incident is one transaction."""
        s = self.settings
        before, after, span = (int(x * NS) for x in (s.context_before_s, s.context_after_s, s.context_max_span_s))
        params: dict[str, int] = {"raw": raw_cutoff + before}
        sql = "SELECT id, device_id, ts_ns, last_seen_ns FROM incidents WHERE ts_ns < :raw"
        if incident_cutoff is not None:
            sql += " AND (state = 'open' OR COALESCE(ended_ns, last_seen_ns) >= :inc)"
            params["inc"] = incident_cutoff
        with self.engine.connect() as conn:
            incidents = conn.execute(text(sql + " ORDER BY id"), params).all()
        copied = 0
        for _id, device_id, ts_ns, last_seen_ns in incidents:
            last = min(max(int(last_seen_ns or ts_ns), int(ts_ns)), int(ts_ns) + span)
            lo, hi = int(ts_ns) - before, last + after + 1  # [lo, hi), as the context reads it
            if self._kept_until_ns is not None and hi <= self._kept_until_ns:
                continue  # its raw rows were deleted in an earlier pass: copied then, or never had any
            copied += self._txn(functools.partial(_copy_window, device_id=int(device_id), lo=lo, hi=hi))
        self._kept_until_ns = raw_cutoff
        return copied


def _citus_keys(conn: Connection) -> dict[str, str]:
    """{distributed table: its unique key, as SQL} on a Citus coordinator; {} elsewhere."""
    from fleetscope.collector.storage.citus import DEVICE_KEYS, is_citus

    if not is_citus(conn):
        return {}
    return {table: ", ".join(columns) for table, _constraint, columns, _plain in DEVICE_KEYS}


def _drop_one(conn: Connection, name: str) -> int:
    conn.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
    conn.execute(text(f"DROP TABLE {name}"))
    return 1


def _copy_window(conn: Connection, device_id: int, lo: int, hi: int) -> int:
    """Copy a device's samples in [lo, hi) into the keep tables, each row once (windows of
    neighbouring incidents overlap, and a pass may be repeated)."""
    from fleetscope.collector.query.samples import gpu_points, host_points

    limit = 1_000_000
    window = {"d": device_id, "lo": lo, "hi": hi}
    session = Session(bind=conn)
    kept_host = set(conn.execute(
        text("SELECT ts_ns FROM incident_host_samples WHERE device_id = :d AND ts_ns >= :lo AND ts_ns < :hi"), window
    ).scalars())
    rows = [
        {"device_id": device_id, "ts_ns": p.ts_ns, **{c: p.values.get(c) for c in HOST_VALUE_COLUMNS},
         "cpu_cores": None if p.cpu_cores is None else json.dumps(p.cpu_cores),
         "top_processes": None if p.top_processes is None else json.dumps(p.top_processes)}
        for p in host_points(session, device_id, lo, hi, limit)
        if p.ts_ns not in kept_host
    ]
    if rows:
        cols = ["device_id", "ts_ns", *HOST_VALUE_COLUMNS, "cpu_cores", "top_processes"]
        conn.execute(text(f"INSERT INTO incident_host_samples ({', '.join(cols)}) VALUES ({', '.join(':' + c for c in cols)})"), rows)
    kept_gpu = {(int(r[0]), int(r[1])) for r in conn.execute(
        text("SELECT ts_ns, gpu_index FROM incident_gpu_samples WHERE device_id = :d AND ts_ns >= :lo AND ts_ns < :hi"), window
    )}
    grows = [
        {"device_id": device_id, "ts_ns": p.ts_ns, "gpu_index": p.gpu_index, **{c: p.values.get(c) for c in GPU_SAMPLE_COLUMNS}}
        for p in gpu_points(session, device_id, lo, hi, limit)
        if (p.ts_ns, p.gpu_index) not in kept_gpu
    ]
    if grows:
        cols = ["device_id", "ts_ns", "gpu_index", *GPU_SAMPLE_COLUMNS]
        conn.execute(text(f"INSERT INTO incident_gpu_samples ({', '.join(cols)}) VALUES ({', '.join(':' + c for c in cols)})"), grows)
    return len(rows) + len(grows)
