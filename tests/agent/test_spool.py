from __future__ import annotations

from pathlib import Path

import pytest

from fleetscope.agent.daemon.batcher import CLASS_INCIDENTS, CLASS_LOGS, CLASS_SAMPLES
from fleetscope.agent.daemon.spool import Spool, SpoolError


def _put(spool: Spool, cls: int, size: int = 1000) -> int:
    seq = spool.reserve_seq()
    spool.put(seq, b"x" * size, delivery_class=cls, samples=10 if cls == CLASS_SAMPLES else 0,
              logs=5 if cls == CLASS_LOGS else 0, incidents=1 if cls == CLASS_INCIDENTS else 0)
    return seq


def test_batches_come_back_in_order_and_leave_when_acked(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    seqs = [_put(spool, CLASS_SAMPLES) for _ in range(5)]
    assert [b.seq for b in spool.after(0, 10)] == seqs
    assert [b.seq for b in spool.after(seqs[1], 2)] == seqs[2:4]
    spool.delete(seqs[0])
    assert spool.stats().batches == 4 and spool.stats().bytes == 4000


def test_sequence_numbers_and_counters_survive_a_restart(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    last = [_put(spool, CLASS_SAMPLES) for _ in range(3)][-1]
    spool.count("rejected_batches", reason="batch 2: gpu.temp_c[0]: -5 is below 0")
    spool.close()
    again = Spool(tmp_path)
    assert again.reserve_seq() == last + 1, "a sequence number is never reused"
    assert again.stats().batches == 3, "unacknowledged batches are still there"
    assert again.stats().counters["rejected_batches"] == 1
    assert "gpu.temp_c" in again.stats().last_rejection


def test_full_spool_drops_oldest_samples_then_logs_and_keeps_incidents(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=10_000)
    incident = _put(spool, CLASS_INCIDENTS)
    log = _put(spool, CLASS_LOGS)
    samples = [_put(spool, CLASS_SAMPLES) for _ in range(8)]  # now 10,000 bytes: full
    newer = [_put(spool, CLASS_SAMPLES) for _ in range(3)]
    kept = [b.seq for b in spool.after(0, 100)]
    assert incident in kept and log in kept
    assert samples[:3] == [s for s in samples if s not in kept], "the oldest samples went first"
    assert all(s in kept for s in newer)
    c = spool.stats().counters
    assert (c["dropped_batches"], c["dropped_samples"], c["dropped_incidents"]) == (3, 30, 0)
    # Only incidents left to evict after samples and logs are gone.
    for _ in range(12):
        _put(spool, CLASS_INCIDENTS)
    assert spool.stats().counters["dropped_logs"] == 5
    assert spool.stats().bytes <= 10_000


def test_unwritable_spool_raises_a_clear_error(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool._db.execute("PRAGMA max_page_count = 8")  # a disk that is full, as SQLite sees it
    with pytest.raises(SpoolError, match="could not store batch"):
        for _ in range(100):
            _put(spool, CLASS_SAMPLES, size=20_000)
    assert spool.stats().batches == len(spool.after(0, 1000)), "the spool's own accounting stays right"
