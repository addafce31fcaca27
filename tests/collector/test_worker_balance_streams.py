"""Two collector workers on one port (SO_REUSEPORT, one shared loads file) even out real agents
over real gRPC: at registration, and by asking streams to move when agents leave one worker.
Every batch is still stored exactly once."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetscope.collector.ingest.server import Collector, CollectorSettings
from fleetscope.collector.ingest.worker_balance import WorkerLoads
from tests.conftest import free_port, wait_until
from tests.helpers import CountingSampler, gpu_sequence_numbers, make_agent

pytestmark = pytest.mark.server

AGENTS = 8


@pytest.fixture
def workers(tmp_path: Path, db_url: str) -> Iterator[tuple[list[Collector], WorkerLoads]]:
    port = free_port()
    loads_path = tmp_path / "agents"
    WorkerLoads.create(loads_path, 2)
    started: list[Collector] = []
    try:
        for i in range(2):  # one after the other: the first creates the schema
            c = Collector(CollectorSettings(listen=f"127.0.0.1:{port}", reuse_port=True, worker_loads=str(loads_path),
                                            worker_index=i, db_url=db_url, tokens=frozenset(["test-token"]), grace_s=2.0,
                                            rollups=False, compaction=False, retention=None, detectors=None))
            c.start()
            started.append(c)
            balancer = c._service.balancer
            assert balancer is not None
            balancer.check_s = 0.3  # the default 2 s, shortened for the test
        yield started, WorkerLoads(loads_path, 0)
    finally:
        for c in started:
            c.stop()


def even(loads: WorkerLoads, total: int) -> bool:
    counts = loads.counts()
    return None not in counts and sum(counts) == total and max(counts) - min(counts) <= 1  # type: ignore[type-var,operator,arg-type]


def streaming_on(worker: Collector) -> set[str]:
    return {b.agent_id for b in list(worker._service._open_streams) if b.agent_id}


def test_agents_even_out_over_two_workers_and_move_when_one_loses_its_agents(
        tmp_path: Path, db_url: str, workers: tuple[list[Collector], WorkerLoads]) -> None:
    collectors, loads = workers
    port = collectors[0].port
    samplers = [CountingSampler(total=10**9, per_tick=5) for _ in range(AGENTS)]
    agents = [make_agent(tmp_path, [f"127.0.0.1:{port}"], s, name=f"a{i}") for i, s in enumerate(samplers)]
    by_id = {a.agent_id: a for a in agents}
    running = list(agents)
    try:
        for a in agents:
            a.start()
        # Whatever the kernel's hash did with eight connections: 4 and 4 in the end.
        wait_until(lambda: even(loads, AGENTS) and sum(len(streaming_on(c)) for c in collectors) == AGENTS,
                   timeout_s=30, message=f"{AGENTS} agents streaming, split evenly: {loads.counts()}")
        # Every agent on worker 0 goes away: worker 1 then holds them all and asks some to move.
        leaving = [by_id[i] for i in streaming_on(collectors[0])]
        assert len(leaving) == AGENTS // 2
        for a in leaving:
            a.stop()
            running.remove(a)
        left = len(running)
        wait_until(lambda: even(loads, left) and sum(len(streaming_on(c)) for c in collectors) == left,
                   timeout_s=60, message=f"the {left} remaining agents split evenly again: {loads.counts()}")
        assert streaming_on(collectors[0]), "agents moved onto the emptied worker"
        assert collectors[1]._service.balancer.shed >= 1
    finally:
        for s in samplers:
            with s.lock:
                s.total = s.produced  # stop producing: what was produced must all arrive
        for a in running:
            a.stop()
    for a, s in zip(agents, samplers, strict=True):
        numbers = gpu_sequence_numbers(db_url, a.settings.name)
        assert len(numbers) == len(set(numbers)), f"{a.settings.name}: a batch stored twice"
        assert sorted(numbers) == list(range(s.produced)), f"{a.settings.name}: batches lost"


def test_an_agent_turned_away_reconnects_to_the_same_address_at_once_and_says_so_at_info(
        tmp_path: Path, db_url: str, workers: tuple[list[Collector], WorkerLoads], caplog: pytest.LogCaptureFixture) -> None:
    collectors, loads = workers
    port = collectors[0].port
    collectors.pop(1).stop()  # one worker listens; the other's slot says it is alive and empty
    other = WorkerLoads(loads.path, 1)
    other.publish(0)
    # A second address that counts who connects to it: the agent must not fall over to it.
    spare = socket.socket()
    spare.bind(("127.0.0.1", 0))
    spare.listen(8)
    spare.setblocking(False)
    first = make_agent(tmp_path, [f"127.0.0.1:{port}"], CountingSampler(total=50, per_tick=5), name="first")
    sampler = CountingSampler(total=50, per_tick=5)
    turned = make_agent(tmp_path, [f"127.0.0.1:{port}", f"127.0.0.1:{spare.getsockname()[1]}"], sampler, name="turned")
    try:
        first.start()
        wait_until(lambda: loads.counts()[0] == 1, timeout_s=15, message="the first agent on worker 0")
        with caplog.at_level(logging.INFO, logger="fleetscope.agent.daemon.uplink"):
            turned.start()
            # Worker 0 holds one more than worker 1's none: it turns the agent away three times,
            # then keeps it.
            wait_until(lambda: turned.uplink.status.connected, timeout_s=15, message="the turned-away agent streaming")
        assert collectors[0]._service.balancer.refused == 3
        said = [r for r in caplog.records if "rebalancing" in r.getMessage()]
        assert len(said) == 3 and all(r.levelno == logging.INFO for r in said), [r.getMessage() for r in said]
        assert turned.uplink.status.collector == f"127.0.0.1:{port}" and turned.uplink.status.last_error == ""
        with pytest.raises(BlockingIOError):
            spare.accept()  # nobody connected to the second address
        wait_until(lambda: sampler.done() and len(gpu_sequence_numbers(db_url, "turned")) >= 50, timeout_s=30,
                   message="the turned-away agent's samples stored")
    finally:
        first.stop()
        turned.stop()
        spare.close()
    assert sorted(gpu_sequence_numbers(db_url, "turned")) == list(range(50))
