"""The fleet views at 10,000 devices: the Fleet page, a comparison of two 1,000-device groups and
a scrape of ``/metrics/fleet``, on Citus, PostgreSQL or SQLite (issue 30).

    python benchmarks/bench_fleet_scale.py --devices 10000 --db citus            # a private coordinator + 2 workers
    python benchmarks/bench_fleet_scale.py --devices 10000 --db postgresql+psycopg://postgres@127.0.0.1/mine
    python benchmarks/bench_fleet_scale.py --devices 500 --db sqlite             # a small fleet in a temporary file

It makes the schema the way a collector does (``make_engine``: the migrations to head, and on a
Citus coordinator the tables distributed by device), then generates for ``--devices`` devices
(half Jetson drones with one GPU, half servers with ``--gpus`` GPUs, as ``bench_dashboard.py``
does) their registration rows (labels ``group=g00``, ``g01``... one per ``--group-size`` devices,
drones first), their latest readings (``gpu_latest``, ``host_latest``, ``gpu_state`` and the
Jetson metric points: what the Fleet page's "now" and ``/metrics/fleet`` read), a few open and
resolved incidents, and a day of minute rollups per GPU and host (with the hour rollups and the
progress marks the rollup job would have made from them), in bulk: numpy columns written with
PostgreSQL's binary ``COPY`` (SQLite: ``executemany``). Before each measured run the fleet is
"touched" (last seen, latest readings and minute rollups brought up to now), as a live fleet is.

It then measures, median of ``--runs``, every run a cache miss:

* **fleet**: the Fleet page in headless Chromium (Debian's ``chromium`` through Playwright) on the
  real dashboard server, from navigation until the device table shows its devices, and how old
  the fleet summary it shows is (a fleet slow to read is shown as last read while the next is
  read: ``--serve-last-after``; ``off`` measures a page waiting for a summary of now), and
  ``fleet_overview`` alone, the query it runs;
* **compare**: the Compare page in Chromium comparing two groups of ``--group-size`` devices
  (a drone group against a server group, over 24 h) until its table shows both groups' device
  counts, a different pair each run (and ``compare_groups`` alone);
* **/metrics/fleet**: an HTTP GET of the collector's exporter (its listener and
  ``FleetExposition``, in this process), its one-second cache expired before each, as the
  collector serves it (a fleet whose rendering takes 2 s or more gets the last rendering, and
  its age is printed) and through an exposition that renders for each scrape (``a rendering``:
  every scrape's time before, and the least age of the readings served);

and prints a table with PASS/MISS against the bars (Fleet page < 2 s, comparison < 2 s, scrape
< 5 s; the exit status is 1 when one is missed), with the CPU seconds each view cost every process
involved (this one, the dashboard server and Chromium, the database's backends on every node):
what it would cost on an idle machine, where the wall time shows what other work made of it.
``--keep`` leaves the database (and a private Citus cluster) behind, to measure it again
with ``--skip-fill --db URL``. Progress goes to stderr; the table to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import bench_dashboard as bd  # noqa: E402  (the device models and specs, reused)

NS = 10**9
GIB = 1024**3
MIN_NS = 60 * NS
HOUR_NS = 3600 * NS
BARS = {"fleet page (Chromium)": 2.0, "compare page (Chromium)": 2.0, "/metrics/fleet scrape": 5.0}
JETSON_POINTS = (  # (name, labels, base value) as the agent's sysfs and tegrastats samplers write them
    ("jetson.power_mw", '{"rail":"VDD_IN"}', 6500.0),
    ("jetson.power_mw", '{"rail":"VDD_CPU_GPU_CV"}', 2100.0),
    ("jetson.power_avg_mw", '{"rail":"VDD_IN"}', 6400.0),
    ("jetson.temp_c", '{"sensor":"cpu"}', 52.0),
    ("jetson.temp_c", '{"sensor":"gpu"}', 50.0),
    ("jetson.fan_percent", "{}", 40.0),
    ("jetson.emc_mhz", "{}", 2133.0),
    ("jetson.emc_load_percent", "{}", 23.0),
    ("jetson.engine_mhz", '{"engine":"NVENC"}', 0.0),
    ("jetson.jetson_clocks", "{}", 0.0),
    ("jetson.nvpmodel_id", '{"mode":"15W"}', 0.0),
)


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Fleet:
    devices: int
    gpus: int  # per server
    group_size: int

    @property
    def drones(self) -> int:
        return self.devices // 2

    def gpus_of(self, ids: np.ndarray) -> np.ndarray:
        return np.where(ids <= self.drones, 1, self.gpus)

    def group_of(self, device_id: int) -> str:
        return f"g{(device_id - 1) // self.group_size:02d}"

    def compare_pairs(self) -> list[tuple[str, str]]:
        """Whole groups of drones against whole groups of servers: (g00, first server group), ..."""
        size = self.group_size
        drone_groups = [f"g{i:02d}" for i in range(self.drones // size)]
        first_server = -(-self.drones // size)  # the first group that starts among the servers
        server_groups = [
            f"g{i:02d}" for i in range(first_server, self.devices // size) if (i + 1) * size <= self.devices
        ]
        return list(zip(drone_groups, server_groups))


# ------------------------------------------------------------------------------ the database


class Target:
    """The database to fill and measure, and how to clean up after it."""

    def __init__(self, spec: str, *, shards: int, keep: bool) -> None:
        self.keep = keep
        self.cluster = None
        self.tmp: Path | None = None
        if spec == "citus":
            from tests.citus_cluster import citus_installed, private_cluster

            why = citus_installed()
            if why:
                raise SystemExit(f"--db citus: {why}")
            say("starting a private Citus cluster (a coordinator and two workers on loopback)")
            self.cluster = private_cluster()
            self.url = self.cluster.create_database(shards=shards)
            say(f"Citus at {self.url} ({shards} shards a table, data in {self.cluster.dir})")
        elif spec == "sqlite":
            self.tmp = Path(tempfile.mkdtemp(prefix="fleet-scale-"))
            self.url = f"sqlite:///{self.tmp / 'fleet.db'}"
        else:
            from fleetscope.collector.storage.engine import normalise_url

            self.url = normalise_url(spec)

    @property
    def kind(self) -> str:
        return "citus" if self.cluster is not None else self.url.split(":", 1)[0].split("+", 1)[0]

    def close(self) -> None:
        if self.keep:
            where = (
                f" (cluster data in {self.cluster.dir}, ports {self.cluster.ports})" if self.cluster else ""
            )
            say(f"kept: {self.url}{where}")
            return
        if self.cluster is not None:
            say("destroying the private Citus cluster")
            self.cluster.destroy()
        if self.tmp is not None:
            import shutil

            shutil.rmtree(self.tmp, ignore_errors=True)


# ------------------------------------------------------------------------------ bulk writing


class Bulk:
    """Rows into a table through the driver's fastest path: PostgreSQL binary COPY of numpy
    columns (a structured array, big-endian, each field with its length word), SQLite executemany."""

    PG_TYPES = {"i2": ">i2", "i4": ">i4", "i8": ">i8", "f8": ">f8"}

    def __init__(self, engine) -> None:  # type: ignore[no-untyped-def]
        self.engine = engine
        self.sqlite = engine.dialect.name == "sqlite"

    def rows(self, table: str, names: list[str], rows: list[tuple]) -> int:
        """Python rows (text, JSON as text) through text COPY (SQLite: executemany): on Citus a
        statement per row costs a round trip through the coordinator each."""
        if not rows:
            return 0
        raw = self.engine.raw_connection()
        try:
            cur = raw.cursor()
            if self.sqlite:
                marks = ", ".join("?" * len(names))
                cur.executemany(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({marks})", rows)
            else:
                with cur.copy(f"COPY {table} ({', '.join(names)}) FROM STDIN") as copy:
                    for r in rows:
                        copy.write_row(r)
            cur.close()
            raw.commit()
        finally:
            raw.close()
        return len(rows)

    def put(self, table: str, columns: dict[str, tuple[str, np.ndarray]]) -> int:
        """``columns``: {name: (type code i2/i4/i8/f8, values)}, all of one length, no NULLs."""
        names = list(columns)
        n = len(next(iter(columns.values()))[1])
        if n == 0:
            return 0
        raw = self.engine.raw_connection()
        try:
            cur = raw.cursor()
            if self.sqlite:
                cols = [columns[c][1].tolist() for c in names]
                cur.executemany(
                    f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                    zip(*cols),
                )
            else:
                fields: list[tuple[str, str]] = [("nf", ">i2")]
                for i, c in enumerate(names):
                    fields += [(f"l{i}", ">i4"), (c, self.PG_TYPES[columns[c][0]])]
                rows = np.empty(n, dtype=np.dtype(fields))
                rows["nf"] = len(names)
                for i, c in enumerate(names):
                    code, values = columns[c]
                    rows[f"l{i}"] = int(code[1])
                    rows[c] = values
                with cur.copy(f"COPY {table} ({', '.join(names)}) FROM STDIN (FORMAT BINARY)") as copy:
                    copy.write(b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0))
                    view = memoryview(rows.view(np.uint8))
                    step = 8 << 20
                    for a in range(0, len(view), step):
                        copy.write(view[a : a + step])
                    copy.write(struct.pack(">h", -1))
            cur.close()
            raw.commit()
        finally:
            raw.close()
        return n


def insert_devices(engine, fleet: Fleet, specs: list, now_ns: int) -> None:  # type: ignore[no-untyped-def]
    from sqlalchemy import insert, text

    from fleetscope.collector.storage.schema import Device

    rows = []
    for sp in specs:
        name, mem_gib, _tdp, _clock = sp.model
        inv = {
            "gpus": [
                {
                    "index": g,
                    "name": name,
                    "memory_total_bytes": mem_gib * GIB,
                    "uuid": "" if sp.jetson else f"GPU-{sp.id:08x}-{g:04x}-0000-0000-000000000000",
                    "pci_bus_id": "" if sp.jetson else f"00000000:{g + 0x17:02X}:00.0",
                }
                for g in range(sp.gpus)
            ],
            "memory_total_bytes": (8 if sp.jetson else 512) * GIB,
            "driver_version": "540.4.0" if sp.jetson else "550.90.07",
            "batch_interval_s": 10.0,
        }
        labels = {"site": ["lab", "field"][sp.id % 2], "fleet": "drones" if sp.jetson else "training",
                  "group": fleet.group_of(sp.id)}  # fmt: skip
        if sp.jetson:
            inv["board_model"] = "NVIDIA Jetson Orin Nano Developer Kit"
        rows.append({
            "id": sp.id, "agent_id": f"scale-{sp.id}", "name": sp.name, "hostname": sp.name,
            "kind": "jetson" if sp.jetson else "server", "boot_id": "", "agent_version": "bench", "labels": labels,
            "inventory": inv, "capabilities": [], "first_seen_ns": now_ns - 2 * 86400 * NS, "last_seen_ns": now_ns,
            "clock_skew_ns": 0, "counters": {"spool_batches": 0, "spool_bytes": 0, "dropped_batches": 0},
            "batches_stored": 8640, "batches_rejected": 0, "last_rejection": "", "simulated": True,
        })  # fmt: skip
    if engine.dialect.name == "sqlite":  # SQLAlchemy's JSON and Boolean types, through the table
        with engine.begin() as conn:
            conn.execute(insert(Device.__table__), rows)
    else:  # COPY: a row at a time into a Citus reference table is a distributed transaction each
        names = list(rows[0])
        as_text = [
            tuple(json.dumps(r[c]) if isinstance(r[c], (dict, list)) else r[c] for c in names) for r in rows
        ]
        Bulk(engine).rows("devices", names, as_text)
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("SELECT setval(pg_get_serial_sequence('devices', 'id'), :n)"), {"n": len(rows)})


def _ids_per_gpu(fleet: Fleet, first: int, last: int) -> tuple[np.ndarray, np.ndarray]:
    """(device id, gpu index) of every GPU of devices [first, last]."""
    ids = np.arange(first, last + 1, dtype=np.int64)
    counts = fleet.gpus_of(ids)
    dev = np.repeat(ids, counts)
    starts = np.cumsum(counts) - counts
    gpu = np.arange(len(dev)) - np.repeat(starts, counts)
    return dev, gpu


def _duty(dev: np.ndarray, gpu: np.ndarray, t_ns: np.ndarray) -> np.ndarray:
    """A slow load pattern per GPU (0.05..0.95), (len(dev), len(t)) or broadcast."""
    return 0.5 + 0.45 * np.sin(t_ns[None, :] / NS / 900.0 + dev[:, None] * 0.7 + gpu[:, None] * 0.3)


def gpu_minutes(
    fleet: Fleet, first: int, last: int, t0: int, t1: int, jetson: bool
) -> dict[str, tuple[str, np.ndarray]]:
    """One minute rollup row per GPU of devices [first, last] and minute of [t0, t1)."""
    dev, gpu = _ids_per_gpu(fleet, first, last)
    ts = np.arange(t0, t1, MIN_NS, dtype=np.int64)
    g, m = len(dev), len(ts)
    rng = np.random.default_rng(first * 7919 + t0 // MIN_NS)
    duty = _duty(dev, gpu, ts)
    noise = rng.normal(0.0, 1.0, (g, m))
    name, mem_gib, tdp, clock = bd.JETSON if jetson else bd.SERVER_GPUS[first % 2]
    util = np.clip(100 * duty + 4 * noise, 0, 100)
    temp = 35 + 45 * duty + (8 if jetson else 0)
    power = tdp * (0.15 + 0.85 * util / 100)
    mem = mem_gib * GIB * (0.2 + 0.7 * duty)
    hot = (temp > 83).astype(np.float64) * 60

    def flat(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=np.float64).reshape(-1)

    return {
        "device_id": ("i4", np.repeat(dev, m)),
        "step_s": ("i4", np.full(g * m, 60)),
        "bucket_ns": ("i8", np.tile(ts, g)),
        "gpu_index": ("i2", np.repeat(gpu, m)),
        "n": ("i8", np.full(g * m, 60)),
        "span_ns": ("i8", np.full(g * m, 59 * NS)),
        "util_avg": ("f8", flat(util.round(1))),
        "util_max": ("f8", flat(np.minimum(100, util + 8).round())),
        "mem_util_avg": ("f8", flat((util * 0.6).round(1))),
        "memory_used_avg": ("f8", flat(mem.round())),
        "memory_used_max": ("f8", flat((mem * 1.02).round())),
        "temp_avg": ("f8", flat(temp.round(1))),
        "temp_max": ("f8", flat((temp + 2).round())),
        "power_avg": ("f8", flat(power.round(2))),
        "power_max": ("f8", flat((power * 1.1).round(2))),
        "energy_delta_j": ("f8", flat((power * 59).round(1))),
        "sm_clock_avg": ("f8", flat(np.where(hot > 0, clock * 0.7, clock * 0.98).round())),
        "sm_clock_min": ("f8", flat(np.where(hot > 0, clock * 0.7, clock * 0.95).round())),
        "memory_clock_avg": ("f8", flat(np.full((g, m), clock * 2.0))),
        "fan_avg": ("f8", flat((30 + 50 * duty).round())),
        "throttle_thermal_n": ("f8", flat(hot)),
        "throttle_power_n": ("f8", flat(np.zeros((g, m)))),
    }


def host_minutes(
    fleet: Fleet, first: int, last: int, t0: int, t1: int, jetson: bool
) -> dict[str, tuple[str, np.ndarray]]:
    ids = np.arange(first, last + 1, dtype=np.int64)
    ts = np.arange(t0, t1, MIN_NS, dtype=np.int64)
    d, m = len(ids), len(ts)
    duty = _duty(ids, np.zeros_like(ids), ts)
    total = (8 if jetson else 512) * GIB
    cpu = np.clip(70 * duty, 0, 100)

    def flat(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.broadcast_to(a, (d, m)), dtype=np.float64).reshape(-1)

    return {
        "device_id": ("i4", np.repeat(ids, m)),
        "step_s": ("i4", np.full(d * m, 60)),
        "bucket_ns": ("i8", np.tile(ts, d)),
        "n": ("i8", np.full(d * m, 60)),
        "span_ns": ("i8", np.full(d * m, 59 * NS)),
        "cpu_avg": ("f8", flat(cpu.round(1))),
        "cpu_max": ("f8", flat(np.minimum(100, cpu + 10).round(1))),
        "load1_avg": ("f8", flat((6 if jetson else 64) * duty * 0.8)),
        "mem_used_avg": ("f8", flat((total * (0.3 + 0.5 * duty)).round())),
        "mem_used_max": ("f8", flat((total * (0.32 + 0.5 * duty)).round())),
        "mem_total_max": ("f8", flat(np.float64(total))),
        "swap_used_avg": ("f8", flat(0.1 * GIB * duty)),
        "swap_used_max": ("f8", flat(0.1 * GIB * duty)),
        "swap_total_max": ("f8", flat(np.float64(4 * GIB))),
        "disk_read_delta": ("f8", flat(1.5e9 * duty)),
        "disk_write_delta": ("f8", flat(0.8e9 * duty)),
        "net_rx_delta": ("f8", flat((6e7 if jetson else 6e9) * duty)),
        "net_tx_delta": ("f8", flat((3e7 if jetson else 3e9) * duty)),
    }


_SUM = ("n", "span_ns", "energy_delta_j", "throttle_thermal_n", "throttle_power_n", "disk_read_delta",
        "disk_write_delta", "net_rx_delta", "net_tx_delta")  # fmt: skip


def to_hours(
    minutes: dict[str, tuple[str, np.ndarray]], per_series: int, hours: int
) -> dict[str, tuple[str, np.ndarray]]:
    """Hour rows from minute rows that start on an hour and cover ``hours`` whole hours per series
    (the rollup job's definitions: sums of n, spans and deltas, max of maxes, min of mins, means)."""
    out: dict[str, tuple[str, np.ndarray]] = {}
    for c, (code, v) in minutes.items():
        block = v.reshape(-1, per_series)[:, : hours * 60].reshape(-1, hours, 60)
        if c in ("device_id", "gpu_index", "bucket_ns"):
            r = block[:, :, 0]
        elif c == "step_s":
            r = np.full(block.shape[:2], 3600)
        elif c in _SUM:
            r = block.sum(axis=2)
        elif c.endswith("_max"):
            r = block.max(axis=2)
        elif c.endswith("_min"):
            r = block.min(axis=2)
        else:
            r = block.mean(axis=2)
        out[c] = (code, np.ascontiguousarray(r).reshape(-1).astype(v.dtype))
    return out


def device_blocks(fleet: Fleet, rows_per_block: int, minutes: int) -> Iterator[tuple[int, int, bool]]:
    """(first id, last id, jetson) blocks of one kind each, about ``rows_per_block`` rows of GPU rollups."""
    for lo, hi, jetson, gpus in (
        (1, fleet.drones, True, 1),
        (fleet.drones + 1, fleet.devices, False, fleet.gpus),
    ):
        per = max(1, rows_per_block // (gpus * minutes))
        for a in range(lo, hi + 1, per):
            yield a, min(hi, a + per - 1), jetson


def fill_rollups(
    engine, fleet: Fleet, t0: int, t1: int, *, hours: bool, quiet: bool = False, write_minutes: bool = True
) -> int:  # type: ignore[no-untyped-def]
    """Minute rollups over [t0, t1) for every device (and hour rollups of its whole hours when
    ``hours``: then t0 is on an hour; only those with ``write_minutes=False``); the rows written."""
    bulk = Bulk(engine)
    minutes = (t1 - t0) // MIN_NS
    whole_hours = minutes // 60 if hours else 0
    total, started = 0, time.monotonic()
    expected = (fleet.drones + (fleet.devices - fleet.drones) * (1 + fleet.gpus) + fleet.drones) * minutes
    for first, last, jetson in device_blocks(fleet, 400_000, minutes):
        g = gpu_minutes(fleet, first, last, t0, t1, jetson)
        h = host_minutes(fleet, first, last, t0, t1, jetson)
        if write_minutes:
            total += bulk.put("gpu_rollups", g) + bulk.put("host_rollups", h)
        if whole_hours:
            total += bulk.put("gpu_rollups", to_hours(g, minutes, whole_hours))
            total += bulk.put("host_rollups", to_hours(h, minutes, whole_hours))
        if not quiet:
            el = time.monotonic() - started
            rate = total / el if el else 0.0
            say(f"  rollups: devices up to {last:,}/{fleet.devices:,}, {total:,} rows, {rate:,.0f} rows/s, "
                f"about {max(0.0, expected - total) / rate / 60 if rate else 0:.1f} min left")  # fmt: skip
    return total


def set_progress(engine, fleet: Fleet, marks: dict[int, int]) -> None:  # type: ignore[no-untyped-def]
    """The rollup job's progress marks: every device rolled up to ``marks[step]``."""
    from sqlalchemy import select, update

    from fleetscope.collector.storage.rollup_schema import rollup_progress as rp

    with engine.begin() as conn:
        have = {int(s) for s in conn.execute(select(rp.c.step_s).distinct()).scalars()}
        for step, until in marks.items():
            if step in have:
                conn.execute(update(rp).where(rp.c.step_s == step).values(rolled_until_ns=until))
    rows = [
        (d, step, until)
        for step, until in marks.items()
        if step not in have
        for d in range(1, fleet.devices + 1)
    ]
    Bulk(engine).rows("rollup_progress", ["device_id", "step_s", "rolled_until_ns"], rows)


def fill_latest(engine, fleet: Fleet, now_ns: int) -> int:  # type: ignore[no-untyped-def]
    """gpu_latest, host_latest, gpu_state (one row per GPU) and the Jetson metric points."""
    from fleetscope.collector.storage.schema import GPU_SAMPLE_COLUMNS, GPU_STATE_COLUMNS, HOST_VALUE_COLUMNS

    bulk = Bulk(engine)
    dev, gpu = _ids_per_gpu(fleet, 1, fleet.devices)
    jet = dev <= fleet.drones
    duty = _duty(dev, gpu, np.array([now_ns]))[:, 0]
    ts = np.full(len(dev), now_ns - NS)
    tdp = np.where(jet, bd.JETSON[2], np.where(dev % 2, bd.SERVER_GPUS[1][2], bd.SERVER_GPUS[0][2]))
    mem_total = np.where(jet, bd.JETSON[1], 80) * float(GIB)
    util = (100 * duty).round()
    vals = {
        "util_gpu_percent": util, "util_memory_percent": (util * 0.6).round(), "util_encoder_percent": 0 * util,
        "util_decoder_percent": 0 * util, "memory_used_bytes": (mem_total * (0.2 + 0.7 * duty)).round(),
        "temp_c": (35 + 45 * duty).round(), "memory_temp_c": (30 + 40 * duty).round(),
        "power_w": (tdp * (0.15 + 0.85 * duty)).round(2), "energy_j": (1e7 + dev * 1000.0).round(),
        "sm_clock_mhz": np.where(jet, 1020.0, 1410.0), "memory_clock_mhz": np.where(jet, 2040.0, 1593.0),
        "graphics_clock_mhz": np.where(jet, 1020.0, 1410.0), "pstate": 0 * util, "fan_percent": (30 + 50 * duty).round(),
        "pcie_tx_bytes_per_s": 1e6 + 0 * util, "pcie_rx_bytes_per_s": 2e6 + 0 * util, "throttle_reasons": 0 * util,
    }  # fmt: skip
    assert set(vals) == set(GPU_SAMPLE_COLUMNS)
    cols = {"device_id": ("i4", dev), "gpu_index": ("i2", gpu), "ts_ns": ("i8", ts)}
    cols.update({c: ("f8", np.asarray(vals[c], dtype=np.float64)) for c in GPU_SAMPLE_COLUMNS})
    n = bulk.put("gpu_latest", cols)
    state = {c: ("f8", np.zeros(len(dev))) for c in GPU_STATE_COLUMNS}
    state.update({
        "memory_total_bytes": ("f8", mem_total), "bar1_total_bytes": ("f8", np.full(len(dev), 256.0 * 2**20)),
        "bar1_used_bytes": ("f8", np.full(len(dev), 5.0 * 2**20)), "power_limit_w": ("f8", tdp.astype(np.float64)),
        "sm_clock_max_mhz": ("f8", np.where(jet, 1020.0, 1980.0)), "memory_clock_max_mhz": ("f8", np.where(jet, 2133.0, 1593.0)),
        "pcie_gen": ("f8", np.where(jet, 0.0, 4.0)), "pcie_width": ("f8", np.where(jet, 0.0, 16.0)),
    })  # fmt: skip
    n += bulk.put("gpu_state", {"device_id": ("i4", dev), "gpu_index": ("i2", gpu),
                                "ts_ns": ("i8", np.full(len(dev), now_ns - 3600 * NS)), **state})  # fmt: skip
    ids = np.arange(1, fleet.devices + 1)
    hd = _duty(ids, 0 * ids, np.array([now_ns]))[:, 0]
    total = np.where(ids <= fleet.drones, 8, 512) * float(GIB)
    host = {
        "cpu_percent": (70 * hd).round(1), "load1": 4 * hd, "load5": 4 * hd, "load15": 4 * hd, "mem_total_bytes": total,
        "mem_used_bytes": (total * (0.3 + 0.5 * hd)).round(), "mem_available_bytes": (total * (0.7 - 0.5 * hd)).round(),
        "swap_total_bytes": 4.0 * GIB + 0 * hd, "swap_used_bytes": 0.1 * GIB * hd, "disk_total_bytes": 64.0 * GIB + 0 * hd,
        "disk_used_bytes": 30.0 * GIB + 0 * hd, "disk_read_bytes": 1e11 + ids * 1e3, "disk_write_bytes": 5e10 + ids * 1e3,
        "net_rx_bytes": 1e12 + ids * 1e3, "net_tx_bytes": 5e11 + ids * 1e3,
    }  # fmt: skip
    assert set(host) == set(HOST_VALUE_COLUMNS)
    hcols = {"device_id": ("i4", ids), "ts_ns": ("i8", np.full(len(ids), now_ns - NS))}
    hcols.update({c: ("f8", np.asarray(host[c], dtype=np.float64)) for c in HOST_VALUE_COLUMNS})
    n += bulk.put("host_latest", hcols)
    # Jetson metric points (5 readings of each a drone), text columns.
    rows = [(d, now_ns - (k + 1) * 10 * NS, name, base + (d % 7), labels)
            for d in range(1, fleet.drones + 1) for k in range(5) for name, labels, base in JETSON_POINTS]  # fmt: skip
    return n + bulk.rows("metric_points", ["device_id", "ts_ns", "name", "value", "labels"], rows)


def fill_incidents(engine, fleet: Fleet, now_ns: int) -> int:  # type: ignore[no-untyped-def]
    """Open warnings and errors on 2 % of the devices (24 h), resolved ones on 5 %, Xids on a few servers."""
    from sqlalchemy import insert

    from fleetscope.collector.storage.schema import Incident

    rng = np.random.default_rng(30)
    rows = []
    for d in range(1, fleet.devices + 1):
        jetson = d <= fleet.drones
        r = rng.random()
        if r < 0.07:
            ts = now_ns - int(rng.uniform(60, 23 * 3600)) * NS
            still = r < 0.02
            kind, sev, title, key = (("host_oom", "error", "Host OOM on cpu: tried to allocate 3.20 GiB", "") if jetson
                                     else ("gpu_xid", "error", "Xid 79: GPU has fallen off the bus", "xid:79") if r < 0.005
                                     else ("gpu_throttling", "warning", "GPU 0 throttled (thermal)", ""))  # fmt: skip
            rows.append({
                "device_id": d, "ts_ns": ts, "received_ns": ts, "kind": kind, "severity": sev, "title": title,
                "facts": {}, "source": "bench", "excerpt": title, "context": {}, "gpu_index": None if jetson else 0,
                "group_key": key, "state": "open" if still else "resolved", "origin": "agent", "count": 1,
                "last_seen_ns": ts, "ended_ns": None if still else ts + 1800 * NS, "updated_ns": ts, "hints": [],
            })  # fmt: skip
    with engine.begin() as conn:
        if rows:
            conn.execute(insert(Incident.__table__), rows)
    return len(rows)


def fill(engine, fleet: Fleet, now_ns: int) -> dict[str, float]:  # type: ignore[no-untyped-def]
    specs = bd.device_specs(fleet.devices, fleet.gpus)
    out: dict[str, float] = {}
    t = time.monotonic()
    insert_devices(engine, fleet, specs, now_ns)
    say(f"  {fleet.devices:,} devices registered ({time.monotonic() - t:.1f} s)")
    t = time.monotonic()
    n = fill_latest(engine, fleet, now_ns)
    n_inc = fill_incidents(engine, fleet, now_ns)
    say(f"  latest readings: {n:,} rows, {n_inc} incidents ({time.monotonic() - t:.1f} s)")
    end = now_ns // MIN_NS * MIN_NS
    start = (end - 24 * HOUR_NS) // HOUR_NS * HOUR_NS
    t = time.monotonic()
    rows = fill_rollups(engine, fleet, start, end, hours=True)
    out["rollup_rows"] = rows
    out["rollups_s"] = round(time.monotonic() - t, 1)
    set_progress(engine, fleet, {60: end, 3600: (end - start) // HOUR_NS * HOUR_NS + start})
    return out


def rolled_until(engine, step_s: int) -> int:  # type: ignore[no-untyped-def]
    from sqlalchemy import func, select

    from fleetscope.collector.storage.rollup_schema import rollup_progress as rp

    with engine.connect() as conn:
        return int(
            conn.execute(select(func.min(rp.c.rolled_until_ns)).where(rp.c.step_s == step_s)).scalar() or 0
        )


def touch(engine, fleet: Fleet) -> float:  # type: ignore[no-untyped-def]
    """A live fleet: last seen now, the latest readings a second old, minute rollups up to the
    last whole minute. Returns the seconds it took."""
    from sqlalchemy import update

    from fleetscope.collector.storage.schema import Device, gpu_latest, host_latest

    t = time.monotonic()
    now = time.time_ns()
    until, hours_until = rolled_until(engine, 60), rolled_until(engine, 3600)
    end = now // MIN_NS * MIN_NS
    if until and end > until:
        fill_rollups(engine, fleet, until, end, hours=False, quiet=True)
        set_progress(engine, fleet, {60: end})
    hour = end // HOUR_NS * HOUR_NS
    if hours_until and hour > hours_until:  # an hour is over: the rollup job would have rolled it
        fill_rollups(engine, fleet, hours_until, hour, hours=True, quiet=True, write_minutes=False)
        set_progress(engine, fleet, {3600: hour})
    with engine.begin() as conn:
        conn.execute(update(Device).values(last_seen_ns=now))
        conn.execute(update(gpu_latest).values(ts_ns=now - NS))
        conn.execute(update(host_latest).values(ts_ns=now - NS))
    return time.monotonic() - t


# ------------------------------------------------------------------------------ measuring


class Cpu:
    """CPU seconds spent by this process, its children (the dashboard server, Playwright's driver
    and Chromium) and the database's backends serving this database (on a Citus cluster: on every
    node), between two snapshots: the work a view costs whatever else loads the machine (a
    backend that exits in between takes its CPU with it: a lower bound)."""

    def __init__(self, url: str) -> None:
        self.db = url.rsplit("/", 1)[1].split("?", 1)[0] if url.startswith("postgresql") else None

    def _now(self) -> dict[int, float]:
        import psutil

        out: dict[int, float] = {}
        me = psutil.Process()
        procs = [me, *me.children(recursive=True)]
        if self.db:
            for p in psutil.process_iter(["cmdline"]):
                title = (p.info["cmdline"] or [""])[0]
                if title.startswith("postgres:") and f" {self.db} " in title:
                    procs.append(p)
        for p in procs:
            try:
                t = p.cpu_times()
                out[p.pid] = t.user + t.system
            except psutil.Error:
                pass
        return out

    def start(self) -> dict[int, float]:
        return self._now()

    def since(self, before: dict[int, float]) -> float:
        return sum(cpu - before.get(pid, 0.0) for pid, cpu in self._now().items())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def query_layer(engine, fleet: Fleet, pairs: list[tuple[str, str]], runs: int) -> dict[str, list[float]]:  # type: ignore[no-untyped-def]
    from fleetscope.collector import query

    out: dict[str, list[float]] = {"fleet_overview": [], "compare_groups": [], "fleet_overview_cpu": [],
                                   "compare_groups_cpu": []}  # fmt: skip
    cpu = Cpu(str(engine.url.render_as_string(hide_password=False)))
    members = _members(engine, fleet)
    for k in range(runs):
        touch(engine, fleet)
        now = time.time_ns()
        with query.session_scope(engine) as s:
            # What the Fleet page reads: every device's state and readings, and one page's sparklines.
            t, c0 = time.perf_counter(), cpu.start()
            ov = query.fleet_overview(session=s, now_ns=now, sparklines=())
            _, sparks = query.fleet_sparklines(
                session=s, now_ns=now, agent_ids=[d.agent_id for d in ov.devices[:100]]
            )
            out["fleet_overview"].append(time.perf_counter() - t)
            out["fleet_overview_cpu"].append(cpu.since(c0))
            assert len(ov.devices) == fleet.devices, len(ov.devices)
            assert len(sparks) == min(100, fleet.devices) and all(
                any(v is not None for v in x.util) for x in sparks.values()
            )
        a, b = pairs[k % len(pairs)]
        since = query.comparison_start(now - 86400 * NS, now)
        with query.session_scope(engine) as s:
            t, c0 = time.perf_counter(), cpu.start()
            res = query.compare_groups(session=s, groups={a: members[a], b: members[b]}, since_ns=since, until_ns=now,
                                       operation=None)  # fmt: skip
            out["compare_groups"].append(time.perf_counter() - t)
            out["compare_groups_cpu"].append(cpu.since(c0))
            assert [len(r.devices) for r in res] == [fleet.group_size] * 2, [len(r.devices) for r in res]
            assert res[0].util_avg is not None and res[1].util_avg is not None
        say(f"  query layer run {k + 1}: fleet_overview {out['fleet_overview'][-1]:.2f} s, "
            f"compare_groups {a} vs {b} {out['compare_groups'][-1]:.2f} s")  # fmt: skip
    return out


def _members(engine, fleet: Fleet) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    from sqlalchemy import select

    from fleetscope.collector.storage.schema import Device

    out: dict[str, list[str]] = {}
    with engine.connect() as conn:
        for i, name in conn.execute(select(Device.id, Device.name)):
            out.setdefault(fleet.group_of(int(i)), []).append(name)
    return out


def scrape(engine, fleet: Fleet, runs: int, interval_s: float) -> dict[str, list[float]]:  # type: ignore[no-untyped-def]
    """GET /metrics/fleet from the collector's metrics listener and exposition, two ways:

    * ``scrape``: as Prometheus scrapes the collector, with ``curl`` (another process) every
      ``interval_s``, the fleet touched after each scrape as agents keep writing: a large fleet
      is served the last rendering, made in the background just before the scrape was due;
      ``scrape_age``: how old the readings it got were;
    * ``render``: a scrape that renders, its one-second cache expired (what every scrape cost
      before the last rendering was served, and what a rendering costs now).
    """

    from fleetscope.collector.observability.fleet_exposition import CONTENT_TYPE, FleetExposition
    from fleetscope.collector.observability.http import MetricsHttpServer

    try:
        served = FleetExposition(engine, cache_s=1.0)  # the collector's
        rendering = FleetExposition(engine, cache_s=1.0, stale_after_s=float("inf"))
    except TypeError:  # a tree from before the last rendering was served: every scrape renders
        served = rendering = FleetExposition(engine, cache_s=1.0)
    server = MetricsHttpServer("127.0.0.1:0", {  # as the collector serves it
        "/metrics/fleet": lambda: (200, CONTENT_TYPE, served.render_chunks()),
        "/render": lambda: (200, CONTENT_TYPE, rendering.render_chunks()),
    }).start()
    out: dict[str, list[float]] = {"scrape": [], "scrape_cpu": [], "scrape_age": [], "render": [], "render_cpu": [],
                                   "bytes": [], "lines": []}  # fmt: skip
    cpu = Cpu(str(engine.url.render_as_string(hide_password=False)))
    body_file = Path(tempfile.mkdtemp(prefix="fleetscope-scrape-")) / "body"

    def get(path: str) -> tuple[float, float, bytes]:
        c0 = cpu.start()
        took = float(subprocess.run(
            ["curl", "-sf", "-o", str(body_file), "-w", "%{time_total}", f"http://127.0.0.1:{server.port}{path}"],
            check=True, capture_output=True, text=True, timeout=300).stdout)  # fmt: skip
        used = cpu.since(c0)
        body = body_file.read_bytes()
        up = body.count(b"\nfleetscope_device_up{") + body.startswith(b"fleetscope_device_up{")
        gpus = body.count(b"\nDCGM_FI_DEV_GPU_UTIL{")
        assert up == fleet.devices, up
        assert gpus == fleet.drones + (fleet.devices - fleet.drones) * fleet.gpus, gpus
        temps = body.count(b"\nfleetscope_jetson_temperature_celsius{")
        assert temps == 2 * fleet.drones, temps  # the newest point of each sensor of each drone
        return took, used, body

    def age_of(body: bytes) -> float:
        at = body.rfind(b"\nfleetscope_fleet_exposition_age_seconds ")
        return float(body[at:].split()[1]) if at >= 0 else 0.0

    try:
        touch(engine, fleet)
        due = time.monotonic()
        get("/metrics/fleet")  # the collector's first scrape renders: there is nothing to serve yet
        for k in range(runs):
            touch(engine, fleet)
            due += interval_s
            time.sleep(max(0.0, due - time.monotonic()))
            took, used, body = get("/metrics/fleet")
            out["scrape"].append(took)
            out["scrape_cpu"].append(used)
            out["scrape_age"].append(age_of(body))
            say(f"  scrape {k + 1} (every {interval_s:g} s, as Prometheus): served in {took:.2f} s, "
                f"readings {out['scrape_age'][-1]:.1f} s old")  # fmt: skip
        if served is not rendering:
            served.wait_for_refresh(interval_s + 300)  # the rendering planned for the next scrape
        for k in range(runs):
            touch(engine, fleet)
            time.sleep(1.2)  # past the exposition's one-second cache
            took, used, body = get("/render")
            out["render"].append(took)
            out["render_cpu"].append(used)
            out["bytes"].append(len(body))
            out["lines"].append(body.count(b"\n"))
            say(f"  rendering {k + 1}: {took:.2f} s, {len(body) / 1e6:.1f} MB, {out['lines'][-1]:,} lines")
    finally:
        server.stop()
        shutil.rmtree(body_file.parent, ignore_errors=True)
    return out


def browser(
    url: str, engine, fleet: Fleet, pairs: list[tuple[str, str]], runs: int, shots: Path | None,
    serve_last_after: str | None = None,
) -> dict[str, list[float]]:  # type: ignore[no-untyped-def]
    from urllib.parse import quote

    from playwright.sync_api import sync_playwright

    port = free_port()
    log_file = tempfile.NamedTemporaryFile(prefix="fleet-scale-dashboard-", suffix=".log", delete=False)
    served = ("--serve-last-after", serve_last_after) if serve_last_after else ()
    proc = subprocess.Popen([sys.executable, "-m", "fleetscope.dashboard", "--db", url, "--port", str(port), *served],
                            stdout=log_file, stderr=subprocess.STDOUT)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    out: dict[str, list[float]] = {"fleet": [], "compare": [], "fleet_cpu": [], "compare_cpu": [], "fleet_age": []}
    cpu = Cpu(url)
    chromium = os.environ.get("FLEETSCOPE_TEST_CHROMIUM", "/usr/bin/chromium")
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the dashboard exited: {Path(log_file.name).read_text()[-2000:]}")
            try:
                urllib.request.urlopen(f"{base}/_stcore/health", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the dashboard did not answer within 120 s") from None
                time.sleep(0.3)
        with sync_playwright() as p:
            br = p.chromium.launch(executable_path=chromium, args=[
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run"])  # fmt: skip
            page = br.new_page(viewport={"width": 1600, "height": 1200})
            # A first visit loads the frontend's code and the server's modules (an operator's
            # browser has them cached): not timed.
            page.goto(f"{base}/alerts")
            page.wait_for_selector('[data-testid="stMainBlockContainer"] h1', timeout=120_000)
            # The Fleet page of a dashboard just started reads the fleet while the page waits;
            # after that, a fleet slow to read is shown as last read while the next is read
            # (--serve-last-after): the runs below measure that, with the age of what they show.
            t = time.perf_counter()
            page.goto(f"{base}/")
            page.wait_for_function(FLEET_TABLE_SHOWN, timeout=300_000)
            say(f"  the first Fleet page since the dashboard started (not timed below): {time.perf_counter() - t:.2f} s")
            for k in range(runs):
                touch(engine, fleet)
                time.sleep(5.5)  # past the dashboard's 5 s cache of the fleet
                t, c0 = time.perf_counter(), cpu.start()
                page.goto(f"{base}/")
                page.wait_for_function(FLEET_TABLE_SHOWN, timeout=300_000)
                out["fleet"].append(time.perf_counter() - t)
                out["fleet_cpu"].append(cpu.since(c0))
                out["fleet_age"].append(summary_age_s(page.inner_text("body")))
                if shots:
                    page.screenshot(path=str(shots / f"fleet-{k + 1}.png"))
                # A pair not compared before (then the pairs swapped): the comparison's cache misses.
                a, b = pairs[k % len(pairs)][:: 1 if (k // len(pairs)) % 2 == 0 else -1]
                q = f"a={quote('label: group=' + a)}&b={quote('label: group=' + b)}&range=24h"
                t, c0 = time.perf_counter(), cpu.start()
                page.goto(f"{base}/compare?{q}")
                page.wait_for_function(
                    "(n) => [...document.querySelectorAll('[data-testid=stDataFrame] table td')]"
                    ".filter(td => td.innerText.trim() === n).length >= 2",
                    arg=str(fleet.group_size),
                    timeout=300_000,
                )
                out["compare"].append(time.perf_counter() - t)
                out["compare_cpu"].append(cpu.since(c0))
                if shots:
                    page.screenshot(path=str(shots / f"compare-{k + 1}.png"))
                say(
                    f"  Chromium run {k + 1}: Fleet page {out['fleet'][-1]:.2f} s (its summary read "
                    f"{out['fleet_age'][-1]:.0f} s before), Compare {a} vs {b} {out['compare'][-1]:.2f} s"
                )
            br.close()
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
    return out


FLEET_TABLE_SHOWN = (
    "() => [...document.querySelectorAll('[data-testid=stDataFrame] table td')].some(td => td.innerText.startsWith('bench-'))"
)


def summary_age_s(page_text: str) -> float:
    """How long before the page was shown its fleet summary was read: the Fleet table's caption
    says '(read N s ago)' for a summary served as last read; a summary of now (its 5 s quantum)
    says nothing."""
    found = re.search(r"\(read (\d+) (s|min) ago\)", page_text)
    return 0.0 if found is None else float(found[1]) * (60 if found[2] == "min" else 1)


# ------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--devices", type=int, default=10_000, help="devices, half Jetson drones (default %(default)s)"
    )
    p.add_argument("--db", default="citus",
                   help="'citus' (a private coordinator and two workers, destroyed at the end), 'sqlite' (a temporary "
                        "file), or a database URL (an empty database of yours; with --skip-fill, a filled one)")  # fmt: skip
    p.add_argument("--gpus", type=int, default=8, help="GPUs per server (default %(default)s)")
    p.add_argument(
        "--group-size", type=int, default=1000, help="devices per comparison group (default %(default)s)"
    )
    p.add_argument(
        "--runs",
        type=int,
        default=3,
        help="measurements of each view; medians reported (default %(default)s)",
    )
    p.add_argument(
        "--shards",
        type=int,
        default=8,
        help="shards per distributed table with --db citus (default %(default)s)",
    )
    p.add_argument(
        "--skip-fill", action="store_true", help="measure a database filled by an earlier --keep run"
    )
    p.add_argument("--scrape-interval", type=float, default=15.0,
                   help="seconds between the scrapes of /metrics/fleet, as Prometheus' scrape_interval (default %(default)s)")
    p.add_argument("--keep", action="store_true", help="leave the database (and the Citus cluster) behind")
    p.add_argument("--no-browser", action="store_true", help="skip Chromium (query layer and scrape only)")
    p.add_argument("--serve-last-after", default=None, metavar="SECONDS",
                   help="the dashboard's --serve-last-after ('off': every Fleet page waits for a summary of now; "
                        "default: the dashboard's)")  # fmt: skip
    p.add_argument(
        "--screenshots", type=Path, default=None, help="save a screenshot of each page measured here"
    )
    p.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = p.parse_args(argv)
    if args.devices < 4 or args.group_size * 2 > args.devices:
        p.error("--devices must hold two groups of --group-size (a drone group and a server group)")
    fleet = Fleet(args.devices, args.gpus, args.group_size)
    pairs = fleet.compare_pairs()
    if not pairs:
        p.error("no whole drone group and server group: lower --group-size")
    if args.screenshots:
        args.screenshots.mkdir(parents=True, exist_ok=True)

    from fleetscope.collector.storage.engine import make_engine

    target = Target(args.db, shards=args.shards, keep=args.keep or args.skip_fill)
    figures: dict[str, object] = {"devices": args.devices, "gpus": fleet.drones + (args.devices - fleet.drones) * args.gpus,
                                  "db": target.kind}  # fmt: skip
    try:
        t = time.monotonic()
        engine = make_engine(target.url)  # the collector's schema: migrations, and distributed on Citus
        figures["schema_s"] = round(time.monotonic() - t, 1)
        from fleetscope.collector.storage.citus import citus_state

        with engine.connect() as conn:
            state = citus_state(conn)
        if state.installed:
            figures["db"] = f"citus, {state.workers} workers, {len(state.distributed)} tables distributed"
        from sqlalchemy import func, select

        from fleetscope.collector.storage.schema import Device

        with engine.connect() as conn:
            have = int(conn.execute(select(func.count()).select_from(Device)).scalar() or 0)
        if args.skip_fill:
            if have != args.devices:
                raise SystemExit(f"--skip-fill: the database holds {have} devices, not {args.devices}")
        else:
            if have:
                raise SystemExit(
                    f"the database already holds {have} devices: give an empty one, or --skip-fill"
                )
            say(
                f"filling {target.url}: {args.devices:,} devices ({figures['gpus']:,} GPUs), a day of minute rollups"
            )
            t = time.monotonic()
            figures.update(fill(engine, fleet, time.time_ns()))
            figures["fill_s"] = round(time.monotonic() - t, 1)
            say(f"filled in {figures['fill_s']} s")
        if engine.dialect.name == "postgresql":
            from sqlalchemy import text

            with engine.begin() as conn:
                conn.execute(text("ANALYZE"))
        say(f"measuring, {args.runs} runs each")
        times: dict[str, list[float]] = {}
        times.update(query_layer(engine, fleet, pairs, args.runs))
        sc = scrape(engine, fleet, args.runs, args.scrape_interval)
        for key in ("scrape", "scrape_cpu", "scrape_age", "render", "render_cpu"):
            times[key] = sc[key]
        figures["scrape_mb"] = round(statistics.median(sc["bytes"]) / 1e6, 1)
        figures["scrape_lines"] = int(statistics.median(sc["lines"]))
        if not args.no_browser:
            times.update(browser(target.url, engine, fleet, pairs, args.runs, args.screenshots, args.serve_last_after))
        engine.dispose()
    finally:
        target.close()

    rows = [
        ("fleet page (Chromium)", "fleet"),
        ("  its summary's age (s)", "fleet_age"),
        ("  fleet_overview+sparklines", "fleet_overview"),
        ("compare page (Chromium)", "compare"),
        ("  compare_groups (query)", "compare_groups"),
        ("/metrics/fleet scrape", "scrape"),
        ("  readings' age (s)", "scrape_age"),
        ("  a rendering", "render"),
    ]
    print(f"fleet views at {args.devices:,} devices ({figures['gpus']:,} GPUs) on {figures['db']}, "
          f"median of {args.runs} (cold caches)")  # fmt: skip
    print(f"{'view':<28}{'median s':>10}{'max s':>8}{'cpu s':>8}{'bar s':>8}  result")
    verdict = 0
    for name, key in rows:
        vals, cpus = times.get(key), times.get(f"{key}_cpu")
        if not vals:
            print(f"{name:<28}{'-':>10}{'-':>8}{'-':>8}{'':>8}  not measured")
            continue
        med = statistics.median(vals)
        bar = BARS.get(name)
        res = "" if bar is None else ("PASS" if med < bar else "MISS")
        verdict |= res == "MISS"
        figures[name.strip()] = round(med, 3)
        cpu = f"{statistics.median(cpus):.2f}" if cpus else "-"
        print(f"{name:<28}{med:>10.2f}{max(vals):>8.2f}{cpu:>8}{(f'< {bar:g}' if bar else ''):>8}  {res}")
    print(
        "  cpu s: CPU seconds of this process, its children (dashboard, Chromium) and the database's backends"
    )
    extra = {
        k: v
        for k, v in figures.items()
        if k in ("schema_s", "fill_s", "rollups_s", "rollup_rows", "scrape_mb", "scrape_lines")
    }
    print("  " + ", ".join(f"{k} {v}" for k, v in extra.items()))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**figures, "runs_s": times}, indent=2))
    return verdict


if __name__ == "__main__":
    sys.exit(main())
