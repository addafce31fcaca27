"""fleetscope on Citus under the faults of a cluster (issue 30): a worker stopped for 20 s while
agents stream, the coordinator restarted. Real agents with on-disk spools, a collector process,
and a cluster of the test's own (``tests/citus_cluster.private_cluster``: the shared one serves
the other tests at the same time, and they must not see its nodes stop).

What a user checks: every sample each device produced is stored exactly once when the node is
back, and the agents held (spooled) what the collector could not store meanwhile."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from fleetscope.collector.storage.chunk_codec import decode_chunk
from fleetscope.collector.storage.engine import make_engine
from tests.conftest import wait_until
from tests.helpers import CountingSampler, make_agent

pytestmark = pytest.mark.processes

DEVICES = ("drone-a", "server-b", "server-c")
PER_DEVICE = 6_000


@pytest.fixture
def cluster() -> Iterator:
    from tests.citus_cluster import citus_installed, private_cluster

    missing = citus_installed()
    if missing:
        if os.environ.get("FLEETSCOPE_REQUIRE_CITUS"):
            pytest.fail(f"Citus must be tested for real here: {missing}")
        pytest.skip(missing)
    made = private_cluster()
    try:
        yield made
    finally:
        made.destroy()


def stored_sequence_numbers(db_url: str, device: str) -> list[int]:
    """The sequence numbers (``energy_j``) stored for ``device``, tail rows and chunks, each
    read by a query routed to the device's worker (its id named)."""
    engine = make_engine(db_url, create=False)
    try:
        with engine.connect() as conn:
            device_id = conn.execute(text("SELECT id FROM devices WHERE name = :n"), {"n": device}).scalar()
            if device_id is None:
                return []
            out = [int(v) for v in conn.execute(
                text("SELECT energy_j FROM gpu_samples WHERE device_id = :d"), {"d": device_id}).scalars()]
            for data in conn.execute(text("SELECT data FROM gpu_chunks WHERE device_id = :d"), {"d": device_id}).scalars():
                _ts, values, _texts = decode_chunk(bytes(data))
                out.extend(int(v) for v in values["energy_j"].tolist() if v == v)
            return out
    finally:
        engine.dispose()


def worker_ports(db_url: str) -> dict[str, int]:
    """{device: the port of the worker that holds its rows}."""
    engine = make_engine(db_url, create=False)
    try:
        with engine.connect() as conn:
            return {name: port for name, port in conn.execute(text(
                "SELECT d.name, n.nodeport FROM devices d"
                " JOIN pg_dist_placement p ON p.shardid = get_shard_id_for_distribution_column('gpu_chunks', d.id)"
                " JOIN pg_dist_node n ON n.groupid = p.groupid"))}
    finally:
        engine.dispose()


def _stream_through(tmp_path: Path, cluster, collector_process, fault) -> str:  # type: ignore[no-untyped-def]
    """Agents stream into a collector on ``cluster``; ``fault()`` runs mid-stream; then every
    device's samples must be stored exactly once. Returns the database's URL."""
    db_url = cluster.create_database()
    c = collector_process(db_url).start()  # its start-up upgrade distributes the schema
    samplers = {name: CountingSampler(total=PER_DEVICE, per_tick=20) for name in DEVICES}
    agents = [make_agent(tmp_path, [c.address], s, name=name) for name, s in samplers.items()]
    for agent in agents:
        agent.start()
    try:
        wait_until(lambda: all(a.uplink.status.acked >= 10 for a in agents), timeout_s=60, message="first acknowledgements")
        at_fault = {name: s.produced for name, s in samplers.items()}
        fault(agents)
        wait_until(lambda: all(s.done() for s in samplers.values()), timeout_s=120, message="all samples produced")
        wait_until(lambda: all(len(stored_sequence_numbers(db_url, n)) >= PER_DEVICE for n in DEVICES),
                   timeout_s=120, message="all samples stored")
    finally:
        for agent in agents:
            agent.stop()
        c.stop()
    for name in DEVICES:
        assert 0 < at_fault[name] < PER_DEVICE, "the fault must land mid-stream"
        assert sorted(stored_sequence_numbers(db_url, name)) == list(range(PER_DEVICE)), f"{name}: every sample exactly once"
    return db_url


def test_a_worker_stopped_for_20_s_while_agents_stream_loses_and_doubles_nothing(
    tmp_path: Path, cluster, collector_process  # type: ignore[no-untyped-def]
) -> None:
    def stop_a_worker(_agents) -> None:  # type: ignore[no-untyped-def]
        cluster.stop_node(1)
        try:
            time.sleep(20)
        finally:
            cluster.start_node(1)

    db_url = _stream_through(tmp_path, cluster, collector_process, stop_a_worker)
    assert cluster.ports[1] in worker_ports(db_url).values(), "a device on the stopped worker"


def test_the_coordinator_restarted_while_agents_stream_loses_and_doubles_nothing(
    tmp_path: Path, cluster, collector_process  # type: ignore[no-untyped-def]
) -> None:
    def restart_the_coordinator(_agents) -> None:  # type: ignore[no-untyped-def]
        cluster.stop_node(0)
        time.sleep(5)
        cluster.start_node(0)

    _stream_through(tmp_path, cluster, collector_process, restart_the_coordinator)
