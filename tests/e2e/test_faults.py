"""The pipeline under the failures users meet: a collector killed mid-stream, no collector at
start, a network cut, a wrong token, bad batches, a full spool, a clock an hour off.

Everything is real: agents with on-disk spools, gRPC over loopback, collectors as separate
processes where a test kills them, and SQLite files or a PostgreSQL server underneath.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.conftest import wait_until
from tests.helpers import CountingSampler, gpu_sequence_numbers, make_agent, table_count
from tests.tcp_proxy import TcpProxy


def test_collector_sigkilled_mid_stream_every_sample_stored_once(tmp_path: Path, db_url: str, collector_process) -> None:
    sampler = CountingSampler(total=10_000, per_tick=50)
    c = collector_process(db_url).start()
    agent = make_agent(tmp_path, [c.address], sampler)
    agent.start()
    try:
        wait_until(lambda: agent.uplink.status.acked >= 20, message="first acknowledgements")
        c.kill()  # SIGKILL: no goodbye, transactions in flight are lost on the collector side
        killed_at = sampler.produced
        time.sleep(1.0)
        c.start()  # same port, same database
        wait_until(sampler.done, timeout_s=60, message="all samples produced")
        wait_until(lambda: len(gpu_sequence_numbers(db_url)) >= 10_000, timeout_s=60, message="all samples stored")
    finally:
        agent.stop()
    assert 0 < killed_at < 10_000, "the kill must land mid-stream"
    stored = gpu_sequence_numbers(db_url)
    assert sorted(stored) == list(range(10_000)), "every sample exactly once"


def test_agent_before_collector_everything_arrives_in_order(tmp_path: Path, sqlite_url: str, collector_process) -> None:
    outage_s = float(os.environ.get("FLEETSCOPE_TEST_OUTAGE_S", "60"))
    sampler = CountingSampler(total=10**9, per_tick=10)
    c = collector_process(sqlite_url)
    agent = make_agent(tmp_path, [c.address], sampler, interval_s=0.1, batch_interval_s=0.5, backoff_max_s=2.0)
    agent.start()
    try:
        time.sleep(outage_s)  # the agent samples and spools with nobody listening
        spooled = agent.spool.stats().batches
        produced_while_away = sampler.produced
        c.start()
        wait_until(lambda: len(gpu_sequence_numbers(sqlite_url)) >= produced_while_away, timeout_s=60,
                   message="the backlog to arrive")
    finally:
        agent.stop()
    assert spooled > 0
    stored = gpu_sequence_numbers(sqlite_url)
    assert stored[:produced_while_away] == list(range(produced_while_away)), "backlog arrives complete and in order"
    assert stored == sorted(stored) and len(set(stored)) == len(stored)


def test_network_cut_nothing_lost_nothing_doubled(tmp_path: Path, db_url: str, collector) -> None:
    proxy = TcpProxy(("127.0.0.1", collector.port)).start()
    sampler = CountingSampler(total=6_000, per_tick=40)
    agent = make_agent(tmp_path, [proxy.address], sampler)
    agent.start()
    try:
        wait_until(lambda: agent.uplink.status.acked >= 10, message="streaming through the proxy")
        proxy.cut()  # every connection dropped, new ones refused
        time.sleep(3.0)
        assert agent.spool.stats().batches > 0, "while cut, batches wait in the spool"
        proxy.restore()
        wait_until(sampler.done, timeout_s=60, message="all samples produced")
        wait_until(lambda: len(gpu_sequence_numbers(db_url)) >= 6_000, timeout_s=60, message="all samples stored")
    finally:
        agent.stop()
        proxy.stop()
    assert sorted(gpu_sequence_numbers(db_url)) == list(range(6_000))


def test_wrong_token_rejected_and_data_kept(tmp_path: Path, db_url: str, collector) -> None:
    channel = grpc.insecure_channel(f"127.0.0.1:{collector.port}")
    register = channel.unary_unary("/fleetscope.v1.Ingest/Register", request_serializer=pb.RegisterRequest.SerializeToString,
                                   response_deserializer=pb.RegisterResponse.FromString)
    with pytest.raises(grpc.RpcError) as err:
        register(pb.RegisterRequest(agent_id="x", name="x"), metadata=(("authorization", "Bearer wrong"),), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.RpcError) as err:
        register(pb.RegisterRequest(agent_id="x", name="x"), timeout=5)  # no token at all
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    channel.close()

    sampler = CountingSampler(total=500, per_tick=50)
    agent = make_agent(tmp_path, [f"127.0.0.1:{collector.port}"], sampler, token="wrong", drain_timeout_s=0.5)
    agent.start()
    try:
        wait_until(lambda: "UNAUTHENTICATED" in agent.uplink.status.last_error, message="the refusal")
        wait_until(sampler.done, message="sampling goes on")
        time.sleep(0.5)
        assert agent.spool.stats().batches > 0, "refused data stays spooled for when the token is fixed"
    finally:
        agent.stop()
    # No device, so no reader would see a sample: nothing stored in either place samples sit.
    assert table_count(db_url, "gpu_chunks") == table_count(db_url, "gpu_samples") == 0
    assert table_count(db_url, "devices") == 0


def test_clock_an_hour_off_is_measured_and_corrected(tmp_path: Path, db_url: str, collector) -> None:
    hour = 3600 * 10**9
    sampler = CountingSampler(total=200, per_tick=20)
    agent = make_agent(tmp_path, [f"127.0.0.1:{collector.port}"], sampler, clock=lambda: time.time_ns() - hour)
    agent.start()
    try:
        wait_until(lambda: len(gpu_sequence_numbers(db_url)) >= 200, message="samples stored")
    finally:
        agent.stop()
    out = subprocess.run([sys.executable, "-m", "fleetscope.cli", "devices", "--db", db_url, "--json"],
                         capture_output=True, text=True, check=True)
    device = json.loads(out.stdout)["devices"][0]
    assert abs(device["clock_skew_ns"] - hour) < 5 * 10**9, "the skew is measured"
    metrics = subprocess.run([sys.executable, "-m", "fleetscope.cli", "metrics", "--db", db_url, "--device", "dev-1",
                              "--since", "5m", "--json"], capture_output=True, text=True, check=True)
    gpu = json.loads(metrics.stdout)["gpu"]
    assert len(gpu) == 200, "an hour-off device's samples land in 'the last five minutes' on the collector's clock"
