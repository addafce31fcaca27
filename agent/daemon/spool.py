"""The agent's on-disk spool: every batch is written here before it is sent.

SQLite in WAL mode (stdlib ``sqlite3``: nothing to install on a drone). A batch leaves the
spool only when the collector acknowledged it (stored, duplicate or rejected), so a collector
killed mid-stream, a cut link or an agent restart loses nothing: unacknowledged batches are
sent again and the collector's (agent id, boot id, seq) check makes the resend harmless.

The spool is bounded (``max_bytes``) by what it really occupies on disk: the main database's
pages in use, plus the WAL and its shared-memory index. The WAL is kept to a fixed share of
the bound (``wal_limit``): checkpoints reset it and ``journal_size_limit`` caps the file, which
keeps its length so that later transactions reuse that space instead of asking a full disk for
more. When a new batch would pass the bound, whole batches are evicted by delivery class: the
oldest samples first, then the oldest logs, incidents last. What was evicted is counted and
travels in every batch's counters.

A full disk is the other bound, found only by hitting it: when SQLite says the disk is full,
the spool evicts the same way until the batch fits in the pages it already owns. If even that
fails (the WAL cannot grow, the file is gone or read-only) the batch is kept in a small
in-memory overflow, bounded and evicted by the same order, which the uplink drains like the
disk; it moves to disk as soon as the disk takes it again. Nothing here raises into the
sampling loop for a disk that is full.

Send order (``next_to_send``): incidents first, then logs, each oldest first, then samples oldest
first, so an incident written while a day of backlog drains over a thin link goes next, not
after the backlog; ``after`` keeps the plain oldest-first order. Samples stay oldest first among
themselves because the collector's rollups and detectors move a per-device mark over sample time
(``collector/jobs/rollup.py``): a sample stored behind a newer one of its device is never rolled
up. ``fresh_s`` (off unless asked) sends the samples of the last seconds before the backlog.

Sequence numbers come from the spool: they rise across restarts because they are also the
spool's key and its creation order. They are unique on the wire only together with the stream id
(sent as ``boot_id``), which is new at every agent start (``identity.new_stream_id``), so a
deleted or restored spool can never repeat an (agent id, boot id, seq) the collector stored.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.message import DecodeError

from fleetscope.agent.daemon.batcher import CLASS_INCIDENTS, CLASS_LOGS, CLASS_SAMPLES
from fleetscope.proto.v1 import telemetry_pb2 as pb

log = logging.getLogger(__name__)

SPOOL_FILE = "spool.sqlite"
SPOOL_FILE_SUFFIXES = ("", "-wal", "-shm")  # the database, its write-ahead log, its WAL index
_COUNTERS = (
    "dropped_batches",
    "dropped_samples",
    "dropped_logs",
    "dropped_incidents",
    "rejected_batches",
    "reconnects",
)
_SHM_ALLOWANCE = 64 << 10  # the WAL index: 32 KiB per ~4000 WAL pages, so one block here
_RETRY_DISK_AFTER_S = 5.0  # after a full disk, how long batches go straight to memory
FRESH_MAX_S = 900.0  # how far back ``next_to_send(fresh_s=...)`` can tell fresh batches from old
# Send order: the classes most worth having first; each oldest first. Samples come last.
SEND_CLASSES = (CLASS_INCIDENTS, CLASS_LOGS)


class SpoolError(OSError):
    """The spool could not keep a batch, not even in memory (a batch larger than the bounds)."""


@dataclass(frozen=True)
class SpooledBatch:
    seq: int
    payload: bytes


@dataclass(frozen=True)
class SpoolStats:
    batches: int
    bytes: int  # payload bytes held, on disk and in memory
    counters: dict[str, int]
    last_rejection: str
    disk_bytes: int = 0  # what the spool's files occupy: database + WAL + WAL index
    memory_batches: int = 0  # held in memory because the disk would not take them


@dataclass(frozen=True)
class _MemoryBatch:
    seq: int
    delivery_class: int
    samples: int
    logs: int
    incidents: int
    payload: bytes


def wal_limit_for(max_bytes: int, filesystem_bytes: int | None = None) -> int:
    """The WAL's share: a sixteenth of the bound (or of a smaller filesystem), 64 KiB to 4 MiB."""
    base = max_bytes if filesystem_bytes is None else min(max_bytes, filesystem_bytes)
    return max(64 << 10, min(4 << 20, base // 16))


class Spool:
    def __init__(self, state_dir: Path, *, max_bytes: int = 256 << 20, memory_max_bytes: int | None = None) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / SPOOL_FILE
        self.max_bytes = max_bytes
        self.wal_limit = wal_limit_for(max_bytes, _filesystem_bytes(state_dir))
        # A drone has little RAM: the overflow holds the newest few MiB, not a second spool.
        self.memory_max_bytes = memory_max_bytes if memory_max_bytes is not None else min(max_bytes, 4 << 20)
        self._lock = threading.Lock()
        self._memory: dict[int, _MemoryBatch] = {}  # seq -> batch; insertion order is seq order
        self._memory_bytes = 0
        self._disk_refused_at = 0.0
        self._undeleted: set[int] = set()  # acknowledged, but the disk refused the DELETE
        # Batches handed to the uplink (``next_to_send``, ``after``) and not yet acknowledged: one
        # of them evicted may still reach the collector, so its drop is taken back if it is acknowledged.
        self._handed_out: set[int] = set()
        self._evicted_in_flight: dict[int, tuple[int, int, int]] = {}  # seq -> (samples, logs, incidents)
        # (monotonic time, first seq put at or after it), at most one a second over FRESH_MAX_S:
        # what ``next_to_send(fresh_s=...)`` tells fresh batches from the backlog by.
        self._put_times: deque[tuple[float, int]] = deque()
        self._final_checked: tuple[int, bool] = (0, False)  # (seq, final) of the last batch read for it
        self._counters = dict.fromkeys(_COUNTERS, 0)
        self._counters_dirty = False
        self._last_rejection = ""
        self._count = self._bytes = 0
        self._next_seq = 1
        self._db: sqlite3.Connection | None = None
        try:
            self._db = self._open()
            self._load()
        except sqlite3.Error as exc:
            # A spool that cannot be opened (disk full at creation, corrupt file) must not stop
            # the agent: it samples into memory and says so once.
            log.error("spool %s cannot be opened (%s): keeping batches in memory only", self.path, exc)
            self._close_db()

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        # Compact batches are a few KB: on 4 KiB pages each left most of its last page empty,
        # a third of a Jetson's spool (docs/benchmarks.md). Takes effect when the file is made.
        db.execute("PRAGMA page_size=1024")
        db.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode survives a process crash; a power cut may lose the last batches,
        # which costs a drone seconds of samples but keeps each write cheap.
        db.execute("PRAGMA synchronous=NORMAL")
        # The spool appends at one end and deletes at the other: a small page cache does (the
        # default, 2 MiB, is resident memory a drone does not have to spare).
        db.execute("PRAGMA cache_size=-512")
        page_size = int(db.execute("PRAGMA page_size").fetchone()[0])
        # Checkpoint (and restart the WAL from its beginning) once it holds wal_limit/2, so one
        # more transaction still fits under wal_limit; the file is cut back to wal_limit at most.
        db.execute(f"PRAGMA wal_autocheckpoint={max(8, self.wal_limit // 2 // page_size)}")
        db.execute(f"PRAGMA journal_size_limit={self.wal_limit}")
        db.execute(
            "CREATE TABLE IF NOT EXISTS batches (seq INTEGER PRIMARY KEY, class INTEGER NOT NULL,"
            " samples INTEGER NOT NULL, logs INTEGER NOT NULL, incidents INTEGER NOT NULL,"
            " size INTEGER NOT NULL, payload BLOB NOT NULL)"
        )
        db.execute("CREATE INDEX IF NOT EXISTS batches_class ON batches (class, seq)")
        db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value)")
        self._page_size = page_size
        return db

    def _load(self) -> None:
        assert self._db is not None
        row = self._db.execute("SELECT count(*), coalesce(sum(size), 0), coalesce(max(seq), 0) FROM batches").fetchone()
        self._count, self._bytes = int(row[0]), int(row[1])
        # The key must rise past every batch still here, even if the counter's last write was lost.
        self._next_seq = max(int(self._meta("next_seq", 1)), int(row[2]) + 1, self._next_seq)
        self._counters = {k: int(self._meta(k, 0)) for k in _COUNTERS}
        self._last_rejection = str(self._meta("last_rejection", ""))

    def _close_db(self) -> None:
        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
        self._db = None

    def _meta(self, key: str, default: int | str) -> int | str:
        assert self._db is not None
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return default if row is None else row[0]

    def _write_meta(self) -> None:
        """Persist the sequence counter and the counters; inside the caller's transaction."""
        assert self._db is not None
        items: list[tuple[str, object]] = [("next_seq", self._next_seq)]
        if self._counters_dirty:
            items += list(self._counters.items()) + [("last_rejection", self._last_rejection)]
        self._db.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", items)

    # -- sizes ----------------------------------------------------------------------------

    def disk_bytes(self) -> int:
        """What the spool's files occupy now: the database, its WAL and the WAL index."""
        total = 0
        for suffix in SPOOL_FILE_SUFFIXES:
            try:
                total += os.stat(f"{self.path}{suffix}").st_size
            except OSError:
                pass
        return total

    def _db_bytes_in_use(self) -> int:
        """Pages holding data (free pages are reused before the file grows), as this connection sees them."""
        assert self._db is not None
        pages = int(self._db.execute("PRAGMA page_count").fetchone()[0])
        free = int(self._db.execute("PRAGMA freelist_count").fetchone()[0])
        return (pages - free) * self._page_size

    @property
    def db_budget(self) -> int:
        """What the main database may hold so that database + WAL + index stay within max_bytes."""
        return max(0, self.max_bytes - self.wal_limit - _SHM_ALLOWANCE)

    def _db_budget_on_this_filesystem(self) -> int:
        """What the database may hold given the filesystem's free space, leaving room for the WAL.

        A disk filled to the last byte is a trap in WAL mode: a checkpoint may need to grow the
        database and any write, even a DELETE, needs WAL space, so nothing can be freed. Keeping
        a WAL's worth of the disk free, as the disk fills, keeps the spool able to evict.
        """
        assert self._db is not None
        try:
            st = os.statvfs(self.path.parent)
        except OSError:
            return self.db_budget
        free = st.f_bavail * st.f_frsize
        try:
            db_file = os.stat(self.path).st_size  # pages in use and free pages, both reusable
        except OSError:
            db_file = self._db_bytes_in_use()
        # The WAL may grow to its limit, and a checkpoint may grow the database by as much again.
        return max(0, db_file + free - 2 * self.wal_limit - _SHM_ALLOWANCE)

    # -- writing --------------------------------------------------------------------------

    def reserve_seq(self) -> int:
        """The next sequence number; persisted with the batch that uses it."""
        with self._lock:
            seq = self._next_seq
            self._next_seq += 1
            return seq

    def put(self, seq: int, payload: bytes, *, delivery_class: int, samples: int, logs: int, incidents: int) -> None:
        """Keep a batch: on disk within the bound, else in memory; evicts by class to make room."""
        batch = _MemoryBatch(seq, delivery_class, samples, logs, incidents, payload)
        with self._lock:
            self._note_put_time(seq)
            if self._db is not None and time.monotonic() - self._disk_refused_at >= _RETRY_DISK_AFTER_S:
                self._move_memory_to_disk()
                if not self._memory and self._put_on_disk(batch):
                    return
            self._put_in_memory(batch)

    def _put_on_disk(self, b: _MemoryBatch) -> bool:
        """True when the batch is on disk. A full disk shrinks what is asked of it and retries once."""
        assert self._db is not None
        # Overhead per batch: its row, index entry and the last partly filled page.
        need = len(b.payload) + 2 * self._page_size
        budget = min(self.db_budget, self._db_budget_on_this_filesystem())
        counters_before, dirty_before = dict(self._counters), self._counters_dirty
        for attempt in range(2):
            try:
                self._db.execute("BEGIN IMMEDIATE")
                freed = self._evict_for(need, budget)
                for victim in freed:  # counted in the same transaction that deletes them
                    self._count_drop(*victim)
                self._db.execute(
                    "INSERT INTO batches (seq, class, samples, logs, incidents, size, payload) VALUES (?,?,?,?,?,?,?)",
                    (b.seq, b.delivery_class, b.samples, b.logs, b.incidents, len(b.payload), b.payload),
                )
                self._next_seq = max(self._next_seq, b.seq + 1)
                self._write_meta()
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                self._counters, self._counters_dirty = dict(counters_before), dirty_before
                if attempt == 0 and _is_disk_full(exc):
                    # The disk, not the bound, is the limit now: fit into the pages already owned,
                    # and write from the start of the WAL file, whose length is already ours.
                    self._restart_wal()
                    budget = min(budget, self._db_bytes_in_use())
                    log.warning("spool %s: disk full; evicting to fit batch %d in the space the spool has", self.path, b.seq)
                    continue
                self._disk_refused_at = time.monotonic()
                log.error("spool %s: cannot store batch %d on disk (%s); keeping it in memory", self.path, b.seq, exc)
                self._reload_totals()
                return False
            self._count += 1 - len(freed)
            self._bytes += len(b.payload) - sum(f[-1] for f in freed)
            for victim in freed:
                self._note_evicted(*victim)
            self._counters_dirty = False
            self._checkpoint_if_large()
            return True
        return False

    def _evict_for(self, need: int, budget: int) -> list[tuple[int, int, int, int, int]]:
        """Delete the oldest batches of the lowest class until ``need`` more bytes fit in ``budget``.

        Runs inside the caller's transaction; returns what it deleted, to be counted only once
        the transaction commits.
        """
        assert self._db is not None
        freed: list[tuple[int, int, int, int, int]] = []
        while self._db_bytes_in_use() + need > budget:
            row = self._db.execute(
                "SELECT seq, samples, logs, incidents, size FROM batches ORDER BY class, seq LIMIT 1"
            ).fetchone()
            if row is None:
                break
            self._db.execute("DELETE FROM batches WHERE seq = ?", (row[0],))
            freed.append(tuple(int(v) for v in row))  # type: ignore[arg-type]
        return freed

    def _count_drop(self, seq: int, samples: int, logs: int, incidents: int, _size: int) -> None:
        for key, n in (("dropped_batches", 1), ("dropped_samples", samples), ("dropped_logs", logs),
                       ("dropped_incidents", incidents)):
            self._counters[key] += n
        self._counters_dirty = True

    def _note_evicted(self, seq: int, samples: int, logs: int, incidents: int, _size: int) -> None:
        """After an eviction is final: remember a batch the uplink holds, whose ack may still come."""
        if seq in self._handed_out:
            self._handed_out.discard(seq)
            self._evicted_in_flight[seq] = (samples, logs, incidents)
        if incidents:
            log.error("spool full (%d bytes): dropped batch %d holding %d incidents", self.max_bytes, seq, incidents)

    def _restart_wal(self) -> None:
        try:
            assert self._db is not None
            self._db.execute("PRAGMA wal_checkpoint(RESTART)")
        except sqlite3.Error:
            pass

    def _checkpoint_if_large(self) -> None:
        """Restart the WAL when it outgrew its share (autocheckpoint skips while a reader is busy)."""
        try:
            if os.stat(f"{self.path}-wal").st_size > self.wal_limit:
                assert self._db is not None
                self._db.execute("PRAGMA wal_checkpoint(RESTART)")
        except (OSError, sqlite3.Error):
            pass

    def _put_in_memory(self, b: _MemoryBatch) -> None:
        if len(b.payload) > self.memory_max_bytes:
            self._count_drop(b.seq, b.samples, b.logs, b.incidents, len(b.payload))
            raise SpoolError(f"spool {self.path}: batch {b.seq} ({len(b.payload)} bytes) fits neither disk nor memory")
        self._memory[b.seq] = b
        self._memory_bytes += len(b.payload)
        while self._memory_bytes > self.memory_max_bytes:
            victim = min(self._memory.values(), key=lambda m: (m.delivery_class, m.seq))
            del self._memory[victim.seq]
            self._memory_bytes -= len(victim.payload)
            self._count_drop(victim.seq, victim.samples, victim.logs, victim.incidents, len(victim.payload))
            self._note_evicted(victim.seq, victim.samples, victim.logs, victim.incidents, len(victim.payload))

    def _move_memory_to_disk(self) -> None:
        """Oldest first, until the disk refuses one; what it refuses stays in memory."""
        while self._memory:
            b = next(iter(self._memory.values()))
            if not self._put_on_disk(b):
                return
            del self._memory[b.seq]
            self._memory_bytes -= len(b.payload)

    def _rollback(self) -> None:
        assert self._db is not None
        try:
            self._db.execute("ROLLBACK")
        except sqlite3.Error:
            pass

    def _reload_totals(self) -> None:
        assert self._db is not None
        try:
            row = self._db.execute("SELECT count(*), coalesce(sum(size), 0) FROM batches").fetchone()
            self._count, self._bytes = int(row[0]), int(row[1])
        except sqlite3.Error:
            pass

    # -- reading and acknowledging -----------------------------------------------------------

    def after(self, seq: int, limit: int) -> list[SpooledBatch]:
        """Up to ``limit`` batches with a sequence number above ``seq``, oldest first (disk and memory)."""
        with self._lock:
            out: list[SpooledBatch] = []
            if self._db is not None:
                try:
                    rows = self._db.execute(
                        "SELECT seq, payload FROM batches WHERE seq > ? ORDER BY seq LIMIT ?",
                        (seq, limit + len(self._undeleted)),
                    ).fetchall()
                    out = [SpooledBatch(int(s), bytes(p)) for s, p in rows if s not in self._undeleted]
                except sqlite3.Error as exc:
                    log.warning("spool %s: cannot read batches: %s", self.path, exc)
            out += [SpooledBatch(m.seq, m.payload) for m in self._memory.values() if m.seq > seq]
            out.sort(key=lambda b: b.seq)
            out = out[:limit]
            self._handed_out.update(b.seq for b in out)
            return out

    def next_to_send(self, limit: int, *, skip: Collection[int] = (), order: str = "priority",
                     fresh_s: float = 0.0) -> list[SpooledBatch]:
        """Up to ``limit`` batches to send next, leaving out ``skip`` (those in flight), disk and memory.

        ``order="priority"``: incidents, then logs, each oldest first; then, with ``fresh_s``, the
        sample batches spooled in the last ``fresh_s`` seconds (at most ``FRESH_MAX_S``), oldest
        first; then the other samples, oldest first. The newest batch goes last, unless it holds
        incidents (see ``_newest_to_hold``). ``order="fifo"``: everything oldest first.
        """
        if order not in ("priority", "fifo"):
            raise ValueError(f"unknown send order {order!r}")
        with self._lock:
            excluded = set(skip) | self._undeleted
            # (class or None for any, lowest seq): the tiers, in the order they are sent.
            tiers: list[tuple[int | None, int]] = []
            if order == "fifo":
                tiers.append((None, 0))
            else:
                tiers += [(cls, 0) for cls in SEND_CLASSES]
                fresh_from = self._fresh_from_seq(fresh_s) if fresh_s > 0 else None
                if fresh_from is not None:
                    tiers.append((CLASS_SAMPLES, fresh_from))
                tiers.append((CLASS_SAMPLES, 0))
            held = self._newest_to_hold(excluded) if order == "priority" else None
            if held is not None:
                excluded.add(held)
            chosen: list[int] = []
            for cls, low in tiers:
                need = limit - len(chosen)
                if need <= 0:
                    break
                taken = set(chosen)
                candidates = self._disk_seqs(cls, low, need + len(excluded) + len(taken))
                candidates += [m.seq for m in self._memory.values()
                               if (cls is None or m.delivery_class == cls) and m.seq >= low]
                candidates.sort()
                chosen += [s for s in candidates if s not in excluded and s not in taken][:need]
            if held is not None and len(chosen) < limit:  # nothing else is left to send: now it goes
                chosen.append(held)
            payloads = {s: m.payload for s in chosen if (m := self._memory.get(s)) is not None}
            payloads.update(self._disk_payloads([s for s in chosen if s not in payloads]))
            out = [SpooledBatch(s, payloads[s]) for s in chosen if s in payloads]
            self._handed_out.update(b.seq for b in out)
            return out

    def _newest_to_hold(self, excluded: set[int]) -> int | None:
        """The newest batch not in flight, when it must wait until everything older was sent.

        The collector keeps a device's counters, and the "stopped" mark of an agent's last batch
        (``final``), from the batch it stored last. Sent last, the newest batch leaves them
        right once the spool drained, whichever batches went out of order before: the logs
        batch of a flush after that flush's samples, the counters-only batch that reports the
        last drops, the final batch. A batch of incidents does not wait, unless it is the final
        one; a newer batch, at the latest the next batch interval's samples, frees a held one.
        """
        newest: tuple[int, int] | None = None  # (seq, incidents)
        if self._db is not None:
            try:
                rows = self._db.execute("SELECT seq, incidents FROM batches ORDER BY seq DESC LIMIT ?",
                                        (len(excluded) + 1,)).fetchall()
                newest = next(((int(s), int(n)) for s, n in rows if s not in excluded), None)
            except sqlite3.Error:
                return None
        for m in self._memory.values():
            if m.seq not in excluded and (newest is None or m.seq > newest[0]):
                newest = (m.seq, m.incidents)
        if newest is None:
            return None
        seq, incidents = newest
        return seq if not incidents or self._is_final(seq) else None

    def _is_final(self, seq: int) -> bool:
        """Whether batch ``seq`` is the agent's last before a clean stop (read once per batch)."""
        if self._final_checked[0] != seq:
            m = self._memory.get(seq)
            payload = m.payload if m is not None else self._disk_payloads([seq]).get(seq, b"")
            try:
                final = pb.Batch.FromString(payload).final
            except DecodeError:
                final = False
            self._final_checked = (seq, final)
        return self._final_checked[1]

    def _disk_seqs(self, delivery_class: int | None, low: int, limit: int) -> list[int]:
        """The oldest ``limit`` sequence numbers on disk of a class (any: None) from ``low`` on."""
        if self._db is None or limit <= 0:
            return []
        where, params = "seq >= ?", [low]
        if delivery_class is not None:
            where, params = "class = ? AND seq >= ?", [delivery_class, low]
        try:
            rows = self._db.execute(f"SELECT seq FROM batches WHERE {where} ORDER BY seq LIMIT ?", (*params, limit))
            return [int(r[0]) for r in rows.fetchall()]
        except sqlite3.Error as exc:
            log.warning("spool %s: cannot read batches: %s", self.path, exc)
            return []

    def _disk_payloads(self, seqs: list[int]) -> dict[int, bytes]:
        if self._db is None or not seqs:
            return {}
        try:
            rows = self._db.execute(
                f"SELECT seq, payload FROM batches WHERE seq IN ({','.join('?' * len(seqs))})", seqs
            ).fetchall()
        except sqlite3.Error as exc:
            log.warning("spool %s: cannot read batches: %s", self.path, exc)
            return {}
        return {int(s): bytes(p) for s, p in rows}

    def _note_put_time(self, seq: int) -> None:
        now = time.monotonic()
        times = self._put_times
        if not times or now - times[-1][0] >= 1.0:
            times.append((now, seq))
        while len(times) > 1 and now - times[1][0] > FRESH_MAX_S:
            times.popleft()

    def _fresh_from_seq(self, fresh_s: float) -> int | None:
        """The lowest seq put in the last ``fresh_s`` seconds (to the second), or None if none was."""
        since = time.monotonic() - min(fresh_s, FRESH_MAX_S)
        for t, seq in self._put_times:
            if t >= since:
                return seq
        return None

    def delete(self, seq: int) -> None:
        """The batch ``seq`` is acknowledged (stored, a duplicate, or rejected and counted so):
        remove it; if it had been evicted while in flight, it was not lost after all."""
        with self._lock:
            self._handed_out.discard(seq)
            taken_back = self._evicted_in_flight.pop(seq, None)
            if taken_back is not None:
                self._take_back_drop(*taken_back)
                return
            m = self._memory.pop(seq, None)
            if m is not None:
                self._memory_bytes -= len(m.payload)
                return
            if self._db is None:
                return
            self._delete_on_disk(seq)
            if self._undeleted:
                for stale in list(self._undeleted):
                    if stale != seq:
                        self._delete_on_disk(stale)

    def _take_back_drop(self, samples: int, logs: int, incidents: int) -> None:
        taken = (("dropped_batches", 1), ("dropped_samples", samples), ("dropped_logs", logs),
                 ("dropped_incidents", incidents))
        for key, n in taken:
            self._counters[key] -= n
        self._counters_dirty = True
        if self._db is not None:
            try:
                self._db.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                                     [(key, self._counters[key]) for key, _ in taken])
            except sqlite3.Error:
                pass  # kept in memory and written with the next batch that reaches the disk

    def _delete_on_disk(self, seq: int) -> None:
        assert self._db is not None
        for attempt in range(2):
            try:
                row = self._db.execute("SELECT size FROM batches WHERE seq = ?", (seq,)).fetchone()
                if row is not None:
                    self._db.execute("DELETE FROM batches WHERE seq = ?", (seq,))
                    self._count -= 1
                    self._bytes -= int(row[0])
                self._undeleted.discard(seq)
                return
            except sqlite3.Error as exc:
                if attempt == 0 and _is_disk_full(exc):
                    self._restart_wal()  # a DELETE needs WAL space too; reuse what the file has
                    continue
                # Kept out of ``after`` so it is never sent again; deleted with a later ack.
                if not self._undeleted:
                    log.warning("spool %s: cannot delete acknowledged batches yet: %s", self.path, exc)
                self._undeleted.add(seq)
                return

    def count(self, key: str, n: int = 1, *, reason: str | None = None) -> None:
        """Add to one of the persisted counters (rejections, reconnects)."""
        with self._lock:
            self._counters[key] += n
            if reason is not None:
                self._last_rejection = reason
            self._counters_dirty = True
            if self._db is not None:
                try:
                    self._db.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                                         [(key, self._counters[key]), ("last_rejection", self._last_rejection)])
                except sqlite3.Error:
                    pass  # kept in memory and written with the next batch that reaches the disk

    def drop_totals(self) -> tuple[int, int, int, int]:
        """Batches, samples, logs and incidents dropped so far: the counters alone, no file sizes."""
        with self._lock:
            c = self._counters
            return c["dropped_batches"], c["dropped_samples"], c["dropped_logs"], c["dropped_incidents"]

    def stats(self) -> SpoolStats:
        with self._lock:
            undeleted = len(self._undeleted)
            return SpoolStats(
                batches=self._count - undeleted + len(self._memory),
                bytes=self._bytes + self._memory_bytes,
                counters=dict(self._counters),
                last_rejection=self._last_rejection,
                disk_bytes=self.disk_bytes(),
                memory_batches=len(self._memory),
            )

    def close(self) -> None:
        with self._lock:
            if self._memory:
                log.warning("spool %s: %d batches held in memory are lost at exit (the disk was full)",
                            self.path, len(self._memory))
            if self._db is None:
                return
            try:
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error:
                pass
            self._close_db()


def _filesystem_bytes(path: Path) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


def _is_disk_full(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code == sqlite3.SQLITE_FULL or "full" in str(exc)
