"""The rollup job: keeps per-minute, per-hour and per-day aggregates of the raw samples up to date.

Design, and why:

* **Per device, behind the device's own frontier.** A drone that was out of radio range for
  hours uploads its spool oldest first when it comes back, with old timestamps. A job that
  rolled "everything older than now minus a minute" would have closed those minutes empty and
  never revisit them. So each device is rolled only up to its *frontier* (its newest stored
  sample) minus ``settle_s``: a minute bucket is final when the device has sent data past
  its end. ``rollup_progress`` keeps, per device and step, where that was.
* **Where the samples are.** Raw samples sit in the tail tables (rows, what older collectors
  wrote) and in chunks (columns: each ingested batch, and what compaction merged). Minute rows
  are made from both by ``rollups.raw_buckets``: the tail grouped in SQL, the chunks decoded
  column by column and grouped with numpy, the two parts of a bucket combined the way the
  readers combine them, so a minute is the same whichever way its samples are stored. Hour rows
  are ``INSERT ... SELECT ... GROUP BY`` over minute rows, day rows (midnight to midnight, UTC)
  over hour rows, in the database. Latency histograms are the exception (their buckets are JSON
  maps and merge by adding counts per index), merged here with
  ``fleetscope.proto.buckets.merge``, one rollup row per bucket scheme (a window an agent
  upgrade crosses has a legacy row and an exponential one; see ``proto.exponential``).
* **One roller per device at a time, any number of collectors sharing the work.** The devices
  are split into shares, each a lease of its own (``fleetscope.collector.storage.shares``):
  each run first balances the shares with the other collectors and rolls the devices of the
  shares it holds. When a holder dies its shares expire after ``lease_s`` and the others take
  them over. Each chunk is one transaction that also moves the progress mark and renews the
  device's share, so a crash never leaves a bucket half written or counted twice, and a roller
  that lost a share (stalled past its expiry) has its chunk rolled back instead of racing the
  new holder.

The same aggregate definitions (``GPU_AGGS``, ``HOST_AGGS``) are used by the readers in
``fleetscope.collector.query`` to aggregate the stretch not rolled up yet, so a chart
that mixes rollups and raw rows computes every point the same way.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import (
    BigInteger,
    Connection,
    Engine,
    and_,
    delete,
    func,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.sql.elements import ColumnElement

from fleetscope.collector.storage.chunk_reader import MAX_CHUNK_SPAN_NS
from fleetscope.collector.storage.lease import LeaseLost, default_owner
from fleetscope.collector.storage.rollup_schema import (
    SOURCE_STEP_S,
    STEPS_S,
    latency_rollups,
    rollup_progress,
)
from fleetscope.collector.storage.rollups import (
    NS,
    SOURCES,
    Source,
    bucket_of,
    raw_buckets,
    read_progress,
    rollup_aggregates,
)
from fleetscope.collector.storage.schema import (
    Device,
    gpu_chunks,
    gpu_samples,
    host_chunks,
    host_samples,
    latency_histograms,
)
from fleetscope.collector.storage.shares import JobShares
from fleetscope.collector.storage.write_lock import WriteLock
from fleetscope.proto import buckets as bucket_math

log = logging.getLogger(__name__)

LEASE_NAME = "rollup"


@dataclass
class RollupReport:
    """What one run did."""

    ran: bool
    holder: str
    devices: int = 0
    chunks: int = 0
    shares: frozenset[int] = frozenset()  # the device shares this pass rolled (``storage.shares``)
    rows: dict[int, int] = field(default_factory=lambda: {s: 0 for s in STEPS_S})
    seconds: float = 0.0


def _bucket_then_gpu(item: tuple[tuple, list]) -> tuple[int, int]:
    _device, gpu, bucket = item[0]
    return bucket, -1 if gpu is None else gpu


class RollupJob:
    """Rolls every device up on a thread (``start``/``stop``) or on demand (``run_once``).

    A collector starts one; with several collectors on one database they share the devices
    (``storage.shares``): each rolls its shares, and no device is rolled by two at once.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        owner: str | None = None,
        interval_s: float = 30.0,
        settle_s: float = 10.0,
        lease_s: float = 120.0,
        minute_chunk_s: int = 6 * 3600,
        hour_chunk_s: int = 7 * 86400,
        day_chunk_s: int = 180 * 86400,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.engine = engine
        self.owner = owner or default_owner()
        self.shares = JobShares(engine, LEASE_NAME, self.owner, ttl_s=lease_s, clock=clock)
        self.interval_s = interval_s
        self.settle_ns = int(settle_s * NS)
        self.chunk_ns = {60: minute_chunk_s * NS, 3600: hour_chunk_s * NS, 86400: day_chunk_s * NS}
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._write_lock = WriteLock(engine)
        self.last_report: RollupReport | None = None

    def release(self) -> None:
        """Give the shares up now, so other collectors need not wait for them to expire."""
        self.shares.release()

    # -- one run ------------------------------------------------------------------------------

    def run_once(self, now_ns: int | None = None) -> RollupReport:
        started = time.monotonic()
        now_ns = self._clock() if now_ns is None else now_ns
        held = self.shares.acquire(now_ns)
        if not held:
            return RollupReport(
                ran=False, holder=", ".join(sorted(set(self.shares.holders(now_ns).values()))) or "?"
            )
        report = RollupReport(ran=True, holder=self.owner, shares=held)
        with self.engine.connect() as conn:
            device_ids = list(conn.execute(select(Device.id).order_by(Device.id)).scalars())
            progress = read_progress(conn)
        for device_id in device_ids:
            if self._stop.is_set():
                break
            if not self.shares.holds(device_id):
                continue  # another collector's share, or ours until it was found taken over
            if not self._roll_device(device_id, now_ns, progress, report):
                self.shares.lost(device_id)  # another collector rolls this share from here
                continue
            report.devices += 1
        report.seconds = time.monotonic() - started
        self.last_report = report
        return report

    def _frontier(
        self, conn: Connection, device_id: int, newest: bool, since: int | None = None
    ) -> int | None:
        """The device's newest (or oldest) stored sample time, wherever it sits: tail rows by
        index seek on (device, ts), chunks by their (device, start) index (a chunk's first row is
        its ``start_ns``, its last its ``end_ns``).

        ``since`` (newest only; the device's minute progress mark): only a newest time from
        ``since`` on matters (below it a pass rolls no minute), so only the chunks that may end
        there are looked at, and ``since`` itself stands in for a device whose samples all end
        before it."""
        best: int | None = None

        def seen(ts: int | None) -> None:
            nonlocal best
            if ts is not None:
                ts = int(ts)
                best = ts if best is None else (max(best, ts) if newest else min(best, ts))

        for t in (host_samples, gpu_samples):
            order = t.c.ts_ns.desc() if newest else t.c.ts_ns.asc()
            seen(
                conn.execute(
                    select(t.c.ts_ns).where(t.c.device_id == device_id).order_by(order).limit(1)
                ).scalar()
            )
        for t in (host_chunks, gpu_chunks):
            c = t.c
            if newest:
                q = select(func.max(c.end_ns)).where(c.device_id == device_id)
                if since is not None:  # a chunk ending at ``since`` or later starts less than a span before
                    q = q.where(c.start_ns > since - MAX_CHUNK_SPAN_NS)
            else:
                q = select(func.min(c.start_ns)).where(c.device_id == device_id)
            seen(conn.execute(q).scalar())
        if newest and since is not None and (best is None or best < since):
            # Any newest time up to the mark rolls the same (no minute, coarser steps up to the
            # mark); the chunks that end earlier were not looked at.
            best = since
        return best

    @staticmethod
    def _oldest_source(conn: Connection, device_id: int, step_s: int, oldest_raw: int | None) -> int | None:
        """Where a step with no progress mark yet starts: the device's oldest row of the step it
        is made from. Day rows added to a database that has kept hour rollups for a year start
        at the oldest hour, not at the oldest raw sample the raw tier still keeps."""
        oldest = oldest_raw
        source = SOURCE_STEP_S[step_s]
        if source:
            for t in (src.rollup for src in SOURCES):
                b = conn.execute(
                    select(t.c.bucket_ns)
                    .where(t.c.device_id == device_id, t.c.step_s == source)
                    .order_by(t.c.bucket_ns)
                    .limit(1)
                ).scalar()
                if b is not None:
                    oldest = b if oldest is None else min(oldest, b)
        return oldest

    def _roll_device(self, device_id: int, now_ns: int, progress: dict, report: RollupReport) -> bool:
        with self.engine.connect() as conn:
            marks = {s: progress.get((device_id, s)) for s in STEPS_S}
            frontier = self._frontier(conn, device_id, newest=True, since=marks[60])
            if frontier is None:
                return True
            # A step never rolled for this device starts at its source's oldest row.
            oldest_raw = self._frontier(conn, device_id, newest=False) if None in marks.values() else None
            starts = {
                s: m if m is not None else (self._oldest_source(conn, device_id, s, oldest_raw) or frontier)
                for s, m in marks.items()
            }
        # Minutes roll up to the frontier less the settle time; each coarser step up to where the
        # step it is made from is done, in whole buckets of its own.
        done = (min(frontier, now_ns) - self.settle_ns) // (60 * NS) * (60 * NS)
        for step_s in STEPS_S:
            step_ns = step_s * NS
            until = done // step_ns * step_ns
            start = starts[step_s] // step_ns * step_ns
            while start < until:
                end = min(until, start + self.chunk_ns[step_s])
                if not self._chunk(device_id, step_s, start, end, now_ns, report):
                    return False
                start = end
            done = max(until, progress.get((device_id, step_s), 0))
        return True

    def _chunk(
        self, device_id: int, step_s: int, start: int, end: int, now_ns: int, report: RollupReport
    ) -> bool:
        """Roll buckets [start, end) of one device at one step, in one transaction."""
        step_ns = step_s * NS
        try:
            # Between two chunks the ingest writer gets the database (see ``write_lock``): a
            # pass over a busy fleet is hundreds of chunks, and without the lock ingest stalled
            # until the whole pass was done.
            with self._write_lock, self.engine.begin() as conn:
                self._chunk_in(conn, device_id, step_s, step_ns, start, end, now_ns, report)
        except LeaseLost:
            log.info("rollup share of device %d lost; leaving it to its new holder", device_id)
            return False
        report.chunks += 1
        return True

    def _chunk_in(
        self,
        conn: Connection,
        device_id: int,
        step_s: int,
        step_ns: int,
        start: int,
        end: int,
        now_ns: int,
        report: RollupReport,
    ) -> None:
        for src in SOURCES:
            report.rows[step_s] += self._aggregate(conn, src, device_id, step_s, start, end)
        report.rows[step_s] += self._latency(conn, device_id, step_s, step_ns, start, end)
        p = rollup_progress.c
        res = conn.execute(
            update(rollup_progress)
            .where(p.device_id == device_id, p.step_s == step_s)
            .values(rolled_until_ns=end)
        )
        if res.rowcount == 0:
            conn.execute(
                insert(rollup_progress).values(device_id=device_id, step_s=step_s, rolled_until_ns=end)
            )
        # Renew the device's share inside the same transaction: if another collector took it
        # over (we stalled past expiry), this chunk is rolled back and we leave the share.
        self.shares.renew_in(conn, device_id, now_ns)

    @staticmethod
    def _aggregate(conn: Connection, src: Source, device_id: int, step_s: int, start: int, end: int) -> int:
        r = src.rollup
        rc = r.c
        step_ns = step_s * NS
        conn.execute(
            delete(r).where(
                rc.device_id == device_id, rc.step_s == step_s, rc.bucket_ns >= start, rc.bucket_ns < end
            )
        )
        if SOURCE_STEP_S[step_s] == 0:  # made from raw samples: tail rows and chunks
            acc = raw_buckets(conn, src, [device_id], start, end, step_s, per_gpu=src.per_gpu)
            rows = [
                {
                    "device_id": device_id,
                    "step_s": step_s,
                    "bucket_ns": bucket,
                    **({"gpu_index": gpu} if src.per_gpu else {}),
                    "n": n,
                    "span_ns": span,
                    **values,
                }
                for (_device, gpu, bucket), (n, span, values) in sorted(acc.items(), key=_bucket_then_gpu)
            ]
            if rows:
                conn.execute(insert(r), rows)
            return len(rows)
        keys: list[ColumnElement] = []
        bucket = bucket_of(rc.bucket_ns, step_ns)
        where = and_(
            rc.device_id == device_id,
            rc.step_s == SOURCE_STEP_S[step_s],
            rc.bucket_ns >= start,
            rc.bucket_ns < end,
        )
        if src.per_gpu:
            keys.append(rc.gpu_index)
        cols = [
            literal(device_id, BigInteger).label("device_id"),
            literal(step_s, BigInteger).label("step_s"),
            bucket.label("bucket_ns"),
            *[k.label("gpu_index") for k in keys],
            *rollup_aggregates(src),
        ]
        q = select(*cols).select_from(r).where(where).group_by(bucket, *keys)
        names = [c.name for c in cols]
        res = conn.execute(insert(r).from_select(names, q))
        return max(res.rowcount or 0, 0)

    @staticmethod
    def _latency(conn: Connection, device_id: int, step_s: int, step_ns: int, start: int, end: int) -> int:
        lr = latency_rollups.c
        conn.execute(
            delete(latency_rollups).where(
                lr.device_id == device_id, lr.step_s == step_s, lr.bucket_ns >= start, lr.bucket_ns < end
            )
        )
        if SOURCE_STEP_S[step_s] == 0:  # made from raw rows
            h = latency_histograms.c
            rows = conn.execute(
                select(
                    h.start_ns,
                    h.end_ns - h.start_ns,
                    h.name,
                    h.labels,
                    h.count,
                    h.sum_ns,
                    h.errors,
                    h.zero_count,
                    h.buckets,
                    h.scheme,
                ).where(h.device_id == device_id, h.start_ns >= start, h.start_ns < end)
            )
        else:
            rows = conn.execute(
                select(
                    lr.bucket_ns,
                    lr.window_ns,
                    lr.name,
                    lr.labels,
                    lr.count,
                    lr.sum_ns,
                    lr.errors,
                    lr.zero_count,
                    lr.buckets,
                    lr.scheme,
                ).where(
                    lr.device_id == device_id,
                    lr.step_s == SOURCE_STEP_S[step_s],
                    lr.bucket_ns >= start,
                    lr.bucket_ns < end,
                )
            )
        # Keyed by scheme too: histograms of different bucket schemes are never added together.
        merged: dict[tuple[int, str, str, int], list] = {}
        for ts, window, name, labels, count, sum_ns, errors, zero, buckets, scheme in rows:
            key = (ts - ts % step_ns, name, labels, scheme)
            acc = merged.setdefault(key, [0, 0, 0, 0, 0, []])
            acc[0] += count
            acc[1] += sum_ns
            acc[2] += errors
            acc[3] += zero
            acc[4] += max(0, window)
            acc[5].append({int(k): v for k, v in json.loads(buckets).items()})
        if not merged:
            return 0
        conn.execute(
            insert(latency_rollups),
            [
                {
                    "device_id": device_id,
                    "step_s": step_s,
                    "bucket_ns": b,
                    "name": name,
                    "labels": labels,
                    "count": a[0],
                    "sum_ns": a[1],
                    "errors": a[2],
                    "zero_count": a[3],
                    "window_ns": a[4],
                    "buckets": json.dumps(bucket_math.merge(a[5]), separators=(",", ":")),
                    "scheme": scheme,
                }
                for (b, name, labels, scheme), a in merged.items()
            ],
        )
        return len(merged)

    # -- on a thread --------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception as exc:  # a failed run (database busy, restarting) is retried next time
                log.warning("rollup run failed: %s", exc)
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="fleetscope-rollup", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.release()
