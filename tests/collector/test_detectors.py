"""Detectors on stored data (rows written by hand, on SQLite and PostgreSQL): each detector opens,
refreshes and resolves its incident; passes are incremental; two jobs on one database detect
exactly once; event incidents resolve after the quiet period and get hints."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, insert, select, update

from fleetscope.collector.jobs.detectors import DETECTOR_NAMES, DetectorJob, DetectorSettings, SloObjective
from fleetscope.collector.storage import incident_lifecycle as lifecycle
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.rollup_schema import latency_rollups, rollup_progress
from fleetscope.collector.storage.schema import (
    Device,
    Incident,
    detector_progress,
    gpu_samples,
    gpu_state,
    host_samples,
    ingested_batches,
    latency_histograms,
    metric_points,
)
from fleetscope.proto import buckets as bucket_math
from fleetscope.proto.vocabulary import THROTTLE_REASON_BITS

NS = 10**9
MIB = 1 << 20
T0 = 1_800_000_000 * NS  # aligned to every window used here
IC = Incident.__table__.c


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    e = make_engine(db_url)
    yield e
    e.dispose()


LIVE = T0 + 10**6 * NS  # a device that keeps sending (no agent_offline in tests about something else)


def _device(engine: Engine, name: str = "dev-1", *, kind: str = "server", last_seen: int = LIVE,
            labels: dict | None = None, inventory: dict | None = None, counters: dict | None = None) -> int:
    with engine.begin() as conn:
        res = conn.execute(insert(Device.__table__).values(
            agent_id=f"agent-{name}", name=name, kind=kind, first_seen_ns=T0 - 3600 * NS, last_seen_ns=last_seen,
            labels=labels or {}, inventory=inventory or {}, capabilities=[], counters=counters or {}))
        return int(res.inserted_primary_key[0])


def _rows(engine: Engine, table, rows: list[dict]) -> None:  # type: ignore[no-untyped-def]
    with engine.begin() as conn:
        conn.execute(insert(table), rows)


def _seen(engine: Engine, device_id: int, ts: int) -> None:
    with engine.begin() as conn:
        conn.execute(update(Device.__table__).where(Device.__table__.c.id == device_id).values(last_seen_ns=ts))


def _incidents(engine: Engine, kind: str | None = None) -> list:
    with engine.connect() as conn:
        q = select(Incident.__table__).order_by(IC.id)
        if kind:
            q = q.where(IC.kind == kind)
        return list(conn.execute(q))


def _job(engine: Engine, owner: str = "a", **settings) -> DetectorJob:  # type: ignore[no-untyped-def]
    # A whole first window per pass, whatever the machine's load: a test about the catch-up
    # budget sets its own (a pass on a busy CI box can outlast the default 0.25 s by itself).
    base = {"settle_s": 0.0, "lookback_s": 3600.0, "catchup_budget_s": 3600.0}
    base.update(settings)
    return DetectorJob(engine, settings=DetectorSettings(**base), owner=owner, discover_s=0.0)


def _hist(device_id: int, ts: int, name: str, values_ms: list[float], step_ns: int = NS) -> dict:
    buckets: dict[int, int] = {}
    for v in values_ms:
        i = bucket_math.bucket_index(v * 1e6)
        buckets[i] = buckets.get(i, 0) + 1
    return {"device_id": device_id, "start_ns": ts, "end_ns": ts + step_ns, "name": name, "labels": "{}",
            "count": len(values_ms), "sum_ns": int(sum(values_ms) * 1e6), "errors": 0, "zero_count": 0,
            "buckets": json.dumps({str(k): v for k, v in buckets.items()})}


# ------------------------------------------------------------------------------ agent offline


def test_agent_offline_opens_after_the_threshold_and_resolves_with_the_gap_and_replay(engine: Engine) -> None:
    d = _device(engine, last_seen=T0)
    _rows(engine, host_samples, [{"device_id": d, "ts_ns": T0 - k * NS, "cpu_percent": 5.0} for k in range(10)])
    job = _job(engine)
    job.run_once(T0 + 9 * NS)
    assert _incidents(engine) == [], "under the 10 s minimum (3 x a 1 s interval is less)"
    job.run_once(T0 + 11 * NS)
    (inc,) = _incidents(engine, "agent_offline")
    assert inc.state == "open" and inc.origin == "detector" and inc.ts_ns == T0 and inc.facts["threshold_s"] == 10
    job.run_once(T0 + 20 * NS)
    (inc,) = _incidents(engine, "agent_offline")
    assert inc.state == "open" and inc.last_seen_ns == T0 + 20 * NS and inc.count == 1, "refreshed, not repeated"
    # It comes back at +30 s and its spool replays what it sampled during the gap.
    _rows(engine, host_samples, [{"device_id": d, "ts_ns": T0 + k * NS, "cpu_percent": 5.0} for k in range(1, 31)])
    _rows(engine, ingested_batches, [{"agent_id": "agent-dev-1", "boot_id": "b", "seq": k, "received_ns": T0 + (30 + k) * NS,
                                      "rows": 10, "device_id": d} for k in range(3)])
    _seen(engine, d, T0 + 32 * NS)
    job.run_once(T0 + 33 * NS)
    (inc,) = _incidents(engine, "agent_offline")
    assert inc.state == "resolved" and inc.ended_ns == T0 + 30 * NS
    assert inc.facts["gap_s"] == 30.0 and inc.facts["replayed_rows"] == 29 and inc.facts["batches_since_back"] == 3
    assert inc.updated_ns == T0 + 33 * NS


def test_offline_after_overrides_the_threshold_and_the_interval_is_the_devices_own(engine: Engine) -> None:
    slow = _device(engine, "slow", last_seen=T0, inventory={"batch_interval_s": 5.0})  # as its agent registered
    fast = _device(engine, "fast", last_seen=T0)  # an agent too old to say: 1 s
    job = _job(engine)
    job.run_once(T0 + 12 * NS)
    assert [i.device_id for i in _incidents(engine)] == [fast], "5 s batches: 3 intervals = 15 s allowed"
    job.run_once(T0 + 16 * NS)
    assert sorted(i.device_id for i in _incidents(engine)) == [slow, fast]
    other = _device(engine, "other", last_seen=T0 + 10 * NS)
    assert not _job(engine, "b", offline_after_s=3.0).run_once(T0 + 17 * NS).ran, "b waits for a's lease"
    job.release()
    _job(engine, "b", offline_after_s=3.0).run_once(T0 + 17 * NS)
    assert other in [i.device_id for i in _incidents(engine)], "silent 7 s, allowed 3 s"


def test_one_offline_threshold_for_the_detector_and_every_reader_and_a_clean_stop_is_no_incident(engine: Engine) -> None:
    """The detector, `fleetscope devices` (list_devices), `status` (fleet_health) and the exposition
    (latest_readings) call a device offline at the same moment: 3 of its own batch intervals, at
    least 10 s, or the detector's threshold set outright, which every reader takes from its pass."""
    from sqlalchemy.orm import Session

    from fleetscope.collector.query import fleet_health, latest_readings, list_devices

    def readers(now_ns: int) -> dict[str, tuple[bool, ...]]:
        with Session(engine) as s:
            listed = {d.name: (d.online, d.stopped) for d in list_devices(session=s, now_ns=now_ns)}
            health = fleet_health(session=s, now_ns=now_ns)
            latest = {d.name: d.state for d in latest_readings(session=s, now_ns=now_ns, incidents=False).devices}
        return {n: (*listed[n], n in health.offline, n in health.stopped, latest[n]) for n in listed}

    slow = _device(engine, "slow", last_seen=T0, inventory={"batch_interval_s": 5.0})
    _device(engine, "landed", last_seen=T0, counters={"stopped": True, "spool_batches": 0})
    job = _job(engine)
    job.run_once(T0 + 14 * NS)
    assert _incidents(engine) == []
    assert readers(T0 + 14 * NS) == {"slow": (True, False, False, False, "online"),
                                     "landed": (False, True, False, True, "stopped")}
    job.run_once(T0 + 16 * NS)
    assert [(i.device_id, i.facts["threshold_s"]) for i in _incidents(engine)] == [(slow, 15.0)]
    assert readers(T0 + 16 * NS)["slow"] == (False, False, True, False, "offline")
    job.release()
    # A threshold set outright (--offline-after) is the readers' too, once the detector ran with it.
    _job(engine, "b", offline_after_s=60.0).run_once(T0 + 17 * NS)
    assert readers(T0 + 30 * NS)["slow"] == (True, False, False, False, "online")
    assert len(_incidents(engine, "agent_offline")) == 1, "a clean stop never opens one"


# -------------------------------------------------------------------------------- latency


def test_latency_slo_breach_opens_and_recovery_resolves(engine: Engine) -> None:
    d = _device(engine, labels={"site": "field"})
    other = _device(engine, "lab-1", labels={"site": "lab"})
    slo = SloObjective(operation="infer", p99_ms=50.0, window_s=10.0, labels={"site": "field"})
    job = _job(engine, slos=(slo,), slo_min_count=20)
    rows = [_hist(dev, T0 + k * NS, "infer", [20.0] * 10) for k in range(10) for dev in (d, other)]
    rows += [_hist(dev, T0 + (10 + k) * NS, "infer", [20.0] * 8 + [90.0] * 2) for k in range(10) for dev in (d, other)]
    _rows(engine, latency_histograms, rows)
    job.run_once(T0 + 10 * NS)
    assert _incidents(engine) == []
    job.run_once(T0 + 20 * NS)
    (inc,) = _incidents(engine, "latency_slo")
    assert inc.device_id == d and inc.state == "open" and inc.group_key == "infer", "only the field device"
    assert inc.facts["p99_ms"] > 80 and inc.facts["objective_p99_ms"] == 50.0 and inc.facts["count"] == 100
    assert inc.ts_ns == T0 + 10 * NS
    _rows(engine, latency_histograms, [_hist(d, T0 + (20 + k) * NS, "infer", [20.0] * 10) for k in range(10)])
    job.run_once(T0 + 30 * NS)
    (inc,) = _incidents(engine, "latency_slo")
    assert inc.state == "resolved" and inc.ended_ns == T0 + 20 * NS and inc.facts["resolved_p99_ms"] < 50


def test_latency_regression_without_configuration(engine: Engine) -> None:
    d = _device(engine)
    job = _job(engine, regression_window_s=10.0, regression_baseline_s=60.0, regression_min_count=50)
    # 60 s of baseline at 10 ms, then a window at 25 ms: 2.5x.
    rows = [_hist(d, T0 + k * NS, "infer", [10.0] * 5) for k in range(60)]
    rows += [_hist(d, T0 + (60 + k) * NS, "infer", [25.0] * 5) for k in range(10)]
    rows += [_hist(d, T0 + k * NS, "noise", [10.0]) for k in range(70)]  # too few calls to judge
    _rows(engine, latency_histograms, rows)
    for t in range(10, 71, 10):
        job.run_once(T0 + t * NS)
    (inc,) = _incidents(engine)
    assert inc.kind == "latency_regression" and inc.group_key == "infer" and inc.state == "open"
    assert 2.2 < inc.facts["ratio"] < 2.8 and inc.facts["baseline_count"] == 300
    assert any("2." in h["text"] and "baseline" in h["text"] for h in [{"text": inc.title}])
    # Back to normal: the regressed window stayed out of the baseline, so it resolves.
    _rows(engine, latency_histograms, [_hist(d, T0 + (70 + k) * NS, "infer", [10.0] * 5) for k in range(10)])
    job.run_once(T0 + 80 * NS)
    (inc,) = _incidents(engine)
    assert inc.state == "resolved" and inc.ended_ns == T0 + 70 * NS


def test_latency_regression_baseline_is_read_from_the_minute_rollups_at_start(engine: Engine) -> None:
    """A new database (no marks, no baseline in memory): the hour before the first window is read
    from the minute rollups, so the first window that doubles is a regression at once."""
    d = _device(engine)
    minute = 60 * NS

    def rollup(bucket: int, ms: float, n: int) -> dict:
        h = _hist(d, bucket, "infer", [ms] * n)
        return {"device_id": d, "step_s": 60, "bucket_ns": bucket, "name": "infer", "labels": "{}", "count": n,
                "sum_ns": h["sum_ns"], "errors": 0, "zero_count": 0, "window_ns": minute, "buckets": h["buckets"]}

    _rows(engine, latency_rollups, [rollup(T0 - k * minute, 10.0, 200) for k in range(1, 61)])
    _rows(engine, rollup_progress, [{"device_id": d, "step_s": 60, "rolled_until_ns": T0}])
    _rows(engine, latency_histograms, [_hist(d, T0 + k * NS, "infer", [30.0] * 5) for k in range(60)])
    job = _job(engine, regression_window_s=60.0, regression_baseline_s=3600.0, rollup_wait_s=0.0)
    job.run_once(T0 + 60 * NS)
    (inc,) = _incidents(engine, "latency_regression")
    assert inc.state == "open" and inc.ts_ns == T0 and inc.facts["baseline_count"] == 12000
    assert inc.facts["baseline_p99_ms"] < 11 and inc.facts["ratio"] > 2.5


def test_a_new_holder_reads_the_baseline_back_from_history(engine: Engine) -> None:
    """The baseline lives in the holder's memory: a takeover reads it back from the stored
    histograms (no rollups here), and windows that were regressed stay out of it."""
    d = _device(engine)
    settings = {"regression_window_s": 10.0, "regression_baseline_s": 60.0, "regression_min_count": 50}
    rows = [_hist(d, T0 + k * NS, "infer", [10.0] * 5) for k in range(60)]
    rows += [_hist(d, T0 + (60 + k) * NS, "infer", [25.0] * 5) for k in range(10)]
    _rows(engine, latency_histograms, rows)
    a = _job(engine, "a", **settings)
    for t in range(10, 71, 10):
        a.run_once(T0 + t * NS)
    (inc,) = _incidents(engine, "latency_regression")
    assert inc.state == "open" and inc.ts_ns == T0 + 60 * NS
    a.flush()
    a.release()
    # Still slow: b's baseline (read back) leaves the regressed window out, so it stays open.
    _rows(engine, latency_histograms, [_hist(d, T0 + (70 + k) * NS, "infer", [25.0] * 5) for k in range(10)])
    b = _job(engine, "b", **settings)
    b.run_once(T0 + 80 * NS)
    (inc,) = _incidents(engine, "latency_regression")
    assert inc.state == "open" and inc.facts["window_start_ns"] == T0 + 70 * NS and inc.facts["baseline_count"] == 250
    _rows(engine, latency_histograms, [_hist(d, T0 + (80 + k) * NS, "infer", [10.0] * 5) for k in range(10)])
    b.run_once(T0 + 90 * NS)
    (inc,) = _incidents(engine, "latency_regression")
    assert inc.state == "resolved" and inc.ended_ns == T0 + 80 * NS


# ----------------------------------------------------------------------------- throttling


def test_server_throttling_sustained_with_clock_loss_and_hint(engine: Engine) -> None:
    d = _device(engine)
    thermal = THROTTLE_REASON_BITS["sw_thermal_slowdown"]
    _rows(engine, gpu_state, [{"device_id": d, "ts_ns": T0, "gpu_index": 0, "sm_clock_max_mhz": 1500.0,
                               "memory_total_bytes": 16e9}])
    rows = [{"device_id": d, "ts_ns": T0 + k * NS, "gpu_index": 0, "util_gpu_percent": 99.0, "temp_c": 80.0 + k / 10,
             "sm_clock_mhz": 1000.0, "throttle_reasons": float(thermal)} for k in range(70)]
    rows += [{"device_id": d, "ts_ns": T0 + k * NS, "gpu_index": 1, "util_gpu_percent": 99.0, "temp_c": 60.0,
              "sm_clock_mhz": 1500.0, "throttle_reasons": 0.0} for k in range(70)]
    _rows(engine, gpu_samples, rows)
    job = _job(engine, throttle_min_s=60.0, throttle_clear_s=10.0)
    job.run_once(T0 + 30 * NS)
    assert _incidents(engine) == [], "30 s is not sustained yet"
    job.run_once(T0 + 70 * NS)
    (inc,) = _incidents(engine, "gpu_throttling")
    assert inc.gpu_index == 0 and inc.state == "open" and inc.ts_ns == T0
    assert inc.facts["clock_loss_percent"] == pytest.approx(33.3, abs=0.1) and inc.facts["cause"] == "thermal"
    assert inc.facts["reasons"] == "sw_thermal_slowdown" and inc.facts["peak_temp_c"] == pytest.approx(86.9)
    assert "throttled at 86 °C with SM clock 33 % below max (1000 of 1500 MHz)" == inc.hints[0]["text"], "as it opened"
    _rows(engine, gpu_samples, [{"device_id": d, "ts_ns": T0 + k * NS, "gpu_index": 0, "util_gpu_percent": 99.0,
                                 "temp_c": 70.0, "sm_clock_mhz": 1500.0, "throttle_reasons": 0.0} for k in range(70, 85)])
    job.run_once(T0 + 85 * NS)
    (inc,) = _incidents(engine, "gpu_throttling")
    assert inc.state == "resolved" and inc.ended_ns == T0 + 69 * NS and inc.facts["duration_s"] == 69.0


def test_jetson_throttling_from_capped_clock_while_hot(engine: Engine) -> None:
    d = _device(engine, kind="jetson")
    rows = []
    for k in range(40):
        hot = k >= 10
        rows.append({"device_id": d, "ts_ns": T0 + k * NS, "gpu_index": 0, "util_gpu_percent": 99.0,
                     "temp_c": 60.0 + (k - 10) if hot else 55.0, "sm_clock_mhz": 624.0 if hot else 1300.0})
    _rows(engine, gpu_samples, rows)
    _job(engine, throttle_min_s=5.0).run_once(T0 + 40 * NS)
    (inc,) = _incidents(engine, "gpu_throttling")
    assert inc.facts["sm_clock_max_mhz"] == 1300.0 and inc.facts["clock_loss_percent"] == 52.0
    assert inc.ts_ns == T0 + 30 * NS, "hot (80 °C) from the 30th second: the run starts there"


def _cores(mhz: float, load: float = 80.0, n: int = 4) -> str:
    return json.dumps([[load, mhz]] * n)


def test_jetson_cpu_frequency_cap_while_hot_is_throttling(engine: Engine) -> None:
    """tegrastats' per-core frequencies (host_samples.cpu_cores) capped while busy and hot: hot by
    the CPU sensor (jetson.temp_c, sensor CPU) on one drone, by the GPU temperature on another;
    a drone capped but idle is not throttled (an idle CPU clocks down)."""
    by_sensor, by_gpu, idle = (_device(engine, n, kind="jetson") for n in ("drone-1", "drone-2", "drone-3"))
    host, gpu, points = [], [], []
    for k in range(40):
        capped = k >= 10
        for d in (by_sensor, by_gpu, idle):
            load = 20.0 if d == idle else 80.0
            host.append({"device_id": d, "ts_ns": T0 + k * NS, "cpu_percent": load,
                         "cpu_cores": _cores(1000.0 if capped else 1900.0, load)})
            hot_gpu = d == by_gpu and capped
            gpu.append({"device_id": d, "ts_ns": T0 + k * NS, "gpu_index": 0, "util_gpu_percent": 10.0,
                        "temp_c": 86.0 if hot_gpu else 60.0, "sm_clock_mhz": 1100.0})
            points.append({"device_id": d, "ts_ns": T0 + k * NS, "name": "jetson.temp_c", "labels": '{"sensor":"CPU"}',
                           "value": 85.0 if capped and d != by_gpu else 55.0})
    _rows(engine, host_samples, host)
    _rows(engine, gpu_samples, gpu)
    _rows(engine, metric_points, points)
    job = _job(engine, throttle_min_s=5.0, throttle_clear_s=5.0)
    job.run_once(T0 + 40 * NS)
    found = {i.device_id: i for i in _incidents(engine, "gpu_throttling")}
    assert set(found) == {by_sensor, by_gpu}, "the idle drone is capped but not busy"
    inc = found[by_sensor]
    assert inc.group_key == "cpu" and inc.gpu_index is None and inc.ts_ns == T0 + 10 * NS
    assert inc.facts["component"] == "cpu" and inc.facts["cpu_clock_max_mhz"] == 1900.0
    assert inc.facts["cpu_clock_mhz"] == 1000.0 and inc.facts["clock_loss_percent"] == 47.4
    assert inc.facts["peak_temp_c"] == 85.0 and inc.title.startswith("CPU on drone-1 thermally throttled")
    assert inc.hints[0]["text"] == "throttled at 85 °C with CPU clock 47 % below max (1000 of 1900 MHz)"
    assert found[by_gpu].facts["peak_temp_c"] == 86.0
    # Uncapped again: resolved once clear for throttle_clear_s.
    _rows(engine, host_samples, [{"device_id": by_sensor, "ts_ns": T0 + k * NS, "cpu_percent": 80.0,
                                  "cpu_cores": _cores(1900.0)} for k in range(40, 50)])
    job.run_once(T0 + 50 * NS)
    inc = {i.device_id: i for i in _incidents(engine, "gpu_throttling")}[by_sensor]
    assert inc.state == "resolved" and inc.ended_ns == T0 + 39 * NS


def test_catch_up_is_spread_over_passes_without_missing_a_device(engine: Engine, monkeypatch) -> None:
    """With no catch-up budget, a pass reads one chunk of first windows (one device here): the
    devices are caught up over passes, and each one's throttling is still found, from its start."""
    from fleetscope.collector.jobs.detectors import _common

    monkeypatch.setattr(_common, "CATCHUP_CHUNK", 1)
    thermal = THROTTLE_REASON_BITS["sw_thermal_slowdown"]
    ids = [_device(engine, f"gpu-{k}") for k in range(3)]
    _rows(engine, gpu_samples, [{"device_id": d, "ts_ns": T0 + k * NS, "gpu_index": 0, "util_gpu_percent": 99.0,
                                 "temp_c": 88.0, "sm_clock_mhz": 1000.0, "throttle_reasons": float(thermal)}
                                for d in ids for k in range(70)])
    others = frozenset(n for n in DETECTOR_NAMES if n != "gpu_throttling")
    job = _job(engine, throttle_min_s=60.0, catchup_budget_s=0.0, disabled=others)
    opened = []
    for t in (70, 71, 72):
        job.run_once(T0 + t * NS)
        opened.append(sorted(i.device_id for i in _incidents(engine, "gpu_throttling")))
    assert opened == [ids[:1], ids[:2], ids], "one device more each pass"
    assert all(i.ts_ns == T0 for i in _incidents(engine, "gpu_throttling")), "each from the start of its run"


# -------------------------------------------------------------------------- starved, growth


def test_gpu_starved_by_data_wait(engine: Engine) -> None:
    d = _device(engine)
    _rows(engine, gpu_samples, [{"device_id": d, "ts_ns": T0 + k * NS, "gpu_index": 0, "util_gpu_percent": 12.0}
                                for k in range(60)])
    _rows(engine, metric_points, [{"device_id": d, "ts_ns": T0 + k * NS, "name": "train.data_wait_ratio", "value": 0.8,
                                   "labels": "{}"} for k in range(60)])
    _rows(engine, host_samples, [{"device_id": d, "ts_ns": T0 + k * NS, "cpu_percent": 30.0} for k in range(60)])
    _job(engine, starved_window_s=40.0).run_once(T0 + 60 * NS)
    (inc,) = _incidents(engine, "gpu_starved")
    assert inc.gpu_index == 0 and inc.facts["cause"] == "data_wait" and inc.facts["data_wait_ratio"] == 0.8
    assert inc.facts["util_percent"] == 12.0


def test_memory_growth_of_a_gpu_and_a_process_with_slope_and_time_to_exhaustion(engine: Engine) -> None:
    d = _device(engine)
    _rows(engine, gpu_state, [{"device_id": d, "ts_ns": T0, "gpu_index": 0, "memory_total_bytes": float(16 << 30)}])
    _rows(engine, gpu_samples, [{"device_id": d, "ts_ns": T0 + k * NS, "gpu_index": 0,
                                 "memory_used_bytes": float((1 << 30) + k * 2 * MIB)} for k in range(120)])
    host = []
    for k in range(120):
        procs = [{"pid": 4242, "name": "leaky", "rss_bytes": 100 * MIB + k * MIB},
                 {"pid": 7, "name": "steady", "rss_bytes": 500 * MIB}]
        host.append({"device_id": d, "ts_ns": T0 + k * NS, "mem_used_bytes": float(8 << 30),
                     "mem_total_bytes": float(32 << 30), "mem_available_bytes": float(24 << 30),
                     "top_processes": json.dumps(procs) if k % 5 == 0 else None})
    _rows(engine, host_samples, host)
    _job(engine, growth_window_s=100.0, catchup_budget_s=60.0).run_once(T0 + 120 * NS)  # the slopes, not the budget: whole in one pass
    by_group = {i.group_key: i for i in _incidents(engine, "memory_growth")}
    assert set(by_group) == {"gpu", "proc:4242"}, "the steady process and host memory are not growing"
    gpu = by_group["gpu"]
    assert gpu.facts["slope_mib_per_min"] == pytest.approx(120, rel=0.01) and gpu.facts["r2"] > 0.99
    left_min = (16 * 1024 - 1024 - 119 * 2) / 120
    assert gpu.facts["time_to_exhaustion_s"] == pytest.approx(left_min * 60, rel=0.02)
    proc = by_group["proc:4242"]
    assert proc.process_name == "leaky" and proc.pid == 4242 and proc.facts["slope_mib_per_min"] == pytest.approx(60, rel=0.02)


# ------------------------------------------------------------------------ OOMs, lifecycle


def _oom(engine: Engine, d: int, ts: int, pid: int, name: str = "python", kind: str = "cuda_oom",
         received_ns: int | None = None) -> None:
    _rows(engine, Incident.__table__, [{
        "device_id": d, "ts_ns": ts, "received_ns": ts if received_ns is None else received_ns, "kind": kind, "severity": "error", "title": "OOM",
        "facts": {"pid": pid, "process_name": name}, "source": "sdk", "excerpt": "", "context": {},
        "pid": pid, "process_name": name, "last_seen_ns": ts, "updated_ns": ts, "hints": []}])


def test_repeated_oom_after_a_restart_names_both(engine: Engine) -> None:
    d = _device(engine)
    job = _job(engine, quiet_period_s=3600.0)
    _oom(engine, d, T0, 100)
    _oom(engine, d, T0 + NS, 100)  # the same process again: not a restart
    job.run_once(T0 + 2 * NS)
    assert _incidents(engine, "repeated_oom") == []
    _oom(engine, d, T0 + 120 * NS, 200)
    _oom(engine, d, T0 + 130 * NS, 300, name="other")
    job.run_once(T0 + 131 * NS)
    (inc,) = _incidents(engine, "repeated_oom")
    assert inc.facts["first_pid"] == 100 and inc.facts["pid"] == 200 and inc.process_name == "python"
    assert inc.state == "open" and inc.group_key == "proc:python" and inc.ts_ns == T0
    job.run_once(T0 + 132 * NS)
    assert len(_incidents(engine, "repeated_oom")) == 1, "read once"


def test_quiet_event_incidents_resolve_and_get_hints(engine: Engine) -> None:
    d = _device(engine)
    # Host CPU saturated and GPU memory climbing before the OOM.
    _rows(engine, host_samples, [{"device_id": d, "ts_ns": T0 + k * NS, "cpu_percent": 97.0} for k in range(600)])
    _rows(engine, gpu_samples, [{"device_id": d, "ts_ns": T0 + k * NS, "gpu_index": 0,
                                 "memory_used_bytes": float((1 << 30) + k * 2 * MIB)} for k in range(600)])
    _oom(engine, d, T0 + 600 * NS, 100)
    # (the growth detector is off: the hint comes from the samples, not from its incident)
    job = _job(engine, quiet_period_s=60.0, growth_window_s=600.0, disabled=frozenset({"memory_growth"}))
    job.run_once(T0 + 601 * NS)
    (oom,) = _incidents(engine, "cuda_oom")
    assert oom.state == "open"
    texts = [h["text"] for h in oom.hints]
    assert any("host CPU saturated (97 %" in t for t in texts), texts
    assert any("10 min after GPU 0 memory began growing at 120 MiB/min" in t for t in texts), texts
    job.run_once(T0 + 661 * NS)
    (oom,) = _incidents(engine, "cuda_oom")
    assert oom.state == "resolved" and oom.ended_ns == T0 + 600 * NS and oom.updated_ns == T0 + 661 * NS


def test_an_hours_old_oom_that_lands_before_the_first_pass_gets_its_hints(engine: Engine) -> None:
    d = _device(engine)
    _rows(engine, host_samples, [{"device_id": d, "ts_ns": T0 + k * NS, "cpu_percent": 97.0} for k in range(600)])
    first_pass = T0 + 600 * NS + 2 * 3600 * NS  # a drone's backlog: the OOM is two hours old when it lands
    _oom(engine, d, T0 + 600 * NS, 100, received_ns=first_pass - NS)
    job = _job(engine, quiet_period_s=60.0, lookback_s=900.0, disabled=frozenset({"memory_growth"}))
    job.run_once(first_pass)
    (oom,) = _incidents(engine, "cuda_oom")
    assert any("host CPU saturated (97 %" in h["text"] for h in oom.hints), oom.hints


def test_lifecycle_open_refresh_resolve_keeps_one_open_per_key(engine: Engine) -> None:
    d = _device(engine)
    key = lifecycle.DerivedKey(d, "gpu_starved", 0, "")
    with engine.begin() as conn:
        a, new_a = lifecycle.open_incident(conn, key, now_ns=T0, started_ns=T0, severity="warning", title="t", facts={"x": 1})
        b, new_b = lifecycle.open_incident(conn, key, now_ns=T0 + NS, started_ns=T0, severity="warning", title="t2",
                                           facts={"x": 2}, last_seen_ns=T0 + NS)
    assert a == b and new_a and not new_b
    (inc,) = _incidents(engine)
    assert inc.facts == {"x": 2} and inc.count == 1 and inc.last_seen_ns == T0 + NS and inc.updated_ns == T0 + NS
    with engine.begin() as conn:
        assert lifecycle.resolve_incident(conn, a, now_ns=T0 + 5 * NS, ended_ns=T0 + 4 * NS, facts={"x": 3})
        assert not lifecycle.resolve_incident(conn, a, now_ns=T0 + 6 * NS, ended_ns=T0 + 6 * NS)
        c, new_c = lifecycle.open_incident(conn, key, now_ns=T0 + 7 * NS, started_ns=T0 + 7 * NS, severity="warning",
                                           title="again", facts={})
    assert new_c and c != a


# ------------------------------------------------------------------- lease, exactly once


def test_two_jobs_on_one_database_detect_exactly_once_and_passes_are_incremental(engine: Engine) -> None:
    d = _device(engine, last_seen=T0)
    a, b = _job(engine, "a"), _job(engine, "b")
    ra, rb = a.run_once(T0 + 20 * NS), b.run_once(T0 + 20 * NS)
    assert ra.ran and not rb.ran and rb.holder == "a"
    assert len(_incidents(engine, "agent_offline")) == 1 and ra.opened == 1
    a.release()
    rb = b.run_once(T0 + 21 * NS)
    assert rb.ran and rb.opened == 0 and len(_incidents(engine)) == 1, "b takes over and sees the open incident"
    with engine.connect() as conn:
        marks = {(r.detector, r.device_id, r.key) for r in conn.execute(select(detector_progress))}
    assert ("lifecycle", 0, "") in marks and ("repeated_oom", 0, "") in marks
    # A throttling sample read once is never read again: the mark is its timestamp.
    _rows(engine, gpu_samples, [{"device_id": d, "ts_ns": T0 + 22 * NS, "gpu_index": 0, "util_gpu_percent": 50.0}])
    _seen(engine, d, T0 + 22 * NS)
    b.run_once(T0 + 23 * NS)
    b.flush()  # marks are written with incident changes, every persist_s, and on stop
    with engine.connect() as conn:
        until = conn.execute(select(detector_progress.c.until_ns).where(
            detector_progress.c.detector == "gpu_throttling", detector_progress.c.device_id == d)).scalar()
    assert until == T0 + 22 * NS


def test_settings_may_be_a_callable_read_each_pass(engine: Engine) -> None:
    _device(engine, last_seen=T0)
    current = {"s": DetectorSettings(offline_after_s=100.0)}
    job = DetectorJob(engine, settings=lambda: current["s"], owner="a")
    job.run_once(T0 + 20 * NS)
    assert _incidents(engine) == []
    current["s"] = DetectorSettings(offline_after_s=5.0)
    job.run_once(T0 + 21 * NS)
    assert len(_incidents(engine, "agent_offline")) == 1


def test_settings_refuse_what_cannot_work() -> None:
    with pytest.raises(ValueError, match="regression_factor"):
        DetectorSettings(regression_factor=0.5)
    with pytest.raises(ValueError, match="disabled"):
        DetectorSettings(disabled=frozenset({"nope"}))
    with pytest.raises(ValueError, match="p99_ms"):
        SloObjective(operation="infer", p99_ms=0)
