"""Several collectors: agents given one DNS name with an address per collector fail over when
one dies, and nothing is lost or doubled; the jobs that must run once run on one collector, and
the jobs split by device share (rollup, compaction, detectors) never run one share on two collectors.

Everything is real: two collector processes on one PostgreSQL database, one on 127.0.0.1 and
one on 127.0.0.2 (both are loopback on Linux), agents with on-disk spools, and a DNS server on
loopback (``TinyDns``) that answers the name ``collectors.fleet.internal`` with both addresses,
which the agents reach through gRPC's own resolver (``dns://127.0.0.1:PORT/NAME:PORT``, the
form that names the DNS server to ask). Nothing in /etc/hosts is touched.
"""

from __future__ import annotations

import http.client
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from fleetscope.agent.daemon.runner import Agent, AgentSettings
from fleetscope.collector.storage.engine import normalise_url
from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.conftest import CollectorProcess, free_port, wait_until
from tests.helpers import CountingSampler, gpu_sequence_numbers, make_agent

NAME = "collectors.fleet.internal"
JOBS = ("alerts", "detectors", "rollup")
SHARED_JOBS = ("compaction", "detectors", "rollup")  # split by device share: both run them, never a share twice
SHARES = 16


class TinyDns:
    """A DNS server on loopback: A records for one name, NXDOMAIN for any other, and an empty
    answer for the other record types (gRPC asks for AAAA too)."""

    def __init__(self, name: str, addresses: list[str]) -> None:
        self.name, self.addresses = name.lower().rstrip("."), addresses
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.questions: list[tuple[str, int]] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def target(self, port: int) -> str:
        return f"dns://127.0.0.1:{self.port}/{self.name}:{port}"

    def _serve(self) -> None:
        while True:
            try:
                data, peer = self.sock.recvfrom(2048)
            except OSError:
                return
            qid = struct.unpack(">H", data[:2])[0]
            i, labels = 12, []
            while data[i]:
                labels.append(data[i + 1:i + 1 + data[i]].decode())
                i += 1 + data[i]
            qtype = struct.unpack(">H", data[i + 1:i + 3])[0]
            question, name = data[12:i + 5], ".".join(labels).lower()
            self.questions.append((name, qtype))
            answers = [b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 5, 4) + socket.inet_aton(a)
                       for a in self.addresses] if name == self.name and qtype == 1 else []
            rcode = 0 if name == self.name else 3
            header = struct.pack(">HHHHHH", qid, 0x8180 | rcode, 1, len(answers), 0, 0)
            self.sock.sendto(header + question + b"".join(answers), peer)

    def close(self) -> None:
        self.sock.close()


class HostCollector(CollectorProcess):
    """A collector process on ``host`` (127.0.0.1 or 127.0.0.2) with its own metrics port."""

    def __init__(self, host: str, db_url: str, port: int, log_path: Path, extra_args: tuple[str, ...] = ()) -> None:
        self.host, self.metrics_port = host, free_port()
        super().__init__(db_url, port, "test-token", log_path,
                         ("--metrics-listen", f"127.0.0.1:{self.metrics_port}", *extra_args))

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> HostCollector:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "fleetscope.cli", "collector", "--listen", self.address, "--db", self.db_url,
                 "--token", self.token, "--grace", "5s", *self.extra_args], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"collector exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            if self.metrics():
                return self
            time.sleep(0.1)
        raise RuntimeError("collector did not start within 30 s")

    def metrics(self) -> dict[str, float]:
        """This collector's self-metrics by name and labels; empty when it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2) as r:
                body = r.read().decode()
        except (OSError, http.client.HTTPException):  # not up yet, or killed mid-answer
            return {}
        out = {}
        for line in body.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
        return out

    def holds(self, job: str) -> bool:
        return self.metrics().get(f'fleetscope_collector_job_holds_lease{{collector_job="{job}"}}', 0.0) == 1.0

    def shares(self, job: str, metrics: dict[str, float] | None = None) -> set[int]:
        """The device shares of a shared job this collector holds now."""
        m = self.metrics() if metrics is None else metrics
        return {k for k in range(SHARES)
                if m.get(f'fleetscope_collector_job_share_held{{collector_job="{job}",share="{k}"}}') == 1.0}

    def streams(self) -> int:
        return int(self.metrics().get("fleetscope_collector_streams_open", 0.0))


def agent_with_backoff(tmp_path: Path, collectors: list[str], sampler: CountingSampler, name: str, *, initial_s: float) -> Agent:
    """An agent as ``make_agent`` makes it, with a backoff whose first pause is ``initial_s``."""
    settings = AgentSettings(collectors=tuple(collectors), spool_dir=tmp_path / f"spool-{name}", token="test-token", name=name,
                             interval_s=0.05, batch_interval_s=0.1, backoff_initial_s=initial_s, backoff_max_s=30.0)
    return Agent(settings, samplers=[sampler], inventory=pb.Inventory(cpu_model="test"), kind=pb.DEVICE_KIND_SERVER)


@pytest.fixture
def dns() -> TinyDns:
    server = TinyDns(NAME, ["127.0.0.1", "127.0.0.2"])
    yield server
    server.close()


def test_one_name_two_collectors_one_killed_every_sample_once_jobs_once(tmp_path: Path, pg_url: str, dns: TinyDns) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('[detectors]\nquiet_period = "30s"\n')  # the alert job runs (every second) with no rules
    port = free_port()
    collectors = [HostCollector(host, pg_url, port, tmp_path / f"collector-{host}.log", ("--alerts", str(rules))).start()
                  for host in ("127.0.0.1", "127.0.0.2")]
    agents_n, rows = 6, 8_000
    samplers = [CountingSampler(total=rows, per_tick=20) for _ in range(agents_n)]
    agents = [make_agent(tmp_path, [dns.target(port)], s, name=f"dev-{i}", batch_interval_s=0.1) for i, s in enumerate(samplers)]
    double_holders: list[str] = []
    watching = threading.Event()

    def watch_leases() -> None:  # at no moment do two collectors say they ran a job's last pass, or hold one share
        while not watching.is_set():
            running = [(c, c.metrics()) for c in collectors if c.proc and c.proc.poll() is None]
            for key in {k for _, m in running for k in m if k.startswith("fleetscope_collector_job_holds_lease{")}:
                if any(f'"{job}"' in key for job in SHARED_JOBS):
                    continue
                if sum(m.get(key) == 1.0 for _, m in running) > 1:  # every job with a lease, not only JOBS
                    double_holders.append(key)
            for job in SHARED_JOBS:
                held = [c.shares(job, m) for c, m in running]
                twice = set.intersection(*held) if len(held) > 1 else set()
                double_holders.extend(f"{job} share {k}" for k in sorted(twice))
            time.sleep(0.2)

    watcher = threading.Thread(target=watch_leases, daemon=True)
    try:
        watcher.start()
        # The second collector gets its part of the rollup job's shares at the first's next pass.
        wait_until(lambda: all(c.shares(job) for c in collectors for job in ("rollup", "detectors")), timeout_s=75,
                   message="both collectors share the rollup and detector jobs")
        for a in agents:
            a.start()
        wait_until(lambda: all(a.uplink.status.acked >= 5 for a in agents), message="every agent streaming")
        wait_until(lambda: sum(c.streams() for c in collectors) >= agents_n, message="the streams counted")
        victim = max(collectors, key=lambda c: c.streams())  # the one more agents stream to
        survivor = next(c for c in collectors if c is not victim)
        on_victim = victim.streams()
        assert on_victim >= 1
        wait_until(lambda: all(any(c.holds(job) for c in collectors) for job in JOBS), timeout_s=40,
                   message="each job run once by somebody")
        produced_at_kill = [s.produced for s in samplers]
        victim.kill()  # SIGKILL mid-stream: its transactions in flight are lost
        # The victim's leases would expire after their TTL (2 minutes for the rollup): expire
        # them now, as if that time had passed, so the survivor's next pass takes them over.
        engine = create_engine(normalise_url(pg_url))
        with engine.begin() as conn:
            conn.execute(text("UPDATE leases SET expires_ns = 0 WHERE owner LIKE :pid"), {"pid": f"%:{victim.proc.pid}:%"})
        engine.dispose()
        wait_until(lambda: survivor.streams() == agents_n, timeout_s=30, message="every agent on the survivor")
        wait_until(lambda: all(s.done() for s in samplers), timeout_s=90, message="all samples produced")
        wait_until(lambda: all(len(gpu_sequence_numbers(pg_url, f"dev-{i}")) >= rows for i in range(agents_n)),
                   timeout_s=90, message="every sample stored")
        wait_until(lambda: all(survivor.holds(job) for job in JOBS), timeout_s=60, message="the survivor runs every job")
        wait_until(lambda: all(len(survivor.shares(job)) == SHARES for job in ("rollup", "detectors")), timeout_s=60,
                   message="the survivor holds every share of the rollup and detector jobs")
    finally:
        watching.set()
        for a in agents:
            a.stop()
        for c in collectors:
            c.stop()
    assert all(0 < p < rows for p in produced_at_kill), "the kill must land mid-stream"
    for i in range(agents_n):
        stored = gpu_sequence_numbers(pg_url, f"dev-{i}")
        assert len(stored) == rows and sorted(stored) == list(range(rows)), f"dev-{i}: every sample exactly once"
    assert not double_holders, f"two collectors ran {sorted(set(double_holders))} at once"
    assert any(name == NAME and qtype == 1 for name, qtype in dns.questions), "the agents asked the DNS server"


def test_a_dead_or_hung_address_of_the_name_is_skipped_quickly(tmp_path: Path, sqlite_url: str, dns: TinyDns,
                                                               collector_process) -> None:
    """127.0.0.1 refuses (nothing listens) for one name and does not answer for another, while
    127.0.0.2 serves: agents reach 127.0.0.2 within a second or two, long before a connection
    timeout (20 s) or their backoff (set to 5 s here) would let them."""
    port = free_port()
    live = HostCollector("127.0.0.2", sqlite_url, port, tmp_path / "collector.log").start()
    hung = socket.socket()  # a host that does not answer: its accept queue is full, so SYNs are dropped
    hung.bind(("127.0.0.3", port))
    hung.listen(0)
    fillers = []
    for _ in range(3):
        f = socket.socket()
        f.setblocking(False)
        f.connect_ex(("127.0.0.3", port))
        fillers.append(f)
    hung_dns = TinyDns(NAME, ["127.0.0.3", "127.0.0.2"])
    samplers = [CountingSampler(total=200, per_tick=20) for _ in range(8)]
    agents = [agent_with_backoff(tmp_path, [(dns if i % 2 else hung_dns).target(port)], s, f"dev-{i}", initial_s=5.0)
              for i, s in enumerate(samplers)]
    try:
        started = time.monotonic()
        for a in agents:
            a.start()
        wait_until(lambda: all(a.uplink.status.acked >= 1 for a in agents), timeout_s=30, message="first acknowledgements")
        took = time.monotonic() - started
        wait_until(lambda: all(len(gpu_sequence_numbers(sqlite_url, f"dev-{i}")) >= 200 for i in range(8)), timeout_s=30,
                   message="every sample stored")
    finally:
        for a in agents:
            a.stop()
        live.stop()
        hung_dns.close()
        for s in (hung, *fillers):
            s.close()
    assert took < 4.0, f"first acknowledgements after {took:.1f} s"
    for i in range(8):
        assert sorted(gpu_sequence_numbers(sqlite_url, f"dev-{i}")) == list(range(200))


def test_a_dead_address_in_the_list_costs_one_short_pause(tmp_path: Path, sqlite_url: str, collector_process) -> None:
    """Explicit addresses: three dead ones before the live one. The pause between addresses of
    one round stays the shortest; the backoff grows only once every address failed."""
    live = collector_process(sqlite_url).start()
    dead = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    agent = agent_with_backoff(tmp_path, [*dead, live.address], CountingSampler(total=100, per_tick=20), "dev-1", initial_s=1.0)
    try:
        started = time.monotonic()
        agent.start()
        wait_until(lambda: agent.uplink.status.acked >= 1, timeout_s=30, message="first acknowledgement")
        took = time.monotonic() - started
    finally:
        agent.stop()
    # Three pauses of at most 1 s each (uniform in [0.5, 1] s); a backoff doubling per address
    # would have made them up to 1 + 2 + 4 s.
    assert took < 4.0, f"first acknowledgement after {took:.1f} s"
