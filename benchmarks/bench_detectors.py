"""One detector pass over 1,000 devices with a day of data each (issue 13: under 1 s).

The database (SQLite, or PostgreSQL with --db) holds, per device: a day of host and GPU samples
(one a minute, as a drone that samples every minute or the minute rollups of a 1 s one would),
the last five minutes at 1 s, one latency operation with two hours of minute rollups and its
last two minutes as raw 1 s histograms, and the rollup job's progress one minute behind. Every
device has an SLO on its operation (1 min windows) and every other detector runs with its
defaults.

Timed: the first pass (the first ever, no progress marks: each detector reads the window it
needs, within the pass's catch-up budget; the rest in the next passes), then fifteen passes 10 s apart, each after 10 s more of 1 s data arrived on every device,
during which the SLO's 1 min windows and the regression's 5 min window close for every device at
once and the progress marks are written (every 60 s).

    .venv/bin/python benchmarks/bench_detectors.py [--devices 1000] [--pg postgresql://USER@HOST:5432/DB]

prints, per database, the first pass, the steady median and the worst steady pass.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import insert

from fleetscope.collector.jobs.detectors import DetectorJob, DetectorSettings, SloObjective
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.rollup_schema import latency_rollups, rollup_progress
from fleetscope.collector.storage.schema import Device, gpu_samples, host_samples, latency_histograms
from fleetscope.proto import buckets as bucket_math

NS = 10**9
NOW = 1_800_000_000 * NS - 5 * NS  # five seconds before a 5-min boundary


def _buckets(rng: random.Random, n: int) -> str:
    out: dict[int, int] = {}
    for _ in range(n):
        i = bucket_math.bucket_index(rng.gauss(12e6, 2e6) if rng.random() > 0.003 else 40e6)
        out[i] = out.get(i, 0) + 1
    return json.dumps({str(k): v for k, v in out.items()}, separators=(",", ":"))


def build(url: str, devices: int) -> None:
    engine = make_engine(url)
    rng = random.Random(13)
    day = [NOW - 86400 * NS + k * 60 * NS for k in range(1435)] + [NOW - 300 * NS + k * NS for k in range(300)]
    bucket_pool = [_buckets(rng, 50) for _ in range(64)]  # a second's histogram: 50 calls
    minute_pool = [_buckets(rng, 3000) for _ in range(16)]  # a minute's: 3,000 calls
    started = time.monotonic()
    with engine.begin() as conn:
        conn.execute(insert(Device.__table__), [
            {"agent_id": f"a{d}", "name": f"dev-{d:04d}", "kind": "server", "first_seen_ns": NOW - 86400 * NS,
             "last_seen_ns": NOW, "labels": {"site": "bench"}, "inventory": {}, "capabilities": [], "counters": {}}
            for d in range(devices)])
    for d in range(1, devices + 1):
        with engine.begin() as conn:
            conn.execute(insert(host_samples), [
                {"device_id": d, "ts_ns": t, "cpu_percent": 30.0 + rng.random() * 10, "mem_used_bytes": 8e9 + rng.random() * 1e8,
                 "mem_total_bytes": 32e9, "mem_available_bytes": 24e9} for t in day])
            conn.execute(insert(gpu_samples), [
                {"device_id": d, "ts_ns": t, "gpu_index": 0, "util_gpu_percent": 70.0, "temp_c": 65.0, "sm_clock_mhz": 1500.0,
                 "memory_used_bytes": 4e9 + rng.random() * 1e8, "throttle_reasons": 0.0} for t in day])
            conn.execute(insert(latency_rollups), [
                {"device_id": d, "step_s": 60, "bucket_ns": NOW - NOW % (60 * NS) - k * 60 * NS, "name": "infer",
                 "labels": "{}", "count": 3000, "sum_ns": 3000 * 12 * 10**6, "errors": 0, "zero_count": 0,
                 "window_ns": 60 * NS, "buckets": rng.choice(minute_pool)} for k in range(1, 121)])
            conn.execute(insert(latency_histograms), [
                {"device_id": d, "start_ns": NOW - k * NS, "end_ns": NOW - k * NS + NS, "name": "infer", "labels": "{}",
                 "count": 50, "sum_ns": 50 * 12 * 10**6, "errors": 0, "zero_count": 0, "buckets": rng.choice(bucket_pool)}
                for k in range(1, 121)])
            conn.execute(insert(rollup_progress), [{"device_id": d, "step_s": 60, "rolled_until_ns": NOW - NOW % (60 * NS)}])
    print(f"built {devices} devices x ({len(day)} host + {len(day)} GPU samples, 120 latency rollups, 120 histograms) "
          f"in {time.monotonic() - started:.0f} s")
    engine.dispose()


def more(url: str, devices: int, since: int, until: int) -> None:
    """Every device sends (since, until] at 1 s (samples and a histogram a second), and the rollup
    job does what it would by ``until``: the minutes that ended 10 s ago rolled up."""
    engine = make_engine(url, create=False)
    rng = random.Random(until)
    ts = list(range(since + NS, until + 1, NS))
    pool = [_buckets(rng, 50) for _ in range(32)]
    minute_pool = [_buckets(rng, 3000) for _ in range(4)]
    ids = range(1, devices + 1)
    minute = 60 * NS
    rolled_before = (since - 10 * NS) - (since - 10 * NS) % minute
    rolled_now = (until - 10 * NS) - (until - 10 * NS) % minute
    with engine.begin() as conn:
        conn.execute(insert(host_samples), [
            {"device_id": d, "ts_ns": t, "cpu_percent": 35.0, "mem_used_bytes": 8e9 + rng.random() * 1e8,
             "mem_total_bytes": 32e9, "mem_available_bytes": 24e9} for d in ids for t in ts])
        conn.execute(insert(gpu_samples), [
            {"device_id": d, "ts_ns": t, "gpu_index": 0, "util_gpu_percent": 70.0, "temp_c": 65.0, "sm_clock_mhz": 1500.0,
             "memory_used_bytes": 4e9 + rng.random() * 1e8, "throttle_reasons": 0.0} for d in ids for t in ts])
        conn.execute(insert(latency_histograms), [
            {"device_id": d, "start_ns": t - NS, "end_ns": t, "name": "infer", "labels": "{}", "count": 50,
             "sum_ns": 50 * 12 * 10**6, "errors": 0, "zero_count": 0, "buckets": rng.choice(pool)} for d in ids for t in ts])
        if rolled_now > rolled_before:
            conn.execute(insert(latency_rollups), [
                {"device_id": d, "step_s": 60, "bucket_ns": b, "name": "infer", "labels": "{}", "count": 3000,
                 "sum_ns": 3000 * 12 * 10**6, "errors": 0, "zero_count": 0, "window_ns": minute, "buckets": rng.choice(minute_pool)}
                for d in ids for b in range(rolled_before, rolled_now, minute)])
            conn.execute(rollup_progress.update().values(rolled_until_ns=rolled_now))
        conn.execute(Device.__table__.update().values(last_seen_ns=until))
    engine.dispose()


def _line(label: str, report, devices: int) -> None:  # type: ignore[no-untyped-def]
    detail = ", ".join(f"{k} {v * 1000:.0f}" for k, v in sorted(report.per_detector_s.items(), key=lambda kv: -kv[1])[:4])
    print(f"  {label:>6}: {report.seconds:.3f} s for {devices} devices (opened {report.opened}; slowest, ms: {detail})")


def run(url: str, devices: int, passes: int) -> dict[str, float]:
    """Build, then time the first pass and ``passes`` steady ones; returns the figures."""
    build(url, devices)
    engine = make_engine(url, create=False)
    settings = DetectorSettings(slos=(SloObjective(operation="infer", p99_ms=50.0, window_s=60.0),))
    job = DetectorJob(engine, settings=settings, owner="bench")
    t = NOW
    first = job.run_once(t + NS)
    _line("first", first, devices)
    # Then a pass every 10 s, each after 10 s more of 1 s data on every device: the SLO's 1 min
    # windows and the regression's 5 min window close on the way, read from the minute rollups,
    # and the progress marks are written every 60 s.
    steady = []
    for _ in range(passes):
        more(url, devices, t, t + 10 * NS)
        t += 10 * NS
        steady.append(job.run_once(t + NS))
    worst = max(steady, key=lambda r: r.seconds)
    times = sorted(r.seconds for r in steady)
    print(f"  steady: median {times[len(times) // 2]:.3f} s, worst {times[-1]:.3f} s over {len(steady)} passes")
    _line("worst", worst, devices)
    with engine.connect() as conn:
        from sqlalchemy import func, select

        from fleetscope.collector.storage.schema import Incident

        kinds = dict(conn.execute(select(Incident.kind, func.count()).group_by(Incident.kind)).all())
    print(f"  incidents: {kinds or 'none'} (a healthy fleet: none expected)")
    engine.dispose()
    return {"first": first.seconds, "median": times[len(times) // 2], "worst": times[-1]}


def _pg_database(admin_url: str) -> tuple[str, Callable[[], None]]:
    """A new empty database on the PostgreSQL server of ``admin_url``, and how to drop it."""
    import secrets

    import psycopg

    name = "fleetscope_bench_" + secrets.token_hex(4)
    plain = admin_url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return plain.rsplit("/", 1)[0] + "/" + name, drop


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", type=int, default=1000)
    ap.add_argument("--passes", type=int, default=15)
    ap.add_argument("--pg", metavar="URL", help="also on PostgreSQL: a server URL (a new database is made there and dropped)")
    ap.add_argument("--no-sqlite", action="store_true", help="PostgreSQL only")
    args = ap.parse_args()
    results: dict[str, dict[str, float]] = {}
    if not args.no_sqlite:
        with tempfile.TemporaryDirectory() as tmp:
            print("SQLite")
            results["SQLite"] = run(f"sqlite:///{Path(tmp) / 'bench.db'}", args.devices, args.passes)
    if args.pg:
        url, drop = _pg_database(args.pg)
        try:
            print("PostgreSQL")
            results["PostgreSQL"] = run(url, args.devices, args.passes)
        finally:
            drop()
    print(f"{'database':<11} {'first':>7} {'steady':>7} {'worst':>7}   ({args.devices} devices, target: every pass < 1 s)")
    for db, r in results.items():
        print(f"{db:<11} {r['first']:>6.3f}s {r['median']:>6.3f}s {r['worst']:>6.3f}s")


if __name__ == "__main__":
    main()
