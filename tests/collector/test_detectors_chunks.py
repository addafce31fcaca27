"""Detectors read raw samples wherever they sit (issue #25, "rollups and detectors read columns,
not rows"): the tail tables (what an older collector wrote) and the chunks (what the writer stores
since revision 0011: a chunk per batch, a multi-GPU one with ``gpu_index`` -1 and a ``gpu_index``
value column; and what compaction folds: a chunk per GPU). The same data stored each way, on
devices side by side in one database (SQLite and PostgreSQL), gives each detector the same
incidents: starved GPUs, memory growth (with its time to exhaustion), GPU throttling on a server
and on a Jetson, a Jetson's CPU frequency caps, and an offline device's replayed rows."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, insert, select, update

from fleetscope.collector.jobs.detectors import DetectorJob, DetectorSettings
from fleetscope.collector.jobs.detectors._common import (
    COUNT,
    MAX,
    SUM,
    DeviceInfo,
    PassContext,
    read_new_sample_sums,
    read_new_samples,
    read_new_sums,
)
from fleetscope.collector.storage.chunk_codec import CODEC_VERSION, encode_chunk
from fleetscope.collector.storage.chunk_reader import MIXED_GPU_COLUMN, MIXED_GPUS
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.schema import (
    Device,
    Incident,
    detector_progress,
    gpu_chunks,
    gpu_samples,
    gpu_state,
    host_chunks,
    host_samples,
    ingested_batches,
    metric_points,
)
from fleetscope.proto.vocabulary import THROTTLE_REASON_BITS

NS = 10**9
MIB = 1 << 20
T0 = 1_800_000_000 * NS
LIVE = T0 + 10**6 * NS
IC = Incident.__table__.c
HOST_TEXTS = ("cpu_cores", "top_processes")

# How a device's samples are stored:
#   tail     rows of gpu_samples / host_samples (an older collector)
#   batches  a chunk per 5 s batch, as the writer stores it (a multi-GPU batch: one mixed chunk)
#   mixed    a chunk per 7 s batch, GPU chunks always mixed (gpu_index -1): chunks straddle the
#            passes' marks and the detectors' sub-windows
#   per_gpu  a chunk per GPU and 13 s, as compaction folds them
#   both     5 s batches, every other one in the tail, the others in mixed chunks
MODES = ("tail", "batches", "mixed", "per_gpu", "both")


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    e = make_engine(db_url)
    yield e
    e.dispose()


def _device(engine: Engine, name: str, *, kind: str = "server", last_seen: int = LIVE) -> int:
    with engine.begin() as conn:
        res = conn.execute(
            insert(Device.__table__).values(
                agent_id=f"agent-{name}",
                name=name,
                kind=kind,
                first_seen_ns=T0 - 3600 * NS,
                last_seen_ns=last_seen,
                labels={},
                inventory={},
                capabilities=[],
                counters={},
            )
        )
        return int(res.inserted_primary_key[0])


def _devices(engine: Engine, base: str, **kw: Any) -> dict[str, int]:
    """One device per storage mode, named ``{base}-{mode}``."""
    return {mode: _device(engine, f"{base}-{mode}", **kw) for mode in MODES}


def _rows(engine: Engine, table: Any, rows: list[dict]) -> None:
    with engine.begin() as conn:
        conn.execute(insert(table), rows)


def _chunk(kind: str, device_id: int, rows: list[dict], gpu: int | None) -> dict:
    """One chunk row of ``rows`` (one device): of GPU ``gpu``, or mixed (``MIXED_GPUS``) with a
    ``gpu_index`` value column when ``gpu`` is None."""
    import numpy as np

    rows = sorted(rows, key=lambda r: (r["ts_ns"], r.get("gpu_index", 0)))
    names = sorted({k for r in rows for k in r} - {"device_id", "ts_ns", "gpu_index", *HOST_TEXTS})
    ts = np.array([r["ts_ns"] for r in rows], dtype=np.int64)
    columns = {n: np.array([np.nan if r.get(n) is None else float(r[n]) for r in rows]) for n in names}
    texts = {n: [r.get(n) for r in rows] for n in HOST_TEXTS if any(n in r for r in rows)}
    extra = {}
    if kind == "gpu":
        if gpu is None:
            columns[MIXED_GPU_COLUMN] = np.array([float(r["gpu_index"]) for r in rows])
        extra["gpu_index"] = MIXED_GPUS if gpu is None else gpu
    return {
        "device_id": device_id,
        "start_ns": int(ts.min()),
        "end_ns": int(ts.max()),
        "rows": len(rows),
        "codec": CODEC_VERSION,
        "data": encode_chunk(ts, columns, texts),
        **extra,
    }


def _store(engine: Engine, kind: str, rows: list[dict], mode: str) -> None:
    """Store samples (``kind`` "gpu" or "host") the way ``mode`` says (see ``MODES``)."""
    table, chunks = (gpu_samples, gpu_chunks) if kind == "gpu" else (host_samples, host_chunks)
    if mode == "tail":
        _rows(engine, table, rows)
        return
    span = {"batches": 5, "mixed": 7, "per_gpu": 13, "both": 5}[mode] * NS
    batches: dict[tuple[int, int], list[dict]] = {}
    for r in rows:
        batches.setdefault((r["device_id"], (r["ts_ns"] - T0) // span), []).append(r)
    tail, out = [], []
    for (d, k), batch in sorted(batches.items()):
        if mode == "both" and k % 2 == 0:
            tail += batch
            continue
        gpus = sorted({r["gpu_index"] for r in batch}) if kind == "gpu" else [None]
        if mode == "per_gpu":
            out += [_chunk(kind, d, [r for r in batch if r.get("gpu_index") == g], g) for g in gpus]
        elif mode == "batches" and len(gpus) == 1:
            out.append(_chunk(kind, d, batch, gpus[0]))
        else:
            out.append(_chunk(kind, d, batch, None))
    if tail:
        _rows(engine, table, tail)
    if out:
        _rows(engine, chunks, out)


def _store_each(engine: Engine, kind: str, devices: dict[str, int], make: Any) -> None:
    """``make(device_id)``: the rows of one device; stored on each mode's device its way."""
    for mode, d in devices.items():
        _store(engine, kind, make(d), mode)


def _job(engine: Engine, **settings: Any) -> DetectorJob:
    # The findings, not the catch-up budget, are under test: a loaded CI machine ran a 0.25 s
    # budget out before a first window was read, and the device then had no mark that pass.
    base: dict[str, Any] = {"settle_s": 0.0, "lookback_s": 3600.0, "catchup_budget_s": 60.0}
    base.update(settings)
    return DetectorJob(engine, settings=DetectorSettings(**base), owner="a", discover_s=0.0)


def _norm(v: Any) -> Any:
    """Floats to 9 significant digits (sums in another order may differ in the last bits)."""
    if isinstance(v, float):
        return float(f"{v:.9g}")
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_norm(x) for x in v]
    return v


def _found(engine: Engine, devices: dict[str, int], base: str, kind: str) -> dict[str, list[dict]]:
    """Each mode's incidents of ``kind``, as comparable records (the device's name replaced)."""
    out: dict[str, list[dict]] = {}
    with engine.connect() as conn:
        for mode, d in devices.items():
            rows = conn.execute(
                select(Incident.__table__).where(IC.device_id == d, IC.kind == kind).order_by(IC.id)
            )
            got = []
            for r in rows:
                rec = {
                    k: getattr(r, k)
                    for k in (
                        "gpu_index",
                        "group_key",
                        "state",
                        "ts_ns",
                        "ended_ns",
                        "last_seen_ns",
                        "severity",
                        "title",
                        "facts",
                        "hints",
                        "pid",
                        "process_name",
                        "count",
                    )
                }
                got.append(_norm(json.loads(json.dumps(rec).replace(f"{base}-{mode}", "<dev>"))))
            out[mode] = got
    return out


def _same_everywhere(found: dict[str, list[dict]]) -> list[dict]:
    """The incidents every mode found, after checking they are the same as the tail's."""
    for mode in MODES:
        assert found[mode] == found["tail"], mode
    return found["tail"]


# ------------------------------------------------------------------------------ the readers


def _ctx(conn: Any, now: int, progress: dict | None = None) -> PassContext:
    devices = {
        r.id: DeviceInfo(r.id, r.name, r.kind, {}, r.last_seen_ns, r.agent_id, {})
        for r in conn.execute(
            select(Device.id, Device.name, Device.kind, Device.last_seen_ns, Device.agent_id)
        )
    }
    return PassContext(conn, now, DetectorSettings(lookback_s=3600.0), devices, progress or {}, {})


def test_sample_readers_keep_the_marks_and_sums_wherever_the_samples_sit(engine: Engine) -> None:
    """``read_new_samples`` and ``read_new_sample_sums`` give the same rows, sums and marks for
    tail rows and chunks: rows after each device's own mark up to now (a chunk that straddles
    either end is cut), NULL readings left out of ``where`` and of the mark, a first window with
    no rows marked at its start, a device with a mark and no new rows given no mark."""
    devices = _devices(engine, "dev")
    quiet = _device(engine, "quiet")

    def util(k: int, g: int) -> float | None:
        return None if k % 5 == 0 else 10.0 * g + k

    def rows(d: int) -> list[dict]:
        return [
            {
                "device_id": d,
                "ts_ns": T0 + k * NS,
                "gpu_index": g,
                "util_gpu_percent": util(k, g),
                "temp_c": 50.0 + k,
            }
            for k in range(40)
            for g in (0, 1)
        ]

    _store_each(engine, "gpu", devices, rows)
    _store_each(
        engine,
        "host",
        devices,
        lambda d: [
            {
                "device_id": d,
                "ts_ns": T0 + k * NS,
                "cpu_percent": float(k),
                "top_processes": "[]" if k % 10 == 0 else None,
            }
            for k in range(40)
        ],
    )
    marked = devices["tail"], devices["mixed"]
    progress = {("t", d, ""): (T0 + 12 * NS, {}) for d in marked} | {("t", quiet, ""): (T0 + 10 * NS, {})}

    def sums(v: dict, x: Any) -> list:
        return [(COUNT, v["util_gpu_percent"]), (SUM, v["util_gpu_percent"]), (SUM, x), (MAX, v["temp_c"])]

    with engine.connect() as conn:
        ctx = _ctx(conn, T0 + 30 * NS, progress)
        got, marks = read_new_sample_sums(
            ctx,
            "t",
            "gpu",
            ["gpu_index"],
            ["util_gpu_percent", "temp_c"],
            sums,
            10 * NS,
            present=["util_gpu_percent"],
            first_lookback_s=25.0,
        )
        ctx = _ctx(conn, T0 + 30 * NS, progress)
        rows_got, row_marks = read_new_samples(
            ctx, "t", "gpu", ["gpu_index", "util_gpu_percent", "temp_c"], first_lookback_s=25.0
        )
        ctx = _ctx(conn, T0 + 30 * NS, progress)
        procs, proc_marks = read_new_samples(
            ctx,
            "t",
            "host",
            ["top_processes", "cpu_percent"],
            present=["top_processes"],
            first_lookback_s=25.0,
        )
        with pytest.raises(ValueError, match="chunks too"):
            read_new_sums(ctx, "t", gpu_samples, [], lambda c, x: [], NS)
    assert quiet not in marks and quiet not in row_marks, "a mark and nothing new: the mark stays"
    for mode, d in devices.items():
        start = T0 + (12 if d in marked else 5) * NS  # the mark, or the first window: now - 25 s
        ks = [k for k in range(40) if T0 + k * NS > start and k <= 30]
        assert [r[1:] for r in rows_got[d]] == [
            (T0 + k * NS, g, util(k, g), 50.0 + k) for k in ks for g in (0, 1)
        ], mode
        assert row_marks[d] == T0 + 30 * NS
        assert marks[d] == T0 + 29 * NS, "the newest sample with a reading (30 has none)"
        expected = []
        for sub in sorted({(T0 + k * NS) // (10 * NS) * 10 * NS for k in ks}):
            for g in (0, 1):
                kk = [k for k in ks if (T0 + k * NS) // (10 * NS) * 10 * NS == sub and k % 5 != 0]
                if kk:
                    expected.append(
                        (
                            d,
                            g,
                            sub,
                            len(kk),
                            sum(10.0 * g + k for k in kk),
                            float(sum(k % 10 for k in kk)),
                            50.0 + max(kk),
                            T0 + max(kk) * NS,
                        )
                    )
        assert sorted(got[d], key=lambda r: (r[2], r[1])) == expected, mode
        assert [r[1] for r in procs[d]] == [T0 + k * NS for k in (10, 20, 30) if T0 + k * NS > start], mode
        assert proc_marks[d] == T0 + 30 * NS
    assert all(isinstance(v, (int, float)) for r in got[devices["mixed"]] for v in r), (
        "Python numbers, for states"
    )


def test_a_first_window_with_nothing_is_marked_at_its_start(engine: Engine) -> None:
    d = _device(engine, "empty")
    with engine.connect() as conn:
        ctx = _ctx(conn, T0 + 30 * NS)
        got, marks = read_new_sample_sums(
            ctx,
            "t",
            "host",
            [],
            ["cpu_percent"],
            lambda v, x: [(COUNT, v["cpu_percent"])],
            10 * NS,
            first_lookback_s=20.0,
        )
    assert got == {} and marks == {d: T0 + 10 * NS}


# -------------------------------------------------------------------------------- detectors


def test_gpu_starved_is_found_in_chunks(engine: Engine) -> None:
    """GPU 0 at 12 % while the program waits on its data, GPU 1 busy, in one mixed chunk per batch;
    read over three passes whose marks fall inside chunks."""
    devices = _devices(engine, "starved")
    _store_each(
        engine,
        "gpu",
        devices,
        lambda d: [
            {
                "device_id": d,
                "ts_ns": T0 + k * NS,
                "gpu_index": g,
                "util_gpu_percent": 12.0 if g == 0 else 90.0,
            }
            for k in range(60)
            for g in (0, 1)
        ],
    )
    _store_each(
        engine,
        "host",
        devices,
        lambda d: [{"device_id": d, "ts_ns": T0 + k * NS, "cpu_percent": 30.0} for k in range(60)],
    )
    _rows(
        engine,
        metric_points,
        [
            {
                "device_id": d,
                "ts_ns": T0 + k * NS,
                "name": "train.data_wait_ratio",
                "value": 0.8,
                "labels": "{}",
            }
            for d in devices.values()
            for k in range(60)
        ],
    )
    job = _job(engine, starved_window_s=40.0)
    for t in (23, 41, 60):
        job.run_once(T0 + t * NS)
    (inc,) = _same_everywhere(_found(engine, devices, "starved", "gpu_starved"))
    assert inc["gpu_index"] == 0 and inc["state"] == "open" and inc["facts"]["cause"] == "data_wait"
    assert inc["facts"]["util_percent"] == 12.0 and inc["facts"]["data_wait_ratio"] == 0.8
    assert inc["facts"]["cpu_percent"] == 30.0


def test_memory_growth_is_found_in_chunks_with_its_time_to_exhaustion(engine: Engine) -> None:
    """GPU 0's memory climbing and GPU 1's steady (mixed chunks), a leaking process in the host's
    top-process table (a text column of the host chunks): the same slopes, and the same time to
    exhaustion from the newest reading, which sits in a chunk."""
    devices = _devices(engine, "growth")
    _rows(
        engine,
        gpu_state,
        [
            {"device_id": d, "ts_ns": T0, "gpu_index": g, "memory_total_bytes": float(16 << 30)}
            for d in devices.values()
            for g in (0, 1)
        ],
    )
    _store_each(
        engine,
        "gpu",
        devices,
        lambda d: [
            {
                "device_id": d,
                "ts_ns": T0 + k * NS,
                "gpu_index": g,
                "memory_used_bytes": float((1 << 30) + k * 2 * MIB) if g == 0 else float(4 << 30),
            }
            for k in range(120)
            for g in (0, 1)
        ],
    )

    def host(d: int) -> list[dict]:
        out = []
        for k in range(120):
            procs = [
                {"pid": 4242, "name": "leaky", "rss_bytes": 100 * MIB + k * MIB},
                {"pid": 7, "name": "steady", "rss_bytes": 500 * MIB},
            ]
            out.append(
                {
                    "device_id": d,
                    "ts_ns": T0 + k * NS,
                    "mem_used_bytes": float(8 << 30),
                    "mem_total_bytes": float(32 << 30),
                    "mem_available_bytes": float(24 << 30),
                    "top_processes": json.dumps(procs) if k % 5 == 0 else None,
                }
            )
        return out

    _store_each(engine, "host", devices, host)
    job = _job(engine, growth_window_s=100.0, catchup_budget_s=60.0)
    for t in (61, 120):
        job.run_once(T0 + t * NS)
    found = _same_everywhere(_found(engine, devices, "growth", "memory_growth"))
    by_group = {i["group_key"]: i for i in found}
    assert set(by_group) == {"gpu", "proc:4242"}, "GPU 1, the steady process and host memory are not growing"
    gpu = by_group["gpu"]
    assert gpu["gpu_index"] == 0 and gpu["facts"]["slope_mib_per_min"] == pytest.approx(120, rel=0.01)
    assert gpu["facts"]["current_bytes"] == (1 << 30) + 119 * 2 * MIB, "the newest reading, from its chunk"
    left_min = (16 * 1024 - 1024 - 119 * 2) / 120
    assert gpu["facts"]["time_to_exhaustion_s"] == pytest.approx(left_min * 60, rel=0.02)
    proc = by_group["proc:4242"]
    assert proc["pid"] == 4242 and proc["process_name"] == "leaky"
    assert proc["facts"]["slope_mib_per_min"] == pytest.approx(60, rel=0.02)
    assert proc["facts"]["time_to_exhaustion_s"] == pytest.approx(24 * 1024 / 60 * 60, rel=0.02), (
        "the host's available memory"
    )


def test_process_marks_follow_the_host_readings_of_a_device_without_a_process_table(engine: Engine) -> None:
    """A device that sends no top-process table (a Jetson's tegrastats) does not have its host
    samples read again on every pass for one: its "proc" mark follows its newest host reading.
    A table that appears later is read from there."""
    devices = _devices(engine, "tegra")
    _store_each(
        engine,
        "host",
        devices,
        lambda d: [
            {
                "device_id": d,
                "ts_ns": T0 + k * NS,
                "mem_used_bytes": float(8 << 30),
                "mem_available_bytes": float(24 << 30),
            }
            for k in range(30)
        ],
    )
    job = _job(engine, growth_window_s=100.0)
    job.run_once(T0 + 30 * NS)
    job.flush()
    p = detector_progress.c
    with engine.connect() as conn:
        marks = dict(
            conn.execute(
                select(p.device_id, p.until_ns).where(p.detector == "memory_growth", p.key == "proc")
            ).all()
        )
    assert marks == {d: T0 + 29 * NS for d in devices.values()}

    def later(d: int) -> list[dict]:
        procs = [{"pid": 4242, "name": "leaky", "rss_bytes": 100 * MIB + k * MIB} for k in range(30, 160)]
        return [
            {
                "device_id": d,
                "ts_ns": T0 + k * NS,
                "mem_used_bytes": float(8 << 30),
                "mem_available_bytes": float(24 << 30),
                "top_processes": json.dumps([procs[k - 30]]) if k % 5 == 0 else None,
            }
            for k in range(30, 160)
        ]

    _store_each(engine, "host", devices, later)
    for t in (90, 160):
        job.run_once(T0 + t * NS)
    (inc,) = _same_everywhere(_found(engine, devices, "tegra", "memory_growth"))
    assert inc["group_key"] == "proc:4242" and inc["facts"]["slope_mib_per_min"] == pytest.approx(
        60, rel=0.02
    )


def test_server_throttling_is_found_in_mixed_chunks_and_resolves(engine: Engine) -> None:
    """GPU 0 thermally throttled for 70 s, GPU 1 not, the two in one chunk per batch; more chunks
    arrive with GPU 0 cool again and it resolves."""
    devices = _devices(engine, "hot")
    thermal = THROTTLE_REASON_BITS["sw_thermal_slowdown"]
    _rows(
        engine,
        gpu_state,
        [{"device_id": d, "ts_ns": T0, "gpu_index": 0, "sm_clock_max_mhz": 1500.0} for d in devices.values()],
    )

    def rows(d: int, ks: range, hot: bool) -> list[dict]:
        out = []
        for k in ks:
            out.append(
                {
                    "device_id": d,
                    "ts_ns": T0 + k * NS,
                    "gpu_index": 0,
                    "util_gpu_percent": 99.0,
                    "temp_c": 80.0 + k / 10 if hot else 70.0,
                    "sm_clock_mhz": 1000.0 if hot else 1500.0,
                    "throttle_reasons": float(thermal if hot else 0),
                }
            )
            out.append(
                {
                    "device_id": d,
                    "ts_ns": T0 + k * NS,
                    "gpu_index": 1,
                    "util_gpu_percent": 99.0,
                    "temp_c": 60.0,
                    "sm_clock_mhz": 1500.0,
                    "throttle_reasons": 0.0,
                }
            )
        return out

    _store_each(engine, "gpu", devices, lambda d: rows(d, range(70), True))
    job = _job(engine, throttle_min_s=60.0, throttle_clear_s=10.0)
    job.run_once(T0 + 30 * NS)
    assert _same_everywhere(_found(engine, devices, "hot", "gpu_throttling")) == [], (
        "30 s is not sustained yet"
    )
    job.run_once(T0 + 70 * NS)
    (inc,) = _same_everywhere(_found(engine, devices, "hot", "gpu_throttling"))
    assert inc["gpu_index"] == 0 and inc["state"] == "open" and inc["ts_ns"] == T0
    assert inc["facts"]["clock_loss_percent"] == pytest.approx(33.3, abs=0.1)
    assert inc["facts"]["peak_temp_c"] == pytest.approx(86.9)
    assert inc["hints"][0]["text"] == "throttled at 86 °C with SM clock 33 % below max (1000 of 1500 MHz)"
    _store_each(engine, "gpu", devices, lambda d: rows(d, range(70, 85), False))
    job.run_once(T0 + 85 * NS)
    (inc,) = _same_everywhere(_found(engine, devices, "hot", "gpu_throttling"))
    assert (
        inc["state"] == "resolved" and inc["ended_ns"] == T0 + 69 * NS and inc["facts"]["duration_s"] == 69.0
    )


def test_jetson_gpu_throttling_is_found_in_chunks(engine: Engine) -> None:
    """A Jetson's GR3D clock capped while hot (no reasons reported); its maximum is learnt from
    the samples, which sit in chunks."""
    devices = _devices(engine, "orin", kind="jetson")
    _store_each(
        engine,
        "gpu",
        devices,
        lambda d: [
            {
                "device_id": d,
                "ts_ns": T0 + k * NS,
                "gpu_index": 0,
                "util_gpu_percent": 99.0,
                "temp_c": 60.0 + (k - 10) if k >= 10 else 55.0,
                "sm_clock_mhz": 624.0 if k >= 10 else 1300.0,
            }
            for k in range(40)
        ],
    )
    _job(engine, throttle_min_s=5.0).run_once(T0 + 40 * NS)
    (inc,) = _same_everywhere(_found(engine, devices, "orin", "gpu_throttling"))
    assert inc["facts"]["sm_clock_max_mhz"] == 1300.0 and inc["facts"]["clock_loss_percent"] == 52.0
    assert inc["ts_ns"] == T0 + 30 * NS


def _cores(mhz: float, load: float = 80.0, n: int = 4) -> str:
    return json.dumps([[load, mhz]] * n)


def test_jetson_cpu_caps_are_found_in_chunks(engine: Engine) -> None:
    """tegrastats' per-core frequencies (host chunks' text column ``cpu_cores``) capped while busy
    and hot: hot by the CPU sensor (a metric point) on one drone, by GPU 0's temperature (in the
    GPU chunks) on another; the idle drone is not throttled."""
    names = {"sensor": "by-sensor", "gpu": "by-gpu", "idle": "idle"}
    fleets = {what: _devices(engine, name, kind="jetson") for what, name in names.items()}
    points = []
    for what, devices in fleets.items():
        load = 20.0 if what == "idle" else 80.0
        _store_each(
            engine,
            "host",
            devices,
            lambda d, load=load: [
                {
                    "device_id": d,
                    "ts_ns": T0 + k * NS,
                    "cpu_percent": load,
                    "cpu_cores": _cores(1000.0 if k >= 10 else 1900.0, load),
                }
                for k in range(40)
            ],
        )
        _store_each(
            engine,
            "gpu",
            devices,
            lambda d, what=what: [
                {
                    "device_id": d,
                    "ts_ns": T0 + k * NS,
                    "gpu_index": g,
                    "util_gpu_percent": 10.0,
                    "temp_c": 86.0 if what == "gpu" and k >= 10 and g == 0 else 60.0,
                    "sm_clock_mhz": 1100.0,
                }
                for k in range(40)
                for g in ((0, 1) if what == "gpu" else (0,))
            ],
        )
        points += [
            {
                "device_id": d,
                "ts_ns": T0 + k * NS,
                "name": "jetson.temp_c",
                "labels": '{"sensor":"CPU"}',
                "value": 85.0 if k >= 10 and what != "gpu" else 55.0,
            }
            for d in devices.values()
            for k in range(40)
        ]
    _rows(engine, metric_points, points)
    job = _job(engine, throttle_min_s=5.0, throttle_clear_s=5.0)
    job.run_once(T0 + 40 * NS)
    assert _same_everywhere(_found(engine, fleets["idle"], "idle", "gpu_throttling")) == []
    (inc,) = _same_everywhere(_found(engine, fleets["sensor"], "by-sensor", "gpu_throttling"))
    assert inc["group_key"] == "cpu" and inc["gpu_index"] is None and inc["ts_ns"] == T0 + 10 * NS
    assert inc["facts"]["cpu_clock_max_mhz"] == 1900.0 and inc["facts"]["cpu_clock_mhz"] == 1000.0
    assert inc["facts"]["peak_temp_c"] == 85.0
    (by_gpu,) = _same_everywhere(_found(engine, fleets["gpu"], "by-gpu", "gpu_throttling"))
    assert by_gpu["facts"]["peak_temp_c"] == 86.0, "GPU 0's temperature, from a mixed chunk"
    # Uncapped again (new chunks): resolved once clear for throttle_clear_s.
    _store_each(
        engine,
        "host",
        fleets["sensor"],
        lambda d: [
            {"device_id": d, "ts_ns": T0 + k * NS, "cpu_percent": 80.0, "cpu_cores": _cores(1900.0)}
            for k in range(40, 50)
        ],
    )
    job.run_once(T0 + 50 * NS)
    (inc,) = _same_everywhere(_found(engine, fleets["sensor"], "by-sensor", "gpu_throttling"))
    assert inc["state"] == "resolved" and inc["ended_ns"] == T0 + 39 * NS


def test_offline_replayed_rows_count_the_chunks(engine: Engine) -> None:
    """A device silent for 30 s replays what it sampled (host and two GPUs): the samples inside
    the gap are counted wherever they sit, chunks wholly inside by their row count and chunks
    that straddle an end of the gap row by row."""
    devices = _devices(engine, "drone", last_seen=T0)

    def host(d: int) -> list[dict]:
        return [{"device_id": d, "ts_ns": T0 + k * NS, "cpu_percent": 5.0} for k in range(-9, 36)]

    def gpu(d: int) -> list[dict]:
        return [
            {"device_id": d, "ts_ns": T0 + k * NS, "gpu_index": g, "util_gpu_percent": 5.0}
            for k in range(-9, 36)
            for g in (0, 1)
        ]

    _store_each(engine, "host", devices, host)
    _store_each(engine, "gpu", devices, gpu)
    job = _job(engine)
    job.run_once(T0 + 11 * NS)
    assert len(_same_everywhere(_found(engine, devices, "drone", "agent_offline"))) == 1
    # Back at +30 s: the first batch after the gap ends it.
    _rows(
        engine,
        ingested_batches,
        [
            {
                "agent_id": f"agent-drone-{mode}",
                "boot_id": "b",
                "seq": k,
                "received_ns": T0 + (30 + k) * NS,
                "rows": 10,
                "device_id": devices[mode],
            }
            for mode in MODES
            for k in range(3)
        ],
    )
    with engine.begin() as conn:
        conn.execute(
            update(Device.__table__)
            .where(Device.__table__.c.id.in_(list(devices.values())))
            .values(last_seen_ns=T0 + 32 * NS)
        )
    job.run_once(T0 + 33 * NS)
    (inc,) = _same_everywhere(_found(engine, devices, "drone", "agent_offline"))
    assert inc["state"] == "resolved" and inc["ended_ns"] == T0 + 30 * NS
    assert inc["facts"]["gap_s"] == 30.0 and inc["facts"]["replayed_rows"] == 29 * 3, (
        "29 s of host and two GPUs"
    )
    assert inc["title"] == "<dev> was silent for 30 s; back, 87 rows replayed from its spool"
