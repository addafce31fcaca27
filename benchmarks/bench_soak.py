"""Soak test: a simulated fleet into two collectors on PostgreSQL, through collector kills and a
database outage; every sample stored exactly once, flat collector memory, bounded ingest lag.

    python benchmarks/bench_soak.py                        # 1,000 devices, 10 minutes
    python benchmarks/bench_soak.py --devices 300 --minutes 3
    python benchmarks/bench_soak.py --pg-cluster "15 soak" --pg-port 5433   # a cluster of its own
    python benchmarks/bench_soak.py --load agents --devices 300   # real agents: spool and uplink too
    python benchmarks/bench_soak.py --citus --devices 100 --minutes 2   # on Citus, a worker stopped once

What runs, all real: ``--devices`` simulated devices (``agent/tools/simulate.py``'s samplers) at
1 Hz, each with its own gRPC stream; two ``fleetscope collector`` processes on one PostgreSQL
database, on 127.0.0.1 and 127.0.0.2 with one port, which every device reaches as one target
with two addresses (``ipv4:127.0.0.1:P,127.0.0.2:P``: gRPC's pick_first over a shuffled list,
what a DNS name with two A records gives). During the run: collector A is killed with SIGKILL
and restarted twice (at 20 % and 70 % of the run), and the database is stopped once
(``pg_ctlcluster --skip-systemctl-redirect VERSION NAME stop``, at 45 %) for ``--db-outage-s``;
a ``finally`` starts it again whatever happens.

``--citus``: the same run on a Citus cluster of its own (``tests/citus_cluster.private_cluster``:
a coordinator and two workers, PostgreSQL 15 on loopback, 4 shards a table), the collectors on
the coordinator (the schema distributed by ``db upgrade``). Instead of the whole database,
worker ``--stop-worker`` (default 1) is stopped once at 45 % for ``--worker-outage-s`` (default
``--db-outage-s``) and started again; the collector kills stay. Meanwhile every write that
touches the stopped worker fails, and the collectors take that as the database being
unavailable (their devices resend): in practice every device stalls, not only those on that
worker, since a write group mixes devices and updates ``devices``, a reference table kept on
every node, and so does each registration. The exactly-once check is also given per worker
(from ``pg_dist_placement``), and the run fails unless devices on the stopped worker are among
those checked. A ``finally`` starts the worker again and destroys the cluster (``--keep-db``
keeps it). It also prints each node's CPU while sampling. Measured on the 2-core machine with
other work beside it (load average 10-15), 100 devices batching every 5 s for 10 minutes: the
coordinator about 1 ms of CPU per device-second, each worker 0.6, the two collectors 2.7
together, the load generator 0.6, about 5 ms in all (plain PostgreSQL, 1,000 devices on the
idle machine: about 1.3, docs/benchmarks.md); the two writers stored at most 60-85 batches a
second there, so 300 devices batching every 5 s did not keep up on that machine, and 1,000
need several cores for the cluster alone.

What simulates the devices (``--load``; the collectors and the database are the same either way):

* ``streams`` (the default): ``soak_streams.py``, one asyncio process (``--stream-processes``,
  default 1) in which each device is one real ``Ingest/Stream`` stream speaking the agent's wire
  protocol with the agent's own code (registration, device key, batches built and stamped as
  the agent does, a window of 16 in flight, acks by seq, the uplink's channel options, failover
  and backoff, every unacknowledged batch resent after a reconnect), but no spool: what is not
  acknowledged is kept in memory. It exercises the collectors, the database, the wire protocol,
  failover and resend at fleet scale. Its readings are ``SimulatedSampler``'s, fresh every
  ``--fresh-every`` seconds (default 10) and re-stamped in between, because a fresh reading
  costs more than everything else the device does. Measured on this 2-core machine (another job
  running beside it, 100-200 devices): 0.6-0.75 ms of CPU per device per second with a batch
  every 5 s and about 0.9 ms with a batch every second in steady state (0.8-0.9 and 1.2 ms with
  every reading fresh, ``--fresh-every 1``); over whole soaks, kills and outage included, 0.8 and
  1.1 ms. So one process carries 1,000 devices batching every 5 s (under one core: its Python
  thread does 85-90 % of the work); batching every second, give it ``--stream-processes 2``.
* ``agents``: a real ``Agent`` per device (on-disk spool, batcher, uplink, a thread per agent),
  spread over ``--agent-processes`` processes (this file's ``--worker``): also exercises the
  agent's spool and uplink, at 2-3.5 ms of CPU per device per second (below), so 1,000 devices
  need 4-6 cores for the harness alone.

At the end the samplers stop, every device delivers what is unacknowledged (``--drain-s``), and
it prints: host and GPU rows sent and stored per device (every device must match exactly, no
duplicates), each collector's RSS over the run (min/median/max and its least-squares slope in
MiB/min after the first minute), the ingest lag over time: every 5 s, how far the newest stored
host sample of the worst device is behind now (a device's backlog is sent oldest first, so this
is the age of what it has not delivered, plus up to a batch interval), against the longest
outage plus a margin (the agents' backoff cap, 30 s, plus two batches), and, not as a check,
the CPU the load generator and each collector used per device per second while sampling.
Exits 1 when a check fails.

What ``--load agents`` costs, and what it leaves out: a real device runs one agent in a process
of its own; here hundreds share a process. What a real agent does per process (read its CPU time
and RSS for its counters, trim the heap every 10 s) is therefore done once per agent process
(``--per-agent-overhead`` does it per agent, as before), and the agents poll no log files between
samples (``--log-poll-s``; they follow none). Sampling, batching every second, the spool (SQLite
WAL, ``synchronous=NORMAL`` as on a device) and one gRPC stream per device are the real agent's.
Measured on this 2-core machine (docs/benchmarks.md): a simulated device costs about 2-3.5 ms of
CPU per second in the agent processes (about 1 ms of it the gRPC stream), the collectors about
1-2 ms and PostgreSQL about 0.3 ms, so 1,000 devices need roughly 4-6 cores to keep up.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TOKEN = "soak-token"
BACKOFF_MAX_S = 30.0  # AgentSettings' default: the longest an agent waits between tries
REPORT_EVERY_S = 5.0  # an agent process's reports: each costs every agent's spool lock, under a busy GIL
LAG_EVERY_S = 5.0
WARM_UP_S = 15.0  # the load generator's CPU is measured from here on: start-up and registrations left out
REPO_ROOT = Path(__file__).resolve().parent.parent  # --citus imports tests/citus_cluster.py from there


# -- the agent side (run with --worker) ------------------------------------------------------


class CountedSampler:
    """A simulated device's sampler that counts the host and GPU rows it hands to the agent,
    and hands none once frozen (so that what was counted is what the agent spools)."""

    def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
        self.inner, self.name = inner, inner.name
        self.host = self.gpu = 0
        self.frozen = False

    def inventory(self):  # type: ignore[no-untyped-def]
        return self.inner.inventory()

    def sample(self, now_ns: int):  # type: ignore[no-untyped-def]
        from fleetscope.agent.samplers._base import SampleSet

        if self.frozen:
            return SampleSet()
        s = self.inner.sample(now_ns)
        self.host += len(s.host)
        self.gpu += len(s.gpu)
        return s

    def close(self) -> None:
        self.inner.close()


def once_per(interval_s: float, fn):  # type: ignore[no-untyped-def]
    """``fn`` called at most once per ``interval_s`` in this process; the other calls get its last
    answer. Thread-safe enough for readings (two threads may both refresh it)."""
    last: list = [float("-inf"), None]

    def cached(*a):  # type: ignore[no-untyped-def]
        now = time.monotonic()
        if now - last[0] >= interval_s:
            last[1], last[0] = fn(*a), now
        return last[1]

    return cached


def share_process_readings() -> None:
    """Take the per-process work of the agents in this process once per process instead of
    once per agent. A real device runs one agent per process, which reads its process's CPU
    time and RSS once per batch and trims its heap every 10 s; here hundreds of agents share a
    process, so each would read the same process-wide figures (and getrusage, malloc_trim cost
    grows with the process's threads and heap arenas): pure harness overhead, O(agents^2)."""
    import types

    from fleetscope.agent.daemon import runner

    real = runner.resource
    runner.resource = types.SimpleNamespace(RUSAGE_SELF=real.RUSAGE_SELF, getrusage=once_per(1.0, real.getrusage))  # type: ignore[assignment]
    runner._rss_bytes = once_per(1.0, runner._rss_bytes)  # type: ignore[assignment]
    runner.release_free_memory = once_per(10.0, runner.release_free_memory)  # type: ignore[assignment]


def run_worker(args: argparse.Namespace) -> int:
    import logging

    from fleetscope.agent.daemon.runner import Agent, AgentSettings
    from fleetscope.agent.tools.simulate import SIMULATED_LABEL, SimulatedSampler
    from fleetscope.proto.v1 import telemetry_pb2 as pb

    logging.basicConfig(level=logging.ERROR)  # reconnects during the kills are expected; errors are not
    if not args.per_agent_overhead:
        share_process_readings()
    state = Path(args.state)
    agents, samplers = [], []
    for i in range(args.first, args.first + args.count):
        kind = "jetson" if i % 2 else "server"
        inner = SimulatedSampler(kind=kind, gpus=args.gpus_per_server, seed=i, latency=False)
        sampler = CountedSampler(inner)
        name = f"soak-{i:05d}"
        settings = AgentSettings(collectors=(args.target,), spool_dir=state / name, token=TOKEN, name=name,
                                 labels={SIMULATED_LABEL: "true", "soak": "true"}, interval_s=1.0, batch_interval_s=args.batch_interval,
                                 drain_timeout_s=1.0,
                                 # A simulated device follows no log files: polling them 4 times a
                                 # second would only wake 1,000 threads for nothing (its sampler's
                                 # own log lines are read every tick).
                                 log_poll_s=args.log_poll_s)
        kind_code = pb.DEVICE_KIND_JETSON if kind == "jetson" else pb.DEVICE_KIND_SERVER
        agents.append(Agent(settings, samplers=[sampler], inventory=inner.inventory_message(), kind=kind_code))
        samplers.append(sampler)
    for a in agents:
        a.start()
        time.sleep(1.0 / max(1, len(agents)))  # spread the devices' ticks over the second
    stop = threading.Event()

    def wait_for_stop() -> None:
        sys.stdin.readline()  # the orchestrator writes a line (or dies: end of file)
        stop.set()

    threading.Thread(target=wait_for_stop, daemon=True).start()

    def report(**extra: object) -> None:
        backlog = [a.spool.stats().batches for a in agents]
        print(json.dumps({"t": time.time(), "connected": sum(a.uplink.status.connected for a in agents),
                          "backlog": sum(backlog), "max_backlog": max(backlog),
                          "host": sum(s.host for s in samplers), "gpu": sum(s.gpu for s in samplers),
                          "rejected": sum(a.uplink.status.rejected for a in agents), **extra}), flush=True)

    while not stop.wait(REPORT_EVERY_S):
        report()
    for s in samplers:
        s.frozen = True
    time.sleep(2.5)  # the last samples taken reach the spool with the next batch
    deadline = time.monotonic() + args.drain_s
    while time.monotonic() < deadline and any(a.spool.stats().batches for a in agents):
        report(draining=True)
        time.sleep(REPORT_EVERY_S)
    undrained = sum(a.spool.stats().batches for a in agents)
    dropped = sum(a.spool.stats().counters.get("dropped_batches", 0) for a in agents)
    final = {a.settings.name: [s.host, s.gpu] for a, s in zip(agents, samplers, strict=True)}
    report(final=final, undrained=undrained, dropped=dropped)
    threads = [threading.Thread(target=a.stop, args=(10.0,)) for a in agents]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0


# -- the orchestrator ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process, all its threads, from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def rss_mib(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class Collector:
    """One ``fleetscope collector`` process slot: killed and restarted in place."""

    def __init__(self, label: str, host: str, port: int, db_url: str, log_dir: Path) -> None:
        self.label, self.host, self.port, self.db_url = label, host, port, db_url
        self.log_path = log_dir / f"collector-{label}.log"
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0
        self.rss: list[tuple[float, float, int]] = []  # (time since start of run, MiB, incarnation)
        # incarnation -> ((t, CPU s) at its first sample, at its latest): its CPU rate while sampled
        self.cpu: dict[int, tuple[tuple[float, float], tuple[float, float]]] = {}
        self.incarnation = 0

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "fleetscope.cli", "collector", "--listen", f"{self.host}:{self.port}", "--db", self.db_url,
                 "--token", TOKEN, "--grace", "5s", "--metrics-listen", "off", "--no-db-upgrade"],
                stdout=log, stderr=subprocess.STDOUT)
        self.started_at = time.monotonic()
        self.incarnation += 1
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"collector {self.label} exited with {self.proc.returncode}; see {self.log_path}")
            with socket.socket() as s:
                if s.connect_ex((self.host, self.port)) == 0:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"collector {self.label} did not listen within 60 s")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def sample_usage(self, t: float) -> None:
        if self.proc is not None and self.proc.poll() is None:
            mib = rss_mib(self.proc.pid)
            if mib is not None:
                self.rss.append((t, mib, self.incarnation))
            cpu = cpu_seconds(self.proc.pid)
            if cpu is not None:
                first = self.cpu.get(self.incarnation, ((t, cpu), (t, cpu)))[0]
                self.cpu[self.incarnation] = (first, (t, cpu))

    def cpu_used(self) -> tuple[float, float]:
        """(CPU seconds, seconds) between the samples of each incarnation so far: leaves out each
        one's start-up and, for a killed one, its last seconds."""
        used = span = 0.0
        for (t0, c0), (t1, c1) in self.cpu.values():
            used, span = used + c1 - c0, span + t1 - t0
        return used, span


class Worker:
    """One load-generator process (``soak_streams.py``, or this file's agent ``--worker``) and the
    reports it prints; both print the same report lines."""

    def __init__(self, args: argparse.Namespace, first: int, count: int, target: str, state: Path) -> None:
        common = ["--first", str(first), "--count", str(count), "--target", target,
                  "--gpus-per-server", str(args.gpus_per_server), "--drain-s", str(args.drain_s),
                  "--batch-interval", str(args.batch_interval)]
        if args.load == "streams":
            cmd = [sys.executable, str(Path(__file__).resolve().with_name("soak_streams.py")), *common, "--token", TOKEN,
                   "--fresh-every", str(args.fresh_every)]
        else:
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", *common, "--state", str(state),
                   "--log-poll-s", str(args.log_poll_s), *(["--per-agent-overhead"] if args.per_agent_overhead else [])]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.last: dict = {}
        self.final: dict | None = None
        self.reports: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                report = json.loads(line)
            except ValueError:
                continue
            self.last = report
            self.reports.append(report)
            if "final" in report:
                self.final = report

    def finish(self) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write("stop\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass


def pg(cluster: str, action: str) -> None:
    version, name = cluster.split()
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, name, action, *(["-m", "fast"] if action == "stop" else [])],
                   check=True, capture_output=True, timeout=120)


def stored_rows(db_url: str) -> dict[str, list[int]]:
    """Host and GPU rows stored per device name: the raw tables, plus the rows folded into
    compressed chunks where the schema has them."""
    from sqlalchemy import create_engine, inspect, text

    from fleetscope.collector.storage.engine import normalise_url

    engine = create_engine(normalise_url(db_url))
    out: dict[str, list[int]] = {}
    try:
        tables = set(inspect(engine).get_table_names())
        with engine.connect() as conn:
            for col, raw, chunks in ((0, "host_samples", "host_chunks"), (1, "gpu_samples", "gpu_chunks")):
                parts = [f"SELECT device_id, count(*) AS n FROM {raw} GROUP BY device_id"]
                if chunks in tables:
                    parts.append(f"SELECT device_id, sum(rows) AS n FROM {chunks} GROUP BY device_id")
                q = (f"SELECT d.name, sum(x.n) FROM ({' UNION ALL '.join(parts)}) x "
                     "JOIN devices d ON d.id = x.device_id GROUP BY d.name")
                for name, n in conn.execute(text(q)):
                    out.setdefault(name, [0, 0])[col] = int(n)
    finally:
        engine.dispose()
    return out


def duplicates(db_url: str) -> int:
    """Rows stored twice: raw rows with the same device, GPU and timestamp, and the rows of a
    chunk that starts where another chunk of its device starts (ingest stores each batch's
    samples as one host and one GPU chunk, so a batch stored twice gives two such chunks)."""
    from sqlalchemy import create_engine, inspect, text

    from fleetscope.collector.storage.engine import normalise_url

    engine = create_engine(normalise_url(db_url))
    try:
        with engine.connect() as conn:
            # Grouped by the device first, so that Citus answers on each worker (a count(DISTINCT
            # (device, ts)) over a distributed table is not pushed down); the same figure elsewhere.
            host = conn.execute(text("SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM host_samples"
                                     " GROUP BY device_id, ts_ns HAVING count(*) > 1) x")).scalar_one()
            gpu = conn.execute(text("SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM gpu_samples"
                                    " GROUP BY device_id, gpu_index, ts_ns HAVING count(*) > 1) x")).scalar_one()
            chunked = 0
            for chunks in set(inspect(engine).get_table_names()) & {"host_chunks", "gpu_chunks"}:
                chunked += int(conn.execute(text(
                    f"SELECT coalesce(sum(s - m), 0) FROM (SELECT sum(rows) AS s, min(rows) AS m FROM {chunks}"
                    " GROUP BY device_id, start_ns HAVING count(*) > 1) x")).scalar_one())
        return int(host) + int(gpu) + chunked
    finally:
        engine.dispose()


@contextmanager
def hold_port(port: int) -> Iterator[None]:
    """Keep a stopped Citus worker's port from being taken meanwhile. ``tests/citus_cluster.py``
    makes clusters on the first free ports from 6450 up, found by binding them; another run's
    tests making their shared cluster while the worker is stopped would take its port (seen:
    the worker could not start again). A socket bound here (not listening: connections are still
    refused, as by a stopped server) makes that search skip the port; PostgreSQL binds with
    SO_REUSEADDR, so the socket is closed just before the worker starts."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past the stopped server's TIME_WAIT sockets
    try:
        s.bind(("127.0.0.1", port))
    except OSError as exc:
        print(f"  (could not hold port {port} while its worker is stopped: {exc})", flush=True)
    try:
        yield
    finally:
        s.close()


def start_worker(cluster, index: int) -> None:  # type: ignore[no-untyped-def]
    """``cluster.start_node``, saying why when it fails (the node's log is removed with the cluster)."""
    try:
        cluster.start_node(index)
    except subprocess.CalledProcessError as exc:
        log_path = cluster.dir / f"worker{index}.log"
        tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else "(no log)"
        raise RuntimeError(f"Citus worker{index} did not start again: {exc.stderr or exc.stdout}\n{tail}") from exc


def server_cpu_seconds(data_dir: Path) -> tuple[int, float] | None:
    """(postmaster pid, CPU s) of a PostgreSQL server: the postmaster's own and its exited
    children's (cutime, cstime), plus its live children's (the backends). A backend that exits
    adds all its CPU at once: close enough for a rate over minutes."""
    try:
        pid = int((data_dir / "postmaster.pid").read_text().split()[0])
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total = sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
        for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
            child_cpu = cpu_seconds(int(child))
            if child_cpu is not None:
                total += round(child_cpu * os.sysconf("SC_CLK_TCK"))
        return pid, total / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class NodeCpu:
    """--citus: each node's CPU while sampling, per server incarnation (a stopped worker starts anew)."""

    def __init__(self, cluster) -> None:  # type: ignore[no-untyped-def]
        from tests.citus_cluster import NODES

        self.nodes = [(name, cluster.dir / name) for name in NODES]
        self.spans: dict[tuple[str, int], tuple[tuple[float, float], tuple[float, float]]] = {}

    def sample(self, t: float) -> None:
        for name, data in self.nodes:
            got = server_cpu_seconds(data)
            if got is not None:
                key = (name, got[0])
                first = self.spans.get(key, ((t, got[1]), (t, got[1])))[0]
                self.spans[key] = (first, (t, got[1]))

    def used(self) -> dict[str, tuple[float, float]]:
        out: dict[str, tuple[float, float]] = {}
        for (name, _), ((t0, c0), (t1, c1)) in self.spans.items():
            used, span = out.get(name, (0.0, 0.0))
            out[name] = (used + c1 - c0, span + t1 - t0)
        return out


def device_workers(db_url: str) -> dict[str, int]:
    """On Citus: {device name: port of the worker that holds its rows}, from the shard placements
    of its ``device_id`` (every per-device table is co-located with ``gpu_chunks``)."""
    from sqlalchemy import create_engine, text

    from fleetscope.collector.storage.engine import normalise_url

    engine = create_engine(normalise_url(db_url))
    try:
        with engine.connect() as conn:
            return {name: int(port) for name, port in conn.execute(text(
                "SELECT d.name, n.nodeport FROM devices d"
                " JOIN pg_dist_placement p ON p.shardid = get_shard_id_for_distribution_column('gpu_chunks', d.id)"
                " JOIN pg_dist_node n ON n.groupid = p.groupid"))}
    finally:
        engine.dispose()


def slope_mib_per_min(points: list[tuple[float, float]]) -> float:
    if len(points) < 3:
        return 0.0
    ts = [t / 60 for t, _ in points]
    ys = [m for _, m in points]
    mt, my = statistics.fmean(ts), statistics.fmean(ys)
    var = sum((t - mt) ** 2 for t in ts)
    return sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True)) / var if var else 0.0


def run(args: argparse.Namespace) -> int:
    # A SIGTERM (a stopped run) unwinds like Ctrl-C: the finally below restarts the database and
    # ends the collectors and agent processes instead of leaving them behind.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if not args.citus:
        return run_soak(args, None)
    sys.path.insert(0, str(REPO_ROOT))
    from tests.citus_cluster import citus_installed, private_cluster

    missing = citus_installed()
    if missing:
        print(f"bench_soak: no Citus cluster can be made here: {missing}", file=sys.stderr)
        return 2
    cluster = private_cluster()
    try:
        return run_soak(args, cluster)
    finally:
        if args.keep_db:
            print(f"\nCitus cluster kept (ports {cluster.ports}, data and logs in {cluster.dir})")
        else:
            cluster.destroy()


def run_soak(args: argparse.Namespace, cluster) -> int:  # type: ignore[no-untyped-def]
    """The soak on one PostgreSQL (``cluster`` None) or on a Citus cluster's coordinator."""
    import psycopg

    duration = args.minutes * 60
    stopped_port = 0  # --citus: the port of the worker stopped
    if cluster is None:
        db_port = args.pg_port
        admin_url = f"postgresql://postgres@127.0.0.1:{db_port}/postgres"
        db_name = "fleetscope_soak_" + secrets.token_hex(4)
        db_url = f"postgresql+psycopg://postgres@127.0.0.1:{db_port}/{db_name}"
        try:
            admin = psycopg.connect(admin_url, autocommit=True, connect_timeout=5)
        except psycopg.OperationalError as exc:
            print(f"bench_soak: PostgreSQL is not reachable at {admin_url}: {exc}", file=sys.stderr)
            return 2
        admin.execute(f'CREATE DATABASE "{db_name}"')
        admin.close()
        where = db_url.rsplit("@", 1)[1]
    else:
        db_url = cluster.create_database()  # on every node, the workers registered, 4 shards a table
        db_port, db_name = cluster.ports[0], db_url.rsplit("/", 1)[1]
        where = (f"Citus coordinator 127.0.0.1:{cluster.ports[0]}/{db_name}, workers 127.0.0.1:{cluster.ports[1]} "
                 f"and 127.0.0.1:{cluster.ports[2]}")
        stopped_port = cluster.ports[args.stop_worker]
    worker_stopped = False
    work = Path(tempfile.mkdtemp(prefix="fleetscope-soak-"))
    subprocess.run([sys.executable, "-m", "fleetscope.cli", "db", "upgrade", "--db", db_url], check=True, capture_output=True)
    port = free_port()
    collectors = [Collector("A", "127.0.0.1", port, db_url, work), Collector("B", "127.0.0.2", port, db_url, work)]
    target = f"ipv4:127.0.0.1:{port},127.0.0.2:{port}"
    workers: list[Worker] = []
    db_stopped = False
    outages: list[tuple[str, float, float]] = []  # (what, start, end) in seconds since the start of the run
    lag_series: list[tuple[float, float]] = []  # (t, worst device's lag s), read from the database
    # On Citus: the same for the devices on the worker that is never stopped, read by a query
    # routed to that worker's shards alone, so it goes on answering while the other is stopped.
    other_lag_series: list[tuple[float, float]] = []
    other_ids: list[int] = []
    lag_stop = threading.Event()

    def watch_other_workers_lag(url: str) -> None:
        if cluster is None:
            return
        try:
            with psycopg.connect(url, connect_timeout=2) as conn:
                if not worker_stopped:  # the placements are read from every node's catalog copy
                    other_ids[:] = [int(r[0]) for r in conn.execute(
                        "SELECT d.id FROM devices d JOIN pg_dist_placement p"
                        " ON p.shardid = get_shard_id_for_distribution_column('host_latest', d.id)"
                        " JOIN pg_dist_node n ON n.groupid = p.groupid WHERE n.nodeport <> %s", (stopped_port,))]
                if not other_ids:
                    return
                newest = conn.execute("SELECT min(ts_ns) FROM host_latest WHERE device_id = ANY(%s)", (other_ids,)).fetchone()
        except psycopg.Error:
            return
        if newest and newest[0]:
            other_lag_series.append((time.monotonic() - start, max(0.0, (time.time_ns() - newest[0]) / 1e9)))

    def watch_lag() -> None:
        url = f"postgresql://postgres@127.0.0.1:{db_port}/{db_name}"
        while not lag_stop.wait(LAG_EVERY_S):
            watch_other_workers_lag(url)
            try:
                with psycopg.connect(url, connect_timeout=2) as conn:
                    # Each device's newest stored host reading (the writer keeps it in host_latest
                    # with every batch, only ever moving forward); the raw table stays empty since
                    # ingest stores a batch's samples as chunks, so it cannot tell the lag.
                    newest = conn.execute("SELECT min(ts_ns) FROM host_latest").fetchone()
            except psycopg.Error:
                continue  # the database (or a Citus worker) is stopped: the next answer shows the lag it left
            if newest and newest[0]:
                lag_series.append((time.monotonic() - start, max(0.0, (time.time_ns() - newest[0]) / 1e9)))

    lag_thread = threading.Thread(target=watch_lag, daemon=True)
    failures: list[str] = []
    collector_cpu = [(0.0, 0.0) for _ in collectors]  # (CPU s, s) of each collector slot while sampling
    cpu_from: tuple[float, list[float | None]] | None = None  # (t, each load process's CPU s) after the warm-up
    cpu_to: tuple[float, list[float | None]] | None = None  # the same when sampling stops
    node_cpu = NodeCpu(cluster) if cluster is not None else None
    print(f"soak: {args.devices} devices at 1 Hz, a batch every {args.batch_interval:g} s, as {args.load} in {args.processes} "
          f"process{'es' if args.processes > 1 else ''} -> 2 collectors "
          f"({target}) on {where}, {args.minutes:g} min; work in {work}", flush=True)
    try:
        for c in collectors:
            c.start()
        per = -(-args.devices // args.processes)
        for first in range(0, args.devices, per):
            workers.append(Worker(args, first, min(per, args.devices - first), target, work / "spools"))
        events = [(0.20, "kill"), (0.45, "db" if cluster is None else "worker"), (0.70, "kill")]
        start = time.monotonic()
        lag_thread.start()
        next_print = 0.0
        while (t := time.monotonic() - start) < duration:
            if events and t >= events[0][0] * duration:
                _, what = events.pop(0)
                if what == "kill":
                    print(f"  [{t:5.0f}s] SIGKILL collector A; restart in {args.restart_after_s:g} s", flush=True)
                    collectors[0].kill()
                    down = time.monotonic() - start
                    time.sleep(args.restart_after_s)
                    collectors[0].start()
                    outages.append(("collector A killed", down, time.monotonic() - start))
                elif what == "worker":
                    node = f"worker{args.stop_worker} (127.0.0.1:{stopped_port})"
                    print(f"  [{t:5.0f}s] stopping Citus {node} for {args.worker_outage_s:g} s", flush=True)
                    cluster.stop_node(args.stop_worker)
                    worker_stopped = True
                    down = time.monotonic() - start
                    with hold_port(stopped_port):
                        time.sleep(args.worker_outage_s)
                    start_worker(cluster, args.stop_worker)
                    worker_stopped = False
                    outages.append((f"{node} stopped", down, time.monotonic() - start))
                    print(f"  [{time.monotonic() - start:5.0f}s] {node} started again", flush=True)
                else:
                    print(f"  [{t:5.0f}s] stopping the database ({args.pg_cluster}) for {args.db_outage_s:g} s", flush=True)
                    pg(args.pg_cluster, "stop")
                    db_stopped = True
                    down = time.monotonic() - start
                    time.sleep(args.db_outage_s)
                    pg(args.pg_cluster, "start")
                    db_stopped = False
                    outages.append(("database stopped", down, time.monotonic() - start))
                continue
            t = time.monotonic() - start
            for c in collectors:
                c.sample_usage(t)
            if cpu_from is None and t >= min(WARM_UP_S, duration / 4):
                cpu_from = (t, [cpu_seconds(w.proc.pid) for w in workers])
            if node_cpu is not None and cpu_from is not None:
                node_cpu.sample(t)
            reports = [w.last for w in workers if w.last]
            if t >= next_print:
                next_print += 15
                rss = ", ".join(f"{c.label} {c.rss[-1][1]:.0f} MiB" for c in collectors if c.rss)
                if reports:
                    print(f"  [{t:5.0f}s] {sum(r['connected'] for r in reports)}/{args.devices} streaming, "
                          f"{sum(r['host'] for r in reports)} host + {sum(r['gpu'] for r in reports)} GPU rows sampled, "
                          f"{sum(r['backlog'] for r in reports)} batches unacknowledged; worst device's lag "
                          f"{lag_series[-1][1] if lag_series else float('nan'):.1f} s; RSS {rss}", flush=True)
                    idle = [why for r in reports for why in r.get("not_streaming", [])]
                    for n, why in sorted(idle, reverse=True)[:3]:
                        print(f"           not streaming: {n} devices, {why}", flush=True)
                    for r in reports:
                        if r.get("stalled"):
                            n, name, since_ack, session, unacked, in_flight = r["stalled"]
                            print(f"           streaming without an ack for over 60 s: {n} devices; longest {name}, "
                                  f"{since_ack} s (session {session} s old, {unacked} batches unacknowledged, "
                                  f"{in_flight} in flight)", flush=True)
            time.sleep(REPORT_EVERY_S)
        cpu_to = (time.monotonic() - start, [cpu_seconds(w.proc.pid) for w in workers])
        collector_cpu = [c.cpu_used() for c in collectors]
        if node_cpu is not None:
            node_cpu.sample(cpu_to[0])
        print("  sampling stops; draining what is unacknowledged", flush=True)
        for w in workers:
            w.finish()
        drain_start = time.monotonic()
        while any(w.final is None and w.proc.poll() is None for w in workers) and time.monotonic() - drain_start < args.drain_s + 60:
            t = time.monotonic() - start
            for c in collectors:
                c.sample_usage(t)
            time.sleep(1.0)
        for w in workers:
            try:
                w.proc.wait(60)
            except subprocess.TimeoutExpired:
                w.proc.kill()
    finally:
        lag_stop.set()
        if db_stopped:
            pg(args.pg_cluster, "start")  # never leave the database stopped
        if worker_stopped:  # nor a worker (the cluster is destroyed after, unless kept)
            try:
                start_worker(cluster, args.stop_worker)
            except RuntimeError as exc:
                print(f"bench_soak: {exc}", file=sys.stderr)  # the collectors and load processes still end below
        for w in workers:
            if w.proc.poll() is None:
                w.proc.kill()
        for c in collectors:
            c.stop()

    # -- figures and checks -------------------------------------------------------------------
    finals = [w.final for w in workers]
    if any(f is None for f in finals):
        failures.append("a load process did not report its final counts")
    sent: dict[str, list[int]] = {}
    for f in finals:
        if f is not None:
            sent.update(f["final"])
            if f["undrained"]:
                failures.append(f"{f['undrained']} batches still unacknowledged after {args.drain_s:g} s of draining")
            if f["dropped"]:
                failures.append(f"{f['dropped']} batches dropped ({'full spools' if args.load == 'agents' else '--max-unacked'})")
            if f["rejected"]:
                failures.append(f"{f['rejected']} batches rejected by a collector")
    stored = stored_rows(db_url)
    dup = duplicates(db_url)
    mismatched = [(name, s, stored.get(name, [0, 0])) for name, s in sorted(sent.items()) if stored.get(name, [0, 0]) != s]
    sent_host, sent_gpu = sum(s[0] for s in sent.values()), sum(s[1] for s in sent.values())
    stored_host = sum(stored.get(n, [0, 0])[0] for n in sent)
    stored_gpu = sum(stored.get(n, [0, 0])[1] for n in sent)
    print("\nexactly once")
    print(f"  host rows: sent {sent_host}, stored {stored_host}; GPU rows: sent {sent_gpu}, stored {stored_gpu}")
    print(f"  devices whose counts differ: {len(mismatched)} of {len(sent)}; rows stored twice (raw or chunked): {dup}")
    for name, s, got in mismatched[:10]:
        print(f"    {name}: sent host/GPU {s}, stored {got}")
    if mismatched:
        failures.append(f"{len(mismatched)} devices' stored counts differ from what they sent")
    if dup:
        failures.append(f"{dup} rows stored twice")
    on_stopped: list[str] = []
    if cluster is not None:
        placed = device_workers(db_url)
        bad = {name for name, _, _ in mismatched}
        for k, wport in enumerate(cluster.ports[1:], start=1):
            names = [n for n in sent if placed.get(n) == wport]
            if wport == stopped_port:
                on_stopped = names
            print(f"  on worker{k} (127.0.0.1:{wport}{', the one stopped' if wport == stopped_port else ''}): "
                  f"{len(names)} devices, {sum(n in bad for n in names)} whose counts differ; host rows stored "
                  f"{sum(stored.get(n, [0, 0])[0] for n in names)}, GPU rows {sum(stored.get(n, [0, 0])[1] for n in names)}")
        unplaced = [n for n in sent if n not in placed]
        if unplaced:
            print(f"  on no worker (never registered): {len(unplaced)}")
        if not on_stopped:
            failures.append(f"no device checked has its rows on the stopped worker{args.stop_worker}")
    print("\ncollector RSS (MiB), per process slot, after each incarnation's first minute")
    for c in collectors:
        settled = [(t, m) for t, m, inc in c.rss if t - min(tt for tt, _, i2 in c.rss if i2 == inc) >= 60]
        values = [m for _, m in settled] or [m for _, m, _ in c.rss]
        if not values:
            continue
        longest = max({inc for _, _, inc in c.rss}, key=lambda inc: sum(1 for *_, i2 in c.rss if i2 == inc))
        trend = slope_mib_per_min([(t, m) for t, m, inc in c.rss if inc == longest and (t, m) in settled])
        print(f"  {c.label}: min {min(values):.0f}, median {statistics.median(values):.0f}, max {max(values):.0f} "
              f"({len(values)} samples, {c.incarnation} starts); slope of its longest run {trend:+.2f} MiB/min")
    # A collector's RSS steps when it takes over the streams of a killed one or replays a backlog;
    # whether it is flat shows between events: from 30 s after the last one to the end of sampling.
    quiet_from = max((end for _, _, end in outages), default=0.0) + 30
    for c in collectors:
        quiet = [(t, m) for t, m, _ in c.rss if quiet_from <= t <= duration]
        if len(quiet) >= 3:
            ms = [m for _, m in quiet]
            print(f"  {c.label} since the last event ({quiet_from:.0f}-{duration:.0f} s, {len(quiet)} samples): "
                  f"min {min(ms):.0f}, max {max(ms):.0f}, slope {slope_mib_per_min(quiet):+.2f} MiB/min")
    print("\ningest lag (how far the worst device's newest stored sample was behind, every 5 s)")
    longest_outage = max((end - begin for _, begin, end in outages), default=0.0)
    bound = longest_outage + BACKOFF_MAX_S + 2 * args.batch_interval
    worst = max((lag for _, lag in lag_series), default=0.0)
    calm = [lag for t, lag in lag_series if all(not (b - 5 <= t <= e + BACKOFF_MAX_S + 5) for _, b, e in outages)]
    for k, (what, b, e) in enumerate(outages):
        until = min(outages[k + 1][1] if k + 1 < len(outages) else float("inf"), e + BACKOFF_MAX_S + 30)
        peak = max((lag for t, lag in lag_series if b <= t < until), default=0.0)
        print(f"  {what} at {b:.0f}-{e:.0f} s ({e - b:.1f} s): lag peaked at {peak:.1f} s")
        if what.startswith("worker") and other_lag_series:
            others = max((lag for t, lag in other_lag_series if b <= t < until), default=float("nan"))
            print(f"    on the devices of the worker that ran on (not a check): peaked at {others:.1f} s")
    if calm:
        print(f"  away from outages: median {statistics.median(calm):.1f} s, max {max(calm):.1f} s")
    print(f"  worst {worst:.1f} s; bound: the longest outage {longest_outage:.1f} s + backoff cap {BACKOFF_MAX_S:g} s + two batches {2 * args.batch_interval:g} s = {bound:.1f} s")
    if worst > bound:
        failures.append(f"ingest lag reached {worst:.1f} s, above {bound:.1f} s")
    print("\nCPU while sampling (ms of CPU per device per second; not a check)")
    if cpu_from is not None and cpu_to is not None and cpu_to[0] > cpu_from[0]:
        used = [b - a for a, b in zip(cpu_from[1], cpu_to[1], strict=True) if a is not None and b is not None]
        rate = sum(used) / (cpu_to[0] - cpu_from[0])
        print(f"  load generator ({args.load}, {args.processes} process{'es' if args.processes > 1 else ''}): "
              f"{1000 * rate / args.devices:.2f} ms ({rate:.2f} cores), from {cpu_from[0]:.0f} s to {cpu_to[0]:.0f} s")
    for c, (used_s, span_s) in zip(collectors, collector_cpu, strict=True):
        if span_s > 0:
            print(f"  collector {c.label}: {1000 * used_s / span_s / args.devices:.2f} ms ({used_s / span_s:.2f} cores), "
                  f"over {span_s:.0f} s of its {c.incarnation} runs")
    if node_cpu is not None:
        for name, (used_s, span_s) in node_cpu.used().items():
            if span_s > 0:
                print(f"  Citus {name}: {1000 * used_s / span_s / args.devices:.2f} ms ({used_s / span_s:.2f} cores), "
                      f"over {span_s:.0f} s")
    if cluster is not None:
        pass  # the cluster (and the database in it) goes with run()'s finally, unless --keep-db
    elif not args.keep_db:
        try:
            admin = psycopg.connect(admin_url, autocommit=True, connect_timeout=10)
            admin.execute(f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)')
            admin.close()
        except psycopg.OperationalError as exc:
            print(f"(could not drop {db_name}: {exc})", file=sys.stderr)
    else:
        print(f"\ndatabase kept: {db_url}")
    if failures:
        print(f"\nlogs and spools kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    verdict = "PASS" if not failures else "FAIL: " + "; ".join(failures)
    if cluster is not None:
        stops = [(what, b, e) for what, b, e in outages if what.startswith("worker")]
        kills = sum(1 for what, _, _ in outages if what.startswith("collector"))
        faults = "; ".join(f"Citus {what} once, {e - b:.1f} s (at {b:.0f}-{e:.0f} s), {len(on_stopped)} of the "
                           f"{len(sent)} devices checked on it" for what, b, e in stops) or "no worker was stopped"
        verdict += f" ({faults}; collector A SIGKILLed {kills} times)"
    print("\nresult: " + verdict)
    return 0 if not failures else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="See the module docstring for what runs and what is checked.")
    p.add_argument("--devices", type=int, default=1000, help="simulated devices, half GPU servers, half Jetsons (default 1000)")
    p.add_argument("--minutes", type=float, default=10.0, help="length of the run before draining (default 10)")
    p.add_argument("--load", choices=("streams", "agents"), default="streams",
                   help="what simulates the devices: streams, a gRPC stream per device from soak_streams.py's "
                        "event loop (light); agents, a real Agent per device with spool and uplink (about 4-6 cores "
                        "at 1,000 devices). Default streams")
    p.add_argument("--stream-processes", type=int, default=1,
                   help="--load streams: processes the devices are spread over (default 1)")
    p.add_argument("--fresh-every", type=int, default=10, metavar="TICKS",
                   help="--load streams: a fresh simulated reading every TICKS seconds, the last one re-stamped in "
                        "between (1: all fresh, as the agents; default 10)")
    p.add_argument("--agent-processes", type=int, default=4,
                   help="--load agents: processes the devices are spread over (default 4)")
    p.add_argument("--gpus-per-server", type=int, default=8, help="GPUs of each simulated server (default 8)")
    p.add_argument("--pg-cluster", default="15 main", metavar="'VERSION NAME'",
                   help="the cluster pg_ctlcluster stops and starts (default '15 main')")
    p.add_argument("--pg-port", type=int, default=5432, help="its port on 127.0.0.1, trust auth as postgres (default 5432)")
    p.add_argument("--db-outage-s", type=float, default=15.0, help="how long the database stays stopped (default 15)")
    p.add_argument("--citus", action="store_true",
                   help="run on a Citus cluster of its own (a coordinator and two workers on loopback, "
                        "tests/citus_cluster.py) and stop one worker once instead of the database")
    p.add_argument("--stop-worker", type=int, choices=(1, 2), default=1, help="--citus: the worker stopped (default 1)")
    p.add_argument("--worker-outage-s", type=float, default=None,
                   help="--citus: how long the worker stays stopped (default: --db-outage-s)")
    p.add_argument("--restart-after-s", type=float, default=5.0, help="how long a killed collector stays down (default 5)")
    p.add_argument("--batch-interval", type=float, default=1.0, metavar="S",
                   help="seconds between an agent's batches (the agent's --batch-interval; samples stay at 1 Hz). "
                        "A large fleet on a thin link sends every few seconds: fewer messages and commits per sample (default 1)")
    p.add_argument("--drain-s", type=float, default=180.0,
                   help="how long the devices get at the end to deliver what is unacknowledged (default 180)")
    p.add_argument("--keep-db", action="store_true",
                   help="keep the soak's database (dropped by default); --citus: keep the whole cluster running")
    p.add_argument("--log-poll-s", type=float, default=0.0,
                   help="--load agents: how often each agent polls its (absent) log files between samples; 0: only "
                        "at each sample (default 0; a real agent's default is 0.25)")
    p.add_argument("--per-agent-overhead", action="store_true",
                   help="--load agents: let every agent read its process's CPU time and RSS and trim the heap itself, as if it "
                        "had the process to itself (default: once per agent process)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--target", default="", help=argparse.SUPPRESS)
    p.add_argument("--state", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return run_worker(args)
    if min(args.devices, args.agent_processes, args.stream_processes, args.fresh_every) < 1 or args.minutes <= 0:
        p.error("--devices, --stream-processes, --agent-processes, --fresh-every and --minutes must be positive")
    if args.batch_interval <= 0 or args.drain_s < 0:
        p.error("--batch-interval must be positive and --drain-s 0 or more")
    if args.worker_outage_s is None:
        args.worker_outage_s = args.db_outage_s
    args.processes = min(args.devices, args.stream_processes if args.load == "streams" else args.agent_processes)
    if len(args.pg_cluster.split()) != 2:
        p.error("--pg-cluster is 'VERSION NAME', e.g. '15 main'")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
