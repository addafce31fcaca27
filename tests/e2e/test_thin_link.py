"""Fresh before old on a thin link (issue 25): a drone back in coverage with a backlog in its
spool, streaming through a 32 kbit/s link (a rate-limited loopback proxy) to a real collector
process. An OOM written after it reconnected is a stored incident within seconds, long before
the backlog is in; the backlog then arrives whole, exactly once. And ``--uplink-rate`` holds a
real agent process to the rate asked, measured on the socket.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, text

from fleetscope.agent.classify import classify_event
from fleetscope.agent.daemon.runner import Agent, AgentSettings
from fleetscope.agent.tools.simulate import SimulatedSampler
from fleetscope.collector.storage.engine import normalise_url
from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.conftest import wait_until
from tests.helpers import sample_count
from tests.tcp_proxy import TcpProxy

LINK = 4000.0  # 32 kbit/s, in bytes a second
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.77 GiB total capacity; "
       "13.12 GiB already allocated; 1.02 GiB free; 13.90 GiB reserved in total by PyTorch)\n")


@dataclass(frozen=True)
class Backlog:
    boot_id: str  # the stream id the backlog's batches carry
    batches: int
    sample_rows: int
    log_rows: int
    bytes: int
    first_ns: int
    last_ns: int


def spool_backlog(spool_dir: Path, seconds: int, *, name: str = "drone-1", ago_s: float = 60.0,
                  batch_s: int = 1) -> Backlog:
    """A Jetson drone's spool after ``seconds`` out of coverage, ending ``ago_s`` ago: a real
    agent (simulated Jetson sampler, batcher, spool) ticks through that stretch of past time with
    no collector, a batch every ``batch_s`` seconds (an agent out of reach seals its readings and
    logs together once a batch interval). The live agent started later on ``spool_dir`` is the
    same agent (same id and device key) and sends it."""
    sampler = SimulatedSampler(kind="jetson", gpus=1, seed=7, latency=False)
    agent = Agent(AgentSettings(collectors=("127.0.0.1:1",), spool_dir=spool_dir, token="test-token", name=name,
                                spool_max_bytes=1 << 30),
                  samplers=[sampler], inventory=sampler.inventory_message(), kind=pb.DEVICE_KIND_JETSON)
    first = time.time_ns() - int((seconds + ago_s) * 1e9)
    for s in range(seconds):
        now = first + s * 10**9
        agent.tick(now)  # a caller's time: no monotonic reading, so nothing is re-anchored
        if (s + 1) % batch_s == 0 or s == seconds - 1:
            agent.flush(now)
    db = agent.spool._db
    assert db is not None
    batches, rows, logs, size = db.execute("SELECT count(*), sum(samples), sum(logs), sum(size) FROM batches").fetchone()
    agent.spool.close()
    return Backlog(agent.boot_id, int(batches), int(rows), int(logs), int(size), first, first + (seconds - 1) * 10**9)


def query(db_url: str, sql: str, **params: object) -> int:
    engine = create_engine(normalise_url(db_url))
    try:
        with engine.connect() as conn:
            return int(conn.execute(text(sql), params).scalar_one() or 0)
    finally:
        engine.dispose()


def backlog_batches_stored(db_url: str, backlog: Backlog) -> int:
    return query(db_url, "SELECT count(*) FROM ingested_batches WHERE boot_id = :b", b=backlog.boot_id)


@dataclass(frozen=True)
class BacklogStored:
    batches: int  # claims of the backlog's stream
    claimed_rows: int  # the sample rows those claims say they carried
    sample_rows: int  # host and GPU rows readable in the backlog's time range
    log_rows: int


def backlog_stored(db_url: str, backlog: Backlog) -> BacklogStored:
    """What the collector holds of ``backlog``: equal to it when every batch landed exactly once."""
    between = {"lo": backlog.first_ns, "hi": backlog.last_ns + 10**9}
    return BacklogStored(
        batches=backlog_batches_stored(db_url, backlog),
        claimed_rows=query(db_url, "SELECT sum(rows) FROM ingested_batches WHERE boot_id = :b", b=backlog.boot_id),
        sample_rows=sample_count(db_url, "host", **between) + sample_count(db_url, "gpu", **between),
        log_rows=query(db_url, "SELECT count(*) FROM log_events WHERE ts_ns >= :lo AND ts_ns < :hi", **between),
    )


def cuda_ooms_stored(db_url: str) -> int:
    return query(db_url, "SELECT count(*) FROM incidents WHERE kind = 'cuda_oom'")


def live_agent(spool_dir: Path, address: str, log_file: Path, *, rate: float, name: str = "drone-1") -> Agent:
    sampler = SimulatedSampler(kind="jetson", gpus=1, seed=8, latency=False)
    settings = AgentSettings(collectors=(address,), spool_dir=spool_dir, token="test-token", name=name,
                             interval_s=1.0, batch_interval_s=1.0, log_files=(str(log_file),),
                             backoff_initial_s=0.1, backoff_max_s=1.0, drain_timeout_s=1.0,
                             uplink_rate_bytes_per_s=rate)
    return Agent(settings, samplers=[sampler], inventory=sampler.inventory_message(), kind=pb.DEVICE_KIND_JETSON,
                 classify=classify_event)


def test_an_oom_after_reconnecting_overtakes_the_backlog_on_a_32kbit_link(tmp_path: Path, sqlite_url: str,
                                                                          collector_process) -> None:
    spool_dir = tmp_path / "spool"
    backlog = spool_backlog(spool_dir, 600)  # ten minutes of a drone: about 150 s of a 32 kbit/s link
    assert backlog.bytes > 100 * LINK, "far more than the link carries in the test's seconds"
    c = collector_process(sqlite_url).start()
    proxy = TcpProxy(("127.0.0.1", c.port), rate_up=LINK, rate_down=LINK).start()
    log_file = tmp_path / "inference.log"
    log_file.write_text("step 1200 latency 41 ms\n")
    # Paced a little below the link (30 of its 32 kbit/s), as the flag's help says to: the link's
    # own queue stays empty, so what the uplink picks next leaves next.
    agent = live_agent(spool_dir, proxy.address, log_file, rate=3750.0)
    agent.start()
    try:
        wait_until(lambda: backlog_batches_stored(sqlite_url, backlog) >= 10, timeout_s=20, message="the backlog draining")
        with open(log_file, "a") as f:
            f.write(OOM)
        written = time.monotonic()
        wait_until(lambda: cuda_ooms_stored(sqlite_url) >= 1, timeout_s=5, interval_s=0.05,
                   message="the OOM written after reconnecting to be a stored incident within 5 s")
        took = time.monotonic() - written
        stored_then = backlog_batches_stored(sqlite_url, backlog)
        assert stored_then < backlog.batches / 2, f"the backlog is still draining ({stored_then}/{backlog.batches})"

        proxy.set_rate(up=None, down=None)  # back on a good link: let it finish
        agent.uplink.set_rate(0)
        wait_until(lambda: backlog_batches_stored(sqlite_url, backlog) >= backlog.batches, timeout_s=30,
                   message="the whole backlog")
    finally:
        agent.stop()
        proxy.stop()
    print(f"OOM stored {took:.2f} s after it was written; {stored_then}/{backlog.batches} backlog batches in by then")
    stored = backlog_stored(sqlite_url, backlog)
    assert stored.batches == backlog.batches, "every batch of the backlog, once"
    assert stored.sample_rows == stored.claimed_rows == backlog.sample_rows, "every sample row of the backlog, none twice"
    assert stored.log_rows == backlog.log_rows
    assert cuda_ooms_stored(sqlite_url) == 1


def test_uplink_rate_32kbit_holds_on_the_socket(tmp_path: Path, sqlite_url: str, collector_process) -> None:
    spool_dir = tmp_path / "spool"
    backlog = spool_backlog(spool_dir, 150, name="drone-2")  # about 35 s of the rate: busy throughout
    c = collector_process(sqlite_url).start()
    proxy = TcpProxy(("127.0.0.1", c.port)).start()  # unlimited; counts what crosses it
    with open(tmp_path / "agent.log", "wb") as log:  # the child keeps its own copy of the descriptor
        agent = subprocess.Popen(
            [sys.executable, "-m", "fleetscope.cli", "agent", "--collector", proxy.address, "--token", "test-token",
             "--spool", str(spool_dir), "--name", "drone-2", "--no-gpu", "--no-kernel-log", "--interval", "1s",
             "--uplink-rate", "32kbit/s"],
            stdout=subprocess.DEVNULL, stderr=log,
        )
    try:
        wait_until(lambda: proxy.bytes_up > 2 * LINK, timeout_s=20, message="the agent streaming")
        time.sleep(1.0)  # past the first second's burst
        b0, t0 = proxy.bytes_up, time.monotonic()
        time.sleep(10.0)
        b1, t1 = proxy.bytes_up, time.monotonic()
        assert agent.poll() is None, (tmp_path / "agent.log").read_text()[-2000:]
        still = backlog_batches_stored(sqlite_url, backlog)
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(20)
        except subprocess.TimeoutExpired:
            agent.kill()
        proxy.stop()
    rate = (b1 - b0) / (t1 - t0)
    print(f"--uplink-rate 32kbit/s: {rate:.0f} B/s on the socket over {t1 - t0:.1f} s")
    assert still < backlog.batches, "the link was busy all along"
    assert abs(rate - LINK) <= 0.10 * LINK, f"{rate:.0f} B/s on the socket for 4000 asked"
