"""Bytes on disk per stored value, raw tail against compacted chunks, and the compaction rate.

    python benchmarks/bench_storage.py                                   # SQLite (temp file), 20 devices x 6 h
    python benchmarks/bench_storage.py --pg postgresql://postgres@127.0.0.1:5432/test
    python benchmarks/bench_storage.py --devices 40 --hours 12 --no-sqlite --pg URL
    python benchmarks/bench_storage.py --no-sqlite --pg URL --fetch returning,arrays   # side by side

It fills the sample tables with data of the dashboard benchmark's shape (its numpy generators,
``bench_dashboard.gpu_rows`` / ``host_rows``: half Jetson drones with one GPU, half servers with
``--gpus`` GPUs, 1 s samples), measures the tables, marks every device rolled up to the end (the
compaction job folds only rolled-up rows; running the rollups themselves is not what is measured
here), runs the compaction job once, and measures again. Sizes: SQLite's ``dbstat`` (pages of
each table and index), PostgreSQL's ``pg_total_relation_size`` (table, indexes, TOAST; summed
over partitions), after VACUUM. A "value" is one column of one row: 17 per GPU row, 15 numbers
and 2 texts per host row; "non-null" leaves out the NULL ones (a drone has no fan).

On PostgreSQL it makes a scratch database next to the given one and drops it at the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import secrets
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_dashboard import NS, Writer, device_specs, gpu_rows, host_rows, insert_devices  # noqa: E402

TABLES = ("gpu_samples", "host_samples", "gpu_chunks", "host_chunks")


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def table_bytes(engine) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Bytes each table takes with its indexes (and TOAST, partitions on PostgreSQL)."""
    from sqlalchemy import text

    out = {}
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            rows = conn.execute(text(
                "SELECT coalesce(i.tbl_name, d.name), sum(d.pgsize) FROM dbstat d "
                "LEFT JOIN sqlite_schema i ON i.name = d.name GROUP BY 1"
            )).all()
            sizes = {name: int(size) for name, size in rows}
            return {t: sizes.get(t, 0) for t in TABLES}
        for t in TABLES:
            out[t] = int(conn.execute(text(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "WHERE c.oid = CAST(:t AS regclass) OR c.oid IN ("
                " WITH RECURSIVE p(oid) AS (SELECT inhrelid FROM pg_inherits WHERE inhparent = CAST(:t AS regclass)"
                " UNION ALL SELECT i.inhrelid FROM pg_inherits i JOIN p ON i.inhparent = p.oid) SELECT oid FROM p)"
            ), {"t": t}).scalar_one())
    return out


def vacuum(engine) -> None:  # type: ignore[no-untyped-def]
    raw = engine.raw_connection()
    try:
        if engine.dialect.name == "sqlite":
            raw.driver_connection.isolation_level = None
            raw.cursor().execute("VACUUM")
        else:
            raw.driver_connection.autocommit = True
            raw.cursor().execute("VACUUM ANALYZE")
    finally:
        raw.close()


def counts(engine) -> dict[str, int]:  # type: ignore[no-untyped-def]
    from sqlalchemy import func, select

    from fleetscope.collector.storage.schema import gpu_chunks, gpu_samples, host_chunks, host_samples

    with engine.connect() as conn:
        return {
            "gpu_samples": conn.execute(select(func.count()).select_from(gpu_samples)).scalar_one(),
            "host_samples": conn.execute(select(func.count()).select_from(host_samples)).scalar_one(),
            "gpu_chunks": int(conn.execute(select(func.coalesce(func.sum(gpu_chunks.c.rows), 0))).scalar_one()),
            "host_chunks": int(conn.execute(select(func.coalesce(func.sum(host_chunks.c.rows), 0))).scalar_one()),
            "gpu_chunk_count": conn.execute(select(func.count()).select_from(gpu_chunks)).scalar_one(),
            "gpu_chunk_data": int(conn.execute(select(func.coalesce(func.sum(func.length(gpu_chunks.c.data)), 0))).scalar_one()),
        }


def null_share(engine, table: str, columns: tuple[str, ...]) -> float:  # type: ignore[no-untyped-def]
    """The share of NULLs among the table's value columns."""
    from sqlalchemy import text

    parts = " + ".join(f"count({c})" for c in columns)
    with engine.connect() as conn:
        n, present = conn.execute(text(f"SELECT count(*), {parts} FROM {table}")).one()  # noqa: S608
    return 1 - present / (n * len(columns)) if n else 0.0


def run_one(url: str, args: argparse.Namespace) -> dict[str, float]:
    from sqlalchemy import insert

    from fleetscope.collector.jobs.compaction import CompactionJob
    from fleetscope.collector.storage.engine import make_engine
    from fleetscope.collector.storage.rollup_schema import rollup_progress
    from fleetscope.collector.storage.schema import GPU_SAMPLE_COLUMNS, HOST_VALUE_COLUMNS

    engine = make_engine(url)
    dialect = engine.dialect.name
    specs = device_specs(args.devices, args.gpus)
    t1 = (time.time_ns() - 2 * 3600 * NS) // (3600 * NS) * (3600 * NS)
    t0 = t1 - args.hours * 3600 * NS
    insert_devices(engine, specs, t0, t1)
    say(f"[{dialect}] filling {args.devices} devices x {args.hours} h at 1 s ...")
    w = Writer(engine)
    rows = 0
    started = time.monotonic()
    try:
        for k, sp in enumerate(specs):
            energy, counters = np.zeros(sp.gpus), np.zeros(4)
            for a in range(t0, t1, 3600 * NS):
                rows += w.put("gpu_samples", gpu_rows(sp, a, a + 3600 * NS, energy))
                rows += w.put("host_samples", host_rows(sp, a, a + 3600 * NS, counters))
            if k % 5 == 4 or k == len(specs) - 1:
                say(f"  {k + 1}/{len(specs)} devices, {rows:,} rows, {rows / (time.monotonic() - started):,.0f} rows/s")
    finally:
        w.close()
    vacuum(engine)
    before_c = counts(engine)
    before = table_bytes(engine)
    gpu_nulls = null_share(engine, "gpu_samples", GPU_SAMPLE_COLUMNS)
    host_nulls = null_share(engine, "host_samples", (*HOST_VALUE_COLUMNS, "cpu_cores", "top_processes"))
    say(f"[{dialect}] compacting {before_c['gpu_samples'] + before_c['host_samples']:,} rows ...")

    def progress(report) -> None:  # type: ignore[no-untyped-def]
        if report.devices % 5 == 0:
            say(f"  {report.devices}/{len(specs)} devices, {report.rows:,} rows folded, {report.rows_per_s:,.0f} rows/s")

    # Side by side: with several --fetch methods, device k is folded by method k % n (the same
    # mix of drones and servers each), device by device, so that a neighbour's load on a shared
    # machine falls on every method alike.
    methods = args.fetch
    reports: dict = {}
    for k, sp in enumerate(specs):
        method = methods[k % len(methods)]
        with engine.begin() as conn:  # the device rolled up to the end (see the module's docstring)
            conn.execute(insert(rollup_progress), [{"device_id": sp.id, "step_s": s, "rolled_until_ns": t1}
                                                   for s in (60, 3600)])
        job = CompactionJob(engine, owner="bench", fold_after_s=0, keep_raw_s=0, fetch=method)
        one = job.run_once(now_ns=t1 + 60 * NS)
        job.release()
        if method in reports:
            r = reports[method]
            r.rows, r.chunks, r.seconds, r.devices = r.rows + one.rows, r.chunks + one.chunks, r.seconds + one.seconds, r.devices + 1
        else:
            one.devices = 1
            reports[method] = one
        progress(dataclasses.replace(one, devices=k + 1, rows=sum(r.rows for r in reports.values()),
                                     seconds=sum(r.seconds for r in reports.values())))
    report = dataclasses.replace(reports[methods[0]], rows=sum(r.rows for r in reports.values()),
                                 chunks=sum(r.chunks for r in reports.values()),
                                 seconds=sum(r.seconds for r in reports.values()))
    vacuum(engine)
    after_c = counts(engine)
    after = table_bytes(engine)
    engine.dispose()

    gpu_vals, host_vals = len(GPU_SAMPLE_COLUMNS), len(HOST_VALUE_COLUMNS) + 2
    g_rows, h_rows = before_c["gpu_samples"], before_c["host_samples"]
    tail_g = before["gpu_samples"] / g_rows
    tail_h = before["host_samples"] / h_rows
    chunk_g = after["gpu_chunks"] / max(after_c["gpu_chunks"], 1)
    chunk_h = after["host_chunks"] / max(after_c["host_chunks"], 1)
    figures = {
        "rows": float(g_rows + h_rows),
        "tail_gpu_row": tail_g, "tail_host_row": tail_h,
        "chunk_gpu_row": chunk_g, "chunk_host_row": chunk_h,
        "tail_per_value": (before["gpu_samples"] + before["host_samples"]) / (g_rows * gpu_vals + h_rows * host_vals),
        "chunk_per_value": (after["gpu_chunks"] + after["host_chunks"])
        / max(after_c["gpu_chunks"] * gpu_vals + after_c["host_chunks"] * host_vals, 1),
        "chunk_per_nonnull_value": (after["gpu_chunks"] + after["host_chunks"])
        / max(after_c["gpu_chunks"] * gpu_vals * (1 - gpu_nulls) + after_c["host_chunks"] * host_vals * (1 - host_nulls), 1),
        "gpu_data_per_row": after_c["gpu_chunk_data"] / max(after_c["gpu_chunks"], 1),
        "rate": report.rows_per_s,
        "seconds": report.seconds,
        "total_before": float(sum(before.values())), "total_after": float(sum(after.values())),
    }
    print(f"\n[{dialect}] {args.devices} devices ({sum(sp.gpus for sp in specs)} GPUs) x {args.hours} h at 1 s: "
          f"{g_rows:,} GPU rows, {h_rows:,} host rows ({gpu_nulls:.0%} / {host_nulls:.0%} of their values NULL)")
    print(f"  tail:   {tail_g:7.1f} bytes per GPU row, {tail_h:7.1f} per host row, "
          f"{figures['tail_per_value']:5.2f} bytes per stored value")
    print(f"  chunks: {chunk_g:7.1f} bytes per GPU row, {chunk_h:7.1f} per host row, "
          f"{figures['chunk_per_value']:5.2f} bytes per stored value ({figures['chunk_per_nonnull_value']:.2f} per non-null value); "
          f"{after_c['gpu_chunk_count']:,} GPU chunks, encoded data {figures['gpu_data_per_row']:.1f} bytes per GPU row")
    print(f"  sample tables: {figures['total_before'] / 2**20:,.1f} MiB before, {figures['total_after'] / 2**20:,.1f} MiB after "
          f"({figures['total_before'] / max(figures['total_after'], 1):.1f}x smaller)")
    print(f"  compaction: {report.rows:,} rows into {report.chunks:,} chunks in {report.seconds:.1f} s = "
          f"{report.rows_per_s:,.0f} rows/s; left in the tail: {after_c['gpu_samples'] + after_c['host_samples']:,} rows")
    if len(reports) > 1:
        for method, r in reports.items():
            print(f"    fetch {method:9s}: {r.rows:,} rows in {r.seconds:.1f} s = {r.rows_per_s:,.0f} rows/s")
        figures.update({f"rate_{m}": r.rows_per_s for m, r in reports.items()})
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--devices", type=int, default=20, help="devices, half drones and half servers (default %(default)s)")
    p.add_argument("--gpus", type=int, default=8, help="GPUs per server (default %(default)s)")
    p.add_argument("--hours", type=int, default=6, help="hours of 1 s samples per device (default %(default)s)")
    p.add_argument("--sqlite", type=Path, default=None, metavar="FILE",
                   help="SQLite database file to make (default: a temporary file)")
    p.add_argument("--no-sqlite", action="store_true", help="measure PostgreSQL only")
    p.add_argument("--pg", default=None, metavar="URL",
                   help="a PostgreSQL database; a scratch database is made next to it and dropped at the end")
    p.add_argument("--fetch", default="auto", metavar="METHODS",
                   help="how the compaction job takes a window's rows: auto, returning (row by row, any database), "
                        "arrays (PostgreSQL: per-column binary arrays); several, comma-separated, are measured side "
                        "by side, each on its share of the devices (default %(default)s)")
    args = p.parse_args(argv)
    from fleetscope.collector.jobs.compaction import FETCH_METHODS

    args.fetch = [m.strip() for m in args.fetch.split(",") if m.strip()]
    bad = [m for m in args.fetch if m not in FETCH_METHODS]
    if bad or not args.fetch:
        p.error(f"--fetch: {', '.join(bad) or 'none given'}: choose from {', '.join(FETCH_METHODS)}")
    if len(args.fetch) > args.devices:
        p.error("--fetch: give at least as many devices as methods")
    if args.devices < 1 or args.hours < 1 or args.gpus < 1:
        p.error("--devices, --hours and --gpus must be at least 1")
    if args.no_sqlite and not args.pg:
        p.error("--no-sqlite needs --pg")
    try:
        if not args.no_sqlite:
            with tempfile.TemporaryDirectory() as tmp:
                path = args.sqlite or Path(tmp) / "storage.db"
                if path.exists():
                    p.error(f"{path} exists; give a new file")
                run_one(f"sqlite:///{path}", args)
        if args.pg:
            run_pg(args.pg, args)
    except KeyboardInterrupt:
        return 130
    return 0


def run_pg(url: str, args: argparse.Namespace) -> None:
    import psycopg
    from sqlalchemy.engine import make_url

    base = make_url(url.replace("postgresql://", "postgresql+psycopg://", 1) if url.startswith("postgresql://") else url)
    name = "fleetscope_bench_storage_" + secrets.token_hex(4)
    admin_dsn = base.set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        admin = psycopg.connect(admin_dsn, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        raise SystemExit(f"bench_storage: cannot reach PostgreSQL at {base.render_as_string()}: {str(exc).strip()}") from None
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        run_one(base.set(database=name).render_as_string(hide_password=False), args)
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


if __name__ == "__main__":
    raise SystemExit(main())
