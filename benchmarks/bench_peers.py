"""fleetscope beside its peers, in one command: storage against VictoriaMetrics, the agent against
node_exporter.

    python benchmarks/bench_peers.py                          # both parts, defaults below
    python benchmarks/bench_peers.py storage --devices 20 --hours 2
    python benchmarks/bench_peers.py agent --seconds 60

The peers are Debian's packages: ``apt-get install -y victoria-metrics prometheus-node-exporter``
(the script says so and stops when they are missing).

**storage**: one fleet of the dashboard benchmark's shape (half Jetson drones with one GPU, half
servers with 8 GPUs, 1 s samples, its generators for the values) for ``--hours`` of fleet time,
built once, before any clock runs, into (1) agent batches of 125 s for fleetscope (compact-v1, as
agents send them; ``--wire rows`` for the plain form of older agents) and (2) JSON
lines (one per series and 125 s) for VictoriaMetrics, carrying exactly the same values. Then,
each alone on the machine:

* fleetscope (SQLite file, and PostgreSQL in a database of its own): one ``fleetscope
  collector`` process (rollups, compaction, detectors and retention off while it ingests) and two
  load-generator processes streaming every batch over gRPC like agents uploading a backlog; the
  clock stops at the last acknowledgement (each one follows a commit), and the stored rows are
  counted. Then the rollup job and the compaction job (``collector/jobs/compaction.py``, fold
  boundary now) run as a collector would run them, the database is vacuumed, and its size is
  divided by the values stored.
* VictoriaMetrics (single node, loopback, a temp ``-storageDataPath``): the JSON lines POSTed to
  ``/api/v1/import`` from four threads; the clock stops after ``/internal/force_flush``; the
  values are counted by a query; bytes are ``du`` of the data directory after the flush (and
  again after a settle, for its background merges).

A "value" is one reading of one metric at one instant (a GPU row with 14 readings is 14 values),
the unit VictoriaMetrics counts in.

**agent**: ``fleetscope agent`` at 1 s (host sampling, one followed log file getting a line
every 100 ms, a local collector) beside ``prometheus-node-exporter`` scraped at 1 s by a loop in
this script, both for ``--seconds``: CPU % of one core (utime + stime from /proc/PID/stat) and
RSS (VmRSS, mean and max) of each. The collector's and the scraper's own costs are not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

NS = 10**9
TOKEN = "bench-token"
STEPS = 125  # seconds of fleet time per batch, as bench_ingest sends them
PEERS = {"victoria-metrics": "victoria-metrics", "node_exporter": "prometheus-node-exporter"}
INSTALL = "apt-get install -y victoria-metrics prometheus-node-exporter"
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout_s:.0f} s")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def rss_split(pid: int) -> tuple[int, int]:
    """VmRSS's two parts, in bytes: anonymous (heap, objects, stacks) and file pages (the code of
    the libraries and the interpreter, shared with the page cache and with other processes)."""
    got = {"RssAnon:": 0, "RssFile:": 0}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key = line.split(None, 1)[0] if line.strip() else ""
            if key in got:
                got[key] = int(line.split()[1]) * 1024
    return got["RssAnon:"], got["RssFile:"]


def du_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def find_peers() -> dict[str, str] | None:
    found = {k: shutil.which(v) for k, v in PEERS.items()}
    if not all(found.values()):
        missing = ", ".join(PEERS[k] for k, v in found.items() if not v)
        print(f"bench_peers: {missing} not found; install the peers with: {INSTALL}", file=sys.stderr)
        return None
    return {k: str(v) for k, v in found.items()}


# ------------------------------------------------------------------------------ the fleet, built once


def build_fleet(devices: int, hours: float, out: Path, wire: str = "compact") -> dict[str, int]:
    """Write the fleet's batches (fleetscope) and JSON lines (VictoriaMetrics) under ``out``;
    returns the counts: rows, values, series."""
    import numpy as np
    from bench_dashboard import device_specs, gpu_rows, host_rows  # the dashboard benchmark's fleet

    from fleetscope.agent.daemon.batcher import fill_gpu, fill_host
    from fleetscope.agent.records import GpuSample, HostSample
    from fleetscope.collector.storage.schema import GPU_SAMPLE_COLUMNS, HOST_VALUE_COLUMNS
    from fleetscope.proto.compact import compact
    from fleetscope.proto.v1 import telemetry_pb2 as pb

    specs = device_specs(devices, 8)
    # Whole aligned hours and a few minutes more (the device's newest rows, which stay raw),
    # ending at least ten minutes ago: every hour is a window the compaction job may fold (it
    # folds whole aligned windows below the rollups' progress, which stops short of the newest).
    hour = 3600 * NS
    t_start = (time.time_ns() - 900 * NS) // hour * hour - int(hours * 3600) * NS
    windows = (int(hours * 3600) + 250) // STEPS
    (out / "fs").mkdir(parents=True)
    (out / "vm").mkdir()
    counts = {"rows": 0, "values": 0, "series": 0, "batches": 0}
    vm_body = bytearray()
    vm_files = 0

    def flush_vm(force: bool = False) -> None:
        nonlocal vm_body, vm_files
        if vm_body and (force or len(vm_body) > 8 << 20):
            (out / "vm" / f"{vm_files:05d}.jsonl").write_bytes(vm_body)
            vm_files += 1
            vm_body = bytearray()

    def vm_lines(metric: str, labels: dict[str, str], ts_ms: list[int], values: list) -> None:
        pairs = [(t, v) for t, v in zip(ts_ms, values) if v is not None]
        if pairs:
            vm_body.extend(json.dumps({"metric": {"__name__": metric, **labels}, "values": [v for _, v in pairs],
                                       "timestamps": [t for t, _ in pairs]}, separators=(",", ":")).encode() + b"\n")

    for sp in specs:
        energy = np.zeros(sp.gpus)
        counters = np.zeros(4)
        agent_id = str(uuid.uuid4())
        series: set[str] = set()
        with open(out / "fs" / f"{sp.id:05d}.batches", "wb") as f:
            # What the device's agent registers with: its kind and GPUs (the collector's workers
            # weigh a connection by them).
            f.write(json.dumps({"agent_id": agent_id, "name": sp.name, "jetson": sp.jetson, "gpus": sp.gpus,
                                "gpu_name": sp.model[0]}).encode() + b"\n")
            for w in range(windows):
                t0 = t_start + w * STEPS * NS
                t1 = t0 + STEPS * NS
                gpu = list(gpu_rows(sp, t0, t1, energy))
                host = list(host_rows(sp, t0, t1, counters))
                b = pb.Batch(agent_id=agent_id, boot_id="bench", seq=w + 1, created_ns=t1)
                fill_gpu(b.gpu, [GpuSample(ts_ns=r[1], gpu_index=r[2], **{k: v for k, v in zip(GPU_SAMPLE_COLUMNS, r[3:])
                                                                         if v is not None}) for r in gpu])
                fill_host(b.host, [HostSample(ts_ns=r[1], **{k: v for k, v in zip(HOST_VALUE_COLUMNS, r[2:])
                                                              if v is not None}) for r in host])
                payload = (compact(b) if wire == "compact" else b).SerializeToString()
                f.write(len(payload).to_bytes(4, "little") + payload)
                counts["rows"] += len(gpu) + len(host)
                counts["batches"] += 1
                # The same readings for VictoriaMetrics: one series per metric, device (and GPU).
                for g in range(sp.gpus):
                    rows = gpu[g * STEPS:(g + 1) * STEPS]
                    ts_ms = [r[1] // 10**6 for r in rows]
                    for i, name in enumerate(GPU_SAMPLE_COLUMNS):
                        vals = [r[3 + i] for r in rows]
                        n = sum(v is not None for v in vals)
                        if n:
                            counts["values"] += n
                            series.add(f"{name}:{g}")
                            vm_lines(f"fleetscope_gpu_{name}", {"device": sp.name, "gpu": str(g)}, ts_ms, vals)
                ts_ms = [r[1] // 10**6 for r in host]
                for i, name in enumerate(HOST_VALUE_COLUMNS):
                    vals = [r[2 + i] for r in host]
                    n = sum(v is not None for v in vals)
                    if n:
                        counts["values"] += n
                        series.add(name)
                        vm_lines(f"fleetscope_host_{name}", {"device": sp.name}, ts_ms, vals)
                flush_vm()
        counts["series"] += len(series)
        say(f"  built {sp.name}: {windows} batches")
    flush_vm(force=True)
    counts["first_ns"], counts["last_ns"] = t_start, t_start + windows * STEPS * NS
    return counts


# ------------------------------------------------------------------------------ fleetscope


def _read_batches(path: Path) -> tuple[dict, list[bytes]]:
    with open(path, "rb") as f:
        head = json.loads(f.readline())
        data = f.read()
    out, i = [], 0
    while i < len(data):
        n = int.from_bytes(data[i:i + 4], "little")
        out.append(data[i + 4:i + 4 + n])
        i += 4 + n
    return head, out


def generator_process(address: str, files: list[str], window: int, ready, go, out) -> None:  # type: ignore[no-untyped-def]
    """Replays devices' batch files, each device on its own connection as a real agent is: a
    channel with its own subchannel pool (gRPC otherwise shares one TCP connection among every
    channel of a process to the same address, and the workers of a `--workers` collector would
    get two connections for twenty devices). Like the agent, a device turned away by a worker to
    even the workers' loads (UNAVAILABLE, ``REBALANCE_DETAIL``) reconnects on a new connection and
    sends again what was not acknowledged."""
    import grpc

    from fleetscope.agent.daemon.uplink import with_sent_ns
    from fleetscope.proto.v1 import telemetry_pb2 as pb
    from fleetscope.proto.vocabulary import CAPABILITIES, REBALANCE_DETAIL

    md = (("authorization", f"Bearer {TOKEN}"),)
    options = [("grpc.max_send_message_length", 64 << 20), ("grpc.use_local_subchannel_pool", 1)]
    rebalanced = [0]

    def turned_away(exc: grpc.RpcError) -> bool:
        return exc.code() == grpc.StatusCode.UNAVAILABLE and (exc.details() or "").startswith(REBALANCE_DETAIL)

    def connect(head: dict):  # type: ignore[no-untyped-def]
        while True:
            channel = grpc.insecure_channel(address, options=options)
            register = channel.unary_unary("/fleetscope.v1.Ingest/Register",
                                           request_serializer=pb.RegisterRequest.SerializeToString,
                                           response_deserializer=pb.RegisterResponse.FromString)
            try:
                kind = pb.DEVICE_KIND_JETSON if head.get("jetson") else pb.DEVICE_KIND_SERVER
                inventory = pb.Inventory(gpus=[pb.GpuInfo(index=g, name=head.get("gpu_name", ""))
                                               for g in range(head.get("gpus", 0))])
                register(pb.RegisterRequest(agent_id=head["agent_id"], boot_id="bench", name=head["name"], kind=kind,
                                            inventory=inventory, capabilities=list(CAPABILITIES), batch_interval_s=1.0,
                                            sent_ns=time.time_ns(), labels={"simulated": "true"}), metadata=md, timeout=60)
                return channel
            except grpc.RpcError as exc:
                channel.close()
                if not turned_away(exc):
                    raise
                rebalanced[0] += 1

    agents = []
    for path in files:
        head, batches = _read_batches(Path(path))
        agents.append((head, connect(head), batches))
    ready.put(len(agents))
    go.wait()
    stored = [0]
    lock = threading.Lock()

    def one(head: dict, channel, batches: list[bytes]) -> None:  # type: ignore[no-untyped-def]
        acked = 0  # batches acknowledged (stored, or already stored when sent again)
        n = 0
        while acked < len(batches):
            sem = threading.Semaphore(window)

            def requests(start: int, sem: threading.Semaphore):  # type: ignore[no-untyped-def]
                for payload in batches[start:]:
                    sem.acquire()
                    yield with_sent_ns(payload, time.time_ns())

            stream = channel.stream_stream("/fleetscope.v1.Ingest/Stream", request_serializer=lambda b: b,
                                           response_deserializer=pb.Ack.FromString)
            call = stream(requests(acked, sem), metadata=md)
            try:
                for ack in call:
                    sem.release()
                    acked += 1
                    n += ack.status == pb.Ack.STATUS_STORED
                    if acked == len(batches):
                        call.cancel()
                        break
            except grpc.RpcError as exc:
                if not turned_away(exc):
                    raise
                rebalanced[0] += 1
                channel.close()
                channel = connect(head)
        channel.close()
        with lock:
            stored[0] += n

    threads = [threading.Thread(target=one, args=a) for a in agents]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put((stored[0], rebalanced[0]))


def db_size(url: str) -> int:
    """Bytes the database takes after a vacuum (deleted rows given back)."""
    from sqlalchemy import create_engine, text

    from fleetscope.collector.storage.engine import normalise_url

    engine = create_engine(normalise_url(url))
    try:
        if engine.dialect.name == "sqlite":
            with engine.connect() as conn:
                conn.execution_options(isolation_level="AUTOCOMMIT")
                conn.exec_driver_sql("VACUUM")
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            path = Path(engine.url.database or "")
            return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.exec_driver_sql("VACUUM FULL")
            # The tables, their indexes and TOAST (partitions included), not the catalogs an empty
            # database already has (about 7.5 MB).
            return int(conn.execute(text(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c JOIN pg_namespace n"
                " ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind IN ('r', 'm')"
            )).scalar_one())
    finally:
        engine.dispose()


def fold(url: str) -> str:
    """Run the rollup job, then the compaction job with a fold boundary of now, as a collector would."""
    from fleetscope.collector.jobs.rollup import RollupJob
    from fleetscope.collector.storage.engine import make_engine

    engine = make_engine(url)
    try:
        RollupJob(engine, settle_s=0.0).run_once()
        try:
            from fleetscope.collector.jobs.compaction import CompactionJob
        except ImportError:
            return "no compaction job in this tree (collector/jobs/compaction.py): raw rows as ingested"
        job = CompactionJob(engine, fold_after_s=0.0, keep_raw_s=0.0)
        r = job.run_once()
        job.release()
        return (f"compaction: {r.rows:,} tail rows and {r.merged_chunks:,} batch chunks into {r.chunks:,} chunks"
                f" in {r.seconds:.1f} s")
    finally:
        engine.dispose()


def run_fleetscope(label: str, url: str, fleet: Path, counts: dict[str, int], tmp: Path,
                   workers: int = 1) -> dict[str, float | str]:
    import multiprocessing as mp

    from bench_ingest import count_rows

    port = free_port()
    address = f"127.0.0.1:{port}"
    log = open(tmp / f"collector-{label}.log", "wb")
    collector = subprocess.Popen([sys.executable, "-m", "fleetscope.cli", "collector", "--listen", address, "--db", url,
                                  "--token", TOKEN, "--no-rollups", "--no-compaction", "--no-retention", "--no-detectors",
                                  "--workers", str(workers)],
                                 stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port)
        files = sorted(str(p) for p in (fleet / "fs").glob("*.batches"))
        ctx = mp.get_context("spawn")
        ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
        procs = [ctx.Process(target=generator_process, args=(address, files[i::2], 4, ready, go, out)) for i in range(2)]
        for p in procs:
            p.start()
        for _ in procs:
            ready.get(timeout=600)
        cpu0 = cpu_seconds(collector.pid)
        t0 = time.monotonic()
        go.set()
        results = [out.get(timeout=3600) for _ in procs]
        stored_batches = sum(r[0] for r in results)
        turned_away = sum(r[1] for r in results)
        elapsed = time.monotonic() - t0
        cpu = cpu_seconds(collector.pid) - cpu0
        for p in procs:
            p.join()
    finally:
        collector.terminate()
        collector.wait(60)
    rows = count_rows(url)
    raw = db_size(url)
    folded = fold(url)
    compact = db_size(url)
    values = counts["values"]
    moved = f", {turned_away} times asked onto another worker" if workers > 1 else ""
    say(f"  {label}: {stored_batches:,} batches acknowledged in {elapsed:.1f} s{moved}; {folded}")
    return {"label": label, "values_per_s": values / elapsed, "rows_per_s": rows / elapsed, "rows_ok": rows == counts["rows"],
            "bytes_raw": raw / values, "bytes": compact / values, "size": compact, "cpu_s": cpu, "elapsed": elapsed,
            "note": folded}


# ------------------------------------------------------------------------------ VictoriaMetrics


def _http(url: str, body: bytes | None = None, timeout: float = 600) -> bytes:
    req = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read()


def run_victoria(binary: str, fleet: Path, counts: dict[str, int], tmp: Path) -> dict[str, float | str]:
    data = tmp / "vm-data"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = open(tmp / "vm.log", "wb")
    vm = subprocess.Popen([binary, f"-storageDataPath={data}", f"-httpListenAddr=127.0.0.1:{port}", "-retentionPeriod=100y",
                           "-search.maxUniqueTimeseries=10000000"], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port)
        files = sorted((fleet / "vm").glob("*.jsonl"))
        bodies = [p.read_bytes() for p in files]  # read before the clock starts, like the batches
        queue = list(range(len(bodies)))
        lock = threading.Lock()

        def sender() -> None:
            while True:
                with lock:
                    if not queue:
                        return
                    i = queue.pop(0)
                _http(f"{base}/api/v1/import", bodies[i])

        cpu0 = cpu_seconds(vm.pid)
        t0 = time.monotonic()
        threads = [threading.Thread(target=sender) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        _http(f"{base}/internal/force_flush")
        elapsed = time.monotonic() - t0
        cpu = cpu_seconds(vm.pid) - cpu0
        bodies.clear()  # the memory goes back before the query
        span_s = (counts["last_ns"] - counts["first_ns"]) // NS + 60
        q = urllib.parse.quote(f'sum(count_over_time({{__name__=~"fleetscope_.+"}}[{span_s}s]))')
        answer = json.loads(_http(f"{base}/api/v1/query?query={q}&time={counts['last_ns'] // NS + 30}"))
        result = answer["data"]["result"]
        stored = int(float(result[0]["value"][1])) if result else 0
        after_flush = du_bytes(data)
        time.sleep(10)  # background merges of the freshly flushed parts
        _http(f"{base}/internal/force_flush")
        settled = du_bytes(data)
    finally:
        vm.terminate()
        vm.wait(60)
    values = counts["values"]
    say(f"  VictoriaMetrics: {values:,} values in {elapsed:.1f} s; {stored:,} counted by query")
    return {"label": "VictoriaMetrics", "values_per_s": values / elapsed, "rows_per_s": float("nan"), "rows_ok": stored == values,
            "bytes_raw": settled / values, "bytes": settled / values, "size": settled, "cpu_s": cpu, "elapsed": elapsed,
            "note": f"du {settled / 2**20:.1f} MiB, 10 s after force_flush ({after_flush / 2**20:.1f} MiB at once: "
                    "its parts reach the disk a few seconds later)"}


def run_storage(args: argparse.Namespace, peers: dict[str, str]) -> int:
    import psycopg

    tmp = Path(tempfile.mkdtemp(prefix="fleetscope-bench-peers-"))
    try:
        say(f"building the fleet: {args.devices} devices ({args.devices // 2} drones, {args.devices - args.devices // 2} "
            f"servers with 8 GPUs), {args.hours} h at 1 s")
        counts = build_fleet(args.devices, args.hours, tmp / "fleet", args.wire)
        say(f"  {counts['rows']:,} rows, {counts['values']:,} values, {counts['series']:,} series, "
            f"{counts['batches']:,} batches ({args.wire} on the wire)")
        results = []
        say("VictoriaMetrics ...")
        results.append(run_victoria(peers["victoria-metrics"], tmp / "fleet", counts, tmp))
        say("fleetscope on SQLite ...")
        suffix = f" x{args.collector_workers}" if args.collector_workers > 1 else ""
        results.append(run_fleetscope(f"fleetscope SQLite{suffix}", f"sqlite:///{tmp / 'fs.db'}", tmp / "fleet", counts, tmp,
                                      args.collector_workers))
        if args.pg_admin:
            name = f"fleetscope_bench_peers_{os.getpid()}"
            admin = psycopg.connect(args.pg_admin, autocommit=True)
            admin.execute(f'CREATE DATABASE "{name}"')
            try:
                url = args.pg_admin.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1) + f"/{name}"
                say("fleetscope on PostgreSQL ...")
                results.append(run_fleetscope(f"fleetscope PostgreSQL{suffix}", url, tmp / "fleet", counts, tmp,
                                              args.collector_workers))
            finally:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                admin.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    vm = results[0]
    print(f"fleet: {args.devices} devices, {args.hours} h at 1 s: {counts['rows']:,} rows, {counts['values']:,} values")
    print(f"{'store':<22} {'values/s':>12} {'ratio':>6} {'B/value raw':>12} {'B/value':>8} {'ratio':>6} {'all stored':>10}  note")
    for r in results:
        print(f"{r['label']:<22} {r['values_per_s']:>12,.0f} {r['values_per_s'] / vm['values_per_s']:>6.2f} "
              f"{r['bytes_raw']:>12.2f} {r['bytes']:>8.2f} {r['bytes'] / vm['bytes']:>6.2f} {str(r['rows_ok']):>10}  {r['note']}")
    print("goals: ingest ratio >= 1.0 (values/s against VictoriaMetrics'); bytes per value <= 2x VictoriaMetrics' "
          "(fleetscope: whole database after rollups + compaction + vacuum, rollups and indexes included)")
    return 0


# ------------------------------------------------------------------------------ agent vs node_exporter


def run_agent(args: argparse.Namespace, peers: dict[str, str]) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="fleetscope-bench-peers-agent-"))
    port, nport = free_port(), free_port()
    procs: list[subprocess.Popen] = []
    try:
        collector = subprocess.Popen([sys.executable, "-m", "fleetscope.cli", "collector", "--listen", f"127.0.0.1:{port}",
                                      "--db", f"sqlite:///{tmp}/a.db", "--token", TOKEN], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        procs.append(collector)
        logfile = tmp / "app.log"
        logfile.touch()
        agents: dict[str, int] = {}
        for i, (name, env) in enumerate([("fleetscope agent", {}), *args.agent_variant]):
            agent = subprocess.Popen([sys.executable, "-m", "fleetscope.cli", "agent", "--collector", f"127.0.0.1:{port}",
                                      "--token", TOKEN, "--name", f"bench-agent-{i}", "--spool", str(tmp / f"spool-{i}"),
                                      "--interval", "1s", "--log-file", str(logfile)], env={**os.environ, **env},
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(agent)
            agents[name] = agent.pid
        exporter = subprocess.Popen([peers["node_exporter"], f"--web.listen-address=127.0.0.1:{nport}"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(exporter)
        wait_for_port(nport)
        stop = threading.Event()
        scrapes = [0, 0]

        def scrape() -> None:  # Prometheus at a 1 s scrape interval
            nxt = time.monotonic()
            while not stop.is_set():
                try:
                    scrapes[1] += len(_http(f"http://127.0.0.1:{nport}/metrics", timeout=5))
                    scrapes[0] += 1
                except OSError:
                    pass
                nxt += 1.0
                stop.wait(max(0.0, nxt - time.monotonic()))

        scraper = threading.Thread(target=scrape, daemon=True)
        scraper.start()
        time.sleep(5)  # start-up (imports, first samples, first scrapes) is not the steady state
        pids = {**agents, "node_exporter": exporter.pid}
        cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
        rss: dict[str, list[int]] = {k: [] for k in pids}
        split: dict[str, list[tuple[int, int]]] = {k: [] for k in pids}
        t0 = time.monotonic()
        lines = 0
        next_rss = t0
        while time.monotonic() - t0 < args.seconds:
            with open(logfile, "a") as f:
                f.write(f"2026-12-03 10:00:00 INFO step {lines} loss 0.{lines % 1000:03d} lr 3e-4\n")
            lines += 1
            if time.monotonic() >= next_rss:
                next_rss += 1.0
                for k, p in pids.items():
                    rss[k].append(rss_bytes(p))
                    split[k].append(rss_split(p))
            time.sleep(0.1)
        wall = time.monotonic() - t0
        cpu = {k: cpu_seconds(p) - cpu0[k] for k, p in pids.items()}
        stop.set()
    finally:
        for p in reversed(procs):  # the agent before its collector: it drains its spool on the way out
            p.terminate()
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"agent at 1 s (host + 1 followed log file, {lines} lines) beside node_exporter scraped at 1 s "
          f"({scrapes[0]} scrapes, {scrapes[1] / max(scrapes[0], 1) / 1024:.0f} KiB each), {wall:.0f} s")
    width = max(18, *(len(k) for k in pids))
    print(f"{'process':<{width}} {'CPU % of a core':>16} {'RSS mean MiB':>13} {'RSS max MiB':>12} "
          f"{'anon mean MiB':>14} {'file mean MiB':>14}")
    for k in pids:
        anon, file = (statistics.mean(part) / 2**20 for part in zip(*split[k]))
        print(f"{k:<{width}} {100 * cpu[k] / wall:>16.2f} {statistics.mean(rss[k]) / 2**20:>13.1f} {max(rss[k]) / 2**20:>12.1f} "
              f"{anon:>14.1f} {file:>14.1f}")
    a, n = cpu["fleetscope agent"], cpu["node_exporter"]
    print(f"goal: agent CPU <= node_exporter's: {'met' if a <= n else 'not met'} ({100 * a / wall:.2f} % against "
          f"{100 * n / wall:.2f} %); RSS {max(rss['fleetscope agent']) / 2**20:.1f} MiB against "
          f"{max(rss['node_exporter']) / 2**20:.1f} MiB")
    return 0


def _variant(text: str) -> tuple[str, dict[str, str]]:
    label, sep, assignments = text.partition(":")
    env = dict(a.split("=", 1) for a in assignments.split(",") if "=" in a)
    if not sep or not label.strip() or not env:
        raise argparse.ArgumentTypeError(f"an agent variant is LABEL:ENV=VALUE[,ENV=VALUE], got {text!r}")
    return f"agent {label.strip()}", env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", nargs="?", choices=("all", "storage", "agent"), default="all")
    parser.add_argument("--devices", type=int, default=20, help="fleet size, half drones (default %(default)s)")
    parser.add_argument("--wire", choices=("compact", "rows"), default="compact",
                        help="the batches' form: compact-v1 as agents send them, or a row per sample as agents "
                             "before compact-v1 did (default %(default)s)")
    parser.add_argument("--collector-workers", type=int, default=1, metavar="N",
                        help="collector processes sharing the port (the collector's --workers; default %(default)s)")
    parser.add_argument("--hours", type=float, default=2.0, help="hours of fleet time at 1 s (default %(default)s)")
    parser.add_argument("--pg-admin", default=PG_ADMIN,
                        help="PostgreSQL URL allowed to create and drop a database of its own ('' skips PostgreSQL; "
                             "default %(default)s)")
    parser.add_argument("--seconds", type=float, default=60.0, help="agent comparison length (default %(default)s)")
    parser.add_argument("--agent-variant", type=_variant, action="append", default=[], metavar="LABEL:ENV=VALUE[,ENV=VALUE]",
                        help="agent part: also run an agent with this environment beside the plain one, on the same log "
                             "file and collector (repeatable), e.g. 'poll:GRPC_POLL_STRATEGY=poll' or, for a before/after "
                             "comparison, 'before:PYTHONPATH=/tmp/old' where /tmp/old/fleetscope/agent etc. are an older tree")
    args = parser.parse_args(argv)
    peers = find_peers()
    if peers is None:
        return 2
    code = 0
    if args.what in ("all", "storage"):
        code |= run_storage(args, peers)
    if args.what in ("all", "agent"):
        code |= run_agent(args, peers)
    return code


if __name__ == "__main__":
    sys.exit(main())
