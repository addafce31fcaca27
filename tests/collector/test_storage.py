"""The storage layer against a real SQLite file and a real PostgreSQL server."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from fleetscope.agent.daemon.batcher import Pending, build_batches
from fleetscope.agent.records import GpuSample, HostSample, IncidentRecord, LogEvent, ProcessUsage
from fleetscope.collector.errors import StoreUnavailable, UnknownDevice
from fleetscope.collector.ingest.validation import Limits, validate_batch
from fleetscope.collector.query import (
    count_samples,
    device_metrics,
    list_devices,
    search_incidents,
    search_logs,
)
from fleetscope.collector.storage.citus_placement import DevicePlacement
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.registry import register_device
from fleetscope.collector.storage.writer import BatchWriter, WriteItem
from fleetscope.proto.v1 import telemetry_pb2 as pb


@pytest.fixture
def store(db_url: str):  # type: ignore[no-untyped-def]
    engine = make_engine(db_url)
    writer = BatchWriter(engine)
    writer.start()
    yield engine, writer
    writer.stop()
    engine.dispose()


def _register(engine, name: str = "gpu-node-1") -> int:  # type: ignore[no-untyped-def]
    req = pb.RegisterRequest(agent_id=f"id-{name}", boot_id="boot", name=name, kind=pb.DEVICE_KIND_SERVER, sent_ns=time.time_ns())
    req.labels["site"] = "lab"
    req.inventory.gpus.add(index=0, name="NVIDIA A100-SXM4-80GB", memory_total_bytes=80 << 30)
    return register_device(engine, req, received_ns=time.time_ns()).device_id


def _groups_for(engine, device_ids: list[int]) -> int:  # type: ignore[no-untyped-def]
    """The transactions one queued group of these devices' batches takes: one, or on Citus one
    per worker holding them (``storage.citus_placement``)."""
    if engine.dialect.name != "postgresql":
        return 1
    raw = engine.raw_connection()
    try:
        cur = raw.driver_connection.cursor()
        cur.execute("SELECT 1 FROM pg_extension WHERE extname = 'citus'")
        if cur.fetchone() is None:
            return 1
        return len(set(DevicePlacement().groups(cur, device_ids).values()))
    finally:
        raw.close()


def _item(device_id: int, seq: int, now: int, name: str = "gpu-node-1") -> WriteItem:
    pending = Pending(
        host=[HostSample(ts_ns=now, cpu_percent=12.5, cpu_core_percent=(10.0, 15.0), mem_used_bytes=8 << 30,
                         top_processes=(ProcessUsage(pid=42, name="python", cpu_percent=99.0, rss_bytes=1 << 30),))],
        gpu=[GpuSample(ts_ns=now, gpu_index=0, util_gpu_percent=97.0, memory_used_bytes=70 << 30, memory_total_bytes=80 << 30,
                       temp_c=71.0, power_w=380.0, sm_clock_mhz=1410.0, throttle_reasons=0x4,
                       processes=(ProcessUsage(pid=42, name="python", cpu_percent=None, rss_bytes=None, gpu_memory_bytes=69 << 30),))],
        logs=[LogEvent(ts_ns=now, source="/var/log/train.log", message="RuntimeError: CUDA out of memory", level="error")],
        incidents=[IncidentRecord(ts_ns=now, kind="cuda_oom", severity="error", title="CUDA OOM on cuda:0",
                                  facts={"requested_bytes": 2 << 30, "device_index": 0, "framework": "pytorch"})],
    )
    batch = pb.Batch(agent_id=f"id-{name}", boot_id="boot", seq=seq, created_ns=now, sent_ns=now)
    for bb in build_batches(pending, now_ns=now):
        batch.MergeFrom(bb.batch)
    batch.seq = seq
    return WriteItem(batch=batch, device_id=device_id, agent_id=f"id-{name}", boot_id="boot", seq=seq, received_ns=now,
                     correction_ns=0, clock_skew_ns=0, decoded=validate_batch(batch, Limits()))


def test_replayed_batch_is_acknowledged_and_skipped(store) -> None:  # type: ignore[no-untyped-def]
    engine, writer = store
    device_id = _register(engine)
    now = time.time_ns()
    first = writer.submit(_item(device_id, 1, now)).result(10)
    again = writer.submit(_item(device_id, 1, now)).result(10)
    other = writer.submit(_item(device_id, 2, now + 10**9)).result(10)
    assert (first.duplicate, again.duplicate, other.duplicate) == (False, True, False)
    assert first.rows == 2
    with Session(engine) as s:
        assert count_samples(session=s, device="gpu-node-1") == {"host": 2, "gpu": 2}
        # The second batch's OOM repeats the first a second later: one incident, counted twice
        # (and the replayed batch is not counted again).
        (incident,) = search_incidents(session=s, since_ns=0, until_ns=now + 10**10)
        assert (incident.count, incident.last_seen_ns, incident.gpu_index) == (2, now + 10**9, 0)
        # Each claim records its batch's device (a distributed database keeps it beside the rows).
        claims = s.execute(text("SELECT seq, device_id FROM ingested_batches ORDER BY seq")).all()
        assert [tuple(c) for c in claims] == [(1, device_id), (2, device_id)]


def test_claims_of_one_group_replays_repeats_and_new_keys(db_url: str) -> None:
    """One group's claims in one statement (PostgreSQL, Citus): a key stored by an earlier group,
    a key twice in the group (the first claims it) and new keys of two devices come back in the
    group's order, and each device row counts only its stored batches."""
    engine = make_engine(db_url)
    writer = BatchWriter(engine)
    writer.start()
    try:
        drone = _register(engine, "drone-7")
        server = _register(engine, "gpu-node-1")
        now = time.time_ns()
        writer.submit(_item(drone, 1, now, name="drone-7")).result(10)
        writer.stop()
        writer = BatchWriter(engine)
        items = [_item(drone, 1, now, name="drone-7"), _item(drone, 2, now + 10**9, name="drone-7"),
                 _item(server, 1, now), _item(drone, 2, now + 10**9, name="drone-7"), _item(server, 2, now + 10**9)]
        futures = [writer.submit(i) for i in items]  # queued before the writer starts: one group
        writer.start()
        outcomes = [f.result(10) for f in futures]
        assert writer.groups == _groups_for(engine, [drone, server])
        assert [o.duplicate for o in outcomes] == [True, False, False, True, False]
        assert writer.flush_liveness()  # on Citus the device rows' counts are written apart, a second later
        with Session(engine) as s:
            assert count_samples(session=s, device="drone-7") == {"host": 2, "gpu": 2}
            assert count_samples(session=s, device="gpu-node-1") == {"host": 2, "gpu": 2}
            stored = {d.name: d.batches_stored for d in list_devices(session=s, now_ns=now)}
            claims = s.execute(text("SELECT device_id, count(*) FROM ingested_batches GROUP BY device_id")).all()
        assert stored == {"drone-7": 2, "gpu-node-1": 2}
        assert dict(claims) == {drone: 2, server: 2}
    finally:
        writer.stop()
        engine.dispose()


def test_queries_return_what_was_stored(store) -> None:  # type: ignore[no-untyped-def]
    engine, writer = store
    device_id = _register(engine)
    now = time.time_ns()
    writer.submit(_item(device_id, 1, now)).result(10)
    with Session(engine) as s:
        (dev,) = list_devices(session=s, now_ns=now)
        assert (dev.name, dev.kind, dev.labels, dev.gpu_count, dev.online) == ("gpu-node-1", "server", {"site": "lab"}, 1, True)
        assert dev.inventory["gpus"][0]["index"] == 0 and dev.inventory["gpus"][0]["memory_total_bytes"] == 80 << 30
        m = device_metrics(session=s, device="gpu-node-1", since_ns=now - 10**9, until_ns=now + 10**9)
        assert m.gpu[0].values["temp_c"] == 71.0 and m.gpu[0].values["throttle_reasons"] == 4
        assert m.host[0].cpu_cores == [[10.0, None], [15.0, None]]
        assert m.host[0].top_processes[0]["name"] == "python"
        assert m.gpu_state[0].values["memory_total_bytes"] == 80 << 30
        assert m.gpu_state[0].processes[0]["gpu_memory_bytes"] == 69 << 30
        logs = search_logs(session=s, device="gpu-node-1", since_ns=0, until_ns=now + 1, text="out of memory")
        assert [ln.level for ln in logs] == ["error"]
        assert search_logs(session=s, device="gpu-node-1", since_ns=0, until_ns=now + 1, text="100%_no_such") == []
        (inc,) = search_incidents(session=s, since_ns=0, until_ns=now + 1, kinds=["cuda_oom"])
        assert inc.facts == {"requested_bytes": 2 << 30, "device_index": 0, "framework": "pytorch"}
        with pytest.raises(UnknownDevice, match="known: gpu-node-1"):
            device_metrics(session=s, device="nope", since_ns=0, until_ns=now)


def test_gpu_state_is_stored_only_when_it_changes(store) -> None:  # type: ignore[no-untyped-def]
    engine, writer = store
    device_id = _register(engine)
    now = time.time_ns()
    for seq in range(1, 6):
        writer.submit(_item(device_id, seq, now + seq * 10**9)).result(10)
    with Session(engine) as s:
        m = device_metrics(session=s, device="gpu-node-1", since_ns=now, until_ns=now + 10**11)
    assert len(m.gpu) == 5 and len(m.gpu_state) == 1


@pytest.mark.parametrize("built_by", ["writer", "ingest handler"])
def test_one_bad_batch_in_a_group_does_not_sink_the_others(store, built_by: str) -> None:  # type: ignore[no-untyped-def]
    engine, writer = store
    device_id = _register(engine)
    now = time.time_ns()
    good = [_item(device_id, s, now + s) for s in (1, 2, 3)]
    bad = _item(device_id, 4, now)
    bad.decoded = None  # a broken item: the writer fails on it, and must fail on it alone
    if built_by == "ingest handler":  # rows built before submit, as the gRPC handler does
        for item in (*good, bad):
            writer.prepare(item)
        assert all(i.prepared is not None for i in good) and bad.prepared is None
    futures = [writer.submit(i) for i in (good[0], bad, good[1], good[2])]
    results = []
    for f in futures:
        try:
            results.append(f.result(10))
        except Exception as exc:  # noqa: BLE001 - the test inspects which one failed
            results.append(exc)
    assert [getattr(r, "duplicate", None) for r in results] == [False, False, False, False]
    # Rejected, not failed as "storage unavailable": the agent would resend it forever.
    assert [r.rejection is not None for r in results] == [False, True, False, False]
    assert "batch 4" in results[1].rejection and "rows" in results[1].rejection
    with Session(engine) as s:
        assert count_samples(session=s) == {"host": 3, "gpu": 3}
        # The failed group's first attempt had already seen the GPU's state: it is stored all the same.
        m = device_metrics(session=s, device="gpu-node-1", since_ns=now - 10**9, until_ns=now + 10**9)
        assert [p.values["memory_total_bytes"] for p in m.gpu_state] == [80 << 30]


def test_unreachable_database_is_a_clear_error() -> None:
    with pytest.raises(StoreUnavailable, match="cannot open database"):
        make_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")


@pytest.mark.parametrize("built_by", ["writer", "ingest handler"])
def test_every_row_of_a_large_batch_keeps_its_own_values(store, built_by: str) -> None:  # type: ignore[no-untyped-def]
    """Row counts that are not a multiple of the writer's statement size, distinct values per
    row and per column, some readings missing: what is read back is exactly what was sent,
    whether the writer built the rows or the ingest handler did before submitting."""
    engine, writer = store
    device_id = _register(engine)
    now = time.time_ns()
    steps, gpus = 123, 3
    t0 = now - steps * 10**9
    host = [HostSample(ts_ns=t0 + s * 10**9, cpu_percent=s % 100, load1=s / 10, mem_used_bytes=(s + 1) << 20,
                       swap_used_bytes=None if s % 7 == 0 else s) for s in range(steps)]
    gpu = [GpuSample(ts_ns=t0 + s * 10**9, gpu_index=g, util_gpu_percent=(s + g) % 100, temp_c=30 + g + s / 1000,
                     power_w=None if (s + g) % 5 == 0 else 100 + s, sm_clock_mhz=1000 + g, throttle_reasons=s % 3)
           for s in range(steps) for g in range(gpus)]
    batch = pb.Batch(agent_id="id-gpu-node-1", boot_id="boot", seq=1, created_ns=now, sent_ns=now)
    for bb in build_batches(Pending(host=host, gpu=gpu), now_ns=now):
        batch.MergeFrom(bb.batch)
    batch.seq = 1
    item = WriteItem(batch=batch, device_id=device_id, agent_id="id-gpu-node-1", boot_id="boot", seq=1, received_ns=now,
                     correction_ns=0, clock_skew_ns=0, decoded=validate_batch(batch, Limits()))
    if built_by == "ingest handler":
        writer.prepare(item)
    assert writer.submit(item).result(10).rows == steps * (gpus + 1)
    with Session(engine) as s:
        m = device_metrics(session=s, device="gpu-node-1", since_ns=t0, until_ns=now)
    got_host = {p.ts_ns: (p.values["cpu_percent"], p.values["load1"], p.values["mem_used_bytes"], p.values["swap_used_bytes"])
                for p in m.host}
    assert got_host == {h.ts_ns: (h.cpu_percent, h.load1, h.mem_used_bytes, h.swap_used_bytes) for h in host}
    got_gpu = {(p.ts_ns, p.gpu_index): (p.values["util_gpu_percent"], p.values["temp_c"], p.values["power_w"],
                                        p.values["sm_clock_mhz"], p.values["throttle_reasons"]) for p in m.gpu}
    assert got_gpu == {(x.ts_ns, x.gpu_index): (x.util_gpu_percent, x.temp_c, x.power_w, x.sm_clock_mhz, x.throttle_reasons)
                       for x in gpu}


def test_a_batch_whose_stream_ended_while_queued_is_skipped_and_writing_goes_on(db_url: str) -> None:
    """gRPC cancels a handler whose agent disconnected, and with it the future of a batch still
    queued for the writer: that batch is not written (never acknowledged, the agent resends it)
    and the writer thread goes on storing everything else."""
    engine = make_engine(db_url)
    writer = BatchWriter(engine)
    try:
        device_id = _register(engine)
        now = time.time_ns()
        orphan = writer.submit(_item(device_id, 1, now))
        assert orphan.cancel()  # what asyncio.wrap_future does when the handler is cancelled
        writer.start()
        kept = writer.submit(_item(device_id, 2, now + 10**9)).result(10)
        assert (kept.seq, kept.duplicate) == (2, False)
        with Session(engine) as s:
            assert count_samples(session=s, device="gpu-node-1") == {"host": 1, "gpu": 1}
        resent = writer.submit(_item(device_id, 1, now)).result(10)  # the agent's replay from its spool
        assert (resent.seq, resent.duplicate) == (1, False)
    finally:
        writer.stop()
        engine.dispose()


def test_one_group_with_a_resent_batch_a_rejection_and_counters_updates_each_device_once(db_url: str) -> None:
    """What one transaction sees when agents reconnect: a batch sent twice before either was
    written (the second is a duplicate, its rows are not stored twice), a rejection recorded on
    the device, the agent's counters, and a second device in the same group."""
    engine = make_engine(db_url)
    writer = BatchWriter(engine)
    try:
        drone = _register(engine, "drone-7")
        server = _register(engine, "gpu-node-1")
        now = time.time_ns()
        first = _item(drone, 1, now, name="drone-7")
        resent = _item(drone, 1, now, name="drone-7")
        with_counters = _item(drone, 2, now + 10**9, name="drone-7")
        with_counters.batch.counters.dropped_samples = 17
        with_counters.batch.counters.reconnects = 3
        with_counters.clock_skew_ns = 2_500_000_000
        rejected = WriteItem(batch=None, device_id=drone, agent_id="id-drone-7", boot_id="boot", seq=3, received_ns=now + 2 * 10**9,
                             correction_ns=0, clock_skew_ns=0, rejection="batch 3: gpu.temp_c[0]: -400.0 is below -60")
        other = _item(server, 1, now)
        # Queued before the writer starts, so that all five land in one group.
        futures = [writer.submit(i) for i in (first, resent, with_counters, rejected, other)]
        writer.start()
        outcomes = [f.result(10) for f in futures]
        assert [o.duplicate for o in outcomes] == [False, True, False, False, False]
        assert writer.groups == _groups_for(engine, [drone, server])
        assert writer.flush_liveness()  # on Citus the device rows' counts are written apart, a second later
        with Session(engine) as s:
            assert count_samples(session=s, device="drone-7") == {"host": 2, "gpu": 2}
            assert count_samples(session=s, device="gpu-node-1") == {"host": 1, "gpu": 1}
            devices = {d.name: d for d in list_devices(session=s, now_ns=now)}
        d = devices["drone-7"]
        assert (d.batches_stored, d.batches_rejected) == (2, 1)
        assert d.last_rejection == "batch 3: gpu.temp_c[0]: -400.0 is below -60"
        assert (d.counters["dropped_samples"], d.counters["reconnects"]) == (17, 3)
        assert d.clock_skew_ns == 2_500_000_000
        assert d.last_seen_ns == now + 2 * 10**9
        g = devices["gpu-node-1"]
        assert (g.batches_stored, g.batches_rejected, g.last_rejection) == (1, 0, "")
        # A later group brings no counters or rejection: what the device row holds stays.
        writer.submit(_item(drone, 4, now + 3 * 10**9, name="drone-7")).result(10)
        assert writer.flush_liveness()
        with Session(engine) as s:
            d = next(x for x in list_devices(session=s, now_ns=now) if x.name == "drone-7")
        assert (d.batches_stored, d.batches_rejected, d.counters["dropped_samples"]) == (3, 1, 17)
        assert d.last_rejection.startswith("batch 3:")
    finally:
        writer.stop()
        engine.dispose()
