"""Bad input gets a clear error and loses nothing else: malformed and oversized batches, a
batch an agent built wrong, a spool that fills while the collector is away."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import grpc
import pytest

from fleetscope.agent.daemon.batcher import fill_gpu
from fleetscope.agent.daemon.uplink import with_sent_ns
from fleetscope.agent.records import GpuSample
from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.conftest import wait_until
from tests.helpers import CountingSampler, gpu_sequence_numbers, make_agent, sample_count

MD = (("authorization", "Bearer test-token"),)


def _raw_client(port: int, name: str):  # type: ignore[no-untyped-def]
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 256 << 20)])
    agent_id = str(uuid.uuid4())
    register = channel.unary_unary("/fleetscope.v1.Ingest/Register", request_serializer=pb.RegisterRequest.SerializeToString,
                                   response_deserializer=pb.RegisterResponse.FromString)
    reply = register(pb.RegisterRequest(agent_id=agent_id, boot_id="b", name=name, sent_ns=time.time_ns()), metadata=MD, timeout=10)
    stream = channel.stream_stream("/fleetscope.v1.Ingest/Stream", request_serializer=lambda b: b, response_deserializer=pb.Ack.FromString)
    return channel, agent_id, stream, reply


def _batch(agent_id: str, seq: int, temps: list[float]) -> pb.Batch:
    now = time.time_ns()
    b = pb.Batch(agent_id=agent_id, boot_id="b", seq=seq, created_ns=now)
    fill_gpu(b.gpu, [GpuSample(ts_ns=now + i, gpu_index=0, temp_c=t, energy_j=float(i)) for i, t in enumerate(temps)])
    return b


def test_malformed_batch_rejected_with_field_and_stream_goes_on(tmp_path: Path, db_url: str, collector) -> None:
    # Another agent streams the whole time: it must not notice anything.
    sampler = CountingSampler(total=3_000, per_tick=30)
    other = make_agent(tmp_path, [f"127.0.0.1:{collector.port}"], sampler, name="bystander")
    other.start()
    channel, agent_id, stream, _ = _raw_client(collector.port, "bad-actor")
    batches = [
        _batch(agent_id, 1, [50.0, 51.0]),
        _batch(agent_id, 2, [50.0, math.nan]),  # NaN is never a reading: null_rows says "no reading"
        _batch(agent_id, 3, [50.0, -400.0]),  # below absolute zero
        _batch(agent_id, 4, [52.0]),
    ]
    bad_shape = _batch(agent_id, 5, [50.0, 51.0])
    bad_shape.gpu.gpu_index.append(3)  # three indexes for two rows
    batches.append(bad_shape)
    acks = list(stream(iter([with_sent_ns(b.SerializeToString(), time.time_ns()) for b in batches]), metadata=MD, timeout=30))
    channel.close()
    try:
        wait_until(sampler.done, message="bystander done")
        wait_until(lambda: len(gpu_sequence_numbers(db_url, "bystander")) >= 3_000, message="bystander stored")
    finally:
        other.stop()
    by_seq = {a.seq: a for a in acks}
    assert by_seq[1].status == pb.Ack.STATUS_STORED and by_seq[4].status == pb.Ack.STATUS_STORED
    for seq, field in ((2, "gpu.temp_c[1]"), (3, "gpu.temp_c[1]"), (5, "gpu.gpu_index")):
        assert by_seq[seq].status == pb.Ack.STATUS_REJECTED
        assert by_seq[seq].code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert by_seq[seq].reason.startswith(field), by_seq[seq].reason
    assert "not a finite number" in by_seq[2].reason and "below" in by_seq[3].reason
    assert sorted(gpu_sequence_numbers(db_url, "bystander")) == list(range(3_000))
    devices = _devices_json(db_url)
    assert devices["bad-actor"]["batches_rejected"] == 3
    assert devices["bad-actor"]["batches_stored"] == 2


def test_oversized_batch_refused_and_other_streams_unharmed(tmp_path: Path, sqlite_url: str) -> None:
    from fleetscope.collector.ingest.server import Collector, CollectorSettings

    c = Collector(CollectorSettings(listen="127.0.0.1:0", db_url=sqlite_url, tokens=frozenset(["test-token"]), max_batch_bytes=1 << 20))
    c.start()
    sampler = CountingSampler(total=2_000, per_tick=20)
    other = make_agent(tmp_path, [f"127.0.0.1:{c.port}"], sampler, name="bystander")
    other.start()
    try:
        channel, agent_id, stream, reply = _raw_client(c.port, "too-big")
        assert reply.max_batch_bytes == 1 << 20, "the limit is announced at registration"
        huge = _batch(agent_id, 1, [40.0] * 200_000)  # about 1.6 MB
        with pytest.raises(grpc.RpcError) as err:
            list(stream(iter([with_sent_ns(huge.SerializeToString(), time.time_ns())]), metadata=MD, timeout=30))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        channel.close()
        wait_until(sampler.done, message="bystander done")
        wait_until(lambda: len(gpu_sequence_numbers(sqlite_url, "bystander")) >= 2_000, message="bystander stored")
    finally:
        other.stop()
        c.stop()
    assert sorted(gpu_sequence_numbers(sqlite_url, "bystander")) == list(range(2_000))


def test_agent_counts_a_rejected_batch_and_goes_on(tmp_path: Path, db_url: str, collector) -> None:
    sampler = CountingSampler(total=1_000, per_tick=50, bad_temp_at_tick=3)
    agent = make_agent(tmp_path, [f"127.0.0.1:{collector.port}"], sampler)
    agent.start()
    try:
        wait_until(sampler.done, message="sampling done")
        wait_until(lambda: agent.uplink.status.rejected == 1 and agent.spool.stats().batches == 0, message="rejection acked")
        time.sleep(0.5)  # one more batch carries the agent's counters
    finally:
        agent.stop()
    stored = gpu_sequence_numbers(db_url)
    assert 0 < len(stored) < 1_000, "only the rejected batch is missing"
    assert len(set(stored)) == len(stored)
    dev = _devices_json(db_url)["dev-1"]
    assert dev["batches_rejected"] == 1
    assert "gpu.temp_c" in dev["last_rejection"] and "below" in dev["last_rejection"]
    assert dev["counters"]["rejected_batches"] == 1, "the agent's own count reaches the collector"
    assert "gpu.temp_c" in dev["counters"]["last_rejection"]


def test_spool_full_drops_oldest_samples_keeps_incidents(tmp_path: Path, sqlite_url: str, collector_process) -> None:
    c = collector_process(sqlite_url)  # not started: the agent spools into a small bound
    sampler = CountingSampler(total=20_000, per_tick=100, incidents_every=10, incompressible=True)
    agent = make_agent(tmp_path, [c.address], sampler, spool_max_bytes=256 * 1024, backoff_max_s=1.0)
    agent.start()
    try:
        wait_until(sampler.done, timeout_s=60, message="sampling done")
        time.sleep(0.3)
        stats = agent.spool.stats()
        assert stats.counters["dropped_samples"] > 0, "the bound was reached"
        assert stats.bytes <= 256 * 1024
        c.start()
        wait_until(lambda: agent.spool.stats().batches == 0, timeout_s=60, message="spool drained")
        time.sleep(1.5)  # a later batch carries the final drop counters
    finally:
        agent.stop()
    stored = gpu_sequence_numbers(sqlite_url)
    assert stored and min(stored) > 0, "the oldest samples were the ones dropped"
    assert stored == sorted(stored) and max(stored) == 19_999, "the newest samples all arrived"
    dev = _devices_json(sqlite_url)["dev-1"]
    host_stored = sample_count(sqlite_url, "host", device="dev-1")
    # Each tick holds 100 GPU rows and one host row; the drop count covers both.
    assert dev["counters"]["dropped_samples"] == (20_000 - len(stored)) + (200 - host_stored)
    assert dev["counters"]["dropped_incidents"] == 0
    incidents = json.loads(subprocess.run([sys.executable, "-m", "fleetscope.cli", "incidents", "--db", sqlite_url, "--json"],
                                          capture_output=True, text=True, check=True).stdout)["incidents"]
    # Repeats within the grouping window are one incident with a count: every occurrence counted once.
    assert sum(i["count"] for i in incidents) == sampler.incidents, "every incident survived the full spool"


def _devices_json(db_url: str) -> dict[str, dict]:
    out = subprocess.run([sys.executable, "-m", "fleetscope.cli", "devices", "--db", db_url, "--json"],
                         capture_output=True, text=True, check=True)
    return {d["name"]: d for d in json.loads(out.stdout)["devices"]}


def test_concurrent_replay_of_one_batch_is_stored_once(db_url: str, collector) -> None:
    """Two streams racing to deliver the same batch (an agent failing over mid-send)."""
    channel, agent_id, stream, _ = _raw_client(collector.port, "racer")
    payload = with_sent_ns(_batch(agent_id, 7, [60.0] * 100).SerializeToString(), time.time_ns())
    results: list[list[pb.Ack]] = []

    def send() -> None:
        results.append(list(stream(iter([payload]), metadata=MD, timeout=30)))

    threads = [threading.Thread(target=send) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    channel.close()
    statuses = sorted(a.status for r in results for a in r)
    assert statuses.count(pb.Ack.STATUS_STORED) == 1 and statuses.count(pb.Ack.STATUS_DUPLICATE) == 3
    assert len(gpu_sequence_numbers(db_url, "racer")) == 100


def test_many_agents_multiplexed_over_one_connection_are_all_served(db_url: str, collector) -> None:
    """A gRPC-aware proxy carries many agents' streams over one connection: every stream is served
    at once, none refused (a cap of 8 streams per connection once answered REFUSED_STREAM)."""
    channel = grpc.insecure_channel(f"127.0.0.1:{collector.port}")
    register = channel.unary_unary("/fleetscope.v1.Ingest/Register", request_serializer=pb.RegisterRequest.SerializeToString,
                                   response_deserializer=pb.RegisterResponse.FromString)
    stream = channel.stream_stream("/fleetscope.v1.Ingest/Stream", request_serializer=lambda b: b, response_deserializer=pb.Ack.FromString)
    agents = [str(uuid.uuid4()) for _ in range(40)]
    for i, agent_id in enumerate(agents):
        register(pb.RegisterRequest(agent_id=agent_id, boot_id="b", name=f"proxied-{i}", sent_ns=time.time_ns()),
                 metadata=MD, timeout=10)
    release = threading.Event()
    results: dict[str, list[pb.Ack]] = {}

    def agent(agent_id: str) -> None:
        def requests():  # type: ignore[no-untyped-def]
            release.wait(30)  # every stream is open before any sends: all 40 are concurrent
            yield with_sent_ns(_batch(agent_id, 1, [60.0] * 10).SerializeToString(), time.time_ns())

        results[agent_id] = list(stream(requests(), metadata=MD, timeout=60))

    threads = [threading.Thread(target=agent, args=(a,)) for a in agents]
    for t in threads:
        t.start()
    time.sleep(0.5)
    release.set()
    for t in threads:
        t.join()
    channel.close()
    assert sorted(results) == sorted(agents)
    assert all([a.status for a in acks] == [pb.Ack.STATUS_STORED] for acks in results.values())
    assert sample_count(db_url, "gpu") == 400
