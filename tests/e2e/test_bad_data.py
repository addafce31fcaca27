"""Bad data never wedges a device and never looks like an outage: each bad value, sent through a
real collector over real gRPC to SQLite and PostgreSQL, is repaired (a NUL in a log line) or
rejected alone with INVALID_ARGUMENT naming the field, while the same device's other batches and
another device's batches arrive exactly once."""

from __future__ import annotations

import json
import math
import sqlite3
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable

import grpc
import pytest
from sqlalchemy import create_engine, text

from fleetscope.agent.daemon.batcher import fill_gpu
from fleetscope.agent.records import GpuSample
from fleetscope.collector.storage.engine import normalise_url
from fleetscope.proto.compact import COMPRESS_ZSTD, compact
from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests import compact_blobs
from tests.helpers import gpu_sequence_numbers

MD = (("authorization", "Bearer test-token"),)
INVALID = grpc.StatusCode.INVALID_ARGUMENT


def _channel(port: int) -> grpc.Channel:
    return grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)])


def _register_call(channel: grpc.Channel):  # type: ignore[no-untyped-def]
    return channel.unary_unary("/fleetscope.v1.Ingest/Register", request_serializer=lambda b: b,
                               response_deserializer=pb.RegisterResponse.FromString)


def _stream_call(channel: grpc.Channel):  # type: ignore[no-untyped-def]
    return channel.stream_stream("/fleetscope.v1.Ingest/Stream", request_serializer=lambda b: b,
                                 response_deserializer=pb.Ack.FromString)


def _register(channel: grpc.Channel, name: str) -> str:
    agent_id = str(uuid.uuid4())
    req = pb.RegisterRequest(agent_id=agent_id, boot_id="b", name=name, sent_ns=time.time_ns())
    _register_call(channel)(req.SerializeToString(), metadata=MD, timeout=10)
    return agent_id


def _batch(agent_id: str, seq: int, rows: int = 10) -> pb.Batch:
    """``rows`` GPU rows whose energy_j is seq * 1000 + row: each row's identity, for counting."""
    now = time.time_ns()
    b = pb.Batch(agent_id=agent_id, boot_id="b", seq=seq, created_ns=now, sent_ns=now)
    fill_gpu(b.gpu, [GpuSample(ts_ns=now + i, gpu_index=0, temp_c=50.0, energy_j=float(seq * 1000 + i)) for i in range(rows)])
    return b


def _expected(seqs: list[int], rows: int = 10) -> list[int]:
    return sorted(s * 1000 + i for s in seqs for i in range(rows))


def _fact(b: pb.Batch, value: float) -> None:
    inc = b.incidents.add(ts_ns=b.sent_ns, kind="cuda_oom", severity=pb.LEVEL_ERROR, title="OOM")
    inc.facts["requested_bytes"].real = value


def _counters_nan(b: pb.Batch) -> None:
    b.counters.rss_bytes = math.nan


def _metric(b: pb.Batch, name: str = "train.loss", labels: dict[str, str] | None = None) -> None:
    m = b.metrics.add(name=name, ts_ns=b.sent_ns, value=1.0)
    m.labels.update(labels or {})


def _latency_count(b: pb.Batch) -> None:
    b.latency.add(name="infer", start_ns=b.sent_ns - 10**9, end_ns=b.sent_ns, count=2**63, zero_count=2**63)


def _compact_truncated(b: pb.Batch) -> None:
    compact(b)
    b.compact = b.compact[:-6]


def _compact_bomb(b: pb.Batch) -> None:
    b.ClearField("gpu")
    b.compact = compact_blobs.blob(b"\x00" * (256 << 20), compressor=COMPRESS_ZSTD)  # 8 KB that unfold into 256 MiB


def _compact_lengths_disagree(b: pb.Batch) -> None:
    del b.gpu.temp_c.values[-1]
    compact(b)


def _compact_dictionary_index(b: pb.Batch) -> None:
    b.ClearField("gpu")
    word = b"python"
    strings = struct.pack("<II", 1, 1) + struct.pack("<I", len(word)) + word + struct.pack("<BB", 1, 3)
    processes = compact_blobs.message((pb.ProcessTable.NAME_FIELD_NUMBER, 5, strings))
    b.compact = compact_blobs.blob(compact_blobs.section(7, compact_blobs.message((pb.GpuSamples.PROCESSES_FIELD_NUMBER, 6, processes))))


def _compact_time_overflow(b: pb.Batch) -> None:
    b.ClearField("gpu")
    deltas = struct.pack("<IBq", 3, 1, 2**62) + struct.pack("<B", 8) + b"".join(
        struct.pack("<2q", 2**62, 2**62)[k::8] for k in range(8))
    b.compact = compact_blobs.blob(compact_blobs.section(7, compact_blobs.message((pb.GpuSamples.TS_NS_FIELD_NUMBER, 2, deltas))))


# (case, how the bad batch is made, the field its rejection names)
REJECTED: list[tuple[str, Callable[[pb.Batch], None], str]] = [
    ("nan_fact", lambda b: _fact(b, math.nan), "incidents[0].facts['requested_bytes']"),
    ("inf_fact", lambda b: _fact(b, math.inf), "incidents[0].facts['requested_bytes']"),
    ("nan_counter", _counters_nan, "counters.rss_bytes"),
    ("seq_2_63", lambda b: setattr(b, "seq", 2**63), "seq"),
    ("min_sent_ns", lambda b: setattr(b, "sent_ns", -(2**63)), "sent_ns"),
    ("mb_label_value", lambda b: _metric(b, labels={"k": "x" * 1_000_000}), "metrics[0].labels['k']"),
    ("10k_label_keys", lambda b: _metric(b, labels={f"k{i}": "v" for i in range(10_000)}), "metrics[0].labels"),
    ("nul_metric_name", lambda b: _metric(b, name="train\x00loss"), "metrics[0].name"),
    ("latency_count_2_63", _latency_count, "latency[0].count"),
    ("long_log_line", lambda b: b.logs.add(ts_ns=b.sent_ns, message="x" * 70_000), "logs[0].message"),
    ("long_agent_id", lambda b: setattr(b, "agent_id", "a" * 100_000), "agent_id"),
    # compact-v1 blobs a hostile sender makes up (fleetscope.proto.compact)
    ("compact_truncated_zstd", _compact_truncated, "compact"),
    ("compact_decompression_bomb", _compact_bomb, "compact"),
    ("compact_column_lengths_disagree", _compact_lengths_disagree, "gpu.temp_c"),
    ("compact_dictionary_index", _compact_dictionary_index, "compact.gpu.processes.name"),
    ("compact_time_delta_overflow", _compact_time_overflow, "compact.gpu.ts_ns"),
]


def _send_bystander(port: int, results: list) -> None:
    channel = _channel(port)
    try:
        agent_id = _register(channel, "bystander")
        payloads = [_batch(agent_id, seq).SerializeToString() for seq in range(1, 21)]
        results.extend(_stream_call(channel)(iter(payloads), metadata=MD, timeout=60))
    finally:
        channel.close()


def _run_case(port: int, make_bad: Callable[[pb.Batch], None]) -> list[pb.Ack]:
    """Stream good batch 1, the bad batch 2, good batch 3 while a bystander streams 20 batches."""
    bystander: list[pb.Ack] = []
    thread = threading.Thread(target=_send_bystander, args=(port, bystander))
    thread.start()
    channel = _channel(port)
    try:
        agent_id = _register(channel, "bad-actor")
        bad = _batch(agent_id, 2)
        make_bad(bad)
        payloads = [_batch(agent_id, 1).SerializeToString(), bad.SerializeToString(), _batch(agent_id, 3).SerializeToString()]
        acks = list(_stream_call(channel)(iter(payloads), metadata=MD, timeout=60))
    finally:
        channel.close()
        thread.join(60)
    assert [a.status for a in bystander] == [pb.Ack.STATUS_STORED] * 20
    return acks


@pytest.mark.parametrize(("case", "make_bad", "field"), REJECTED, ids=[c[0] for c in REJECTED])
def test_bad_value_rejected_alone_naming_the_field(db_url: str, collector, case: str, make_bad, field: str) -> None:  # type: ignore[no-untyped-def]
    acks = _run_case(collector.port, make_bad)
    assert len(acks) == 3
    first, bad, third = acks
    assert (first.seq, first.status) == (1, pb.Ack.STATUS_STORED)
    assert (third.seq, third.status) == (3, pb.Ack.STATUS_STORED)
    assert bad.status == pb.Ack.STATUS_REJECTED, bad
    assert bad.code == INVALID.value[0]
    assert bad.reason.startswith(field + ":"), bad.reason
    assert gpu_sequence_numbers(db_url, "bad-actor") == _expected([1, 3]), "the neighbours arrive once, the bad batch not at all"
    assert sorted(gpu_sequence_numbers(db_url, "bystander")) == _expected(list(range(1, 21)))


def test_nul_in_log_line_is_repaired_and_kept(db_url: str, collector) -> None:
    def nul_line(b: pb.Batch) -> None:
        b.logs.add(ts_ns=b.sent_ns, source="/var/log/crash.log", level=pb.LEVEL_ERROR, message="before\x00\x00after")
        b.incidents.add(ts_ns=b.sent_ns, kind="host_oom", severity=pb.LEVEL_ERROR, title="OOM\x00", excerpt="x\x00y")

    acks = _run_case(collector.port, nul_line)
    assert [(a.seq, a.status) for a in acks] == [(1, pb.Ack.STATUS_STORED), (2, pb.Ack.STATUS_STORED), (3, pb.Ack.STATUS_STORED)]
    assert gpu_sequence_numbers(db_url, "bad-actor") == _expected([1, 2, 3])
    engine = create_engine(normalise_url(db_url))
    try:
        with engine.connect() as conn:
            messages = conn.execute(text("SELECT message FROM log_events")).scalars().all()
            incidents = conn.execute(text("SELECT title, excerpt FROM incidents")).all()
    finally:
        engine.dispose()
    assert messages == ["before\ufffd\ufffdafter"]
    assert [tuple(r) for r in incidents] == [("OOM\ufffd", "x\ufffdy")]


@pytest.mark.parametrize(
    ("payload", "what"),
    [(bytes(range(256)) * 4, "random bytes"), (b"\x0a\x02\xc3\x28", "invalid UTF-8 in agent_id")],
    ids=["random_bytes", "invalid_utf8"],
)
def test_undecodable_batch_ends_stream_with_invalid_argument(db_url: str, collector, payload: bytes, what: str) -> None:
    channel = _channel(collector.port)
    try:
        agent_id = _register(channel, "bad-bytes")
        acks: list[pb.Ack] = []
        with pytest.raises(grpc.RpcError) as err:
            for ack in _stream_call(channel)(iter([_batch(agent_id, 1).SerializeToString(), payload]), metadata=MD, timeout=30):
                acks.append(ack)
        assert err.value.code() == INVALID, (what, err.value.code(), err.value.details())
        assert "not a valid fleetscope.v1.Batch" in (err.value.details() or "")
        assert [(a.seq, a.status) for a in acks] == [(1, pb.Ack.STATUS_STORED)], "the batch before it is acknowledged"
        # The agent reconnects and goes on.
        acks = list(_stream_call(channel)(iter([_batch(agent_id, 2).SerializeToString()]), metadata=MD, timeout=30))
        assert [(a.seq, a.status) for a in acks] == [(2, pb.Ack.STATUS_STORED)]
    finally:
        channel.close()
    assert gpu_sequence_numbers(db_url, "bad-bytes") == _expected([1, 2])


def test_undecodable_registration_gets_invalid_argument(sqlite_url: str, collector) -> None:
    channel = _channel(collector.port)
    try:
        with pytest.raises(grpc.RpcError) as err:
            _register_call(channel)(bytes(range(256)), metadata=MD, timeout=10)
    finally:
        channel.close()
    assert err.value.code() == INVALID
    assert "not a valid fleetscope.v1.RegisterRequest" in (err.value.details() or "")


def _big_inventory(req: pb.RegisterRequest) -> None:
    for i in range(3_000):
        req.inventory.gpus.add(index=i % 8, name="NVIDIA H100 80GB HBM3" * 5, uuid=str(uuid.uuid4()))


REGISTRATIONS: list[tuple[str, Callable[[pb.RegisterRequest], None], str]] = [
    ("long_agent_id", lambda r: setattr(r, "agent_id", "a" * 100_000), "agent_id"),
    ("mb_label_value", lambda r: r.labels.update({"k": "x" * 1_000_000}), "labels['k']"),
    ("10k_label_keys", lambda r: r.labels.update({f"k{i}": "v" for i in range(10_000)}), "labels"),
    ("big_inventory", _big_inventory, "inventory"),
    ("nul_hostname", lambda r: setattr(r, "hostname", "host\x00"), "hostname"),
    ("long_name", lambda r: setattr(r, "name", "n" * 201), "name"),
]


@pytest.mark.parametrize(("case", "make_bad", "field"), REGISTRATIONS, ids=[c[0] for c in REGISTRATIONS])
def test_oversized_registration_refused_naming_the_field(db_url: str, collector, case: str, make_bad, field: str) -> None:  # type: ignore[no-untyped-def]
    channel = _channel(collector.port)
    try:
        req = pb.RegisterRequest(agent_id=str(uuid.uuid4()), boot_id="b", name="huge", sent_ns=time.time_ns())
        make_bad(req)
        with pytest.raises(grpc.RpcError) as err:
            _register_call(channel)(req.SerializeToString(), metadata=MD, timeout=30)
        assert err.value.code() == INVALID
        assert (err.value.details() or "").startswith(f"registration: {field}:"), err.value.details()
        agent_id = _register(channel, "fine")
        acks = list(_stream_call(channel)(iter([_batch(agent_id, 1).SerializeToString()]), metadata=MD, timeout=30))
        assert [a.status for a in acks] == [pb.Ack.STATUS_STORED]
    finally:
        channel.close()
    assert [d["name"] for d in _devices_json(db_url)] == ["fine"], "nothing of the refused registration is stored"


def _devices_json(db_url: str) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "fleetscope.cli", "devices", "--db", db_url, "--json"],
                         capture_output=True, text=True, check=True).stdout
    return list(json.loads(out, parse_constant=_refuse_constant)["devices"])


def _refuse_constant(name: str) -> object:
    raise AssertionError(f"--json printed a bare {name}, which is not JSON")


def test_json_output_never_holds_bare_nan(sqlite_url: str, collector_process) -> None:
    """Counters stored before validation refused NaN: ``--json`` prints null for them."""
    c = collector_process(sqlite_url).start()
    channel = _channel(c.port)
    try:
        agent_id = _register(channel, "old-row")
        list(_stream_call(channel)(iter([_batch(agent_id, 1).SerializeToString()]), metadata=MD, timeout=30))
    finally:
        channel.close()
        c.terminate()
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as db:
        db.execute("UPDATE devices SET counters = ?", (json.dumps({"rss_bytes": math.nan, "cpu_seconds": math.inf}),))
    (dev,) = _devices_json(sqlite_url)
    assert dev["counters"]["rss_bytes"] is None and dev["counters"]["cpu_seconds"] is None
