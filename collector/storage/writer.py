"""Group commit: one thread writes every batch, many batches per transaction.

Ingest handlers build a validated batch's rows and SQL parameters (``BatchWriter.prepare``),
hand it to ``BatchWriter.submit`` and wait on the returned future. The writer thread takes
whatever is queued (up to ``max_group_rows``), builds the rows of any batch that came without
them, and in one transaction: claims every batch's (agent id, boot id, seq) in
``ingested_batches`` (a batch already there is a duplicate and is skipped), inserts the new
batches' samples as chunks (one host and one GPU chunk per batch, their columns as they came:
``storage.batch_chunks``) and their other rows (logs, metric points, histograms) with the
fastest path the driver has (``statements``: sqlite3 ``executemany``, psycopg binary ``COPY``),
upserts each device's and GPU's newest reading (``host_latest``, ``gpu_latest``), updates the
device rows (on Citus a second later, apart: ``deferred_liveness``; and there a group is written
as one transaction per worker, ``citus_placement``), writes the incidents
(``incidents.write_incidents``, which merges the two reports of one Xid), commits, and only then
resolves the futures, so an acknowledgement always means "committed". One fsync per group
instead of per batch is what makes ``synchronous=FULL`` affordable.

Under load the writer thread is the collector's bottleneck (busy all the time, most of it in
``executemany``) while the event-loop thread that receives and validates batches waits on its
sockets most of the time, so the rows are built there, where they cost the writer nothing.
A third thread that built the next group's rows while one is written did not help: building
rows is Python and needs the GIL, and so does binding each statement's parameters; it took the
GIL whenever a statement step released it and the writer then waited for it back, and the
measured throughput was the same as one thread's (``docs/benchmarks.md``).

Validation keeps out what the databases cannot store, but if a group's transaction still fails
on the data of one batch (``_is_data_error``: a value out of range, text a column refuses), the
group is rolled back and written again in halves, down to the one batch at fault, so its
neighbours are stored with a few extra transactions. That batch is rejected: its outcome carries
the database's reason (the agent gets REJECTED, INVALID_ARGUMENT, and never resends it) and the
rejection is recorded on its device row. A batch whose rows cannot be built is rejected the same
way. Only a database that cannot be written (disk full, server gone) fails the futures with
``StoreUnavailable``; the agents keep those batches in their spools and resend.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from itertools import chain

from sqlalchemy import Engine
from sqlalchemy.pool import PoolProxiedConnection

from fleetscope.collector.errors import StoreUnavailable
from fleetscope.collector.storage import statements
from fleetscope.collector.storage.batch_chunks import SampleChunks, sample_chunks
from fleetscope.collector.storage.citus_placement import DevicePlacement
from fleetscope.collector.storage.decoded import Decoded
from fleetscope.collector.storage.deferred_liveness import DeferredLiveness
from fleetscope.collector.storage.incidents import write_incidents
from fleetscope.collector.storage.rows import BatchRows, ColumnBlock, GpuStateCache, batch_rows, counters_dict
from fleetscope.collector.storage.write_lock import WriteLock
from fleetscope.proto.v1 import telemetry_pb2 as pb

log = logging.getLogger(__name__)

_ROW_FIELD = {
    "host_samples": "host",
    "gpu_samples": "gpu",
    "latency_histograms": "latency",
    "metric_points": "metrics",
    "inventory_records": "inventory",
    "log_events": "logs",
}


@dataclass(frozen=True)
class WriteOutcome:
    seq: int
    duplicate: bool
    rows: int
    rejection: str | None = None  # set when the batch was not stored for a fault of its data


@dataclass
class WriteItem:
    """A validated batch (or a rejection to record) for one device."""

    batch: pb.Batch | None
    device_id: int
    agent_id: str
    boot_id: str
    seq: int
    received_ns: int
    correction_ns: int
    clock_skew_ns: int
    clock_step_ns: int = 0  # nonzero: re-anchored, the rows' clock this far from the send-time clock
    rejection: str | None = None
    decoded: Decoded | None = None
    compact_sections: dict[int, bytes] | None = None  # a compact batch's sample sections as they came
    prepared: _Prepared | None = None  # rows built by the submitting thread, if it did
    future: Future = field(default_factory=Future)


@dataclass
class _Prepared:
    """One batch ready to write: its rows, and per table the values to insert."""

    rows: BatchRows  # everything but the samples, which are in ``samples``
    samples: SampleChunks
    values: dict[str, list] = field(default_factory=dict)  # per table: flat values (SQLite) or row tuples

    @property
    def sample_rows(self) -> int:
        return self.samples.sample_rows


# A prepared group: each item with its rows (None for a rejection to record).
_Group = list[tuple[WriteItem, "_Prepared | None"]]


class BatchWriter:
    def __init__(self, engine: Engine, *, max_group_rows: int = 100_000, max_group_batches: int = 256) -> None:
        self._engine = engine
        self._dialect = engine.dialect.name
        self._queue: queue.Queue[WriteItem | threading.Event | None] = queue.Queue()
        self._max_rows = max_group_rows
        self._max_batches = max_group_batches
        self._state = GpuStateCache()  # consulted inside each transaction, in commit order
        self._thread = threading.Thread(target=self._run, name="fleetscope-writer", daemon=True)
        self._stopping = False
        self._conn: PoolProxiedConnection | None = None
        self._lock = WriteLock(engine)
        self.groups = 0
        self.batches = 0
        # Read by the self-metrics at scrape time (fleetscope.collector.observability): groups that
        # failed on the database, and an optional observer of each committed group's seconds.
        self.errors = 0
        self.commit_observer: Callable[[float], None] | None = None
        # On Citus only (found on the first connection): each worker's batches in their own
        # transaction (``citus_placement``), the device rows' liveness written apart from them
        # (``deferred_liveness``; registrations add to it too).
        self._citus: bool | None = None
        self._placement = DevicePlacement()
        self.liveness = DeferredLiveness()
        self._liveness_failing = False

    @property
    def queue_depth(self) -> int:
        """Batches submitted and not yet taken into a group."""
        return self._queue.qsize()

    def start(self) -> None:
        self._thread.start()

    def prepare(self, item: WriteItem) -> None:
        """Build the item's rows now, in the caller's thread (``submit`` then has less to do
        in the writer's). A batch whose rows cannot be built is left to the writer, which
        fails it alone."""
        try:
            item.prepared = _prepare(item, self._dialect == "sqlite")
        except Exception:
            item.prepared = None

    def submit(self, item: WriteItem) -> Future:
        if self._stopping:
            item.future.set_exception(StoreUnavailable("collector is shutting down"))
        else:
            self._queue.put(item)
        return item.future

    def flush_liveness(self, timeout_s: float = 10.0) -> bool:
        """Write the device rows' deferred liveness now (Citus; ``deferred_liveness``), after
        every batch submitted before this call; whether it was done in ``timeout_s``. Elsewhere
        the device rows are written with the batches, and this returns once those are."""
        done = threading.Event()
        self._queue.put(done)
        return done.wait(timeout_s)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Finish what is queued, then stop."""
        self._stopping = True
        self._queue.put(None)
        self._thread.join(timeout_s)

    # -- the thread -------------------------------------------------------------------------

    def _run(self) -> None:
        sqlite = self._dialect == "sqlite"
        done = False
        try:
            while not done:
                try:
                    item = self._queue.get(timeout=self.liveness.interval_s if self.liveness.pending else None)
                except queue.Empty:
                    self._flush_liveness()
                    continue
                if item is None:
                    break
                flushes: list[threading.Event] = []  # flush_liveness calls, answered after this group
                group: list[WriteItem] = []
                rows = 0
                nxt: WriteItem | threading.Event | None = item
                while True:
                    if isinstance(nxt, threading.Event):
                        flushes.append(nxt)
                    elif nxt is not None:
                        group.append(nxt)
                        rows += self._rows_hint(nxt)
                    if rows >= self._max_rows or len(group) >= self._max_batches:
                        break
                    try:
                        nxt = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is None:
                        done = True
                        break
                for part in self._split_by_worker(group) if group else []:
                    prepared = self._prepare_group(part, sqlite)
                    if prepared:
                        self._write_group(prepared)
                if flushes or self.liveness.due():
                    self._flush_liveness()
                for event in flushes:
                    event.set()
        finally:
            if self.liveness.pending:
                self._flush_liveness()
            self._close_conn()

    def _split_by_worker(self, group: list[WriteItem]) -> list[list[WriteItem]]:
        """The group as one part per Citus worker (by its devices' shards), in arrival order
        within each; the group whole elsewhere, or when the placement cannot be read."""
        if self._dialect != "postgresql" or self._citus is False:  # known plain: nothing to read per group
            return [group]
        try:
            conn = self._connection()
            driver = conn.driver_connection
            cur = driver.cursor()
            try:
                if self._citus is None:
                    self._citus = statements.on_citus(cur)
                if not self._citus:
                    return [group]
                node_of = self._placement.groups(cur, (it.device_id for it in group))
            finally:
                cur.close()
                driver.rollback()  # the reads' transaction: the writes open their own
        except Exception as exc:  # the coordinator is away: the write that follows says so to the agents
            log.debug("placement of a group's devices not read: %s", exc)
            self._close_conn()
            return [group]
        parts: dict[int, list[WriteItem]] = {}
        for it in group:
            parts.setdefault(node_of.get(it.device_id, -1), []).append(it)
        return list(parts.values())

    def _flush_liveness(self) -> None:
        """Write the deferred device and stream liveness (Citus) in one transaction; kept for
        the next try when it fails (a node is down: every node holds these tables)."""
        devices, streams = self.liveness.take()
        if not devices and not streams:
            return
        try:
            conn = self._connection()
            driver = conn.driver_connection
            cur = driver.cursor()
            try:
                if devices:
                    statements.update_devices(cur, devices, False)
                if streams:
                    statements.update_streams(cur, streams)
                driver.commit()
            finally:
                cur.close()
            self._liveness_failing = False
        except Exception as exc:
            self.liveness.put_back(devices, streams)
            self.liveness.failures += 1
            # Tried every second while a node is down: said once per outage.
            log.log(logging.DEBUG if self._liveness_failing else logging.WARNING,
                    "device rows' last-seen times not written (kept, tried again each second): %s", exc)
            self._liveness_failing = True
            try:
                self._close_conn()
            except Exception:  # nothing to save on a broken connection
                pass

    @staticmethod
    def _prepare_group(group: list[WriteItem], sqlite: bool) -> _Group:
        """Each batch with its rows built: the Python work, done before the write lock is taken."""
        prepared: _Group = []
        for it in group:
            # A batch whose stream ended while it waited here (the agent disconnected; gRPC
            # cancelled the handler, and with it this future) is not written: it was never
            # acknowledged, so the agent sends it again. Marking the others running means no
            # cancellation can race the result set later, which would raise in this thread
            # and stop all writing.
            if not it.future.set_running_or_notify_cancel():
                continue
            if it.batch is None:
                prepared.append((it, None))
                continue
            try:
                prepared.append((it, _finish(it.prepared or _prepare(it, sqlite), sqlite)))
                it.prepared = None
            except Exception as exc:  # a batch that cannot be turned into rows is rejected alone
                log.error("batch %s/%s rejected: its rows could not be built: %s", it.agent_id, it.seq, exc)
                it.rejection = rejection_text(f"batch {it.seq}: could not be turned into rows: {exc}")
                it.batch = None
                prepared.append((it, None))
        return prepared

    @staticmethod
    def _rows_hint(item: WriteItem) -> int:
        b = item.batch
        if b is None:
            return 1
        samples = item.decoded.sample_rows if item.decoded is not None else len(b.host.ts_ns) + len(b.gpu.ts_ns)
        return samples + len(b.logs) + 1

    def _connection(self):  # type: ignore[no-untyped-def]
        if self._conn is None:
            raw = self._engine.raw_connection()
            if self._dialect == "sqlite":
                raw.driver_connection.isolation_level = None  # type: ignore[union-attr]  # explicit BEGIN/COMMIT below
            self._conn = raw
        return self._conn

    def _close_conn(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # closing a broken connection may fail too; nothing to save
                pass
            self._conn = None

    def _write_group(self, group: _Group) -> None:
        started = time.monotonic()
        try:
            outcomes = self._transaction(group)
        except Exception as exc:
            self._close_conn()
            if _is_data_error(exc):
                self._isolate(group, exc)
                return
            self.errors += 1
            err = exc if isinstance(exc, StoreUnavailable) else StoreUnavailable(f"database write failed: {exc}")
            log.warning("database unavailable: %s", exc)
            for item, _ in group:
                if not item.future.done():
                    item.future.set_exception(err)
            return
        self.groups += 1
        self.batches += len(group)
        if self.commit_observer is not None:
            self.commit_observer(time.monotonic() - started)
        for (item, _), outcome in zip(group, outcomes):
            item.future.set_result(outcome)

    def _isolate(self, group: _Group, exc: BaseException) -> None:
        """A group failed on data: write it again in halves until the batch at fault is alone,
        then reject that batch (and record the rejection) instead of failing the others."""
        if len(group) > 1:
            half = len(group) // 2
            self._write_group(group[:half])
            self._write_group(group[half:])
            return
        item, prep = group[0]
        if prep is not None:
            log.error("batch %s/%s rejected: the database refused its data: %s", item.agent_id, item.seq, exc)
            item.rejection = rejection_text(f"batch {item.seq}: the database refused its data: {exc}")
            item.batch = None
            self._write_group([(item, None)])  # records the rejection on the device row
            return
        # Recording a rejection failed on its own text: answer it unrecorded rather than loop.
        log.error("rejection of batch %s/%s could not be recorded: %s", item.agent_id, item.seq, exc)
        item.future.set_result(WriteOutcome(item.seq, False, 0, rejection=item.rejection or str(exc)))

    def _transaction(self, group: _Group) -> list[WriteOutcome]:
        conn = self._connection()
        # Other collector workers and the rollup job write to the same SQLite file: the lock
        # hands the database over between them at once (see ``write_lock``).
        with self._lock:
            return self._locked_transaction(conn, group)

    def _locked_transaction(self, conn, group: _Group) -> list[WriteOutcome]:  # type: ignore[no-untyped-def]
        driver = conn.driver_connection
        sqlite = self._dialect == "sqlite"
        cur = driver.cursor()
        state_keys: list[tuple[int, int]] = []  # forgotten again if this transaction does not commit
        try:
            if sqlite:
                cur.execute("BEGIN IMMEDIATE")
            citus = not sqlite and statements.on_citus(cur)
            stored = iter(
                statements.claim_batches(
                    cur,
                    [
                        statements.Claim(it.agent_id, it.boot_id, it.seq, it.received_ns, prep.sample_rows, it.device_id)
                        for it, prep in group
                        if prep is not None
                    ],
                    sqlite,
                )
            )
            outcomes: list[WriteOutcome] = []
            values: dict[str, list] = {}  # per table, the stored batches' rows in arrival order
            states: list[tuple] = []
            incidents: list[dict] = []
            latest: dict[str, dict[tuple, tuple]] = {"host_latest": {}, "gpu_latest": {}}  # per key, the newest
            device_updates: dict[int, dict] = {}
            for item, prep in group:
                if prep is None:
                    upd = device_updates.setdefault(item.device_id, {"stored": 0, "rejected": 0})
                    upd["rejected"] += 1
                    upd["last_rejection"] = item.rejection or ""
                    upd["last_seen_ns"] = item.received_ns
                    outcomes.append(WriteOutcome(item.seq, False, 0, rejection=item.rejection or "rejected"))
                    continue
                rows = prep.rows
                if not next(stored):
                    outcomes.append(WriteOutcome(item.seq, True, 0))
                    continue
                for table, part in prep.values.items():
                    values.setdefault(table, []).extend(part)
                _keep_newest(latest["host_latest"], prep.samples.host_latest, 1)
                _keep_newest(latest["gpu_latest"], prep.samples.gpu_latest, 2)
                if rows.gpu_state:
                    changed, keys = self._state.keep_changed(rows.gpu_state)
                    states.extend(changed)
                    state_keys.extend(keys)
                incidents.extend(rows.incidents)
                upd = device_updates.setdefault(item.device_id, {"stored": 0, "rejected": 0})
                upd["stored"] += 1
                upd["last_seen_ns"] = item.received_ns
                upd["clock_skew_ns"] = item.clock_skew_ns
                if item.clock_step_ns:
                    upd["reanchored"] = upd.get("reanchored", 0) + 1
                    upd["clock_step_ns"] = item.clock_step_ns
                assert item.batch is not None
                if item.batch.HasField("counters") or item.batch.final:
                    upd["counters"] = counters_dict(item.batch.counters, final=item.batch.final)
                outcomes.append(WriteOutcome(item.seq, False, prep.sample_rows))
            if states:
                values["gpu_state"] = list(chain.from_iterable(states)) if sqlite else states
            for table, part in values.items():
                if sqlite:
                    statements.sqlite_insert(cur, table, part)
                else:
                    statements.pg_copy(cur, table, part)
            for table, newest in latest.items():
                if newest:
                    statements.upsert_latest(cur, table, list(newest.values()), sqlite)
            if device_updates and not citus:
                statements.update_devices(cur, device_updates, sqlite)
            if incidents:
                # After the device rows: on PostgreSQL this transaction now holds their row locks,
                # so the Xid merge's lookup cannot race another writer's for the same device. On
                # Citus the device rows are written later (``deferred_liveness``): the
                # coordinator's advisory locks on the devices serialise the merges instead.
                if citus:
                    statements.lock_devices(cur, sorted({int(inc["device_id"]) for inc in incidents}))
                write_incidents(cur, incidents, sqlite)
            if sqlite:
                cur.execute("COMMIT")
            else:
                driver.commit()
            if citus and device_updates:
                self.liveness.add_devices(device_updates)
            return outcomes
        except BaseException:
            self._state.forget(state_keys)
            try:
                if sqlite:
                    cur.execute("ROLLBACK")
                else:
                    driver.rollback()
            except Exception:  # the connection may be gone; it is closed and reopened by the caller
                pass
            raise
        finally:
            cur.close()


def _prepare(item: WriteItem, sqlite: bool) -> _Prepared:
    """The batch's samples as chunks (``storage.batch_chunks``), its other rows, and their
    insert parameters."""
    assert item.batch is not None and item.decoded is not None
    rows = batch_rows(
        item.batch, item.decoded, device_id=item.device_id, correction_ns=item.correction_ns,
        received_ns=item.received_ns, samples=False,
    )
    samples = sample_chunks(item.batch, item.decoded, device_id=item.device_id, correction_ns=item.correction_ns,
                            sections=item.compact_sections)
    prepared = _Prepared(rows, samples)
    for table, attr in _ROW_FIELD.items():
        part = getattr(rows, attr)
        if len(part):
            if sqlite:  # row-major values, as the multi-row VALUES statements take them
                prepared.values[table] = part.flat() if isinstance(part, ColumnBlock) else list(chain.from_iterable(part))
            else:
                prepared.values[table] = part.rows() if isinstance(part, ColumnBlock) else part
    return prepared


def _finish(prepared: _Prepared, sqlite: bool) -> _Prepared:
    """The chunk rows' values, their compact sections compressed: done in the writer's thread
    (``SampleChunks.wrap_sections``), once per batch."""
    samples = prepared.samples
    samples.wrap_sections()
    for table, part in (("host_chunks", samples.host_chunks), ("gpu_chunks", samples.gpu_chunks)):
        if part:
            prepared.values[table] = list(chain.from_iterable(part)) if sqlite else part
    return prepared


def _keep_newest(newest: dict[tuple, tuple], rows: list[tuple], key_width: int) -> None:
    """Keep each key's newest row (by ``ts_ns``, the column after the key; a later batch wins a
    tie, as the upsert would have it)."""
    for row in rows:
        key = row[:key_width]
        have = newest.get(key)
        if have is None or row[key_width] >= have[key_width]:
            newest[key] = row


def rejection_text(text: str, max_chars: int = 2_000) -> str:
    """A rejection reason that any database stores: no NUL (a driver's message may quote the
    value at fault), and bounded."""
    return text.replace("\x00", "\\x00")[:max_chars]


def _is_data_error(exc: BaseException) -> bool:
    """Errors about the values being written, which the same values will always hit again:
    the drivers' DataError and IntegrityError (SQLSTATE classes 22 and 23 on PostgreSQL), and
    the conversion errors the drivers raise before sending (an int beyond int64, an
    unencodable string). Anything else is taken as the database being unavailable: a batch
    must never be rejected, and lost, for a fault that is not its own."""
    # By class, not message: a data error's message may quote the data ("disk", "full", ...).
    if isinstance(exc, StoreUnavailable):
        return False
    sqlstate = getattr(exc, "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate[:2] in ("22", "23"):
        return True
    if any(cls.__name__ in ("DataError", "IntegrityError") for cls in type(exc).__mro__):
        return True
    return isinstance(exc, (OverflowError, ValueError, TypeError))


def _is_unavailable(exc: BaseException) -> bool:
    """Errors that are about the database, not about the batch: retrying a batch alone won't help."""
    if isinstance(exc, StoreUnavailable):
        return True
    text = str(exc).lower()
    names = type(exc).__name__
    return (
        "disk" in text
        or "full" in text
        or "readonly" in text
        or "read-only" in text
        or "locked" in text
        or "connection" in text
        or "server closed" in text
        or names in ("OperationalError", "InterfaceError")
    )
