from __future__ import annotations

from pathlib import Path

from fleetscope.agent.daemon.batcher import CLASS_INCIDENTS, CLASS_LOGS, CLASS_SAMPLES
from fleetscope.agent.daemon.spool import SPOOL_FILE, Spool


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
    bound = 512 << 10
    spool = Spool(tmp_path, max_bytes=bound)
    incident = _put(spool, CLASS_INCIDENTS, 20_000)
    log = _put(spool, CLASS_LOGS, 20_000)
    samples = [_put(spool, CLASS_SAMPLES, 20_000) for _ in range(60)]
    kept = [b.seq for b in spool.after(0, 1000)]
    assert incident in kept and log in kept
    dropped = [s for s in samples if s not in kept]
    assert dropped and dropped == samples[: len(dropped)], "the oldest samples went first"
    c = spool.stats().counters
    assert (c["dropped_batches"], c["dropped_samples"], c["dropped_incidents"]) == (len(dropped), 10 * len(dropped), 0)
    # Only incidents left to evict after samples and logs are gone.
    for _ in range(40):
        _put(spool, CLASS_INCIDENTS, 20_000)
        assert spool.disk_bytes() <= bound, "database + WAL + index stay within the bound"
    assert spool.stats().counters["dropped_logs"] == 5
    assert spool.stats().counters["dropped_incidents"] > 0


def test_the_bound_counts_the_wal_and_holds_under_churn(tmp_path: Path) -> None:
    bound = 2 << 20
    spool = Spool(tmp_path, max_bytes=bound)
    peak = 0
    for i in range(400):  # append at one end, acknowledge at the other, as the uplink does
        _put(spool, CLASS_SAMPLES, 15_000)
        if i % 3 == 0:
            spool.delete(spool.after(0, 1)[0].seq)
        peak = max(peak, spool.disk_bytes())
    assert peak <= bound, f"the spool's files reached {peak} bytes over a bound of {bound}"
    assert spool.stats().counters["dropped_batches"] > 0


def test_a_disk_that_refuses_writes_keeps_batches_in_memory(tmp_path: Path) -> None:
    spool = Spool(tmp_path, memory_max_bytes=100_000)
    spool._db.execute("PRAGMA max_page_count = 8")  # type: ignore[union-attr]  # a full disk, as SQLite sees it
    seqs = [_put(spool, CLASS_SAMPLES if i % 5 else CLASS_INCIDENTS, 20_000) for i in range(10)]
    st = spool.stats()
    assert st.memory_batches == 5, "the newest batches are held in memory, within its bound"
    kept = [b.seq for b in spool.after(0, 100)]
    assert kept == sorted(kept)
    assert seqs[0] in kept and seqs[5] in kept, "incidents are kept; samples go first"
    assert st.counters["dropped_samples"] == 10 * (len(seqs) - len(kept))
    for seq in kept:
        spool.delete(seq)
    assert spool.after(0, 100) == [] and spool.stats().batches == 0


def test_an_unopenable_spool_runs_from_memory(tmp_path: Path) -> None:
    (tmp_path / SPOOL_FILE).mkdir()  # not a database: SQLite cannot open it
    spool = Spool(tmp_path)
    seq = _put(spool, CLASS_SAMPLES)
    assert [b.seq for b in spool.after(0, 10)] == [seq]
    spool.close()


def test_sequence_numbers_rise_past_every_spooled_batch(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    last = [_put(spool, CLASS_SAMPLES) for _ in range(3)][-1]
    spool._db.execute("DELETE FROM meta WHERE key = 'next_seq'")  # type: ignore[union-attr]  # a lost counter write
    spool.close()
    assert Spool(tmp_path).reserve_seq() == last + 1


def test_a_batch_evicted_on_the_wire_and_acknowledged_after_all_is_not_counted_as_dropped(tmp_path: Path) -> None:
    bound = 512 << 10
    spool = Spool(tmp_path, max_bytes=bound)
    first = [_put(spool, CLASS_SAMPLES, 20_000) for _ in range(5)]
    on_the_wire = [b.seq for b in spool.after(0, 3)]  # the uplink sent the three oldest
    assert on_the_wire == first[:3]
    while spool.drop_totals()[0] < 5:  # fill until the oldest five are evicted
        _put(spool, CLASS_SAMPLES, 20_000)
    dropped_before = spool.drop_totals()
    assert dropped_before[0] == 5 and dropped_before[1] == 50
    # Acks come for two of the three sent: they reached the collector, so they were not lost.
    spool.delete(on_the_wire[0])
    spool.delete(on_the_wire[1])
    assert spool.drop_totals() == (dropped_before[0] - 2, dropped_before[1] - 20, 0, 0)
    # An evicted batch that was never sent stays counted, and a second ack takes nothing back.
    spool.delete(first[3])
    spool.delete(on_the_wire[0])
    assert spool.drop_totals() == (dropped_before[0] - 2, dropped_before[1] - 20, 0, 0)
    spool.close()
    assert Spool(tmp_path).drop_totals() == (dropped_before[0] - 2, dropped_before[1] - 20, 0, 0), "persisted"
