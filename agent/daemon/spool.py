"""The agent's on-disk spool: every batch is written here before it is sent.

SQLite in WAL mode (stdlib ``sqlite3``: nothing to install on a drone). A batch leaves the
spool only when the collector acknowledged it (stored, duplicate or rejected), so a collector
killed mid-stream, a cut link or an agent restart loses nothing: unacknowledged batches are
sent again and the collector's (agent id, boot id, seq) check makes the resend harmless.

The spool is bounded (``max_bytes``). When a new batch would pass the bound, whole batches are
evicted by delivery class: the oldest samples first, then the oldest logs, incidents last.
What was evicted is counted in the ``meta`` table and travels in every batch's counters.

Sequence numbers come from the spool (``meta.next_seq``) so that they keep rising across agent
restarts; they are never reused for the same agent id.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SPOOL_FILE = "spool.sqlite"
_COUNTERS = (
    "dropped_batches",
    "dropped_samples",
    "dropped_logs",
    "dropped_incidents",
    "rejected_batches",
    "reconnects",
)


class SpoolError(OSError):
    """The spool could not be written (disk full, permissions): the batch was not kept."""


@dataclass(frozen=True)
class SpooledBatch:
    seq: int
    payload: bytes


@dataclass(frozen=True)
class SpoolStats:
    batches: int
    bytes: int
    counters: dict[str, int]
    last_rejection: str


class Spool:
    def __init__(self, state_dir: Path, *, max_bytes: int = 256 << 20) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / SPOOL_FILE
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode survives a process crash; a power cut may lose the last batches,
        # which costs a drone seconds of samples but keeps each write cheap.
        self._db.execute("PRAGMA synchronous=NORMAL")
        # The spool appends at one end and deletes at the other: a small page cache does (the
        # default, 2 MiB, is resident memory a drone does not have to spare).
        self._db.execute("PRAGMA cache_size=-512")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS batches (seq INTEGER PRIMARY KEY, class INTEGER NOT NULL,"
            " samples INTEGER NOT NULL, logs INTEGER NOT NULL, incidents INTEGER NOT NULL,"
            " size INTEGER NOT NULL, payload BLOB NOT NULL)"
        )
        self._db.execute("CREATE INDEX IF NOT EXISTS batches_class ON batches (class, seq)")
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value)")
        row = self._db.execute("SELECT count(*), coalesce(sum(size), 0) FROM batches").fetchone()
        self._count, self._bytes = int(row[0]), int(row[1])
        self._next_seq = int(self._meta("next_seq", 1))
        self._counters = {k: int(self._meta(k, 0)) for k in _COUNTERS}
        self._last_rejection = str(self._meta("last_rejection", ""))

    def _meta(self, key: str, default: int | str) -> int | str:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return default if row is None else row[0]

    def _set_meta(self, key: str, value: object) -> None:
        self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def reserve_seq(self) -> int:
        """The next sequence number, persisted before it is used."""
        with self._lock:
            seq = self._next_seq
            self._next_seq += 1
            self._set_meta("next_seq", self._next_seq)
            return seq

    def put(self, seq: int, payload: bytes, *, delivery_class: int, samples: int, logs: int, incidents: int) -> None:
        size = len(payload)
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._evict_for(size)
                self._db.execute(
                    "INSERT INTO batches (seq, class, samples, logs, incidents, size, payload) VALUES (?,?,?,?,?,?,?)",
                    (seq, delivery_class, samples, logs, incidents, size, payload),
                )
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                self._reload_totals()
                raise SpoolError(f"spool {self.path}: could not store batch {seq}: {exc}") from exc
            self._count += 1
            self._bytes += size

    def _rollback(self) -> None:
        try:
            self._db.execute("ROLLBACK")
        except sqlite3.Error:
            pass

    def _reload_totals(self) -> None:
        row = self._db.execute("SELECT count(*), coalesce(sum(size), 0) FROM batches").fetchone()
        self._count, self._bytes = int(row[0]), int(row[1])
        self._counters = {k: int(self._meta(k, 0)) for k in _COUNTERS}

    def _evict_for(self, size: int) -> None:
        """Delete the oldest batches of the lowest class until ``size`` more bytes fit."""
        need = self._bytes + size - self.max_bytes
        while need > 0:
            row = self._db.execute(
                "SELECT seq, samples, logs, incidents, size FROM batches ORDER BY class, seq LIMIT 1"
            ).fetchone()
            if row is None:
                break
            seq, samples, logs, incidents, bsize = row
            self._db.execute("DELETE FROM batches WHERE seq = ?", (seq,))
            self._count -= 1
            self._bytes -= bsize
            need -= bsize
            for key, n in (("dropped_batches", 1), ("dropped_samples", samples), ("dropped_logs", logs), ("dropped_incidents", incidents)):
                self._counters[key] += n
                self._set_meta(key, self._counters[key])
            if incidents:
                log.error("spool full (%d bytes): dropped batch %d holding %d incidents", self.max_bytes, seq, incidents)

    def after(self, seq: int, limit: int) -> list[SpooledBatch]:
        """Up to ``limit`` batches with a sequence number above ``seq``, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, payload FROM batches WHERE seq > ? ORDER BY seq LIMIT ?", (seq, limit)
            ).fetchall()
        return [SpooledBatch(int(s), bytes(p)) for s, p in rows]

    def delete(self, seq: int) -> None:
        with self._lock:
            row = self._db.execute("SELECT size FROM batches WHERE seq = ?", (seq,)).fetchone()
            if row is None:
                return
            self._db.execute("DELETE FROM batches WHERE seq = ?", (seq,))
            self._count -= 1
            self._bytes -= int(row[0])

    def count(self, key: str, n: int = 1, *, reason: str | None = None) -> None:
        """Add to one of the persisted counters (rejections, reconnects)."""
        with self._lock:
            self._counters[key] += n
            self._set_meta(key, self._counters[key])
            if reason is not None:
                self._last_rejection = reason
                self._set_meta("last_rejection", reason)

    def stats(self) -> SpoolStats:
        with self._lock:
            return SpoolStats(self._count, self._bytes, dict(self._counters), self._last_rejection)

    def close(self) -> None:
        with self._lock:
            try:
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error:
                pass
            self._db.close()


