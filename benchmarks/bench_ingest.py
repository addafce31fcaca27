"""Collector ingest throughput, and the agent's own footprint.

    python benchmarks/bench_ingest.py ingest --db sqlite --agents 100 --seconds 30
    python benchmarks/bench_ingest.py ingest --db postgresql+psycopg://postgres@127.0.0.1/test
    python benchmarks/bench_ingest.py compare --agents 60 --seconds 45 --collectors 2
    python benchmarks/bench_ingest.py writer --seconds 20
    python benchmarks/bench_ingest.py agent --seconds 60

``ingest`` starts one collector process (``--collectors N``: N of them, each on its own port,
the agents spread over them) and a load generator (separate processes) that runs
N simulated agents, each registering and streaming as fast as its acknowledgement window lets
it. Batches are built once per agent and resent with new sequence numbers (the generator's own
cost stays small on a machine it shares with the collector). It prints the sustained sample
rows per second stored, checked against the database at the end (exactly-once on: every
batch passes the collector's per-batch dedup).

``compare`` runs the same load, one after the other in one run, into a database of its own on
the plain PostgreSQL server at ``--postgres`` (made and dropped) and into a private Citus
cluster, a coordinator and two workers on loopback (``tests/citus_cluster.py``, Citus' default
32 shards a table, the plain server's fsync / synchronous_commit / full_page_writes applied to
its nodes, destroyed at the end), each through ``--collectors`` collector processes with every
job on (the leased jobs split between them by device share). It prints side by side the
steady-state rows, batches and values per second stored, the exactly-once check (every
agent's acknowledged rows against its device's stored rows, no claim doubled), the CPU of the
collectors, the database servers and the generators, and how far the rollup and compaction
jobs got. Needs Citus (``../shared/citus/install.sh``).

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


def wait_serving(proc: subprocess.Popen, address: str, log: Path, timeout_s: float) -> None:
    """Wait for a collector to serve: its port is bound before its start-up (the schema upgrade,
    on Citus the distribution, the partitions ahead) is done, and answers nothing until then."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if f"collector listening on {address}".encode() in log.read_bytes():
            return
        if proc.poll() is not None:
            raise RuntimeError(f"the collector for {address} exited ({proc.returncode})")
        time.sleep(0.2)
    raise RuntimeError(f"the collector on {address} is not serving after {timeout_s:.0f} s")


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


def values_per_batch(gpus: int, steps: int) -> int:
    """Values in one generated batch: a value is one reading of one metric at one instant (the
    stored value columns a sample row has set), as ``bench_peers.py`` counts them."""
    from fleetscope.collector.storage.schema import GPU_SAMPLE_COLUMNS, HOST_VALUE_COLUMNS

    b, _ = build_batch("values", 1, 1, 0)
    host = len({f.name for f, _ in b.host.ListFields()} & set(HOST_VALUE_COLUMNS))
    gpu = len({f.name for f, _ in b.gpu.ListFields()} & set(GPU_SAMPLE_COLUMNS))
    return steps * host + steps * gpus * gpu


def generator_process(addresses: list[str], first: int, agents: int, seconds: float, gpus: int, steps: int, window: int,
                      out: mp.Queue) -> None:
    """Agents ``first`` .. ``first + agents - 1`` of the load, agent ``i`` streaming to
    ``addresses[i % len(addresses)]`` (several collectors: the agents spread evenly over them)."""
    import grpc

    from fleetscope.agent.daemon.uplink import with_sent_ns
    from fleetscope.proto.v1 import telemetry_pb2 as pb

    stop_at = time.monotonic() + seconds
    totals: dict = {"rows": 0, "batches": 0, "sent": 0, "errors": 0, "per_agent": {}}
    lock = threading.Lock()

    def one_agent(i: int) -> None:
        agent_id = str(uuid.uuid4())
        address = addresses[(first + i) % len(addresses)]
        channel = grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 64 << 20)])
        md = (("authorization", f"Bearer {TOKEN}"),)
        register = channel.unary_unary("/fleetscope.v1.Ingest/Register", request_serializer=pb.RegisterRequest.SerializeToString,
                                       response_deserializer=pb.RegisterResponse.FromString)
        register(pb.RegisterRequest(agent_id=agent_id, boot_id="bench", name=f"bench-{os.getpid()}-{i}", sent_ns=time.time_ns(),
                                    labels={"simulated": "true"}), metadata=md, timeout=60)
        batch, rows = build_batch(agent_id, gpus, steps, backlog_start_ns())
        host_ts, gpu_ts = list(batch.host.ts_ns), list(batch.gpu.ts_ns)
        sem = threading.Semaphore(window)
        acked = [0]
        sent = [0]

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
                sent[0] = seq
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
            totals["sent"] += sent[0]
            totals["per_agent"][agent_id] = acked[0] * rows
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


def count_batches(db_url: str) -> int:
    """Batches claimed (stored), all agents."""
    return _query_int(db_url, "SELECT count(*) FROM ingested_batches")


def start_collectors(db_url: str, n: int, workers: int, rollups: bool, logdir: Path) -> list[tuple[subprocess.Popen, str, Path]]:
    """``n`` independent collector processes on the same database, each on a port of its own.
    The first starts alone: it upgrades the schema (and on Citus distributes it) before it
    listens; the others then find the database at head."""
    started: list[tuple[subprocess.Popen, str, Path]] = []

    def start(i: int) -> tuple[subprocess.Popen, str, Path]:
        address = f"127.0.0.1:{free_port()}"
        path = logdir / f"collector-{i}.log"
        with open(path, "wb") as log:
            proc = subprocess.Popen([*collector_command(address, db_url, workers, rollups), "--metrics-listen", "off"],
                                    stdout=log, stderr=subprocess.STDOUT)
        started.append((proc, address, path))
        return proc, address, path

    try:
        start(0)
        wait_serving(*started[0], timeout_s=300)  # migrations, distribution and partitions first
        for i in range(1, n):
            start(i)
        for proc, address, path in started[1:]:
            wait_serving(proc, address, path, timeout_s=300)
    except RuntimeError as exc:
        stop_collectors(started)
        tail = started[-1][2].read_text(errors="replace").strip().splitlines()[-5:]
        raise SystemExit(f"bench_ingest: {exc}; the collector's log ends:\n  " + "\n  ".join(tail)) from None
    return started


def stop_collectors(collectors: list[tuple[subprocess.Popen, str, Path]]) -> None:
    for proc, _, _ in collectors:
        proc.terminate()
    for proc, _, _ in collectors:
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def collectors_cpu(collectors: list[tuple[subprocess.Popen, str, Path]]) -> float:
    return sum(_cpu_seconds(p.pid) + sum(_cpu_seconds(int(c)) for c in _children(p.pid)) for p, _, _ in collectors)


def drive_load(db_url: str, addresses: list[str], args: argparse.Namespace, label: str = "") -> dict:
    """Run the load generators against ``addresses`` for ``args.seconds``; the steady-state rates
    from the database's own counts (warm-up and wind-down excluded) and the generators' totals."""
    per_proc = [args.agents // args.processes + (1 if i < args.agents % args.processes else 0) for i in range(args.processes)]
    firsts = [sum(per_proc[:i]) for i in range(len(per_proc))]
    ctx = mp.get_context("spawn")  # no forked gRPC state in the children
    out = ctx.Queue()
    procs = [ctx.Process(target=generator_process, args=(addresses, first, n, args.seconds, args.gpus, args.steps, args.window, out))
             for first, n in zip(firsts, per_proc) if n]
    t0 = time.monotonic()
    for p in procs:
        p.start()
    time.sleep(min(5.0, args.seconds / 4))
    start_rows, start_batches, start_t = count_rows(db_url), count_batches(db_url), time.monotonic()
    # The window ends a second before the generators stop sending: their wind-down is not load.
    load_end = t0 + args.seconds - 1.0
    end_rows, end_batches, end_t = start_rows, start_batches, start_t
    while time.monotonic() < load_end:
        time.sleep(max(0.0, min(5.0, load_end - time.monotonic())))
        end_rows, end_batches, end_t = count_rows(db_url), count_batches(db_url), time.monotonic()
        print(f"  {label}[{end_t - t0:.0f}s] {end_rows:,} rows stored, {(end_rows - start_rows) / (end_t - start_t):,.0f} rows/s",
              file=sys.stderr)
    totals = [out.get() for _ in procs]
    for p in procs:
        p.join()
    window = end_t - start_t
    per_agent: dict[str, int] = {}
    for t in totals:
        per_agent.update(t["per_agent"])
    return {
        "rows_per_s": (end_rows - start_rows) / window, "batches_per_s": (end_batches - start_batches) / window, "window_s": window,
        "acked_rows": sum(t["rows"] for t in totals), "acked_batches": sum(t["batches"] for t in totals),
        "sent_batches": sum(t["sent"] for t in totals), "errors": sum(t["errors"] for t in totals),
        "generator_cpu_s": sum(t["cpu_s"] for t in totals), "per_agent": per_agent, "generators": len(procs),
    }


def exactly_once(db_url: str, per_agent: dict[str, int]) -> dict:
    """Every agent's acknowledged rows against the rows stored for its device (tail and chunks),
    and the claims: none doubled, and each device's claimed rows equal to its stored rows."""
    from sqlalchemy import create_engine, text

    from fleetscope.collector.storage.engine import normalise_url

    engine = create_engine(normalise_url(db_url))
    stored: dict[int, int] = {}
    claimed: dict[int, int] = {}
    try:
        with engine.connect() as conn:
            devices: dict[str, int] = dict(conn.execute(text("SELECT agent_id, id FROM devices")).all())
            for sql in ("SELECT device_id, sum(rows) FROM host_chunks GROUP BY device_id",
                        "SELECT device_id, sum(rows) FROM gpu_chunks GROUP BY device_id",
                        "SELECT device_id, count(*) FROM host_samples GROUP BY device_id",
                        "SELECT device_id, count(*) FROM gpu_samples GROUP BY device_id"):
                for device_id, n in conn.execute(text(sql)):
                    stored[device_id] = stored.get(device_id, 0) + int(n)
            for device_id, n in conn.execute(text("SELECT device_id, sum(rows) FROM ingested_batches GROUP BY device_id")):
                claimed[device_id] = int(n)
            doubled = int(conn.execute(text(
                "SELECT count(*) FROM (SELECT agent_id, boot_id, seq FROM ingested_batches GROUP BY agent_id, boot_id, seq"
                " HAVING count(*) > 1) AS d")).scalar_one())
    finally:
        engine.dispose()
    differ = [a for a, rows in per_agent.items() if stored.get(devices.get(a, -1), 0) != rows]
    claims_differ = [d for d in stored if claimed.get(d, 0) != stored[d]]
    total = sum(stored.values())
    return {"agents": len(per_agent), "differ": len(differ), "doubled": doubled, "claims_differ": len(claims_differ),
            "sent": sum(per_agent.values()), "stored": total,
            "ok": total > 0 and not differ and not doubled and not claims_differ and total == sum(per_agent.values())}


def jobs_report(db_url: str, stored: int, steps: int) -> dict:
    """How far the leased jobs got: rows rolled into minutes, rows compaction folded into hour
    chunks (a chunk spanning more than one batch's ``steps`` seconds), and how the collectors
    split each job's device shares (``storage/shares.py``)."""
    from sqlalchemy import create_engine, text

    from fleetscope.collector.storage.engine import normalise_url

    rolled = count_rolled_rows(db_url)
    engine = create_engine(normalise_url(db_url))
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT name, owner FROM leases WHERE name LIKE '%/share/%'")).all()
            folded = int(conn.execute(text(
                "SELECT (SELECT coalesce(sum(rows), 0) FROM gpu_chunks WHERE end_ns - start_ns > :span)"
                " + (SELECT coalesce(sum(rows), 0) FROM host_chunks WHERE end_ns - start_ns > :span)"), {"span": steps * 10**9}).scalar_one())
    finally:
        engine.dispose()
    shares: dict[str, dict[str, int]] = {}
    for name, owner in rows:
        job = name.split("/share/")[0]
        shares.setdefault(job, {})
        shares[job][owner] = shares[job].get(owner, 0) + 1
    split = ", ".join(f"{job} {'+'.join(str(n) for n in sorted(owners.values(), reverse=True))}" for job, owners in sorted(shares.items()))
    return {"rolled": rolled, "rolled_share": rolled / max(stored, 1), "folded": folded, "shares": split or "none"}


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
    collectors = start_collectors(db_url, args.collectors, args.workers, args.rollups, Path(tmp.name))
    for proc, address, _ in collectors:
        print(f"collector pid {proc.pid} on {address}, db {db_url.split('@')[-1]}", file=sys.stderr)
    try:
        load = drive_load(db_url, [a for _, a, _ in collectors], args)
        cpu_collector = collectors_cpu(collectors)
    finally:
        stop_collectors(collectors)
    acked_rows = load["acked_rows"]
    stored = count_rows(db_url)
    print(f"database: {args.db.split('@')[-1]}")
    print(f"agents: {args.agents} in {load['generators']} generator processes, batch = {args.steps} host + {args.steps * args.gpus} GPU rows;"
          f" {len(collectors)} collector process(es) of {args.workers} worker(s)")
    print(f"sustained: {load['rows_per_s']:,.0f} sample rows/s stored (steady state, from database counts)")
    print(f"acknowledged rows: {acked_rows:,}; stored rows: {stored:,}; exactly once: {stored == acked_rows}")
    print(f"collector CPU: {cpu_collector:.1f} s; load generator CPU: {load['generator_cpu_s']:.1f} s; "
          f"stream errors: {load['errors']}")
    if args.rollups:
        rolled = count_rolled_rows(db_url)
        print(f"minute rollups cover {rolled:,} of the stored rows ({rolled / max(stored, 1):.0%}; a pass runs every 30 s and "
              "leaves each device's newest 10 s)")
    print_bytes_per_row(db_url, stored)
    print(background_work(db_url))
    tmp.cleanup()
    return 0 if stored == acked_rows else 1


def _server_cpu(postmaster_pid: int) -> float:
    """CPU seconds a PostgreSQL server has used: the postmaster, its live backends and (its
    cumulative children's times) the ones that exited."""
    with open(f"/proc/{postmaster_pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    reaped = (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    return _cpu_seconds(postmaster_pid) + reaped + sum(_cpu_seconds(int(c)) for c in _children(postmaster_pid))


def _postmaster_pid(data_dir: Path) -> int | None:
    try:
        return int((data_dir / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def measure(db_url: str, args: argparse.Namespace, label: str, servers: list[int]) -> dict:
    """One side of ``compare``: ``--collectors`` collector processes on ``db_url``, the load, the
    checks. ``servers``: the database servers' postmaster pids, whose CPU is counted over the load."""
    tmp = tempfile.TemporaryDirectory(prefix="fleetscope-bench-")
    print(f"{label}: starting {args.collectors} collectors (the first upgrades the schema)", file=sys.stderr)
    t = time.monotonic()
    collectors = start_collectors(db_url, args.collectors, args.workers, args.rollups, Path(tmp.name))
    started_s = time.monotonic() - t
    try:
        db_cpu0 = sum(_server_cpu(p) for p in servers)
        load = drive_load(db_url, [a for _, a, _ in collectors], args, label=f"{label} ")
        db_cpu = sum(_server_cpu(p) for p in servers) - db_cpu0
        cpu = collectors_cpu(collectors)
    finally:
        stop_collectors(collectors)
    check = exactly_once(db_url, load["per_agent"])
    jobs = jobs_report(db_url, check["stored"], args.steps)
    errors = sum(1 for _, _, path in collectors for line in path.read_text(errors="replace").splitlines()
                 if " ERROR " in line or "Traceback" in line or " WARNING " in line)
    tmp.cleanup()
    return {**load, "check": check, "jobs": jobs, "collector_cpu_s": cpu, "db_cpu_s": db_cpu, "start_s": started_s,
            "log_problems": errors}


def run_compare(args: argparse.Namespace) -> int:
    """The same load into one plain PostgreSQL database and into a Citus coordinator with two
    workers, one after the other in one run, each through ``--collectors`` collector processes."""
    import secrets

    import psycopg

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.citus_cluster
    from tests.citus_cluster import citus_installed, private_cluster

    why = citus_installed()
    if why is not None:
        raise SystemExit(f"bench_ingest: {why}")
    host, port = args.postgres.rsplit(":", 1)
    try:
        admin = psycopg.connect(host=host, port=int(port), user="postgres", dbname="postgres", autocommit=True, connect_timeout=10)
    except psycopg.Error as exc:
        raise SystemExit(f"bench_ingest: no PostgreSQL at {args.postgres} (user postgres, trust auth): "
                         f"{str(exc).strip().splitlines()[0]}") from None
    durability = {name: admin.execute("SELECT current_setting(%s)", (name,)).fetchone()[0]  # type: ignore[index]
                  for name in ("fsync", "synchronous_commit", "full_page_writes")}
    plain_pid = _postmaster_pid(Path(admin.execute("SHOW data_directory").fetchone()[0]))  # type: ignore[index]
    name = "fleetscope_bench_" + secrets.token_hex(4)
    cluster = None
    results: dict[str, dict] = {}
    shards = 0
    try:
        print(f"starting a private Citus cluster (coordinator + 2 workers), durability as the plain server's: {durability}",
              file=sys.stderr)
        cluster = private_cluster()
        cluster.set_durability(durability)
        admin.execute(f'CREATE DATABASE "{name}"')
        plain_url = f"postgresql+psycopg://postgres@{host}:{port}/{name}"
        try:
            results["PostgreSQL"] = measure(plain_url, args, "PostgreSQL", [plain_pid] if plain_pid else [])
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        citus_url = cluster.create_database(shards=None)  # Citus' default (32), not the tests' 4
        db = citus_url.rsplit("/", 1)[1]
        pids = [p for p in (_postmaster_pid(cluster.dir / node) for node in ("coordinator", "worker1", "worker2")) if p]
        results["Citus"] = measure(citus_url, args, "Citus", pids)
        with cluster._admin(cluster.ports[0], db) as coord:
            shards = coord.execute("SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'gpu_chunks'::regclass").fetchone()[0]  # type: ignore[index]
    finally:
        if cluster is not None:
            cluster.destroy()
        admin.close()
    per_batch_values = values_per_batch(args.gpus, args.steps)
    cols = list(results)
    head = {"PostgreSQL": "PostgreSQL (one server)", "Citus": "Citus (coordinator + 2 workers)"}

    def row(what: str, cells: list[str]) -> None:
        print(f"{what:<44}" + "".join(f"  {c:>36}" for c in cells))

    print(f"ingest, the same load into each: {args.agents} agents in {args.processes} generator processes, {args.seconds:.0f} s each, "
          f"a batch = {args.steps} host + {args.steps * args.gpus} GPU rows ({per_batch_values:,} values), {args.window} unacknowledged a stream")
    print(f"{args.collectors} collector processes x {args.workers} worker(s) on each database (agents spread over them), "
          f"jobs {'on' if args.rollups else 'on, rollups off'}; durability on every server: "
          + ", ".join(f"{k}={v}" for k, v in durability.items()) + f"; Citus: {shards} shards a table (the default)")
    row("", [head[c] for c in cols])
    row("rows/s stored (steady state)", [f"{results[c]['rows_per_s']:,.0f}" for c in cols])
    row("batches/s stored", [f"{results[c]['batches_per_s']:,.1f}" for c in cols])
    row("values/s stored", [f"{results[c]['batches_per_s'] * per_batch_values:,.0f}" for c in cols])
    row("rows acknowledged / stored", [f"{results[c]['check']['sent']:,} / {results[c]['check']['stored']:,}" for c in cols])
    row("exactly once (every agent; claims)", [
        ("yes" if r["check"]["ok"] else "NO") + f": {r['check']['agents'] - r['check']['differ']}/{r['check']['agents']} agents, "
        f"{r['check']['doubled']} doubled" for r in (results[c] for c in cols)])
    row("stream errors; collector log warnings", [f"{results[c]['errors']}; {results[c]['log_problems']}" for c in cols])
    row("CPU s: collectors / database / generators", [
        f"{r['collector_cpu_s']:.0f} / {r['db_cpu_s']:.0f} / {r['generator_cpu_s']:.0f}" for r in (results[c] for c in cols)])
    row("minute rollups cover (of stored rows)", [f"{results[c]['jobs']['rolled_share']:.0%}" for c in cols])
    row("compaction folded rows into hour chunks", [f"{results[c]['jobs']['folded']:,}" for c in cols])
    row("job shares held per collector", [results[c]["jobs"]["shares"] for c in cols])
    row("collectors' start (schema upgrade) s", [f"{results[c]['start_s']:.1f}" for c in cols])
    print("(database CPU: PostgreSQL's server is shared with anything else on it; Citus' counts its three nodes;"
          " steady state = from 5 s in to 1 s before the load stops)")
    return 0 if all(r["check"]["ok"] for r in results.values()) else 1


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


class _Parser(argparse.ArgumentParser):
    """--help (and usage) on stderr: stdout carries only the results."""

    def print_help(self, file=None) -> None:  # type: ignore[no-untyped-def]
        super().print_help(file or sys.stderr)


def main() -> int:
    parser = _Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    p.add_argument("--collectors", type=int, default=1, help="independent collector processes on the same database, each on its own port")
    p.add_argument("--no-rollups", dest="rollups", action="store_false",
                   help="collectors skip the dashboard's rollups (as when another collector maintains them)")
    p.set_defaults(func=run_ingest)
    p = sub.add_parser("compare", help="the same load into one PostgreSQL and into Citus (coordinator + 2 workers), side by side")
    p.add_argument("--postgres", default="127.0.0.1:5432",
                   help="the plain PostgreSQL server, HOST:PORT (user postgres, trust auth); a database of the run's own is made and dropped")
    p.add_argument("--agents", type=int, default=60)
    p.add_argument("--processes", type=int, default=2, help="load generator processes")
    p.add_argument("--seconds", type=float, default=45.0, help="load per database")
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--steps", type=int, default=125, help="timestamps per batch (rows = steps * (gpus + 1))")
    p.add_argument("--window", type=int, default=4, help="unacknowledged batches per agent")
    p.add_argument("--collectors", type=int, default=2, help="independent collector processes on each database, each on its own port")
    p.add_argument("--workers", type=int, default=1, help="worker processes per collector (fleetscope collector --workers)")
    p.add_argument("--no-rollups", dest="rollups", action="store_false", help="collectors skip the rollups")
    p.set_defaults(func=run_compare)
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
