"""The rollup job: rolled buckets equal what the raw rows say, one roller at a time, and a
device's late backlog (a drone back in radio range) is rolled when it arrives."""

from __future__ import annotations

import json
import random

import pytest
from sqlalchemy import Engine, insert, select
from sqlalchemy.orm import Session

from fleetscope.collector import query
from fleetscope.collector.jobs.rollup import RollupJob
from fleetscope.collector.query.planning import comparison_step
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.rollup_schema import (
    gpu_rollups,
    host_rollups,
    latency_rollups,
    rollup_progress,
)
from fleetscope.collector.storage.schema import Device, gpu_samples, host_samples, latency_histograms
from tests.latest_rows import refresh_latest

NS = 10**9
T0 = 1_800_000_000 * NS  # a fixed "now" so buckets are the same on every run


def _device(engine: Engine, name: str, gpus: int = 2) -> int:
    with Session(engine) as s, s.begin():
        d = Device(
            agent_id=f"agent-{name}",
            name=name,
            kind="server",
            first_seen_ns=T0,
            last_seen_ns=T0,
            labels={},
            inventory={"gpus": [{"index": i, "name": "A100", "memory_total_bytes": 80 << 30} for i in range(gpus)]},
        )
        s.add(d)
        s.flush()
        return d.id


def _samples(engine: Engine, device_id: int, start_ns: int, end_ns: int, seed: int, every_s: int = 1) -> None:
    """Random readings every ``every_s`` seconds (days of data sparse enough to stay quick),
    and a latency histogram every 10 s (every sample when they are further apart)."""
    rng = random.Random(seed)
    gpu, host, lat = [], [], []
    energy = 0.0
    for t in range(start_ns, end_ns, every_s * NS):
        for g in (0, 1):
            energy += rng.uniform(100, 300)
            gpu.append(
                {
                    "device_id": device_id,
                    "ts_ns": t,
                    "gpu_index": g,
                    "util_gpu_percent": rng.uniform(0, 100),
                    "memory_used_bytes": rng.uniform(1e9, 8e10),
                    "temp_c": rng.uniform(30, 90),
                    "power_w": rng.uniform(50, 400),
                    "energy_j": energy,
                    "sm_clock_mhz": rng.choice([1410.0, 900.0]),
                    "throttle_reasons": float(rng.choice([0, 0, 0, 0x20, 0x4, 0x1])),
                }
            )
        host.append(
            {
                "device_id": device_id,
                "ts_ns": t,
                "cpu_percent": rng.uniform(0, 100),
                "mem_used_bytes": rng.uniform(1e9, 5e9),
                "mem_total_bytes": 8e9,
                "disk_read_bytes": float(t - start_ns) / NS * 4096,
                "net_rx_bytes": None,
            }
        )
        if (t // NS) % 10 == 0 or every_s >= 10:
            lat.append(
                {
                    "device_id": device_id,
                    "start_ns": t,
                    "end_ns": t + min(10, every_s) * NS,
                    "name": "infer",
                    "labels": "{}",
                    "count": 50,
                    "sum_ns": 50 * 4_000_000,
                    "errors": 1,
                    "zero_count": 0,
                    "buckets": json.dumps({"380": 20, "390": 25 - t // NS % 7, "400": 5 + t // NS % 7}),
                }
            )
    with engine.begin() as conn:
        conn.execute(insert(gpu_samples), gpu)
        conn.execute(insert(host_samples), host)
        refresh_latest(conn)
        if lat:
            conn.execute(insert(latency_histograms), lat)


def _series(engine: Engine, device: str, since: int, until: int, step_s: int) -> query.DeviceSeries:
    with Session(engine) as s:
        return query.device_series(session=s, device=device, since_ns=since, until_ns=until, step_s=step_s)


def _assert_same(a: query.SeriesTable, b: query.SeriesTable, *, exact_deltas: bool = True) -> None:
    """Equal, column by column. Re-aggregated rollups (steps above a minute) lose the increment
    between two minute buckets in counter deltas and spans (by design, 1/60): there the rates
    (delta / span) must agree instead."""
    assert a.columns["ts_ns"] == b.columns["ts_ns"]
    for name, col in a.columns.items():
        if not exact_deltas and (name == "span_ns" or "delta" in name):
            if name != "span_ns":
                for x, y, sx, sy in zip(col, b.columns[name], a.columns["span_ns"], b.columns["span_ns"]):
                    if x is not None and sx and sy:
                        assert x / sx == pytest.approx(y / sy, rel=0.03), name
            continue
        for x, y in zip(col, b.columns[name]):
            assert (x is None and y is None) or x == pytest.approx(y, rel=1e-9, abs=1e-6), name


@pytest.fixture
def engine(db_url: str):  # type: ignore[no-untyped-def]
    e = make_engine(db_url)
    yield e
    e.dispose()


def test_rolled_series_equal_the_raw_aggregates(engine: Engine) -> None:
    d = _device(engine, "srv")
    start = T0 - 3 * 3600 * NS - 17 * NS  # not aligned: the first minute and hour are partial
    _samples(engine, d, start, T0, seed=1)
    before = {step: _series(engine, "srv", start, T0, step) for step in (60, 300, 3600)}
    assert all(s.sources == ("raw",) for s in before.values())
    report = RollupJob(engine, settle_s=0).run_once(T0)
    assert report.ran and report.rows[60] > 0 and report.rows[3600] > 0
    for step in (60, 300, 3600):
        after = _series(engine, "srv", start, T0, step)
        assert after.sources != ("raw",), step
        _assert_same(before[step].gpu, after.gpu, exact_deltas=step == 60)
        _assert_same(before[step].host, after.host, exact_deltas=step == 60)
        assert [x.count for x in before[step].latency] == [x.count for x in after.latency]
        assert [x.p99_ms for x in before[step].latency] == [x.p99_ms for x in after.latency]
    assert _series(engine, "srv", start, T0, 3600).sources == ("hour", "minute", "raw")
    # A throttled share is counted per reason: thermal and power-cap bits are both in the data.
    hour = _series(engine, "srv", start, T0, 3600).gpu.columns
    assert sum(hour["throttle_thermal_n"]) > 0 and sum(hour["throttle_power_n"]) > 0


def test_a_second_collector_waits_for_the_shares(engine: Engine) -> None:
    d = _device(engine, "srv")
    _samples(engine, d, T0 - 600 * NS, T0, seed=2)
    first = RollupJob(engine, owner="collector-a", settle_s=0, lease_s=60, clock=lambda: T0)
    second = RollupJob(engine, owner="collector-b", settle_s=0, lease_s=60, clock=lambda: T0)
    assert first.run_once(T0).ran
    skipped = second.run_once(T0)
    assert not skipped.ran and skipped.holder == "collector-a"
    assert second.run_once(T0 + 61 * NS).ran, "expired shares are taken over"
    assert not first.run_once(T0 + 62 * NS).ran, "and the old holder now waits"
    second.release()
    assert first.run_once(T0 + 63 * NS).ran, "released shares are free at once"


def test_late_backlog_is_rolled_when_it_arrives(engine: Engine) -> None:
    online = _device(engine, "online")
    drone = _device(engine, "drone")
    _samples(engine, online, T0 - 2 * 3600 * NS, T0, seed=3)
    _samples(engine, drone, T0 - 2 * 3600 * NS, T0 - 3600 * NS, seed=4)  # out of range for the last hour
    job = RollupJob(engine, settle_s=0)
    job.run_once(T0)
    with engine.connect() as conn:
        progress = {
            r.device_id: r.rolled_until_ns
            for r in conn.execute(select(rollup_progress).where(rollup_progress.c.step_s == 60))
        }
    # A minute is final once the device sent data past it: its last minute waits for more.
    assert progress[online] == T0 - 60 * NS and progress[drone] == T0 - 3660 * NS, (
        "each device to its own frontier"
    )
    _samples(engine, drone, T0 - 3600 * NS, T0, seed=5)  # back in range: the spool uploads the hour it missed
    raw = _series(engine, "drone", T0 - 2 * 3600 * NS, T0, 60)
    job.run_once(T0 + 30 * NS)
    rolled = _series(engine, "drone", T0 - 2 * 3600 * NS, T0, 60)
    assert rolled.sources == ("minute", "raw")
    _assert_same(raw.gpu, rolled.gpu)
    with engine.connect() as conn:
        rows = conn.execute(
            select(gpu_rollups.c.bucket_ns).where(
                gpu_rollups.c.device_id == drone, gpu_rollups.c.step_s == 60
            )
        ).all()
    assert len(rows) == 2 * 119, "two GPUs, every finished minute of both hours, each once"


def test_fleet_overview_reads_rollups_and_the_unrolled_edge(engine: Engine) -> None:
    d = _device(engine, "srv")
    _samples(engine, d, T0 - 1800 * NS, T0, seed=6)
    with engine.begin() as conn:
        conn.execute(Device.__table__.update().values(last_seen_ns=T0))  # type: ignore[attr-defined]
    with Session(engine) as s:
        before = query.fleet_overview(session=s, now_ns=T0)
    RollupJob(engine, settle_s=0).run_once(T0 - 300 * NS)  # rolled up to five minutes ago only
    with Session(engine) as s:
        after = query.fleet_overview(session=s, now_ns=T0)
    a, b = before.devices[0], after.devices[0]
    assert a.online and a.gpu_count == 2 and len([v for v in a.spark_util if v is not None]) >= 29
    assert a.spark_util == pytest.approx(b.spark_util) and a.spark_power == pytest.approx(b.spark_power)
    assert a.util_percent == b.util_percent is not None


def test_a_chart_of_all_gpus_stays_within_what_the_browser_draws_quickly(engine: Engine) -> None:
    """Every GPU is a line on one chart, so more GPUs get coarser buckets: the whole chart holds
    at most POINTS_PER_CHART points (the Device page's browser budget), a drone's single GPU
    keeps minute buckets over 24 h."""
    _device(engine, "eight", gpus=8)
    _device(engine, "drone", gpus=1)
    day = 24 * 3600 * NS
    with Session(engine) as s:
        eight = query.device_series(session=s, device="eight", since_ns=T0 - day, until_ns=T0)
        drone = query.device_series(session=s, device="drone", since_ns=T0 - day, until_ns=T0)
    assert 8 * (day // NS) / eight.step_s <= query.POINTS_PER_CHART
    assert drone.step_s == 60 and eight.step_s > drone.step_s


DAY = 86400 * NS


def test_day_rollups_equal_the_raw_aggregates_and_serve_long_reads(engine: Engine) -> None:
    """Three days and a bit: day rows (UTC midnights) made from hour rows give the same
    buckets, percentiles and whole-window figures as the raw rows they summarise."""
    d = _device(engine, "srv")
    start = T0 - 3 * DAY - 5 * 3600 * NS - 17 * NS  # a partial first day, hour and minute
    _samples(engine, d, start, T0, seed=7, every_s=60)
    with Session(engine) as s:
        before = query.device_series(session=s, device="srv", since_ns=start, until_ns=T0, step_s=86400)
        whole_before = query.compare_groups(
            session=s, groups={"g": ["srv"]}, since_ns=start, until_ns=T0, operation="infer"
        )[0]
    assert before.sources == ("raw",)
    report = RollupJob(engine, settle_s=0).run_once(T0)
    assert report.rows[86400] > 0
    with engine.connect() as conn:
        days = conn.execute(
            select(gpu_rollups.c.bucket_ns).where(gpu_rollups.c.device_id == d, gpu_rollups.c.step_s == 86400)
        ).scalars().all()
    assert days and all(b % DAY == 0 for b in days), "day buckets start at midnight UTC"
    assert max(days) + DAY <= T0, "only whole days the hours below them finished"
    with Session(engine) as s:
        after = query.device_series(session=s, device="srv", since_ns=start, until_ns=T0, step_s=86400)
        whole_after = query.compare_groups(
            session=s, groups={"g": ["srv"]}, since_ns=start, until_ns=T0, operation="infer"
        )[0]
    assert after.sources[0] == "day"
    _assert_same(before.gpu, after.gpu, exact_deltas=False)
    _assert_same(before.host, after.host, exact_deltas=False)
    assert [x.count for x in before.latency] == [x.count for x in after.latency]
    assert [x.p99_ms for x in before.latency] == [x.p99_ms for x in after.latency]
    assert whole_after.latency is not None and whole_before.latency is not None
    assert whole_after.latency.count == whole_before.latency.count
    assert whole_after.latency.p99_ms == whole_before.latency.p99_ms
    for f in ("util_avg", "power_per_gpu_w", "temp_avg_c", "temp_max_c", "memory_used_per_gpu_bytes"):
        assert getattr(whole_after, f) == pytest.approx(getattr(whole_before, f), rel=1e-9), f


def test_a_month_comparison_steps_by_days_from_day_rollups(engine: Engine) -> None:
    """The Compare page's p99 over a month: a point a day, each the merged histograms of the
    day's hour rows (or minutes and raw at the edges): the same percentiles as from raw."""
    assert comparison_step(30 * DAY) == 86400
    assert comparison_step(7 * DAY) < 86400, "a week keeps finer points"
    a, b = _device(engine, "a", gpus=1), _device(engine, "b", gpus=1)
    since = T0 - 25 * DAY
    _samples(engine, a, since, T0, seed=8, every_s=600)
    _samples(engine, b, since + 3 * DAY, T0, seed=9, every_s=600)

    def p99s() -> list[list[tuple[int, int, float | None]]]:
        with Session(engine) as s:
            out = query.group_latency_series(
                session=s, groups={"one": ["a"], "both": ["a", "b"]}, operation="infer", since_ns=since, until_ns=T0
            )
        series = [g for g in out.values() if g is not None]
        assert len(series) == 2
        return [list(zip(g.ts_ns, g.count, g.p99_ms)) for g in series]

    raw = p99s()
    RollupJob(engine, settle_s=0).run_once(T0)
    rolled = p99s()
    assert rolled == raw and all(len(g) >= 25 for g in raw)
    assert all(t % DAY == 0 for g in raw for t, _n, _p in g)
    assert raw[0] != raw[1], "the second device changes the merged percentiles"


def test_day_rows_added_later_start_at_the_oldest_hour_rollup(engine: Engine) -> None:
    """A database whose raw tier expired long ago but kept its hour rollups (one from before day
    rollups existed): day rows are made for those old days too, from the hours."""
    d = _device(engine, "old")
    start = T0 - 4 * DAY
    _samples(engine, d, start, T0, seed=10, every_s=120)
    first = RollupJob(engine, settle_s=0)
    first.run_once(T0)
    first.release()

    def day_rows() -> list[tuple]:
        with engine.connect() as conn:
            return [
                tuple(r)
                for r in conn.execute(
                    select(gpu_rollups)
                    .where(gpu_rollups.c.device_id == d, gpu_rollups.c.step_s == 86400)
                    .order_by(gpu_rollups.c.bucket_ns, gpu_rollups.c.gpu_index)
                )
            ]

    made = day_rows()
    assert len(made) >= 2 * 3
    with engine.begin() as conn:  # as before day rollups: none, no mark; raw kept for a day only
        conn.execute(gpu_rollups.delete().where(gpu_rollups.c.step_s == 86400))
        for t in (gpu_rollups, host_rollups, latency_rollups):
            conn.execute(t.delete().where(t.c.step_s == 86400))
        conn.execute(rollup_progress.delete().where(rollup_progress.c.step_s == 86400))
        conn.execute(gpu_samples.delete().where(gpu_samples.c.ts_ns < T0 - DAY))
        conn.execute(host_samples.delete().where(host_samples.c.ts_ns < T0 - DAY))
    assert RollupJob(engine, settle_s=0).run_once(T0 + 60 * NS).ran
    assert day_rows() == made
