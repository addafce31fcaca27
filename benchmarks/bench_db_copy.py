"""Moving a fleet's database from one PostgreSQL onto Citus with ``fleetscope db copy``, beside a
copy into another plain PostgreSQL, in one run.

    python benchmarks/bench_db_copy.py                         # 40 devices x 6 h
    python benchmarks/bench_db_copy.py --devices 100 --hours 12

It makes a source database on the PostgreSQL at ``--pg`` (127.0.0.1:5432, trust auth) and fills
it the way ``bench_dashboard.py`` does (half Jetson drones with one GPU, half servers with
``--gpus`` GPUs, 1 s samples, latency histograms, logs, incidents), then runs the rollup and
compaction jobs on it as a collector would, so it holds what a live fleet's database holds:
hourly chunks, a tail of recent rows, minute and hour rollups. It then times the real command,
``fleetscope db copy --from SOURCE --to TARGET``, into

* a new database on the same PostgreSQL, and
* a new database on a Citus coordinator with two workers (a private cluster on loopback ports,
  ``tests/citus_cluster.py``, removed at the end; Citus' default 32 shards a table), where the
  copy ends by distributing the tables;

and checks that every table holds as many rows in each target as in the source. Both servers
write durably (the Citus nodes' ``fsync``, ``synchronous_commit`` and ``full_page_writes`` are
switched back on for the run), so the two copies are comparable. Its own databases are dropped
at the end.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

NS = 10**9


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def admin(pg: str, dbname: str = "postgres"):  # type: ignore[no-untyped-def]
    import psycopg

    host, port = pg.rsplit(":", 1)
    return psycopg.connect(host=host, port=int(port), user="postgres", dbname=dbname, autocommit=True,
                           connect_timeout=10)


def create_database(pg: str, name: str) -> str:
    with admin(pg) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"postgresql+psycopg://postgres@{pg}/{name}"


def drop_database(pg: str, name: str) -> None:
    with admin(pg) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def row_counts(url: str) -> dict[str, int]:
    from sqlalchemy import create_engine, inspect, text

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            names = sorted(inspect(conn).get_table_names())
            return {n: conn.execute(text(f'SELECT count(*) FROM "{n}"')).scalar_one() for n in names}
    finally:
        engine.dispose()


def database_bytes(url: str) -> int:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one())
    finally:
        engine.dispose()


def fill_source(url: str, devices: int, hours: float, gpus: int) -> dict[str, float]:
    import bench_dashboard as bd

    from fleetscope.collector.jobs.compaction import CompactionJob
    from fleetscope.collector.jobs.rollup import RollupJob
    from fleetscope.collector.storage.engine import make_engine

    engine = make_engine(url)
    specs = bd.device_specs(devices, gpus)
    now = time.time_ns() // NS * NS
    first = now - int(hours * 3600) * NS
    say(f"filling the source: {devices} devices x {hours:g} h of 1 s samples")
    bd.insert_devices(engine, specs, first, now)
    t = time.monotonic()
    rows = bd.fill(engine, specs, first, now, {})
    bd.trt_records(engine, specs, now)
    fill_s = time.monotonic() - t
    say(f"  {rows:,} sample rows in {fill_s:.0f} s; rolling up and folding into chunks as a collector would")
    RollupJob(engine, settle_s=10).run_once()
    report = CompactionJob(engine).run_once()
    say(f"  compaction: {report.rows:,} rows folded into {report.chunks:,} chunks")
    engine.dispose()
    return {"sample_rows": rows, "folded_rows": report.rows, "chunks": report.chunks}


def copy(source: str, target: str) -> float:
    t = time.monotonic()
    done = subprocess.run([str(Path(sys.executable).parent / "fleetscope"), "db", "copy", "--from", source,
                           "--to", target], capture_output=True, text=True)
    seconds = time.monotonic() - t
    if done.returncode != 0:
        raise SystemExit(f"bench_db_copy: fleetscope db copy into {target} failed: "
                         f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--devices", type=int, default=40, help="devices, half Jetson drones (default %(default)s)")
    p.add_argument("--hours", type=float, default=6.0, help="hours of 1 s samples per device (default %(default)s)")
    p.add_argument("--gpus", type=int, default=8, help="GPUs per server (default %(default)s)")
    p.add_argument("--pg", default="127.0.0.1:5432", metavar="HOST:PORT",
                   help="the plain PostgreSQL (trust auth as postgres; default %(default)s)")
    args = p.parse_args(argv)
    if args.devices < 2 or args.hours <= 0:
        p.error("--devices must be at least 2 and --hours positive")

    from tests.citus_cluster import citus_installed, private_cluster

    why_not = citus_installed()
    if why_not:
        print(f"bench_db_copy: {why_not}", file=sys.stderr)
        return 2
    tag = secrets.token_hex(4)
    source_name, plain_name = f"fleetscope_copy_src_{tag}", f"fleetscope_copy_pg_{tag}"
    made: list[str] = []
    cluster = None
    try:
        source = create_database(args.pg, source_name)
        made.append(source_name)
        figures = fill_source(source, args.devices, args.hours, args.gpus)
        source_counts = row_counts(source)
        source_bytes = database_bytes(source)
        plain = create_database(args.pg, plain_name)
        made.append(plain_name)
        say("starting a Citus coordinator and two workers")
        cluster = private_cluster()
        cluster.set_durability({"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"})
        citus = cluster.create_database(shards=None)  # Citus' default, 32
        citus_name = citus.rsplit("/", 1)[1]

        def citus_bytes(_url: str) -> int:  # every node's share: the workers hold the distributed tables
            total = 0
            for port in cluster.ports:
                with cluster._admin(port) as conn:
                    total += conn.execute("SELECT pg_database_size(%s)", (citus_name,)).fetchone()[0]
            return total

        results = []
        for label, target, size in (("PostgreSQL", plain, database_bytes), ("Citus, 2 workers", citus, citus_bytes)):
            say(f"fleetscope db copy into {label}...")
            seconds = copy(source, target)
            counts = row_counts(target)
            differ = {t: (n, counts.get(t)) for t, n in source_counts.items()
                      if t not in ("leases", "schema_info") and counts.get(t) != n}
            results.append((label, seconds, sum(counts.values()), size(target), differ))
        total_rows = sum(n for t, n in source_counts.items() if t not in ("leases", "schema_info"))
        print(f"source: {args.devices} devices x {args.hours:g} h, {int(figures['sample_rows']):,} sample rows "
              f"({int(figures['folded_rows']):,} folded into {int(figures['chunks']):,} chunks), "
              f"{total_rows:,} rows in all tables, {source_bytes / 2**20:,.0f} MiB on disk")
        print(f"{'target':<18} {'copy s':>8} {'rows/s':>10} {'MiB/s (source)':>15} {'target MiB':>11}  rows match")
        ok = True
        for label, seconds, _rows, target_bytes, differ in results:
            ok &= not differ
            print(f"{label:<18} {seconds:>8.1f} {total_rows / seconds:>10,.0f} "
                  f"{source_bytes / 2**20 / seconds:>15.1f} {target_bytes / 2**20:>11,.0f}  "
                  f"{'yes' if not differ else 'NO: ' + str(differ)}")
        print("(Citus' size is its three nodes' databases together)")
        return 0 if ok else 1
    finally:
        for name in made:
            drop_database(args.pg, name)
        if cluster is not None:
            cluster.destroy()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
