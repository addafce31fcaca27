"""Query speed on a month of a fleet: what the dashboard asks, on SQLite and on PostgreSQL.

    python benchmarks/bench_queries.py                                   # 200 devices x 30 days, SQLite
    python benchmarks/bench_queries.py --db postgresql://127.0.0.1/bench_queries
    python benchmarks/bench_queries.py --devices 50 --raw-days 1         # what fits a small machine
    python benchmarks/bench_queries.py --db /tmp/q.db --skip-fill        # measure an existing one

The database looks like what a month of retention leaves (issue 15's tiers), built in bulk for
the fleet of ``bench_dashboard.py`` (half Jetson drones with one GPU, half servers with
``--gpus`` GPUs; its generator functions, imported):

* raw samples of the last ``--raw-days`` as compressed chunks (``gpu_chunks``/``host_chunks``,
  one per device, GPU and hour, written with ``collector.storage.chunk_codec.encode_chunk``;
  left out, with a line saying so, where this code base has no chunk codec yet), and the last
  ``--tail-minutes`` as raw tail rows in ``gpu_samples``/``host_samples``;
* minute, hour and day rollups (GPU, host, latency) for all ``--days``, generated directly with numpy
  from the same load curves, with the ``rollup_progress`` marks the rollup job would leave, so
  the read planner serves each stretch from the coarsest tier, as on a live collector;
* raw latency histograms (one a minute) for the raw days, a log line every 10 min and an OOM
  incident every ~6 h per device for all the days.

Then it times, cold (a fresh engine and session) and warm (the same query again), median of
``--runs``: the fleet overview, a server's 24 h and 30 d charts, the drones-against-servers p99
comparison over 24 h and 30 d (what the Compare page asks), and all OOM incidents of the last
30 days; printed beside the targets (< 300 ms on PostgreSQL, < 1 s on SQLite).

A PostgreSQL database is dropped and created again before a fill; its name must contain
"bench" so that a typo cannot drop a real one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_dashboard import (  # noqa: E402  (a sibling script, not a package)
    GIB,
    NS,
    Spec,
    Writer,
    device_specs,
    gpu_rows,
    host_rows,
    insert_devices,
    latency_template,
    lifecycle,
    other_rows,
    say,
)

MINUTE = 60 * NS
HOUR = 3600 * NS
DAY = 86400 * NS
TARGET_S = {"postgresql": 0.3, "sqlite": 1.0}
CODEC_DEFAULT = 1  # what a chunk row's codec column holds when the codec module names none


# ------------------------------------------------------------------------------ rollups


def _duty(sp: Spec, t_s: np.ndarray, g: int = 0) -> np.ndarray:
    # bench_dashboard's load curve, evaluated at bucket midpoints.
    return 0.5 + 0.45 * np.sin(t_s / 900.0 + sp.id + g * 0.3)


def gpu_rollup_rows(sp: Spec, lo: int, hi: int, step_s: int) -> Iterator[tuple]:
    """gpu_rollups tuples (device_id, step_s, bucket_ns, gpu_index, n, span_ns, *GPU_ROLLUP_COLUMNS)."""
    name, mem_gib, tdp, clock = sp.model
    buckets = np.arange(lo, hi, step_s * NS, dtype=np.int64)
    m = len(buckets)
    if not m:
        return
    mid = (buckets + step_s * NS // 2) / 1e9
    rng = np.random.default_rng(sp.id * 31 + lo // NS + step_s)
    # Over an hour the 15-minute sine averages out; over a minute it is the reading itself.
    smooth = 1.0 if step_s <= 60 else 0.3
    for g in range(sp.gpus):
        duty = 0.5 + (_duty(sp, mid, g) - 0.5) * smooth
        util = np.clip(100 * duty + rng.normal(0, 2, m), 0, 100)
        temp = 35 + 45 * duty + (8 if sp.jetson else 0)
        hot = temp > 83
        power = tdp * (0.15 + 0.85 * util / 100) * np.where(hot, 0.8, 1.0)
        mem = mem_gib * GIB * (0.2 + 0.7 * duty) + 0.5 * GIB
        sm = np.where(hot, clock * 0.7, clock * 0.98)
        n = np.full(m, step_s)
        cols = [
            util,
            np.minimum(100, util + 12),
            util * 0.6,
            mem,
            mem + 0.5 * GIB,
            temp,
            temp + 3,
            power,
            power * 1.1,
            power * (step_s - 1),
            sm,
            sm * 0.97,
            np.full(m, clock * 2.0),
            None if sp.jetson else (30 + 50 * duty),
            np.where(hot, step_s, 0),
            np.zeros(m),
        ]
        yield from zip(
            [sp.id] * m,
            [step_s] * m,
            buckets.tolist(),
            [g] * m,
            n.tolist(),
            [(step_s - 1) * NS] * m,
            *[([None] * m if c is None else np.round(c, 3).tolist()) for c in cols],
        )


def host_rollup_rows(sp: Spec, lo: int, hi: int, step_s: int) -> Iterator[tuple]:
    buckets = np.arange(lo, hi, step_s * NS, dtype=np.int64)
    m = len(buckets)
    if not m:
        return
    duty = _duty(sp, (buckets + step_s * NS // 2) / 1e9)
    total = (8 if sp.jetson else 512) * GIB
    cores = 6 if sp.jetson else 64
    cpu = np.clip(70 * duty, 0, 100)
    net = (1e6 if sp.jetson else 100e6) * (step_s - 1)
    cols = [
        cpu,
        np.minimum(100, cpu + 20),
        cores * duty * 0.8,
        total * (0.3 + 0.5 * duty),
        total * (0.3 + 0.5 * duty) + 0.05 * total,
        np.full(m, float(total)),
        0.1 * GIB * duty,
        0.1 * GIB * duty + 0.01 * GIB,
        np.full(m, 4.0 * GIB),
        np.full(m, 25e6 * (step_s - 1)),
        np.full(m, 25e6 * (step_s - 1)),
        np.full(m, net),
        np.full(m, net),
    ]
    yield from zip(
        [sp.id] * m,
        [step_s] * m,
        buckets.tolist(),
        [step_s] * m,
        [(step_s - 1) * NS] * m,
        *[np.round(c, 3).tolist() for c in cols],
    )


def latency_rollup_rows(
    sp: Spec, lo: int, hi: int, step_s: int, template: tuple[str, int, int]
) -> list[tuple]:
    """latency_rollups tuples: the device's one-minute "infer" histogram, times the minutes in a bucket."""
    buckets_json, count, sum_ns = template
    k = step_s // 60
    if k != 1:
        buckets_json = json.dumps(
            {i: c * k for i, c in json.loads(buckets_json).items()}, separators=(",", ":")
        )
    return [
        (
            sp.id,
            step_s,
            b,
            "infer",
            '{"model":"yolov8n"}',
            count * k,
            sum_ns * k,
            0,
            0,
            k * MINUTE,
            buckets_json,
            0,
        )
        for b in range(lo, hi, step_s * NS)
    ]


# ------------------------------------------------------------------------------ chunks


def _chunk_codec() -> tuple[Callable[..., bytes], int] | None:
    try:
        from fleetscope.collector.storage import chunk_codec
    except ImportError:
        return None
    return chunk_codec.encode_chunk, int(getattr(chunk_codec, "CODEC_VERSION", CODEC_DEFAULT))


def chunk_rows(
    sp: Spec,
    a: int,
    b: int,
    energy: np.ndarray,
    counters: np.ndarray,
    encode: Callable[..., bytes],
    code: int,
) -> tuple[list[tuple], list[tuple], int]:
    """One chunk per GPU and one host chunk for [a, b): the raw rows bench_dashboard generates."""
    from fleetscope.collector.storage.schema import GPU_SAMPLE_COLUMNS, HOST_VALUE_COLUMNS

    ts = np.arange(a, b, NS, dtype=np.int64)
    n = len(ts)
    # Tuples to one float array: None becomes NaN, which is what the codec takes for NULL.
    gpu = np.array(list(gpu_rows(sp, a, b, energy)), dtype=np.float64)
    out_g = []
    for g in range(sp.gpus):
        part = gpu[g * n : (g + 1) * n]
        cols = {c: np.ascontiguousarray(part[:, 3 + k]) for k, c in enumerate(GPU_SAMPLE_COLUMNS)}
        out_g.append((sp.id, g, a, int(ts[-1]), n, code, encode(ts, cols)))
    host = np.array([r[:-2] for r in host_rows(sp, a, b, counters)], dtype=np.float64)
    cols = {c: np.ascontiguousarray(host[:, 2 + k]) for k, c in enumerate(HOST_VALUE_COLUMNS)}
    out_h = [
        (
            sp.id,
            a,
            int(ts[-1]),
            n,
            code,
            encode(ts, cols, {"cpu_cores": [None] * n, "top_processes": [None] * n}),
        )
    ]
    return out_g, out_h, n * (sp.gpus + 1)


# ------------------------------------------------------------------------------ filling


class BulkWriter(Writer):
    """bench_dashboard's writer, with the rollup and chunk tables added."""

    def __init__(self, engine) -> None:  # type: ignore[no-untyped-def]
        super().__init__(engine)
        from fleetscope.collector.storage.rollup_schema import GPU_ROLLUP_COLUMNS, HOST_ROLLUP_COLUMNS

        self.cols["gpu_rollups"] = (
            "device_id",
            "step_s",
            "bucket_ns",
            "gpu_index",
            "n",
            "span_ns",
            *GPU_ROLLUP_COLUMNS,
        )
        self.cols["host_rollups"] = ("device_id", "step_s", "bucket_ns", "n", "span_ns", *HOST_ROLLUP_COLUMNS)
        self.cols["latency_rollups"] = (
            "device_id",
            "step_s",
            "bucket_ns",
            "name",
            "labels",
            "count",
            "sum_ns",
            "errors",
            "zero_count",
            "window_ns",
            "buckets",
            "scheme",
        )
        if not self.sqlite:
            # A benchmark fill, not acknowledged data (as the SQLite path's synchronous=OFF):
            # without this every COPY's commit waits for a WAL flush.
            cur = self.raw.cursor()
            cur.execute("SET synchronous_commit = off")
            cur.close()
            self.raw.commit()
        self.cols["gpu_chunks"] = ("device_id", "gpu_index", "start_ns", "end_ns", "rows", "codec", "data")
        self.cols["host_chunks"] = ("device_id", "start_ns", "end_ns", "rows", "codec", "data")


def day_partitions(engine, first_ns: int, now_ns: int) -> int:  # type: ignore[no-untyped-def]
    """PostgreSQL with partitioned tables: the day partitions of the whole month, so that the
    backfill lands where a month of live ingest would have put it (not in the default partition)."""
    if engine.dialect.name != "postgresql":
        return 0
    try:
        from fleetscope.collector.storage import partitions
    except ImportError:
        return 0
    with engine.connect() as conn:
        tables = partitions.partitioned_tables(conn)
    made = 0
    for table in tables:
        for day in range(partitions.day_start_ns(first_ns), now_ns + DAY, DAY):
            with engine.begin() as conn:
                made += partitions.create_partition(conn, table, day)
    return made


def recreate_database(url: str) -> None:
    """An empty database to fill: a SQLite file removed, a PostgreSQL database dropped and created."""
    from sqlalchemy.engine import make_url

    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        for suffix in ("", "-wal", "-shm"):
            Path(str(u.database) + suffix).unlink(missing_ok=True)
        return
    name = u.database or ""
    if "bench" not in name:
        raise SystemExit(
            f"bench_queries: refusing to drop PostgreSQL database {name!r}: a fill needs a database whose name contains 'bench'"
        )
    import psycopg

    admin = u.set(drivername="postgresql", database="postgres").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def fill(engine, specs: list[Spec], now_ns: int, days: float, raw_days: float, tail_s: int) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Write the month; returns counts."""
    from sqlalchemy import insert

    from fleetscope.collector.storage.rollup_schema import rollup_progress

    first = (now_ns - int(days * 86400) * NS) // HOUR * HOUR
    tail_lo = (now_ns - tail_s * NS) // MINUTE * MINUTE
    raw_lo = max(first, (now_ns - int(raw_days * 86400) * NS) // HOUR * HOUR)
    minute_until = now_ns // MINUTE * MINUTE - MINUTE  # the last complete minute, as the job leaves it
    hour_until = now_ns // HOUR * HOUR
    day_until = now_ns // DAY * DAY
    codec = _chunk_codec() if raw_days > 0 else None
    if raw_days > 0 and codec is None:
        say("  no collector/storage/chunk_codec.py in this code base: raw days before the tail are left out")
    if codec is not None:
        # Until the chunk tables' migration lands, the schema module's definitions make them.
        from fleetscope.collector.storage import schema

        for name in ("gpu_chunks", "host_chunks"):
            schema.metadata.tables[name].create(engine, checkfirst=True)
    made = day_partitions(engine, first, now_ns)
    if made:
        say(f"  {made} day partitions created (the ones a collector running all month made ahead)")
    insert_devices(engine, specs, first, now_ns)
    w = BulkWriter(engine)
    counts: dict[str, Any] = dict.fromkeys(
        (
            "gpu_rollup_rows",
            "host_rollup_rows",
            "latency_rollup_rows",
            "latency_histograms",
            "log_events",
            "incidents",
            "chunks",
            "chunk_sample_rows",
            "tail_sample_rows",
        ),
        0,
    )
    steps = ((60, minute_until), (3600, hour_until), (86400, day_until))
    started = time.monotonic()
    try:
        for k, sp in enumerate(specs):
            template = latency_template(sp)
            # One COPY/executemany per table and device: a PostgreSQL COPY and its commit cost
            # ~0.1 s of fixed time on this VM, which a day at a time paid ~500 times a device.
            # A day bucket starts at midnight UTC, as the rollup job aligns them.
            spans = [
                (step, a, min(until, a + DAY))
                for step, until in steps
                for a in range(first // (step * NS) * (step * NS), until, DAY)
            ]
            counts["gpu_rollup_rows"] += w.put(
                "gpu_rollups", chain.from_iterable(gpu_rollup_rows(sp, a, b, st) for st, a, b in spans)
            )
            counts["host_rollup_rows"] += w.put(
                "host_rollups", chain.from_iterable(host_rollup_rows(sp, a, b, st) for st, a, b in spans)
            )
            counts["latency_rollup_rows"] += w.put(
                "latency_rollups",
                chain.from_iterable(latency_rollup_rows(sp, a, b, st, template) for st, a, b in spans),
            )
            lat, logs, incidents = other_rows(sp, first, now_ns)
            counts["latency_histograms"] += w.put("latency_histograms", [r for r in lat if r[1] >= raw_lo])
            counts["log_events"] += w.put("log_events", logs)
            w.incidents([lifecycle(i, now_ns) for i in incidents])
            counts["incidents"] += len(incidents)
            energy, counters = np.zeros(sp.gpus), np.zeros(4)
            if codec is not None:
                encode, code = codec
                gpu_chunks: list[tuple] = []
                host_chunks: list[tuple] = []
                for a in range(raw_lo, tail_lo, HOUR):
                    g_rows, h_rows, n = chunk_rows(
                        sp, a, min(tail_lo, a + HOUR), energy, counters, encode, code
                    )
                    gpu_chunks += g_rows
                    host_chunks += h_rows
                    counts["chunk_sample_rows"] += n
                    if len(gpu_chunks) >= 1000 or a + HOUR >= tail_lo:  # ~30 MB a COPY
                        counts["chunks"] += w.put("gpu_chunks", gpu_chunks) + w.put(
                            "host_chunks", host_chunks
                        )
                        gpu_chunks, host_chunks = [], []
            counts["tail_sample_rows"] += w.put("gpu_samples", gpu_rows(sp, tail_lo, now_ns, energy))
            counts["tail_sample_rows"] += w.put("host_samples", host_rows(sp, tail_lo, now_ns, counters))
            if k % 5 == 4 or k == len(specs) - 1:
                el = time.monotonic() - started
                say(
                    f"  {k + 1}/{len(specs)} devices in {el:,.0f} s, about {el / (k + 1) * (len(specs) - k - 1) / 60:.1f} min left "
                    f"({counts['gpu_rollup_rows'] + counts['host_rollup_rows']:,} rollup rows, {counts['chunks']:,} chunks)"
                )
    finally:
        w.close()
    marks = [
        {"device_id": sp.id, "step_s": step, "rolled_until_ns": until}
        for sp in specs
        for step, until in steps
    ]
    with engine.begin() as conn:
        conn.execute(insert(rollup_progress), marks)
    return counts


def top_up(engine, specs: list[Spec]) -> int:  # type: ignore[no-untyped-def]
    """Raw tail rows from the newest stored second to now, every device seen now, and the
    rollup job run over them, so a database filled a while ago is live again."""
    from sqlalchemy import func, select, update

    from fleetscope.collector.storage.schema import Device, host_samples

    with engine.connect() as conn:
        last = conn.execute(select(func.max(host_samples.c.ts_ns))).scalar()
    now = time.time_ns() // NS * NS
    rows = 0
    if last is not None and now - last > 5 * NS:
        w = BulkWriter(engine)
        try:
            for sp in specs:
                rows += w.put("gpu_samples", gpu_rows(sp, last + NS, now, np.zeros(sp.gpus)))
                rows += w.put("host_samples", host_rows(sp, last + NS, now, np.zeros(4)))
        finally:
            w.close()
    with engine.begin() as conn:
        conn.execute(update(Device).values(last_seen_ns=time.time_ns()))
    # A live collector's rollup job runs every 30 s: roll what the top-up added, so the reads
    # below see rollups as current as a collector's (the raw edge a minute or two wide).
    from fleetscope.collector.jobs.rollup import RollupJob

    t = time.monotonic()
    report = RollupJob(engine).run_once()
    say(f"  rolled up the top-up: {sum(report.rows.values()):,} rollup rows in {time.monotonic() - t:.1f} s")
    return rows


def analyse(engine) -> None:  # type: ignore[no-untyped-def]
    """Planner statistics, as autovacuum (PostgreSQL) or a long-lived database would have them."""
    from sqlalchemy import text

    if engine.dialect.name == "postgresql":
        raw = engine.raw_connection()
        raw.driver_connection.autocommit = True
        cur = raw.cursor()
        cur.execute("VACUUM ANALYZE")
        cur.close()
        raw.close()
    else:
        with engine.begin() as conn:
            conn.execute(text("ANALYZE"))


def database_bytes(engine) -> int | None:  # type: ignore[no-untyped-def]
    from sqlalchemy import text

    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            return int(conn.execute(text("SELECT pg_database_size(current_database())")).scalar() or 0)
        path = Path(engine.url.database or "")
        return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


# ------------------------------------------------------------------------------ measuring


def questions(specs: list[Spec]) -> dict[str, Callable[[Any, int], object]]:
    from fleetscope.collector import query
    from fleetscope.proto.vocabulary import KIND_CUDA_OOM, KIND_HOST_OOM

    server = next((sp for sp in specs if not sp.jetson), specs[0]).name
    groups = {
        "drones": [sp.name for sp in specs if sp.jetson],
        "servers": [sp.name for sp in specs if not sp.jetson],
    }

    def compare(s: Any, now: int, span: int) -> object:
        # The Compare page: the side-by-side figures and p99 over time, for one operation.
        return query.compare_groups(
            session=s,
            groups=groups,
            since_ns=query.comparison_start(now - span, now),
            until_ns=now,
            operation="infer",
        )

    return {
        "fleet overview": lambda s, now: query.fleet_overview(session=s, now_ns=now),
        "device chart 24 h": lambda s, now: query.device_series(
            session=s, device=server, since_ns=now - DAY, until_ns=now
        ),
        "device chart 30 d": lambda s, now: query.device_series(
            session=s, device=server, since_ns=now - 30 * DAY, until_ns=now
        ),
        "p99 compare 24 h": lambda s, now: compare(s, now, DAY),
        "p99 compare 30 d": lambda s, now: compare(s, now, 30 * DAY),
        "OOM incidents 30 d": lambda s, now: query.search_incidents(
            session=s, since_ns=now - 30 * DAY, until_ns=now, kinds=[KIND_CUDA_OOM, KIND_HOST_OOM]
        ),
    }


def measure(url: str, specs: list[Spec], runs: int) -> dict[str, dict[str, float]]:
    """Per question: cold (a fresh engine, so a fresh connection and empty caches) and warm."""
    from fleetscope.collector import query
    from fleetscope.collector.query import planning

    asks = questions(specs)
    times: dict[str, dict[str, list[float]]] = {q: {"cold": [], "warm": []} for q in asks}
    for r in range(runs):
        for name, ask in asks.items():
            planning._rollups_seen.clear()
            engine = query.open_database(url)
            try:
                for phase in ("cold", "warm"):
                    with query.session_scope(engine) as s:
                        now = time.time_ns()
                        t = time.perf_counter()
                        ask(s, now)
                        times[name][phase].append(time.perf_counter() - t)
            finally:
                engine.dispose()
        say(f"  run {r + 1}/{runs} done")
    return {q: {p: statistics.median(v) for p, v in ph.items()} for q, ph in times.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--db",
        default="benchmarks/results/bench_queries.db",
        help="database URL or SQLite path (default %(default)s; benchmarks/results/ is git-ignored)",
    )
    p.add_argument(
        "--devices", type=int, default=200, help="devices, half of them Jetson drones (default %(default)s)"
    )
    p.add_argument(
        "--days", type=float, default=30.0, help="days of rollups, logs and incidents (default %(default)s)"
    )
    p.add_argument(
        "--raw-days", type=float, default=7.0, help="days of raw samples kept as chunks (default %(default)s)"
    )
    p.add_argument(
        "--tail-minutes", type=int, default=60, help="minutes of raw tail rows (default %(default)s)"
    )
    p.add_argument("--gpus", type=int, default=8, help="GPUs per server (default %(default)s)")
    p.add_argument(
        "--runs",
        type=int,
        default=3,
        help="measurements per question; medians reported (default %(default)s)",
    )
    p.add_argument("--skip-fill", action="store_true", help="measure an existing database")
    p.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = p.parse_args(argv)
    for flag in ("devices", "runs", "gpus", "tail_minutes"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be at least 1")
    if args.days <= 0 or args.raw_days < 0 or args.raw_days > args.days:
        p.error("--days must be positive and --raw-days between 0 and --days")

    from fleetscope.collector.storage.engine import make_engine, normalise_url

    url = normalise_url(args.db)
    specs = device_specs(args.devices, args.gpus)
    figures: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "devices": args.devices,
        "gpus": sum(sp.gpus for sp in specs),
        "days": args.days,
        "raw_days": args.raw_days,
    }
    if args.skip_fill:  # the database's own sizes are whatever its fill made
        for k in ("days", "raw_days"):
            figures.pop(k)
    try:
        if not args.skip_fill:
            recreate_database(url)
        engine = make_engine(url)
    except SystemExit:
        raise
    except Exception as e:  # noqa: BLE001 - one line for a database that cannot be reached
        print(f"bench_queries: cannot open {url}: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    dialect = engine.dialect.name
    figures["db"] = dialect
    try:
        if not args.skip_fill:
            say(
                f"filling {url}: {args.devices} devices ({figures['gpus']} GPUs) x {args.days:g} days "
                f"(raw {args.raw_days:g} days as chunks, {args.tail_minutes} min tail)"
            )
            t = time.monotonic()
            figures.update(
                fill(engine, specs, time.time_ns(), args.days, args.raw_days, args.tail_minutes * 60)
            )
            figures["fill_s"] = round(time.monotonic() - t, 1)
            t = time.monotonic()
            analyse(engine)
            figures["analyse_s"] = round(time.monotonic() - t, 1)
            say(f"filled in {figures['fill_s']} s, analysed in {figures['analyse_s']} s")
        else:
            t = time.monotonic()
            rows = top_up(engine, specs)
            say(f"topped up to now: {rows:,} raw tail rows in {time.monotonic() - t:.1f} s")
        figures["db_bytes"] = database_bytes(engine)
    finally:
        engine.dispose()

    say(f"measuring (median of {args.runs})...")
    results = measure(url, specs, args.runs)
    target = TARGET_S.get(dialect, 1.0)
    for k, v in figures.items():
        print(f"{k:<22}{v:,}" if isinstance(v, int) else f"{k:<22}{v}")
    print(f"\n{'question':<22}{'cold ms':>10}{'warm ms':>10}  target < {target * 1000:.0f} ms")
    for q, ph in results.items():
        verdict = "ok" if max(ph.values()) < target else "MISSED"
        print(f"{q:<22}{ph['cold'] * 1000:>10.0f}{ph['warm'] * 1000:>10.0f}  {verdict}")
    figures["queries_s"] = {q: {p: round(v, 4) for p, v in ph.items()} for q, ph in results.items()}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
