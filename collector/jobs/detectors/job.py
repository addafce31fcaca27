"""The detector job: every detector, one pass at a time, exactly once across collectors.

Like the rollup job (``collector/jobs/rollup.py``):

* **Shared by device** (the ``detectors`` job's shares, ``storage/shares.py``): any number of
  collectors run the job, each over the devices of the shares it holds; the detectors that read
  the whole fleet's incidents under one mark (``FLEET_DETECTORS``) run on the holder of share 0.
  Each detector's writes are one transaction that also moves its progress marks and renews the
  shares held (``renew_held_in``), so a holder that stalled past a share's lease has that
  transaction rolled back instead of writing beside the new holder. When the shares held change,
  the marks kept in memory are dropped and read again; marks not yet written are recomputed by
  their new holder from the older ones, which detects nothing twice (see ``_apply``).
* **Incremental**: a pass reads the devices, the progress marks and the open incidents once;
  each detector reads only what arrived since its marks (see each module), and its marks move in
  the same transaction as the incidents it wrote, so a crash never detects twice or skips.
* **Reads outside, writes inside the write lock**: a detector evaluates on a read connection,
  then its changes are applied in a short transaction under the SQLite write lock
  (``storage/write_lock.py``), so ingest is never held for a whole pass.

``settings`` may be a callable returning the current ``DetectorSettings``: a reloaded rules file
applies from the next pass.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine, delete, select

from fleetscope.collector.jobs.detectors import latency, memory, offline, oom, starved, throttling
from fleetscope.collector.jobs.detectors._common import (
    NS,
    Changes,
    DeviceInfo,
    Hints,
    NameCache,
    Open,
    PassContext,
    Refresh,
    Resolve,
    loads,
)
from fleetscope.collector.jobs.detectors.settings import DetectorSettings
from fleetscope.collector.query._common import is_pass_key, pass_key
from fleetscope.collector.query.devices import batch_interval_s
from fleetscope.collector.storage import incident_lifecycle as lifecycle
from fleetscope.collector.storage.lease import LeaseLost, default_owner
from fleetscope.collector.storage.rollups import read_progress
from fleetscope.collector.storage.schema import Device, detector_progress
from fleetscope.collector.storage.shares import JOB_SHARES, JobShares, share_of
from fleetscope.collector.storage.write_lock import WriteLock
from fleetscope.proto.vocabulary import (
    DERIVED_KINDS,
    KIND_AGENT_OFFLINE,
    KIND_GPU_STARVED,
    KIND_GPU_THROTTLING,
    KIND_LATENCY_REGRESSION,
    KIND_LATENCY_SLO,
    KIND_MEMORY_GROWTH,
    KIND_REPEATED_OOM,
    ORIGIN_DETECTOR,
)

log = logging.getLogger(__name__)

LEASE_NAME = "detectors"

DETECTORS: tuple[tuple[str, Callable[[PassContext], Changes]], ...] = (
    (KIND_AGENT_OFFLINE, offline.detect),
    (KIND_LATENCY_SLO, latency.detect_slo),
    (KIND_LATENCY_REGRESSION, latency.detect_regression),
    (KIND_GPU_THROTTLING, throttling.detect),
    (KIND_GPU_STARVED, starved.detect),
    (KIND_MEMORY_GROWTH, memory.detect),
    (KIND_REPEATED_OOM, oom.detect),
    ("lifecycle", oom.lifecycle),
)
# Detectors that read the whole fleet's incidents under one fleet-wide mark (device 0): they run
# with every device, on the collector that holds share 0; every other detector reads the devices
# of the shares its collector holds.
FLEET_DETECTORS = frozenset({KIND_REPEATED_OOM, "lifecycle"})
FLEET_SHARE = share_of(0)


@dataclass
class DetectorReport:
    """What one pass did."""

    ran: bool
    holder: str
    opened: int = 0
    refreshed: int = 0
    resolved: int = 0
    hinted: int = 0
    per_detector_s: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    shares: frozenset[int] = frozenset()  # the device shares this pass read (``storage.shares``)


class DetectorJob:
    """Runs the detectors on a thread (``start``/``stop``) or on demand (``run_once``)."""

    def __init__(
        self,
        engine: Engine,
        *,
        settings: DetectorSettings | Callable[[], DetectorSettings] | None = None,
        owner: str | None = None,
        interval_s: float = 10.0,
        lease_s: float = 120.0,
        discover_s: float = 60.0,
        persist_s: float = 60.0,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.engine = engine
        self._settings = settings if settings is not None else DetectorSettings()
        self.owner = owner or default_owner()
        self.shares = JobShares(engine, LEASE_NAME, self.owner, ttl_s=lease_s, clock=clock)
        self.interval_s = interval_s
        self._clock = clock
        self._names = NameCache(discover_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._write_lock = WriteLock(engine)
        self.last_report: DetectorReport | None = None
        # Progress marks as this holder last left them (None: read them from the database).
        self._progress: dict[tuple[str, int, str], tuple[int, dict]] | None = None
        self._memo: dict[str, dict] = {}  # what detectors keep in memory (PassContext.memo)
        self._dirty: dict[str, dict[tuple[int, str], tuple[int, dict]]] = {}
        self._persisted_ns: dict[str, int] = {}
        self._held_until_ns = 0
        self._held: frozenset[int] = frozenset()  # the shares the progress kept in memory is for
        self.persist_ns = int(persist_s * NS)

    @property
    def settings(self) -> DetectorSettings:
        s = self._settings
        return s() if callable(s) else s

    def release(self) -> None:
        """Give the shares up now, so other collectors need not wait for them to expire. The
        progress kept in memory is forgotten: the next holders (maybe this job) read the marks."""
        self.shares.release()
        self._progress = None

    # -- one pass -----------------------------------------------------------------------------

    def run_once(self, now_ns: int | None = None) -> DetectorReport:
        started = time.monotonic()
        now_ns = self._clock() if now_ns is None else now_ns
        held = self.shares.acquire(now_ns)
        if not held:
            return DetectorReport(ran=False, holder=", ".join(sorted(set(self.shares.holders(now_ns).values()))) or "?")
        if self._progress is not None and (now_ns > self._held_until_ns or held != self._held):
            # Our shares lapsed or changed since the last pass: another holder may have moved the marks.
            self._progress = None
        self._held, self._held_until_ns = held, now_ns + self.shares.ttl_ns
        settings = self.settings
        report = DetectorReport(ran=True, holder=self.owner, shares=held)
        caught_up: list[str] = []  # the detectors that read every device of their shares this pass
        with self.engine.connect() as conn:
            ctx = self._context(conn, now_ns, settings)
            fleet, mine = ctx.devices, {d: dev for d, dev in ctx.devices.items() if share_of(d) in held}
            for name, detect in DETECTORS:
                if self._stop.is_set() or not settings.enabled(name):
                    continue
                if name in FLEET_DETECTORS and FLEET_SHARE not in held:
                    continue
                ctx.devices = fleet if name in FLEET_DETECTORS else mine
                t0 = time.monotonic()
                ctx.catchup_left_out = False
                changes = detect(ctx)
                conn.rollback()  # end the read transaction: the next detector sees what was written
                try:
                    self._apply(changes, ctx, now_ns, report)
                except LeaseLost:
                    log.info("a detectors share was lost; stopping this pass")
                    self._progress = None
                    break
                except BaseException:
                    self._progress = None  # what was applied is unknown: read the marks again
                    raise
                report.per_detector_s[name] = time.monotonic() - t0
                if not ctx.catchup_left_out:
                    caught_up.append(name)
        self._mark_passes(caught_up, now_ns, settings, held)
        report.seconds = time.monotonic() - started
        self.last_report = report
        return report

    def _context(self, conn: Connection, now_ns: int, settings: DetectorSettings) -> PassContext:
        devices = {
            r.id: DeviceInfo(r.id, r.name, r.kind, dict(loads(r.labels) or {}), r.last_seen_ns, r.agent_id,
                             dict(loads(r.counters) or {}), batch_interval_s(loads(r.inventory)))
            for r in conn.execute(
                select(Device.id, Device.name, Device.kind, Device.labels, Device.last_seen_ns, Device.agent_id,
                       Device.counters, Device.inventory)
            )
        }
        if self._progress is None:
            p = detector_progress.c
            self._progress = {
                (r.detector, r.device_id, r.key): (r.until_ns, loads(r.state) or {})
                for r in conn.execute(select(p.detector, p.device_id, p.key, p.until_ns, p.state))
            }
            self._dirty = {}
            self._memo = {}
        progress = self._progress
        open_ = {
            k: v
            for k, v in lifecycle.list_open(conn, kinds=sorted(DERIVED_KINDS | {KIND_REPEATED_OOM})).items()
            if v.origin == ORIGIN_DETECTOR
        }
        rolled = {d: until for (d, step), until in read_progress(conn).items() if step == 60}
        return PassContext(conn, now_ns, settings, devices, progress, open_, rolled, self._names, self._memo,
                           time.monotonic() + settings.catchup_budget_s)

    def _apply(self, ch: Changes, ctx: PassContext, now_ns: int, report: DetectorReport) -> None:
        """Write a detector's changes. Its progress marks are written with any incident change,
        and at least every ``persist_s`` otherwise (kept in memory between): a pass redone from
        older marks after a crash or a takeover recomputes the same state, and opening,
        refreshing and resolving are idempotent (one open incident per key), so it detects
        nothing twice; it only saves writing every device's mark on every pass."""
        dirty = self._dirty.setdefault(ch.detector, {})
        dirty.update(ch.progress)
        for (d, key), value in ch.progress.items():
            ctx.progress[(ch.detector, d, key)] = value
        due = now_ns - self._persisted_ns.get(ch.detector, 0) >= self.persist_ns
        if not (ch.ops or ch.resolve_quiet_s is not None or (due and dirty)):
            return
        with self._write_lock, self.engine.begin() as conn:
            opened: dict[lifecycle.DerivedKey, int] = {}
            for op in ch.ops:
                if isinstance(op, Open):
                    incident_id, new = lifecycle.open_incident(
                        conn, op.key, now_ns=now_ns, started_ns=op.started_ns, severity=op.severity, title=op.title,
                        facts=op.facts, hints=op.hints, last_seen_ns=op.last_seen_ns, pid=op.pid,
                        process_name=op.process_name, source=f"detector:{ch.detector}",
                    )
                    opened[op.key] = incident_id
                    report.opened += int(new)
                    report.refreshed += int(not new)
                elif isinstance(op, Refresh):
                    target = op.incident_id if op.incident_id is not None else opened.get(op.key)  # type: ignore[arg-type]
                    if target is not None:
                        lifecycle.refresh_incident(conn, target, now_ns=now_ns, last_seen_ns=op.last_seen_ns,
                                                   facts=op.facts, hints=op.hints, title=op.title, severity=op.severity)
                        report.refreshed += 1
                elif isinstance(op, Resolve):
                    target = op.incident_id if op.incident_id is not None else opened.pop(op.key, None)  # type: ignore[arg-type]
                    if target is not None and lifecycle.resolve_incident(
                        conn, target, now_ns=now_ns, ended_ns=op.ended_ns, facts=op.facts, title=op.title
                    ):
                        report.resolved += 1
                elif isinstance(op, Hints):
                    lifecycle.set_hints(conn, op.incident_id, op.hints, now_ns=now_ns)
                    report.hinted += 1
            if ch.resolve_quiet_s is not None:
                report.resolved += len(lifecycle.resolve_quiet_incidents(conn, now_ns, ch.resolve_quiet_s))
            self._write_progress(conn, ch.detector, dirty)
            self.shares.renew_held_in(conn, now_ns)
        dirty.clear()
        self._persisted_ns[ch.detector] = now_ns

    def _mark_passes(self, detectors: list[str], now_ns: int, settings: DetectorSettings, held: frozenset[int]) -> None:
        """Record that these detectors looked at the data of every device of the shares ``held``
        (of every share, for the fleet-wide ones) up to ``now_ns``: their pass mark per share
        (device 0, key ``pass_key(share)``), which is what their lag is measured from
        (``query.job_lags``: the oldest share's). The offline detector's marks also hold its
        threshold settings, which ``query.offline_rule`` reads, so `fleetscope devices`, the
        dashboard and the exposition call a device offline when it does. One small upsert per
        pass; a failure only leaves the lag older."""
        off = [name for name, _ in DETECTORS if not settings.enabled(name) and name != KIND_AGENT_OFFLINE]
        if not settings.enabled(KIND_AGENT_OFFLINE):  # its settings still say when a device is offline
            detectors = [*detectors, KIND_AGENT_OFFLINE]
        if not detectors and not off:
            return
        try:
            with self._write_lock, self.engine.begin() as conn:
                if off:  # a detector turned off has no lag: its marks would only grow
                    p = detector_progress.c
                    conn.execute(delete(detector_progress).where(p.detector.in_(off), p.device_id == 0,
                                                                 is_pass_key(p.key)))
                for name in detectors:
                    state = settings.offline_rule().as_state() if name == KIND_AGENT_OFFLINE else {}
                    covered = range(JOB_SHARES) if name in FLEET_DETECTORS else sorted(held)
                    self._write_progress(conn, name, {(0, pass_key(k)): (now_ns, state) for k in covered})
        except Exception as exc:  # the database is busy: the next pass marks again
            log.debug("could not mark the detectors' pass: %s", exc)

    def _write_progress(self, conn: Connection, detector: str, rows: dict[tuple[int, str], tuple[int, dict]]) -> None:
        """Every mark in one statement: an executemany of one upsert (INSERT ... ON CONFLICT DO UPDATE,
        on SQLite and PostgreSQL alike)."""
        if not rows:
            return
        from sqlalchemy.dialects import postgresql, sqlite

        stmt: Any = (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(detector_progress)
        stmt = stmt.on_conflict_do_update(
            index_elements=[detector_progress.c.detector, detector_progress.c.device_id, detector_progress.c.key],
            set_={"until_ns": stmt.excluded.until_ns, "state": stmt.excluded.state},
        )
        conn.execute(stmt, [
            {"detector": detector, "device_id": d, "key": k, "until_ns": u, "state": st}
            for (d, k), (u, st) in rows.items()
        ])

    # -- on a thread --------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception as exc:  # a failed pass (database busy, restarting) is retried next time
                log.warning("detector pass failed: %s", exc, exc_info=log.isEnabledFor(logging.DEBUG))
            self._stop.wait(self._interval())

    def _interval(self) -> float:
        """The pass interval; with an offline threshold set, at most half of it (so a device is
        reported within 1.5x the threshold)."""
        s = self.settings
        if s.offline_after_s is not None:
            return max(0.2, min(self.interval_s, s.offline_after_s / 2))
        return self.interval_s

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="fleetscope-detectors", daemon=True)
        self._thread.start()

    def flush(self, now_ns: int | None = None) -> None:
        """Write the progress marks kept in memory (on stop, and before giving the lease up)."""
        if self._progress is None or not any(self._dirty.values()):
            return
        now_ns = self._clock() if now_ns is None else now_ns
        try:
            with self._write_lock, self.engine.begin() as conn:
                for detector, rows in self._dirty.items():
                    if rows:
                        self._write_progress(conn, detector, rows)
                self.shares.renew_held_in(conn, now_ns)
        except LeaseLost:
            self._progress = None
            return
        for rows in self._dirty.values():
            rows.clear()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        try:
            self.flush()
        except Exception as exc:  # the database is gone: the marks are redone from the last written
            log.debug("could not write the detectors' progress on stop: %s", exc)
        self.release()


__all__ = ["DETECTORS", "LEASE_NAME", "DetectorJob", "DetectorReport"]
