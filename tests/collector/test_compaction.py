"""The compaction job folds old raw rows into chunks, and every reader gives the same answers
before and after: raw samples, summaries, charts (raw stretches included), the incident context.
Nothing is lost or doubled: not with a late row for an hour already folded, not with a row
committed while a window is being folded, not when the compactor is killed in the middle."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, insert, select

from fleetscope.collector.jobs import compaction
from fleetscope.collector.jobs.compaction import CompactionJob
from fleetscope.collector.jobs.rollup import RollupJob
from fleetscope.collector.query import (
    device_metrics,
    device_series,
    incident_with_context,
    metrics_summary,
    session_scope,
)
from fleetscope.collector.query.samples import count_samples, last_sample_ns
from fleetscope.collector.query.series import fetch_samples
from fleetscope.collector.storage.chunk_codec import CODEC_VERSION, encode_chunk
from fleetscope.collector.storage.chunk_reader import HOST_TEXT_COLUMNS, MIXED_GPU_COLUMN, MIXED_GPUS
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.rollups import GPU, HOST
from fleetscope.collector.storage.schema import (
    GPU_SAMPLE_COLUMNS,
    HOST_VALUE_COLUMNS,
    Device,
    Incident,
    gpu_chunks,
    gpu_samples,
    gpu_state,
    host_chunks,
    host_samples,
)
from fleetscope.proto.vocabulary import KIND_CUDA_OOM

NS = 10**9
HOUR = 3600 * NS
T0 = 1_780_000_000 * NS // HOUR * HOUR + 17 * 60 * NS  # 17 minutes past an hour: partial windows
STEP = 10 * NS
SPAN = 3 * HOUR
END = T0 + SPAN
NOW = END + 30 * NS  # the data's present: the newest rows are 30 s old


def gpu_row(device_id: int, gpu: int, ts: int, i: int) -> dict[str, Any]:
    return {
        "device_id": device_id,
        "ts_ns": ts,
        "gpu_index": gpu,
        "util_gpu_percent": float((i * 7 + gpu) % 101),
        "util_memory_percent": float(i % 40),
        "util_encoder_percent": 0.0,
        "util_decoder_percent": None if i % 3 else 0.0,
        "memory_used_bytes": float((20 << 30) + (i % 50) * (1 << 20)),
        "temp_c": float(60 + (i // 30) % 20),
        "memory_temp_c": None,
        "power_w": round(200 + (i % 97) * 0.731, 3),
        "energy_j": round(1e6 + i * 2103.517, 3),
        "sm_clock_mhz": 1980.0 if i % 11 else 1410.0,
        "memory_clock_mhz": 9501.0,
        "graphics_clock_mhz": 1980.0,
        "pstate": 0.0,
        "fan_percent": None,
        "pcie_tx_bytes_per_s": float(i * 1234 % 100_000),
        "pcie_rx_bytes_per_s": 0.1 + i,  # not decimal-exact after x1000 for every i: the raw path
        "throttle_reasons": float(0x20 if i % 13 == 0 else 0x4 if i % 17 == 0 else 0),
    }


def host_row(device_id: int, ts: int, i: int) -> dict[str, Any]:
    return {
        "device_id": device_id,
        "ts_ns": ts,
        "cpu_percent": round((i * 3.7) % 100, 1),
        "load1": round(i % 8 * 0.37, 2),
        "load5": 1.25,
        "load15": None,
        "mem_total_bytes": float(64 << 30),
        "mem_used_bytes": float((8 << 30) + i * 4096),
        "mem_available_bytes": float((56 << 30) - i * 4096),
        "swap_total_bytes": 0.0,
        "swap_used_bytes": 0.0,
        "disk_total_bytes": 1.2e13,
        "disk_used_bytes": 3.3e12 + i,
        "disk_read_bytes": float(i * 65536),
        "disk_write_bytes": float(i * 131072),
        "net_rx_bytes": float(i * 1500),
        "net_tx_bytes": float(i * 900),
        "cpu_cores": json.dumps([[round(i % 100 * 1.0, 1), 2400], [50.0, None]]),
        "top_processes": None
        if i % 5
        else json.dumps([{"pid": 100 + i % 3, "name": "python", "cpu_percent": 99.5, "rss_bytes": 1 << 30}]),
    }


BATCH = 7  # sample times a batch (70 s at 10 s): some batches cross an hour's edge
UPGRADE_NS = T0 + 50 * 60 * NS  # "upgrade" layout: older rows in the tail, newer ones in batch chunks


def chunk_row(
    device_id: int,
    gpu_index: int | None,
    rows: Sequence[dict[str, Any]],
    columns: Sequence[str],
    texts: Sequence[str] = (),
) -> dict[str, Any]:
    """A chunk table row holding ``rows`` (sorted by time), encoded column by column."""
    import numpy as np

    ts = np.array([r["ts_ns"] for r in rows], dtype=np.int64)
    values = {
        c: np.array([np.nan if r.get(c) is None else r[c] for r in rows], dtype=np.float64) for c in columns
    }
    out = {
        "device_id": device_id,
        "start_ns": int(ts[0]),
        "end_ns": int(ts[-1]),
        "rows": len(rows),
        "codec": CODEC_VERSION,
        "data": encode_chunk(ts, values, {t: [r.get(t) for r in rows] for t in texts}),
    }
    if gpu_index is not None:
        out["gpu_index"] = gpu_index
    return out


def store_batches(
    conn: Any,
    device_id: int,
    g_rows: Sequence[dict[str, Any]],
    h_rows: Sequence[dict[str, Any]],
    *,
    mixed: bool = True,
    batch: int = BATCH,
) -> None:
    """Rows stored as the collector stores them since revision 0011: each batch of ``batch`` sample
    times one host chunk and one GPU chunk holding every GPU (``gpu_index`` -1, each row's GPU in
    the value column ``gpu_index``), or with ``mixed=False`` one GPU chunk per GPU."""
    by_ts: dict[int, list[dict[str, Any]]] = {}
    for r in g_rows:
        by_ts.setdefault(r["ts_ns"], []).append(r)
    host_by_ts = {r["ts_ns"]: r for r in h_rows}
    times = sorted(set(by_ts) | set(host_by_ts))
    gpu, host = [], []
    for k in range(0, len(times), batch):
        part = times[k : k + batch]
        hs = [host_by_ts[t] for t in part if t in host_by_ts]
        if hs:
            host.append(chunk_row(device_id, None, hs, HOST_VALUE_COLUMNS, HOST_TEXT_COLUMNS))
        gs = sorted((r for t in part for r in by_ts.get(t, ())), key=lambda r: (r["ts_ns"], r["gpu_index"]))
        if gs and mixed:
            gpu.append(chunk_row(device_id, MIXED_GPUS, gs, (*GPU_SAMPLE_COLUMNS, MIXED_GPU_COLUMN)))
        elif gs:
            for g in sorted({r["gpu_index"] for r in gs}):
                gpu.append(
                    chunk_row(device_id, g, [r for r in gs if r["gpu_index"] == g], GPU_SAMPLE_COLUMNS)
                )
    if gpu:
        conn.execute(insert(gpu_chunks), gpu)
    if host:
        conn.execute(insert(host_chunks), host)


def store(
    conn: Any, device_id: int, g_rows: list[dict[str, Any]], h_rows: list[dict[str, Any]], layout: str
) -> None:
    """``layout``: "tail" (rows, as collectors before revision 0011 stored them), "mixed" or
    "per_gpu" (batch chunks, see ``store_batches``), "upgrade" (rows before ``UPGRADE_NS`` in the
    tail, the rest in mixed batch chunks: a window with both)."""
    if layout == "upgrade":
        store(
            conn,
            device_id,
            [r for r in g_rows if r["ts_ns"] < UPGRADE_NS],
            [r for r in h_rows if r["ts_ns"] < UPGRADE_NS],
            "tail",
        )
        store(
            conn,
            device_id,
            [r for r in g_rows if r["ts_ns"] >= UPGRADE_NS],
            [r for r in h_rows if r["ts_ns"] >= UPGRADE_NS],
            "mixed",
        )
    elif layout == "tail":
        if g_rows:
            conn.execute(insert(gpu_samples), g_rows)
        if h_rows:
            conn.execute(insert(host_samples), h_rows)
    else:
        store_batches(conn, device_id, g_rows, h_rows, mixed=layout == "mixed")


def fill(engine: Engine, devices: int = 2, gpus: int = 2, layouts: Sequence[str] = ()) -> dict[str, int]:
    """Two devices, two GPUs each, three hours at 10 s; some GPU state rows; an incident an hour in.
    ``layouts``: how each device's samples are stored (``store``; the tail when not given)."""
    with engine.begin() as conn:
        for d in range(1, devices + 1):
            conn.execute(
                insert(Device.__table__).values(
                    id=d,
                    agent_id=f"agent-{d}",
                    name=f"dev-{d}",
                    kind="server",
                    first_seen_ns=T0,
                    last_seen_ns=END,
                )
            )
            g_rows, h_rows = [], []
            for i, ts in enumerate(range(T0, END, STEP)):
                jitter = (i * 7919) % 1000 * 1000  # microseconds of sampling jitter
                for g in range(gpus):
                    g_rows.append(gpu_row(d, g, ts + jitter, i))
                h_rows.append(host_row(d, ts + jitter, i))
            store(conn, d, g_rows, h_rows, layouts[d - 1] if layouts else "tail")
            conn.execute(
                insert(gpu_state),
                [
                    {
                        "device_id": d,
                        "ts_ns": T0 + k * HOUR + 5 * NS,
                        "gpu_index": g,
                        "memory_total_bytes": float(80 << 30),
                        "power_limit_w": 700.0 - k,
                        "sm_clock_max_mhz": 1980.0,
                        "processes": "[]",
                    }
                    for k in range(3)
                    for g in range(gpus)
                ],
            )
        incident = conn.execute(
            insert(Incident.__table__)
            .values(
                device_id=1,
                ts_ns=T0 + HOUR + 123 * NS,
                received_ns=T0 + HOUR + 124 * NS,
                kind=KIND_CUDA_OOM,
                severity="error",
                title="CUDA out of memory",
                facts={},
                source="test",
                excerpt="",
                context={},
                last_seen_ns=T0 + HOUR + 123 * NS,
                updated_ns=T0 + HOUR + 124 * NS,
            )
            .returning(Incident.id)
        ).scalar_one()
    return {"incident": incident}


def answers(engine: Engine, incident_id: int) -> dict[str, Any]:
    """The readers' answers over windows that cross the folded hours, chunk edges and the tail."""
    out: dict[str, Any] = {}
    windows = [
        (T0, END + 1),
        (T0 + 30 * 60 * NS, T0 + 150 * 60 * NS),
        (T0 + HOUR - 7 * NS, T0 + HOUR + 53 * NS),
    ]
    with session_scope(engine) as s:
        for device in ("dev-1", "dev-2"):
            for lo, hi in windows:
                out[f"metrics {device} {lo} {hi}"] = device_metrics(
                    session=s, device=device, since_ns=lo, until_ns=hi
                )
                out[f"summary {device} {lo} {hi}"] = metrics_summary(
                    session=s, device=device, since_ns=lo, until_ns=hi
                )
            out[f"limited {device}"] = device_metrics(
                session=s, device=device, since_ns=T0, until_ns=END, limit=333
            )
            out[f"last {device}"] = last_sample_ns(session=s, device=device)
            out[f"count {device}"] = count_samples(session=s, device=device)
            # Charts: 3 h at the automatic step (10 s: raw rows only), 30 min at 2 s, and a day
            # in minute buckets (rollups, raw at the edges).
            out[f"series {device} 3h"] = device_series(
                session=s, device=device, since_ns=T0, until_ns=END, latency=False
            )
            out[f"series {device} 30m"] = device_series(
                session=s,
                device=device,
                since_ns=T0 + 40 * 60 * NS,
                until_ns=T0 + 70 * 60 * NS,
                step_s=2,
                latency=False,
            )
            out[f"series {device} 1m"] = device_series(
                session=s, device=device, since_ns=T0 - HOUR, until_ns=END + HOUR, step_s=60, latency=False
            )
        out["count"] = count_samples(session=s)
        for src, per_gpu in ((GPU, True), (GPU, False), (HOST, False)):  # whole-window (compare), odd edges
            acc, _ = fetch_samples(s, src, [1, 2], T0 + 61 * NS, END - 59 * NS, None, per_gpu)
            out[f"window {src.kind} {per_gpu}"] = acc
        ctx = incident_with_context(
            session=s, incident_id=incident_id, before_s=900, after_s=300, with_series=True
        )
        out["context"] = dataclasses.replace(ctx, nearby=[])
    return out


def assert_same_answers(before: Any, after: Any, path: str = "") -> None:
    """Equal, except floats that are aggregates of many values (means, sums), which may differ in
    their last bits with the order of summation."""
    if isinstance(before, float) and isinstance(after, float):
        if math.isnan(before):
            assert math.isnan(after), path
        else:
            assert after == pytest.approx(before, rel=1e-12, abs=1e-9), path
    elif dataclasses.is_dataclass(before) and not isinstance(before, type):
        assert type(before) is type(after), path
        for f in dataclasses.fields(before):
            assert_same_answers(getattr(before, f.name), getattr(after, f.name), f"{path}.{f.name}")
    elif isinstance(before, dict):
        assert isinstance(after, dict) and set(before) == set(after), (path, set(before) ^ set(after))
        for k in before:
            assert_same_answers(before[k], after[k], f"{path}[{k!r}]")
    elif isinstance(before, (list, tuple)):
        assert isinstance(after, (list, tuple)) and len(before) == len(after), (path, len(before), len(after))
        for i, (a, b) in enumerate(zip(before, after)):
            assert_same_answers(a, b, f"{path}[{i}]")
    else:
        assert before == after, path


def tail_and_chunked(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {
            "gpu_tail": conn.execute(select(func.count()).select_from(gpu_samples)).scalar_one(),
            "host_tail": conn.execute(select(func.count()).select_from(host_samples)).scalar_one(),
            "gpu_chunked": conn.execute(select(func.coalesce(func.sum(gpu_chunks.c.rows), 0))).scalar_one(),
            "host_chunked": conn.execute(select(func.coalesce(func.sum(host_chunks.c.rows), 0))).scalar_one(),
            "gpu_chunks": conn.execute(select(func.count()).select_from(gpu_chunks)).scalar_one(),
        }


@pytest.fixture
def filled(db_url: str) -> Any:
    engine = make_engine(db_url)
    ids = fill(engine)
    RollupJob(engine, owner="roller").run_once(now_ns=NOW)
    yield engine, ids
    engine.dispose()


def test_every_reader_answers_the_same_before_and_after_compaction(filled: Any) -> None:
    engine, ids = filled
    before = answers(engine, ids["incident"])
    counts = tail_and_chunked(engine)
    report = CompactionJob(engine, owner="c1").run_once(now_ns=NOW)
    assert report.ran and report.rows > 0
    after_counts = tail_and_chunked(engine)
    # Whole hours wholly below the boundary (min(now - 1 h, rolled up to)) are folded: of the
    # three hours that started 17 minutes past, the first partial hour and the next whole one.
    assert after_counts["gpu_chunks"] == 2 * 2 * 2
    assert after_counts["gpu_tail"] + after_counts["gpu_chunked"] == counts["gpu_tail"]
    assert after_counts["host_tail"] + after_counts["host_chunked"] == counts["host_tail"]
    assert after_counts["gpu_chunked"] > counts["gpu_tail"] // 2
    with engine.connect() as conn:  # the tail keeps what is not folded, and nothing below a folded window
        oldest = conn.execute(select(func.min(gpu_samples.c.ts_ns))).scalar_one()
        assert oldest >= T0 // HOUR * HOUR + 2 * HOUR
        ends = conn.execute(select(gpu_chunks.c.start_ns, gpu_chunks.c.end_ns)).all()
        assert all(e // HOUR == s // HOUR for s, e in ends), "a chunk holds one window"
    after = answers(engine, ids["incident"])
    assert_same_answers(before, after)
    # Raw rows come back exactly, not approximately.
    for key in before:
        if key.startswith(("metrics", "limited", "last", "count")):
            assert before[key] == after[key], key
    # A second pass finds nothing more to fold.
    again = CompactionJob(engine, owner="c1").run_once(now_ns=NOW)
    assert again.rows == 0 and tail_and_chunked(engine) == after_counts


def test_a_late_row_for_a_folded_hour_is_folded_into_a_chunk_of_its_own_and_read_back(filled: Any) -> None:
    engine, ids = filled
    late_ts = T0 + 20 * 60 * NS + 1234  # inside the first folded window, between two rows

    def add_late_rows() -> None:
        with engine.begin() as conn:
            conn.execute(insert(gpu_samples).values(gpu_row(1, 1, late_ts, 424242)))
            conn.execute(insert(host_samples).values(host_row(1, late_ts, 424242)))

    def remove_late_rows() -> None:
        with engine.begin() as conn:
            conn.execute(gpu_samples.delete().where(gpu_samples.c.ts_ns == late_ts))
            conn.execute(host_samples.delete().where(host_samples.c.ts_ns == late_ts))

    add_late_rows()
    expected = answers(engine, ids["incident"])  # every row in the tail
    remove_late_rows()
    CompactionJob(engine, owner="c1").run_once(now_ns=NOW)
    add_late_rows()  # arrives after its hour was folded
    with session_scope(engine) as s:
        got = device_metrics(session=s, device="dev-1", since_ns=late_ts, until_ns=late_ts + 1)
        assert [(p.ts_ns, p.gpu_index) for p in got.gpu] == [(late_ts, 1)] and len(got.host) == 1
        assert_same_answers(expected["count dev-1"], count_samples(session=s, device="dev-1"))
    chunks_before = tail_and_chunked(engine)["gpu_chunks"]
    report = CompactionJob(engine, owner="c1").run_once(now_ns=NOW)
    assert report.rows == 2 and report.chunks == 2
    assert tail_and_chunked(engine)["gpu_chunks"] == chunks_before + 1, "a chunk of its own, overlapping"
    assert_same_answers(expected, answers(engine, ids["incident"]))
    with session_scope(engine) as s:
        rows = device_metrics(
            session=s, device="dev-1", since_ns=late_ts - 20 * NS, until_ns=late_ts + 20 * NS
        ).gpu
        times = [(p.ts_ns, p.gpu_index) for p in rows]
        assert times == sorted(times) and (late_ts, 1) in times and len(times) == len(set(times))


def test_only_rows_below_the_boundary_are_folded(filled: Any) -> None:
    engine, _ = filled
    # Without rollups a device is not folded at all (the rollup job reads the raw tail).
    with engine.begin() as conn:
        conn.execute(
            insert(Device.__table__).values(
                id=3, agent_id="agent-3", name="dev-3", kind="server", first_seen_ns=T0, last_seen_ns=END
            )
        )
        conn.execute(insert(gpu_samples), [gpu_row(3, 0, T0 + i * STEP, i) for i in range(100)])
    # A fold_after of 2 h leaves one window wholly below: the first (partial) hour.
    job = CompactionJob(engine, owner="c1", fold_after_s=2 * 3600)
    assert set(job.boundaries(engine.connect(), NOW)) == {1, 2}
    report = job.run_once(now_ns=NOW)
    assert report.windows == 2 * 2  # two devices, GPU and host
    with engine.connect() as conn:
        assert conn.execute(select(func.max(gpu_chunks.c.end_ns))).scalar_one() < T0 // HOUR * HOUR + HOUR
        assert conn.execute(select(func.count()).where(gpu_samples.c.device_id == 3)).scalar_one() == 100
    # keep_raw_s (the detectors' lookback) bounds it too.
    assert CompactionJob(engine, fold_after_s=0, keep_raw_s=3 * 3600).boundaries(engine.connect(), NOW) == {
        1: NOW - 3 * HOUR,
        2: NOW - 3 * HOUR,
    }


def test_devices_whose_shares_another_collector_holds_are_not_folded(filled: Any) -> None:
    engine, _ = filled
    first = CompactionJob(engine, owner="first")
    assert len(first.shares.acquire(NOW)) == 16, "alone, a collector holds every share"
    second = CompactionJob(engine, owner="second")
    report = second.run_once(now_ns=NOW)
    assert not report.ran and report.holder == "first"
    assert tail_and_chunked(engine)["gpu_chunks"] == 0


def test_a_row_committed_while_its_window_is_folded_is_neither_lost_nor_doubled(
    filled: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, _ = filled
    total = sum(v for k, v in tail_and_chunked(engine).items() if k == "gpu_tail")
    inside = threading.Event()
    inserted = threading.Event()
    real = compaction.make_chunks
    late_ts = T0 + 5 * 60 * NS + 77

    def slow_make_chunks(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        if not inside.is_set():  # the first window: its rows are deleted, not yet committed
            inside.set()
            inserted.wait(3)  # PostgreSQL: the insert commits now; SQLite: it waits for this commit
        return out

    def insert_late_row() -> None:
        inside.wait(30)
        with engine.begin() as conn:
            conn.execute(insert(gpu_samples).values(gpu_row(1, 0, late_ts, 99)))
        inserted.set()

    monkeypatch.setattr(compaction, "make_chunks", slow_make_chunks)
    writer = threading.Thread(target=insert_late_row)
    writer.start()
    CompactionJob(engine, owner="c1").run_once(now_ns=NOW)
    writer.join(60)
    assert inserted.is_set()
    monkeypatch.undo()
    CompactionJob(engine, owner="c1").run_once(now_ns=NOW)
    counts = tail_and_chunked(engine)
    assert counts["gpu_tail"] + counts["gpu_chunked"] == total + 1
    with session_scope(engine) as s:
        got = device_metrics(session=s, device="dev-1", since_ns=late_ts, until_ns=late_ts + 1).gpu
        assert [(p.ts_ns, p.gpu_index) for p in got] == [(late_ts, 0)]


KILLED_COMPACTOR = textwrap.dedent("""
    import sys, time
    from fleetscope.collector.jobs import compaction
    from fleetscope.collector.storage.engine import make_engine

    real = compaction.make_chunks
    windows = 0

    def make_chunks(*args, **kwargs):
        global windows
        out = real(*args, **kwargs)
        windows += 1
        if windows == 3:  # two windows committed, the third deleted from the tail, not committed
            print("inside", flush=True)
            time.sleep(600)
        return out

    compaction.make_chunks = make_chunks
    engine = make_engine(sys.argv[1])
    compaction.CompactionJob(engine, owner="doomed").run_once(now_ns=int(sys.argv[2]))
""")


@pytest.mark.processes
def test_a_compactor_killed_inside_a_window_loses_and_doubles_nothing(filled: Any, tmp_path: Path) -> None:
    engine, ids = filled
    url = engine.url.render_as_string(hide_password=False)
    before = answers(engine, ids["incident"])
    counts = tail_and_chunked(engine)
    script = tmp_path / "compactor.py"
    script.write_text(KILLED_COMPACTOR)
    proc = subprocess.Popen(
        [sys.executable, str(script), url, str(NOW)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "inside"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        assert proc.stdout is not None
        proc.stdout.close()
    engine.dispose()  # SQLite: the next connection finds the killed writer's WAL and recovers
    mid = tail_and_chunked(engine)
    assert mid["gpu_tail"] + mid["gpu_chunked"] == counts["gpu_tail"]
    assert mid["host_tail"] + mid["host_chunked"] == counts["host_tail"]
    assert 0 < mid["gpu_chunked"] < counts["gpu_tail"], "the committed windows stay folded"
    assert_same_answers(before, answers(engine, ids["incident"]))
    # Its lease expires (renewals count from the wall clock too); the next compactor finishes the work.
    report = CompactionJob(engine, owner="next").run_once(now_ns=max(NOW, time.time_ns()) + 10 * 60 * NS)
    assert report.ran and report.rows > 0
    done = tail_and_chunked(engine)
    assert done["gpu_tail"] + done["gpu_chunked"] == counts["gpu_tail"]
    assert_same_answers(before, answers(engine, ids["incident"]))


@pytest.mark.server
def test_the_collector_runs_compaction_unless_told_not_to(db_url: str) -> None:
    from fleetscope.collector.ingest.server import Collector, CollectorSettings

    for on in (True, False):
        c = Collector(
            CollectorSettings(
                listen="127.0.0.1:0",
                db_url=db_url,
                compaction=on,
                fold_after_s=7200,
                detectors=None,
                retention=None,
            )
        )
        c.start()
        try:
            job = c.jobs.get("compaction")
            assert (job is not None) == on
            if job is not None:
                assert job.fold_after_ns == 7200 * NS
        finally:
            c.stop()


@pytest.mark.processes
def test_collector_flags() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "fleetscope.cli", "collector", "--fold-after", "soon"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert (
        run.stderr.strip().splitlines()[-1].startswith("fleetscope collector: error: argument --fold-after:")
    )
    run = subprocess.run(
        [sys.executable, "-m", "fleetscope.cli", "collector", "--fold-after", "2h", "--no-compaction"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and "not allowed with argument" in run.stderr


def test_the_job_folds_on_its_own_thread_and_stops(filled: Any) -> None:
    from tests.conftest import wait_until

    engine, _ = filled
    job = CompactionJob(engine, owner="threaded", interval_s=0.2, clock=lambda: NOW)
    job.start()
    try:
        wait_until(lambda: tail_and_chunked(engine)["gpu_chunks"] > 0, timeout_s=60, message="chunks")
    finally:
        job.stop()
    assert job.last_report is not None and job.last_report.ran
    assert len(CompactionJob(engine, owner="other").shares.acquire(NOW)) == 16, "stop gives every share up"


def test_postgresql_folds_through_per_column_arrays_into_the_same_chunks(pg_url: str) -> None:
    """The fast PostgreSQL path (one row of per-column binary arrays, read by numpy) makes the
    very chunks the row-by-row path makes: NULLs, texts, -0.0 and every float bit included."""
    engine = make_engine(pg_url)
    try:
        fill(engine)
        with engine.begin() as conn:  # values the arrays must carry exactly
            conn.execute(
                insert(gpu_samples).values(
                    {
                        **gpu_row(1, 0, T0 + 3, 5),
                        "power_w": -0.0,
                        "temp_c": 1e-300,
                        "energy_j": 2.0**60 + 0.5,
                        "fan_percent": None,
                    }
                )
            )
        RollupJob(engine, owner="roller").run_once(now_ns=NOW)
        with engine.connect() as conn:
            rows = conn.execute(select(gpu_samples)).all()
            hosts = conn.execute(select(host_samples)).all()
        made = {}
        for method in ("returning", "arrays"):
            with engine.begin() as conn:
                conn.execute(gpu_chunks.delete())
                conn.execute(host_chunks.delete())
                conn.execute(gpu_samples.delete())
                conn.execute(host_samples.delete())
                conn.execute(insert(gpu_samples), [dict(r._mapping) for r in rows])
                conn.execute(insert(host_samples), [dict(r._mapping) for r in hosts])
            job = CompactionJob(engine, owner=method, fetch=method)
            assert job.run_once(now_ns=NOW).rows > 0
            with engine.connect() as conn:
                made[method] = conn.execute(
                    select(
                        gpu_chunks.c.device_id,
                        gpu_chunks.c.gpu_index,
                        gpu_chunks.c.start_ns,
                        gpu_chunks.c.end_ns,
                        gpu_chunks.c.rows,
                        gpu_chunks.c.data,
                    ).order_by(gpu_chunks.c.device_id, gpu_chunks.c.gpu_index, gpu_chunks.c.start_ns)
                ).all()
                made[method + " host"] = conn.execute(
                    select(
                        host_chunks.c.device_id,
                        host_chunks.c.start_ns,
                        host_chunks.c.rows,
                        host_chunks.c.data,
                    ).order_by(host_chunks.c.device_id, host_chunks.c.start_ns)
                ).all()
            job.release()
        assert made["arrays"] and [tuple(r) for r in made["arrays"]] == [tuple(r) for r in made["returning"]]
        assert made["arrays host"] and made["arrays host"] == made["returning host"]
        assert CompactionJob(engine, owner="x").fetch == "auto"
        with pytest.raises(ValueError, match="fetch"):
            CompactionJob(engine, fetch="copy")
    finally:
        engine.dispose()
