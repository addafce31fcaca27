"""A batch whose data the database refuses, past validation, is isolated and rejected alone:
the other batches of its group are stored, and it is answered once, never retried forever."""

from __future__ import annotations

import time

from sqlalchemy.orm import Session

from fleetscope.collector.ingest.validation import Limits, validate_batch
from fleetscope.collector.query import list_devices
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.registry import register_device
from fleetscope.collector.storage.writer import BatchWriter, WriteItem, WriteOutcome
from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.helpers import table_count


def _item(device_id: int, seq: int, now: int) -> WriteItem:
    batch = pb.Batch(agent_id="id-iso", boot_id="boot", seq=seq, created_ns=now, sent_ns=now)
    batch.logs.add(ts_ns=now, source="/var/log/app.log", level=pb.LEVEL_INFO, message=f"line {seq}")
    h = batch.latency.add(name="infer", start_ns=now - 10**9, end_ns=now, count=1, sum_ns=1000)
    h.bucket_index.append(3)
    h.bucket_count.append(1)
    return WriteItem(batch=batch, device_id=device_id, agent_id="id-iso", boot_id="boot", seq=seq, received_ns=now,
                     correction_ns=0, clock_skew_ns=0, decoded=validate_batch(batch, Limits()))


def test_bad_batch_in_a_group_is_rejected_and_the_others_stored(db_url: str) -> None:
    engine = make_engine(db_url)
    req = pb.RegisterRequest(agent_id="id-iso", boot_id="boot", name="iso", sent_ns=time.time_ns())
    device_id = register_device(engine, req, received_ns=time.time_ns()).device_id
    now = time.time_ns()
    items = [_item(device_id, seq, now + seq) for seq in range(1, 9)]
    # Past validation: a histogram sum beyond int64, which both databases' BIGINT refuse.
    items[4].batch.latency[0].sum_ns = 2**64 - 1  # type: ignore[union-attr]
    writer = BatchWriter(engine)
    try:
        futures = [writer.submit(it) for it in items]  # queued before the thread runs: one group
        writer.start()
        outcomes: list[WriteOutcome] = [f.result(30) for f in futures]
    finally:
        writer.stop()
    try:
        bad = outcomes[4]
        assert bad.rejection is not None and "batch 5" in bad.rejection and "refused" in bad.rejection
        assert bad.rows == 0
        for o in outcomes[:4] + outcomes[5:]:
            assert o.rejection is None and not o.duplicate
        assert table_count(db_url, "log_events") == 7, "every other batch of the group was stored"
        assert table_count(db_url, "latency_histograms") == 7
        assert table_count(db_url, "ingested_batches") == 7, "the bad batch is not claimed, so nothing of it is kept"
        with Session(engine) as s:
            dev = next(d for d in list_devices(session=s, now_ns=time.time_ns()) if d.name == "iso")
        assert dev.batches_stored == 7 and dev.batches_rejected == 1
        assert "batch 5" in dev.last_rejection
    finally:
        engine.dispose()


def test_a_group_of_good_batches_still_commits_once(db_url: str) -> None:
    engine = make_engine(db_url)
    req = pb.RegisterRequest(agent_id="id-iso", boot_id="boot", name="iso", sent_ns=time.time_ns())
    device_id = register_device(engine, req, received_ns=time.time_ns()).device_id
    now = time.time_ns()
    writer = BatchWriter(engine)
    try:
        futures = [writer.submit(_item(device_id, seq, now + seq)) for seq in range(1, 6)]
        writer.start()
        assert all(f.result(30).rejection is None for f in futures)
    finally:
        writer.stop()
        engine.dispose()
    assert writer.groups == 1 and writer.batches == 5
