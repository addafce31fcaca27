"""Collector ingest throughput, and the agent's own footprint.

    python benchmarks/bench_ingest.py ingest --db sqlite --agents 100 --seconds 30
    python benchmarks/bench_ingest.py ingest --db postgresql+psycopg://postgres@127.0.0.1/test
    python benchmarks/bench_ingest.py writer --seconds 20
    python benchmarks/bench_ingest.py agent --seconds 60

``ingest`` starts one collector process and a load generator (separate processes) that runs
N simulated agents, each registering and streaming as fast as its acknowledgement window lets
it. Batches are built once per agent and resent with new sequence numbers (the generator's own
cost stays small on a machine it shares with the collector). It prints the sustained sample
rows per second stored, checked against the database at the end (exactly-once on: every
batch passes the collector's per-batch dedup).

``writer`` drives the collector's ``BatchWriter`` directly with the same batches (no gRPC, no
parsing, no validation): the storage path's own rate, to tell the two apart.

``agent`` runs the real ``fleetscope agent`` at a 1 s interval, sampling the host and following
a log file that gets a line every 100 ms, and prints its RSS and CPU share.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

TOKEN = "bench-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(address: str, timeout_s: float = 30.0) -> None:
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex((host, int(port))) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {address} after {timeout_s:.0f} s")


BACKLOG_DAYS = 6


def backlog_start_ns() -> int:
    """Where the agents' timestamps start: the generators send samples far faster than real
    time (125 s of them per batch), so they play an agent uploading a long backlog, starting
    six days back and never reaching the present (a 10-minute run at 200,000 rows/s covers
    about 4.6 days of it). Six, not more: retention's raw tier keeps 7 days (the collector runs
    with it on), and would delete older rows in the middle of the run, which the exactly-once
    check would count as lost."""
    return time.time_ns() - BACKLOG_DAYS * 86_400 * 10**9


def collector_command(address: str, db_url: str, workers: int, rollups: bool) -> list[str]:
    """The collector as a fleet runs it: partitions (PostgreSQL), rollups, compaction and
    retention all on, at their defaults (``--no-rollups`` only when asked)."""
    return [sys.executable, "-m", "fleetscope.cli", "collector", "--listen", address, "--db", db_url,
            "--token", TOKEN, "--workers", str(workers), *([] if rollups else ["--no-rollups"])]


def background_work(db_url: str) -> str:
    """What the jobs did by the end: rows folded into chunks, day partitions (PostgreSQL)."""
    from fleetscope.collector import query

    engine = query.open_database(db_url)
    try:
        with engine.connect() as conn:
            from fleetscope.collector.storage.chunk_reader import chunked_row_counts

            folded = sum(chunked_row_counts(conn).values())
            parts = ""
            if engine.dialect.name == "postgresql":
                from sqlalchemy import text

                n = conn.execute(text("SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhparent "
                                      "WHERE c.relname IN ('gpu_samples', 'host_samples')")).scalar_one()
                parts = f"; sample tables' partitions: {n}"
    finally:
        engine.dispose()
    return (f"background jobs: compaction folded {folded:,} rows into chunks (its first pass runs a minute after "
            f"start, retention's too){parts}")


def build_batch(agent_id: str, gpus: int, steps: int, t0: int):  # type: ignore[no-untyped-def]
    from fleetscope.agent.daemon.batcher import fill_gpu, fill_host
    from fleetscope.agent.records import GpuSample, HostSample
    from fleetscope.proto.v1 import telemetry_pb2 as pb

    rng = random.Random(agent_id)
    gpu_rows, host_rows = [], []
    for s in range(steps):
        ts = t0 + s * 10**9
        host_rows.append(HostSample(ts_ns=ts, cpu_percent=rng.uniform(0, 100), load1=1.0, mem_used_bytes=8e9, mem_total_bytes=64e9))
        for g in range(gpus):
            gpu_rows.append(GpuSample(
                ts_ns=ts, gpu_index=g, util_gpu_percent=rng.uniform(0, 100), util_memory_percent=rng.uniform(0, 100),
                memory_used_bytes=rng.uniform(1e9, 8e10), temp_c=rng.uniform(30, 85), power_w=rng.uniform(50, 700),
                energy_j=float(s), sm_clock_mhz=1980.0, memory_clock_mhz=2619.0, graphics_clock_mhz=1980.0, pstate=0,
                fan_percent=40.0, throttle_reasons=0, memory_total_bytes=8.5e10, power_limit_w=700.0,
            ))
    b = pb.Batch(agent_id=agent_id, boot_id="bench", created_ns=t0)
    fill_host(b.host, host_rows)
    fill_gpu(b.gpu, gpu_rows)
    return b, len(gpu_rows) + len(host_rows)


def generator_process(address: str, agents: int, seconds: float, gpus: int, steps: int, window: int, out: mp.Queue) -> None:
    import grpc

    from fleetscope.agent.daemon.uplink import with_sent_ns
    from fleetscope.proto.v1 import telemetry_pb2 as pb

    stop_at = time.monotonic() + seconds
    totals = {"rows": 0, "batches": 0, "errors": 0}
    lock = threading.Lock()

    def one_agent(i: int) -> None:
        agent_id = str(uuid.uuid4())
        channel = grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 64 << 20)])
        md = (("authorization", f"Bearer {TOKEN}"),)
        register = channel.unary_unary("/fleetscope.v1.Ingest/Register", request_serializer=pb.RegisterRequest.SerializeToString,
                                       response_deserializer=pb.RegisterResponse.FromString)
        register(pb.RegisterRequest(agent_id=agent_id, boot_id="bench", name=f"bench-{os.getpid()}-{i}", sent_ns=time.time_ns(),
                                    labels={"simulated": "true"}), metadata=md, timeout=30)
        batch, rows = build_batch(agent_id, gpus, steps, backlog_start_ns())
        host_ts, gpu_ts = list(batch.host.ts_ns), list(batch.gpu.ts_ns)
        sem = threading.Semaphore(window)
        acked = [0]

        def requests():  # type: ignore[no-untyped-def]
            seq = 0
            while time.monotonic() < stop_at:
                sem.acquire()
                seq += 1
                batch.seq = seq
                # Each batch continues where the last one ended, as a real agent's do: resending
                # the same timestamps would insert every batch into the middle of the
                # (device_id, ts_ns) indexes instead of at each device's end.
                shift = (seq - 1) * steps * 10**9
                batch.host.ts_ns[:] = [t + shift for t in host_ts]
                batch.gpu.ts_ns[:] = [t + shift for t in gpu_ts]
                yield with_sent_ns(batch.SerializeToString(), time.time_ns())

        stream = channel.stream_stream("/fleetscope.v1.Ingest/Stream", request_serializer=lambda b: b,
                                       response_deserializer=pb.Ack.FromString)
        try:
            for ack in stream(requests(), metadata=md):
                sem.release()
                if ack.status == pb.Ack.STATUS_STORED:
                    acked[0] += 1
        except grpc.RpcError:
            with lock:
                totals["errors"] += 1
        with lock:
            totals["rows"] += acked[0] * rows
            totals["batches"] += acked[0]
        channel.close()

    threads = [threading.Thread(target=one_agent, args=(i,)) for i in range(agents)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    totals["cpu_s"] = ru.ru_utime + ru.ru_stime
    out.put(totals)


def _query_int(db_url: str, sql: str) -> int:
    from sqlalchemy import create_engine, text

    from fleetscope.collector.storage.engine import normalise_url

    engine = create_engine(normalise_url(db_url))
    with engine.connect() as conn:
        n = conn.execute(text(sql)).scalar_one()
    engine.dispose()
    return int(n)


def count_rows(db_url: str) -> int:
    """Stored sample rows (host and GPU), as the read API counts them."""
    from fleetscope.collector import query

    engine = query.open_database(db_url)
    try:
        with query.session_scope(engine) as session:
            return sum(query.count_samples(session=session).values())
    finally:
        engine.dispose()


def count_rolled_rows(db_url: str) -> int:
    """Raw rows that the rollup job has folded into minute rollups (each rollup row counts its ``n``)."""
    return _query_int(
        db_url,
        "SELECT (SELECT coalesce(sum(n), 0) FROM gpu_rollups WHERE step_s = 60)"
        " + (SELECT coalesce(sum(n), 0) FROM host_rollups WHERE step_s = 60)",
    )


def print_bytes_per_row(db_url: str, stored: int) -> None:
    """Disk per stored sample row: the sample tables, raw tail and compacted chunks, with their
    indexes (measured as ``bench_storage.py`` does)."""
    from bench_storage import table_bytes

    from fleetscope.collector.storage.engine import make_engine

    engine = make_engine(db_url, create=False)
    try:
        sizes = table_bytes(engine)
    finally:
        engine.dispose()
    tail = sizes["gpu_samples"] + sizes["host_samples"]
    chunks = sizes["gpu_chunks"] + sizes["host_chunks"]
    print(f"bytes per stored row: {(tail + chunks) / max(stored, 1):.1f} (sample tables {(tail + chunks) / 2**20:,.1f} MiB: "
          f"tail {tail / 2**20:,.1f} MiB, chunks {chunks / 2**20:,.1f} MiB)")


def run_ingest(args: argparse.Namespace) -> int:
    tmp = tempfile.TemporaryDirectory(prefix="fleetscope-bench-")
    db_url = f"sqlite:///{tmp.name}/bench.db" if args.db == "sqlite" else args.db
    if args.db != "sqlite":
        from sqlalchemy import create_engine, text

        from fleetscope.collector.storage.engine import normalise_url

        # Every table goes, the migrations' own included, so the collector starts from nothing
        # whatever revision (or older benchmark) left the database behind.
        e = create_engine(normalise_url(db_url))
        with e.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE"))
            conn.execute(text("CREATE SCHEMA public"))
        e.dispose()
    port = free_port()
    address = f"127.0.0.1:{port}"
    log = open(Path(tmp.name) / "collector.log", "wb")
    collector = subprocess.Popen(collector_command(address, db_url, args.workers, args.rollups), stdout=log,
                                 stderr=subprocess.STDOUT)
    try:
        wait_for_port(address, timeout_s=120)  # a loaded machine: migrations and partitions first
    except RuntimeError as exc:
        collector.terminate()
        collector.wait(30)
        log.close()
        tail = (Path(tmp.name) / "collector.log").read_text(errors="replace").strip().splitlines()[-5:]
        raise SystemExit(f"bench_ingest: {exc}; the collector's log ends:\n  " + "\n  ".join(tail)) from None
    print(f"collector pid {collector.pid} on {address}, db {db_url.split('@')[-1]}", file=sys.stderr)
    per_proc = [args.agents // args.processes + (1 if i < args.agents % args.processes else 0) for i in range(args.processes)]
    ctx = mp.get_context("spawn")  # no forked gRPC state in the children
    out = ctx.Queue()
    procs = [ctx.Process(target=generator_process, args=(address, n, args.seconds, args.gpus, args.steps, args.window, out))
             for n in per_proc if n]
    start_rows = 0
    t0 = time.monotonic()
    for p in procs:
        p.start()
    # Progress, and the steady-state rate from the database itself (warm-up excluded).
    time.sleep(min(5.0, args.seconds / 4))
    start_rows, start_t = count_rows(db_url), time.monotonic()
    # The window ends a second before the generators stop sending: their wind-down is not load.
    load_end = t0 + args.seconds - 1.0
    end_rows, end_t = start_rows, start_t
    while time.monotonic() < load_end:
        time.sleep(max(0.0, min(5.0, load_end - time.monotonic())))
        end_rows, end_t = count_rows(db_url), time.monotonic()
        print(f"  [{end_t - t0:.0f}s] {end_rows:,} rows stored, {(end_rows - start_rows) / (end_t - start_t):,.0f} rows/s",
              file=sys.stderr)
    totals = [out.get() for _ in procs]
    for p in procs:
        p.join()
    cpu_collector = _cpu_seconds(collector.pid) + sum(_cpu_seconds(int(c)) for c in _children(collector.pid))
    collector.terminate()
    collector.wait(60)
    acked_rows = sum(t["rows"] for t in totals)
    stored = count_rows(db_url)
    rate = (end_rows - start_rows) / (end_t - start_t)
    print(f"database: {args.db.split('@')[-1]}")
    print(f"agents: {args.agents} in {len(procs)} generator processes, batch = {args.steps} host + {args.steps * args.gpus} GPU rows")
    print(f"sustained: {rate:,.0f} sample rows/s stored (steady state, from database counts)")
    print(f"acknowledged rows: {acked_rows:,}; stored rows: {stored:,}; exactly once: {stored == acked_rows}")
    print(f"collector CPU: {cpu_collector:.1f} s; load generator CPU: {sum(t['cpu_s'] for t in totals):.1f} s; "
          f"stream errors: {sum(t['errors'] for t in totals)}")
    if args.rollups:
        rolled = count_rolled_rows(db_url)
        print(f"minute rollups cover {rolled:,} of the stored rows ({rolled / max(stored, 1):.0%}; a pass runs every 30 s and "
              "leaves each device's newest 10 s)")
    print_bytes_per_row(db_url, stored)
    print(background_work(db_url))
    tmp.cleanup()
    return 0 if stored == acked_rows else 1


def run_writer(args: argparse.Namespace) -> int:
    """The storage path alone, in this process: validated batches go straight to ``BatchWriter``
    from N agent threads, each with ``--window`` batches unacknowledged. No gRPC, no parsing:
    what the writer itself sustains, to compare with ``ingest``."""
    from concurrent.futures import Future

    from fleetscope.collector.ingest.validation import Limits, validate_batch
    from fleetscope.collector.storage.engine import make_engine
    from fleetscope.collector.storage.registry import register_device
    from fleetscope.collector.storage.writer import BatchWriter, WriteItem
    from fleetscope.proto.v1 import telemetry_pb2 as pb

    tmp = tempfile.TemporaryDirectory(prefix="fleetscope-bench-writer-")
    path = Path(tmp.name) / "bench.db"
    engine = make_engine(f"sqlite:///{path}")
    now = time.time_ns()
    agents = []
    for i in range(args.agents):
        agent_id = str(uuid.uuid4())
        req = pb.RegisterRequest(agent_id=agent_id, boot_id="bench", name=f"bench-{i}", sent_ns=now, labels={"simulated": "true"})
        device_id = register_device(engine, req, received_ns=now).device_id
        batch, _ = build_batch(agent_id, args.gpus, args.steps, backlog_start_ns())
        batch.sent_ns, batch.seq = now, 1
        agents.append((agent_id, device_id, batch, validate_batch(batch, Limits())))
    writer = BatchWriter(engine)
    writer.start()
    stop_at = time.monotonic() + args.seconds

    def one_agent(agent_id: str, device_id: int, batch, decoded) -> None:  # type: ignore[no-untyped-def]
        inflight: list[Future] = []
        seq = 0
        while time.monotonic() < stop_at:
            if len(inflight) >= args.window:
                inflight.pop(0).result(120)
            seq += 1
            # The writer shifts a batch's timestamps by its clock correction: here that moves
            # each batch past the last one's end, as an agent's next batch would be.
            shift = (seq - 1) * args.steps * 10**9
            inflight.append(writer.submit(WriteItem(batch=batch, device_id=device_id, agent_id=agent_id, boot_id="bench", seq=seq,
                                                    received_ns=now, correction_ns=shift, clock_skew_ns=0, decoded=decoded)))
        for f in inflight:
            f.result(120)

    threads = [threading.Thread(target=one_agent, args=a) for a in agents]
    for t in threads:
        t.start()
    time.sleep(min(5.0, args.seconds / 4))
    start_rows, start_t = count_rows(f"sqlite:///{path}"), time.monotonic()
    time.sleep(max(0.0, stop_at - 1.0 - time.monotonic()))
    end_rows, end_t = count_rows(f"sqlite:///{path}"), time.monotonic()
    for t in threads:
        t.join()
    writer.stop()
    engine.dispose()
    print(f"writer alone (SQLite), {args.agents} agents, window {args.window}, batch = {args.steps} host + {args.steps * args.gpus} GPU rows")
    print(f"sustained: {(end_rows - start_rows) / (end_t - start_t):,.0f} sample rows/s stored; {writer.groups} groups, "
          f"{writer.batches / max(1, writer.groups):.0f} batches per group")
    tmp.cleanup()
    return 0


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return f.read().split()
    except OSError:
        return []


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def run_agent(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="fleetscope-bench-agent-"))
    port = free_port()
    address = f"127.0.0.1:{port}"
    collector = subprocess.Popen([sys.executable, "-m", "fleetscope.cli", "collector", "--listen", address, "--db",
                                  f"sqlite:///{tmp}/a.db", "--token", TOKEN], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    logfile = tmp / "app.log"
    logfile.touch()
    agent = subprocess.Popen([sys.executable, "-m", "fleetscope.cli", "agent", "--collector", address, "--token", TOKEN,
                              "--name", "bench-agent", "--spool", str(tmp / "spool"), "--interval", "1s",
                              "--log-file", str(logfile), *args.agent_args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(5)  # start-up (imports, first samples) is not the steady state
    cpu0, t0 = _cpu_seconds(agent.pid), time.monotonic()
    rss_max = 0
    n = 0
    while time.monotonic() - t0 < args.seconds:
        with open(logfile, "a") as f:
            f.write(f"2026-12-02 10:00:00 INFO step {n} loss 0.{n % 1000:03d} lr 3e-4\n")
        n += 1
        rss_max = max(rss_max, _rss(agent.pid))
        time.sleep(0.1)
    cpu = _cpu_seconds(agent.pid) - cpu0
    wall = time.monotonic() - t0
    agent.terminate()
    agent.wait(30)
    collector.terminate()
    collector.wait(30)
    print(f"agent at 1 s interval, host sampling + 1 log file ({n} lines): RSS max {rss_max / 2**20:.1f} MiB, "
          f"CPU {100 * cpu / wall:.2f} % of one core over {wall:.0f} s")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("ingest", help="collector rows/s with N streaming agents")
    p.add_argument("--db", default="sqlite", help="'sqlite' (a temp file) or a PostgreSQL URL (everything in its public schema is dropped first!)")
    p.add_argument("--agents", type=int, default=100)
    p.add_argument("--processes", type=int, default=2, help="load generator processes")
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--steps", type=int, default=125, help="timestamps per batch (rows = steps * (gpus + 1))")
    p.add_argument("--window", type=int, default=4, help="unacknowledged batches per agent")
    p.add_argument("--workers", type=int, default=1, help="collector worker processes (fleetscope collector --workers)")
    p.add_argument("--no-rollups", dest="rollups", action="store_false",
                   help="collectors skip the dashboard's rollups (as when another collector maintains them)")
    p.set_defaults(func=run_ingest)
    p = sub.add_parser("writer", help="the storage path alone (no gRPC): BatchWriter rows/s into SQLite")
    p.add_argument("--agents", type=int, default=100)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--steps", type=int, default=125, help="timestamps per batch (rows = steps * (gpus + 1))")
    p.add_argument("--window", type=int, default=4, help="unacknowledged batches per agent")
    p.set_defaults(func=run_writer)
    p = sub.add_parser("agent", help="the real agent's RSS and CPU at a 1 s interval")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("agent_args", nargs="*", help="extra `fleetscope agent` options, after --")
    p.set_defaults(func=run_agent)
    args = parser.parse_args()
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
