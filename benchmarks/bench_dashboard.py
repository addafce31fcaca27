"""Dashboard render times on a large fleet: the Fleet page and a Device page over 24 h.

    python benchmarks/bench_dashboard.py                          # 200 devices x 7 days (~75 GB, ~1 h 40 min here)
    python benchmarks/bench_dashboard.py --devices 200 --days 1   # what fits a small machine
    python benchmarks/bench_dashboard.py --db /tmp/big.db --skip-fill --browser

It fills a database with 1 s samples for every device (half Jetson drones with one GPU, half
servers with ``--gpus`` GPUs), latency histograms, logs, incidents and trtexec benchmark
records, generated in bulk with numpy and written with the storage layer's tables and the
driver's bulk path (sqlite3 ``executemany``, psycopg ``COPY``). It then runs the rollup job as
a collector would, tops the data up to "now" so the fleet is live, and measures:

* the query layer alone (``fleet_overview``, ``device_series`` for 24 h);
* the real app through Streamlit's AppTest: the whole script run of each page, cold (caches
  cleared) and warm (a refresh within the cache TTL), median of ``--runs``;
* with ``--browser``, the real server in headless Chromium: from navigation until the table
  shows its devices (Fleet) or the charts are drawn (Device).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

NS = 10**9
GIB = 1024**3
SERVER_GPUS = (("NVIDIA A100-SXM4-80GB", 80, 400.0, 1410.0), ("NVIDIA H100 80GB HBM3", 80, 700.0, 1980.0))
JETSON = ("Orin (nvgpu)", 8, 15.0, 1020.0)
CHUNK_S = 6 * 3600


@dataclass(frozen=True)
class Spec:
    id: int
    name: str
    jetson: bool
    gpus: int
    model: tuple[str, int, float, float]


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------ filling


def device_specs(devices: int, gpus: int) -> list[Spec]:
    out = []
    drones = devices // 2
    for i in range(devices):
        jetson = i < drones
        name = f"bench-drone-{i:03d}" if jetson else f"bench-gpu-{i - drones:03d}"
        out.append(Spec(i + 1, name, jetson, 1 if jetson else gpus, JETSON if jetson else SERVER_GPUS[i % 2]))
    return out


def insert_devices(engine, specs: list[Spec], first_ns: int, now_ns: int) -> None:  # type: ignore[no-untyped-def]
    from sqlalchemy.orm import Session

    from fleetscope.collector.storage.schema import Device

    with Session(engine) as s, s.begin():
        for sp in specs:
            name, mem_gib, _tdp, _clock = sp.model
            inv = {
                "gpus": [
                    {"index": g, "name": name, "memory_total_bytes": mem_gib * GIB} for g in range(sp.gpus)
                ],
                "memory_total_bytes": (8 if sp.jetson else 512) * GIB,
            }
            labels = {
                "site": ["lab", "field"][sp.id % 2],
                "fleet": "drones" if sp.jetson else "training",
                "bench": "true",
            }
            if sp.jetson:
                inv["board_model"] = "NVIDIA Jetson Orin Nano Developer Kit"
                labels["drone_id"] = f"D{sp.id:03d}"
            s.add(
                Device(
                    id=sp.id,
                    agent_id=f"bench-{sp.id}",
                    name=sp.name,
                    hostname=sp.name,
                    kind="jetson" if sp.jetson else "server",
                    labels=labels,
                    inventory=inv,
                    first_seen_ns=first_ns,
                    last_seen_ns=now_ns,
                    simulated=True,
                    agent_version="bench",
                )
            )


def gpu_rows(sp: Spec, t0: int, t1: int, energy: np.ndarray) -> Iterator[tuple]:
    """GPU sample tuples for [t0, t1) in the gpu_samples column order, all GPUs of a device."""
    name, mem_gib, tdp, clock = sp.model
    ts = np.arange(t0, t1, NS, dtype=np.int64)
    t = ts / 1e9
    rng = np.random.default_rng(sp.id * 1_000_003 + t0 // NS)
    n = len(ts)
    for g in range(sp.gpus):
        duty = 0.5 + 0.45 * np.sin(t / 900.0 + sp.id + g * 0.3)
        util = np.clip(100 * duty + rng.normal(0, 6, n), 0, 100)
        temp = 35 + 45 * duty + rng.normal(0, 1.5, n) + (8 if sp.jetson else 0)
        hot = temp > 83
        power = tdp * (0.15 + 0.85 * util / 100) * np.where(hot, 0.8, 1.0)
        energy_g = energy[g] + np.cumsum(power)
        energy[g] = energy_g[-1]
        mem = mem_gib * GIB * (0.2 + 0.7 * duty) + rng.uniform(0, GIB, n)
        sm = np.where(hot, clock * 0.7, clock * 0.98)
        throttle = np.where(hot, 0x60, 0).astype(np.float64)
        # As NVML reports them: utilisation, temperature and clocks in whole units, power and
        # energy in milli-units. SQLite stores a whole-valued REAL in 1-2 bytes instead of 8, so
        # the recorded shape of the data also decides how much disk a week of a fleet takes.
        sm = sm.round()
        cols = [
            util.round(),
            (util * 0.6).round(),
            mem.round(),
            temp.round(),
            power.round(3),
            energy_g.round(3),
            sm,
            sm,
            throttle,
        ]
        yield from zip(
            [sp.id] * n,
            ts.tolist(),
            [g] * n,
            *(c.tolist() for c in cols[:2]),
            [0.0] * n,
            [0.0] * n,
            cols[2].tolist(),
            cols[3].tolist(),
            [None] * n,
            cols[4].tolist(),
            cols[5].tolist(),
            cols[6].tolist(),
            [clock * 2.0] * n,
            cols[7].tolist(),
            [0.0] * n,
            [None] * n if sp.jetson else (30 + 50 * duty).round().tolist(),
            [None] * n,
            [None] * n,
            cols[8].tolist(),
        )


def host_rows(sp: Spec, t0: int, t1: int, counters: np.ndarray) -> Iterator[tuple]:
    ts = np.arange(t0, t1, NS, dtype=np.int64)
    t = ts / 1e9
    rng = np.random.default_rng(sp.id * 7919 + t0 // NS)
    n = len(ts)
    duty = 0.5 + 0.45 * np.sin(t / 900.0 + sp.id)
    total = (8 if sp.jetson else 512) * GIB
    cores = 6 if sp.jetson else 64
    cpu = np.clip(70 * duty + rng.normal(0, 10, n), 0, 100).round(1)
    rates = rng.uniform(0, 50e6, (2, n)), rng.uniform(0, 2e6 if sp.jetson else 200e6, (2, n))
    disk = counters[:2, None] + np.cumsum(rates[0], axis=1)
    net = counters[2:, None] + np.cumsum(rates[1], axis=1)
    counters[:2], counters[2:] = disk[:, -1], net[:, -1]
    yield from zip(
        [sp.id] * n,
        ts.tolist(),
        cpu.tolist(),
        (cores * duty * 0.8).round(2).tolist(),
        (cores * duty * 0.7).round(2).tolist(),
        (cores * duty * 0.6).round(2).tolist(),
        [float(total)] * n,
        (total * (0.3 + 0.5 * duty)).round().tolist(),
        (total * (0.7 - 0.5 * duty)).round().tolist(),
        [4.0 * GIB] * n,
        (0.1 * GIB * duty).round().tolist(),
        [64.0 * GIB] * n,
        [30.0 * GIB] * n,
        disk[0].round().tolist(),
        disk[1].round().tolist(),
        net[0].round().tolist(),
        net[1].round().tolist(),
        [None] * n,
        [None] * n,
    )


def latency_template(sp: Spec) -> tuple[str, int, int]:
    """One minute of "infer" timings as a histogram: drones ~30 ms at 30/s, servers ~4 ms at 250/s."""
    from fleetscope.proto import buckets

    rng = np.random.default_rng(sp.id)
    per_minute = 60 * (30 if sp.jetson else 250)
    values = rng.lognormal(math.log(30e6 if sp.jetson else 4e6), 0.15, per_minute)
    hist: dict[int, int] = {}
    for v in values:
        i = buckets.bucket_index(float(v))
        hist[i] = hist.get(i, 0) + 1
    return json.dumps(hist, separators=(",", ":")), per_minute, int(values.sum())


def other_rows(sp: Spec, t0: int, t1: int) -> tuple[list[tuple], list[tuple], list[dict]]:
    """Latency histograms (one a minute), log lines (one every 10 min) and incidents (every ~6 h)."""
    buckets_json, count, sum_ns = latency_template(sp)
    lat = [
        (sp.id, t, t + 60 * NS, "infer", '{"model":"yolov8n"}', count, sum_ns, 0, 0, buckets_json)
        for t in range(t0 - t0 % (60 * NS), t1, 60 * NS)
        if t >= t0
    ]
    logs = [
        (
            sp.id,
            t,
            "/var/log/inference.log" if sp.jetson else "/var/log/train.log",
            "info",
            f"step {t // NS % 100000} ok",
        )
        for t in range(t0 - t0 % (600 * NS), t1, 600 * NS)
        if t >= t0
    ]
    incidents = []
    for t in range(t0 - t0 % (6 * 3600 * NS) + (sp.id % 360) * 60 * NS, t1, 6 * 3600 * NS):
        if t < t0:
            continue
        if sp.jetson:
            kind, title = "host_oom", "Host OOM on cpu: tried to allocate 3.20 GiB"
            facts = {"requested_bytes": int(3.2 * GIB), "device": "cpu"}
        else:
            kind, title = "cuda_oom", "CUDA OOM on cuda:0: tried to allocate 2.00 GiB"
            facts = {
                "requested_bytes": 2 * GIB,
                "free_bytes": int(1.25 * GIB),
                "reserved_unallocated_bytes": int(1.37 * GIB),
                "batch_size": 32,
            }
        incidents.append(
            {
                "device_id": sp.id,
                "ts_ns": t,
                "received_ns": t,
                "kind": kind,
                "severity": "error",
                "title": title,
                "facts": facts,
                "source": "sdk",
                "excerpt": title,
                "context": {},
            }
        )
        logs.append((sp.id, t, "sdk", "error", title))
    return lat, logs, incidents


class Writer:
    """Bulk inserts through the driver's fast path, like the collector's writer."""

    def __init__(self, engine) -> None:  # type: ignore[no-untyped-def]
        from fleetscope.collector.storage.schema import GPU_SAMPLE_COLUMNS, HOST_VALUE_COLUMNS

        self.engine = engine
        self.sqlite = engine.dialect.name == "sqlite"
        self.cols = {
            "gpu_samples": ("device_id", "ts_ns", "gpu_index", *GPU_SAMPLE_COLUMNS),
            "host_samples": ("device_id", "ts_ns", *HOST_VALUE_COLUMNS, "cpu_cores", "top_processes"),
            "latency_histograms": (
                "device_id",
                "start_ns",
                "end_ns",
                "name",
                "labels",
                "count",
                "sum_ns",
                "errors",
                "zero_count",
                "buckets",
            ),
            "log_events": ("device_id", "ts_ns", "source", "level", "message"),
        }
        self.raw = engine.raw_connection()
        if self.sqlite:
            self.raw.driver_connection.isolation_level = None
            cur = self.raw.cursor()
            cur.execute("PRAGMA synchronous=OFF")  # a benchmark fill, not acknowledged data
            cur.close()

    def put(self, table: str, rows) -> int:  # type: ignore[no-untyped-def]
        cols = self.cols[table]
        cur = self.raw.cursor()
        n = 0
        if self.sqlite:
            rows = list(rows)
            cur.execute("BEGIN")
            cur.executemany(
                f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", rows
            )
            cur.execute("COMMIT")
            n = len(rows)
        else:
            with cur.copy(f"COPY {table} ({', '.join(cols)}) FROM STDIN") as copy:
                for r in rows:
                    copy.write_row(r)
                    n += 1
            self.raw.commit()
        cur.close()
        return n

    def incidents(self, rows: list[dict]) -> None:
        from sqlalchemy import insert

        from fleetscope.collector.storage.schema import Incident

        if rows:
            now_ns = time.time_ns()
            rows = [r if "last_seen_ns" in r else lifecycle(r, now_ns) for r in rows]
            with self.engine.begin() as conn:
                conn.execute(insert(Incident.__table__), rows)  # type: ignore[arg-type]

    def close(self) -> None:
        self.raw.close()


def lifecycle(incident: dict, now_ns: int) -> dict:
    """The lifecycle columns (revision 0003: ``last_seen_ns`` is NOT NULL) an event incident has
    once the detectors' lifecycle has seen it: resolved 30 min after it was last seen."""
    from fleetscope.proto.vocabulary import INCIDENT_OPEN, INCIDENT_RESOLVED

    ts = incident["ts_ns"]
    ended = ts + 30 * 60 * NS
    done = ended <= now_ns
    return {
        **incident,
        "last_seen_ns": ts,
        "updated_ns": ended if done else ts,
        "ended_ns": ended if done else None,
        "state": INCIDENT_RESOLVED if done else INCIDENT_OPEN,
    }


def fill(engine, specs: list[Spec], t0: int, t1: int, state: dict, *, quiet: bool = False) -> int:  # type: ignore[no-untyped-def]
    """Samples for [t0, t1) for every device; returns rows written."""
    w = Writer(engine)
    total = 0
    started = time.monotonic()
    expected = sum((1 + sp.gpus) for sp in specs) * ((t1 - t0) // NS)
    try:
        for k, sp in enumerate(specs):
            energy, counters = state.setdefault(sp.id, (np.zeros(sp.gpus), np.zeros(4)))
            for a in range(t0, t1, CHUNK_S * NS):
                b = min(t1, a + CHUNK_S * NS)
                total += w.put("gpu_samples", gpu_rows(sp, a, b, energy))
                total += w.put("host_samples", host_rows(sp, a, b, counters))
                lat, logs, incidents = other_rows(sp, a, b)
                w.put("latency_histograms", lat)
                w.put("log_events", logs)
                w.incidents(incidents)
            if not quiet and (k % 10 == 9 or k == len(specs) - 1):
                el = time.monotonic() - started
                rate = total / el if el else 0
                eta = (expected - total) / rate if rate else 0
                say(
                    f"  {k + 1}/{len(specs)} devices, {total:,} sample rows, {rate:,.0f} rows/s, about {eta / 60:.1f} min left"
                )
    finally:
        w.close()
    return total


def trt_records(engine, specs: list[Spec], now_ns: int) -> None:  # type: ignore[no-untyped-def]
    from sqlalchemy import insert

    from fleetscope.collector.storage.schema import Incident

    rows = []
    for sp in specs[:: max(1, len(specs) // 20)]:
        qps, p99 = (41.5, 29.4) if sp.jetson else (1250.5, 0.95)
        rows.append(
            {
                "device_id": sp.id,
                "ts_ns": now_ns - 3600 * NS,
                "received_ns": now_ns,
                "kind": "trt_benchmark",
                "severity": "info",
                "title": f"trtexec: {qps} qps",
                "source": "/var/log/trtexec.log",
                "excerpt": "",
                "context": {},
                "facts": {
                    "record": "performance_summary",
                    "throughput_qps": qps,
                    "latency_p99_ms": p99,
                    "latency_mean_ms": p99 * 0.8,
                    "gpu_compute_mean_ms": p99 * 0.7,
                    "precision": "FP32+FP16",
                    "device_name": sp.model[0],
                },
            }
        )
    with engine.begin() as conn:
        conn.execute(insert(Incident.__table__), [lifecycle(r, now_ns) for r in rows])  # type: ignore[arg-type]


def touch_devices(engine, now_ns: int) -> None:  # type: ignore[no-untyped-def]
    from sqlalchemy import update

    from fleetscope.collector.storage.schema import Device

    with engine.begin() as conn:
        conn.execute(update(Device).values(last_seen_ns=now_ns))


# ------------------------------------------------------------------------------ measuring


def _entry(db_url: str, page: str) -> None:
    from fleetscope.dashboard.app import main

    main(db_url=db_url, default=page)


def apptest(db_url: str, page: str, query: dict[str, str], runs: int) -> dict[str, float]:
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    cold, warm = [], []
    for _ in range(runs):
        st.cache_data.clear()
        at = AppTest.from_function(_entry, args=(db_url, page), default_timeout=300)
        for k, v in query.items():
            at.query_params[k] = v
        t = time.perf_counter()
        at.run()
        cold.append(time.perf_counter() - t)
        if at.exception or any("could not" in str(e.value) for e in at.error):
            raise RuntimeError(
                f"{page} failed: {[e.value for e in at.exception] or [e.value for e in at.error]}"
            )
        t = time.perf_counter()
        at.run()
        warm.append(time.perf_counter() - t)
    return {"cold_s": statistics.median(cold), "warm_s": statistics.median(warm), "cold_max_s": max(cold)}


def query_times(db_url: str, device: str, runs: int) -> dict[str, float]:
    from fleetscope.collector import query

    engine = query.open_database(db_url)
    fleet, series = [], []
    try:
        for _ in range(runs):
            now = time.time_ns()
            with query.session_scope(engine) as s:
                t = time.perf_counter()
                query.fleet_overview(session=s, now_ns=now)
                fleet.append(time.perf_counter() - t)
                t = time.perf_counter()
                query.device_series(session=s, device=device, since_ns=now - 86400 * NS, until_ns=now)
                series.append(time.perf_counter() - t)
    finally:
        engine.dispose()
    return {"fleet_overview_s": statistics.median(fleet), "device_series_24h_s": statistics.median(series)}


def browser_times(db_url: str, device: str, runs: int) -> dict[str, float]:
    import socket
    import subprocess
    import urllib.request

    from playwright.sync_api import sync_playwright

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetscope.dashboard", "--db", db_url, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    out: dict[str, list[float]] = {"boot": [], "fleet": [], "device": []}
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{base}/_stcore/health", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ]
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=os.environ.get("FLEETSCOPE_TEST_CHROMIUM", "/usr/bin/chromium"), args=args
            )
            page = browser.new_page(viewport={"width": 1600, "height": 1200})
            for _ in range(runs):
                t = time.perf_counter()
                page.goto(f"{base}/")
                # The frontend's own start (scripts, websocket, first message) is the same for
                # any Streamlit app: timed apart, so the page's part can be read off.
                page.wait_for_selector('[data-testid="stSidebarNav"]', timeout=120_000)
                out["boot"].append(time.perf_counter() - t)
                page.wait_for_function(
                    "() => [...document.querySelectorAll('[data-testid=stDataFrame] table td')]"
                    ".some(td => td.innerText.startsWith('bench-'))",
                    timeout=120_000,
                )
                out["fleet"].append(time.perf_counter() - t)
                t = time.perf_counter()
                page.goto(f"{base}/device?device={device}&range=24h")
                page.wait_for_function(
                    "() => document.querySelectorAll('[data-testid=stVegaLiteChart] canvas, "
                    "[data-testid=stVegaLiteChart] svg').length >= 5",
                    timeout=120_000,
                )
                out["device"].append(time.perf_counter() - t)
            browser.close()
    finally:
        proc.terminate()
        proc.wait(15)
    return {
        "browser_app_boot_s": statistics.median(out["boot"]),
        "browser_fleet_s": statistics.median(out["fleet"]),
        "browser_device_24h_s": statistics.median(out["device"]),
    }


# ------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--db",
        default="benchmarks/results/bench_dashboard.db",
        help="database URL or SQLite path (default %(default)s; benchmarks/results/ is git-ignored)",
    )
    p.add_argument(
        "--devices", type=int, default=200, help="devices, half of them Jetson drones (default %(default)s)"
    )
    p.add_argument(
        "--days", type=float, default=7.0, help="days of 1 s samples per device (default %(default)s)"
    )
    p.add_argument("--gpus", type=int, default=8, help="GPUs per server (default %(default)s)")
    p.add_argument(
        "--runs",
        type=int,
        default=3,
        help="measurements per page; medians are reported (default %(default)s)",
    )
    p.add_argument(
        "--skip-fill", action="store_true", help="measure an existing database (top it up to now first)"
    )
    p.add_argument(
        "--browser", action="store_true", help="also time the pages in headless Chromium (Playwright)"
    )
    p.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = p.parse_args(argv)

    from fleetscope.collector.jobs.rollup import RollupJob
    from fleetscope.collector.storage.engine import make_engine, normalise_url

    url = normalise_url(args.db)
    if url.startswith("sqlite:///") and not args.skip_fill:
        path = Path(url[len("sqlite:///") :])
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
    engine = make_engine(url)  # the collector's schema, rollup tables included
    specs = device_specs(args.devices, args.gpus)
    server = next(sp for sp in specs if not sp.jetson) if any(not sp.jetson for sp in specs) else specs[0]
    state: dict = {}
    figures: dict[str, object] = {
        "devices": args.devices,
        "days": args.days,
        "gpus_per_server": args.gpus,
        "db": engine.dialect.name,
    }
    start_ns = time.time_ns() // NS * NS
    if not args.skip_fill:
        first = start_ns - int(args.days * 86400) * NS
        gpus = sum(sp.gpus for sp in specs)
        say(
            f"filling {url}: {args.devices} devices ({gpus} GPUs) x {args.days:g} days of 1 s samples, "
            f"about {(args.devices + gpus) * int(args.days * 86400):,} rows"
        )
        insert_devices(engine, specs, first, start_ns)
        t = time.monotonic()
        rows = fill(engine, specs, first, start_ns, state)
        figures["fill_s"] = round(time.monotonic() - t, 1)
        figures["sample_rows"] = rows
        trt_records(engine, specs, start_ns)
        say(f"filled {rows:,} sample rows in {figures['fill_s']} s")
    job = RollupJob(engine, settle_s=10)
    t = time.monotonic()
    report = job.run_once()
    figures["rollup_s"] = round(time.monotonic() - t, 1)
    say(
        f"rollup job: {report.rows[60]:,} minute and {report.rows[3600]:,} hour rows in {figures['rollup_s']} s"
    )
    # Top up to "now" (the fill took a while), so the fleet is online and the charts reach the present.
    with engine.connect() as conn:
        from sqlalchemy import func, select

        from fleetscope.collector.storage.schema import host_samples

        last = conn.execute(select(func.max(host_samples.c.ts_ns))).scalar() or start_ns
    for _ in range(3):
        now = time.time_ns() // NS * NS
        if now - last < 5 * NS:
            break
        fill(engine, specs, last + NS, now, state, quiet=True)
        last = now - NS
    job.run_once()
    touch_devices(engine, time.time_ns())
    engine.dispose()

    say(f"measuring (median of {args.runs})...")
    figures.update(query_times(url, server.name, args.runs))
    fleet = apptest(url, "fleet", {}, args.runs)
    device = apptest(url, "device", {"device": server.name, "range": "24h"}, args.runs)
    figures.update({f"apptest_fleet_{k}": round(v, 3) for k, v in fleet.items()})
    figures.update({f"apptest_device_24h_{k}": round(v, 3) for k, v in device.items()})
    if args.browser:
        figures.update({k: round(v, 3) for k, v in browser_times(url, server.name, args.runs).items()})
    width = max(len(k) for k in figures)
    for k, v in figures.items():
        print(f"{k.ljust(width)}  {v}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
