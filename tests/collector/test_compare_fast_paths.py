"""The Compare page's fast paths give the answers of the slow ones.

Latency: bucket counts of many histograms are summed in numpy (``latency._bucket_sums``) rather
than row by row, and the comparison chart's step follows the rollup tiers. On random histograms
(several schemes, label sets, devices; raw rows rolled up into minute and hour rollups by the
real rollup job), every figure equals what merging the raw rows one by one, as the reader did
before, gives. GPUs: a device reinstalled in the window (a new agent id, same name) counts its
GPUs once.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import pytest
from sqlalchemy import Engine, insert, select
from sqlalchemy.orm import Session

from fleetscope.collector import query
from fleetscope.collector.jobs.rollup import RollupJob
from fleetscope.collector.query._common import floor_to
from fleetscope.collector.query.latency import _bucket_sums, _bucket_sums_by_row
from fleetscope.collector.query.planning import comparison_step
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.rollup_schema import latency_rollups
from fleetscope.collector.storage.schema import Device, gpu_samples, latency_histograms
from fleetscope.proto import exponential as ex

S = 10**9
H = 3600 * S


def _random_maps(rng: random.Random, n: int) -> list[dict[int, int]]:
    return [{rng.randint(-30, 1200): rng.randint(0, 10**9) for _ in range(rng.randint(0, 40))} for _ in range(n)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_bucket_sums_equal_row_by_row_sums(seed: int) -> None:
    rng = random.Random(seed)
    maps = _random_maps(rng, 3000)
    # Compact and spaced JSON, as different writers leave it; empty maps; negative indexes.
    texts = [json.dumps(m, separators=(",", ":")) if i % 3 else json.dumps(m, indent=i % 2 or None)
             for i, m in enumerate(maps)]
    slots = [rng.randint(0, 40) for _ in maps]
    fast = _bucket_sums(texts, slots)
    assert fast == _bucket_sums_by_row(texts, slots)
    expected: dict[tuple[int, int], int] = {}
    for m, s in zip(maps, slots):
        for i, c in m.items():
            expected[(s, i)] = expected.get((s, i), 0) + c
    assert {(s, i): c for s, i, c in fast} == expected


def test_bucket_sums_of_nothing_and_of_odd_json() -> None:
    assert _bucket_sums([], []) == [] and _bucket_sums(["{}", "{}"], [0, 1]) == []
    # Not plain integer JSON: the row-by-row path reads it.
    assert _bucket_sums(['{"3": 2}', '{"3": 1e0}'], [0, 0]) == [(0, 3, 3)]


def _device(engine: Engine, name: str, agent_id: str, first_seen: int, now: int) -> int:
    with engine.begin() as conn:
        res = conn.execute(insert(Device).values(
            agent_id=agent_id, name=name, kind="jetson", first_seen_ns=first_seen, last_seen_ns=now,
            labels={}, inventory={}, capabilities=[], counters={}))
        key = res.inserted_primary_key
        assert key is not None
        return int(key[0])


def _reference(rows: list[dict], ids: set[int], lo: int, hi: int, step_ns: int | None) -> dict[str, Any]:
    """The old reader: every row's JSON parsed and added to a dict of dicts, then read."""
    per: dict[int, list] = {}
    measured: dict[tuple[int, str], list[int]] = {}
    for r in rows:
        if r["device_id"] not in ids or not lo <= r["start_ns"] < hi:
            continue
        b = r["start_ns"] - r["start_ns"] % step_ns if step_ns else 0
        e = per.setdefault(b, [0, 0, 0, {}])
        e[0] += r["count"]
        e[1] += r["errors"]
        e[2] += r["zero_count"]
        ex.add(e[3], r["scheme"], {int(k): v for k, v in json.loads(r["buckets"]).items()})
        m = measured.setdefault((r["device_id"], r["labels"]), [0, 0])
        m[0] += r["count"]
        m[1] += r["end_ns"] - r["start_ns"]
    out = {}
    for b, (count, errors, zero, hist) in per.items():
        pcts = tuple(ex.quantile_of(hist, p, zero_count=zero) for p in (0.5, 0.9, 0.99))
        out[b] = (count, errors, *(None if v is None else v / 1e6 for v in pcts))
    qps = sum(c / (w / S) for c, w in measured.values() if w > 0)
    return {"buckets": out, "qps": qps}


def test_group_latency_and_compare_equal_the_row_by_row_reader(db_url: str) -> None:
    rng = random.Random(7)
    # Noon yesterday (UTC), not the wall clock: four hours back from just after midnight would span a
    # whole finished day and the rollup job would add a day tier the comparison below does not expect.
    now = floor_to(time.time_ns(), 24 * H) - 12 * H + 1234 * S
    t0 = floor_to(now, H) - 3 * H
    engine = make_engine(db_url)
    try:
        ids = {n: _device(engine, n, f"agent-{n}", t0 - H, now) for n in ("a1", "a2", "b1")}
        rows = []
        for d in ids.values():
            for k in range(0, int((now - 60 * S - t0) // S), 20):  # a histogram every 20 s
                if rng.random() < 0.15:
                    continue  # gaps
                scheme = rng.choice([0, 3, 4, 4])
                m = {str(rng.randint(300, 460)): rng.randint(1, 50) for _ in range(rng.randint(1, 25))}
                start = t0 + k * S + rng.randint(0, 5) * S
                rows.append({
                    "device_id": d, "start_ns": start, "end_ns": start + 20 * S, "name": "infer",
                    "labels": json.dumps({"model": rng.choice(["m1", "m2"])}), "count": sum(m.values()),
                    "sum_ns": rng.randint(10**6, 10**9), "errors": rng.randint(0, 2),
                    "zero_count": rng.randint(0, 1), "buckets": json.dumps(m), "scheme": scheme,
                })
        # GPU samples from before t0 to now: the rollup job rolls a device up to its newest sample.
        samples = [{"device_id": d, "ts_ns": t, "gpu_index": 0, "power_w": 5.0}
                   for d in ids.values() for t in [*range(t0 - 60 * S, now - 30 * S, 600 * S), now - 30 * S]]
        with engine.begin() as conn:
            conn.execute(insert(latency_histograms), rows)
            conn.execute(insert(gpu_samples), samples)
        RollupJob(engine).run_once(now)
        with engine.connect() as conn:
            tiers = {s for (s,) in conn.execute(select(latency_rollups.c.step_s).distinct())}
        assert tiers == {60, 3600}, "the reads below must mix hour and minute rollups with raw rows"

        groups = {"A": ["a1", "a2"], "B": ["b1"]}
        since = t0 + 17 * 60 * S + 7 * S  # not on any bucket boundary
        with Session(engine) as s:
            for step in (None, 3600, 600):
                got = query.group_latency_series(session=s, groups=groups, operation="infer", since_ns=since,
                                                 until_ns=now, step_s=step)
                step_s = step or comparison_step(now - since)
                for g, names in groups.items():
                    ref = _reference(rows, {ids[n] for n in names}, floor_to(since, step_s * S), now, step_s * S)
                    series = got[g]
                    assert series is not None
                    assert series.ts_ns == sorted(ref["buckets"])
                    assert list(zip(series.count, series.errors, series.p50_ms, series.p90_ms, series.p99_ms)) == [
                        ref["buckets"][t] for t in series.ts_ns]
            cmp = query.compare_groups(session=s, groups=groups, since_ns=since, until_ns=now, operation="infer")
            for c in cmp:
                ref = _reference(rows, {ids[n] for n in groups[c.group]}, since, now, None)
                (whole,) = ref["buckets"].values()
                assert c.latency is not None
                assert (c.latency.count, c.latency.errors, c.latency.p50_ms, c.latency.p90_ms,
                        c.latency.p99_ms) == whole
                assert c.latency.qps == pytest.approx(ref["qps"])
                # The chart beside the figures: the same window in comparison_step buckets (the
                # first holds only the part from `since`), read by the same query.
                step_ns = comparison_step(now - since) * S
                ref_series = _reference(rows, {ids[n] for n in groups[c.group]}, since, now, step_ns)
                assert c.latency_series is not None
                assert c.latency_series.ts_ns == sorted(ref_series["buckets"])
                assert list(zip(c.latency_series.count, c.latency_series.errors, c.latency_series.p50_ms,
                                c.latency_series.p90_ms, c.latency_series.p99_ms)) == [
                    ref_series["buckets"][t] for t in c.latency_series.ts_ns]
                assert sum(c.latency_series.count) == c.latency.count
            (no_op,) = query.compare_groups(session=s, groups={"A": groups["A"]}, since_ns=since, until_ns=now,
                                            operation=None)
            assert no_op.latency is None and no_op.latency_series is None
            # The Compare page's one call: the operations timed, and the comparison with the one
            # wanted when timed, else the most timed; its reads side by side give the same answer.
            timed = query.latency_operations(session=s, devices=["a1", "a2", "b1"], since_ns=since, until_ns=now)
            assert timed and timed[0] == "infer"
            for wanted in (None, "infer", "never-timed"):
                both = query.compare_with_operations(session=s, groups=groups, since_ns=since, until_ns=now,
                                                     wanted=wanted)  # fmt: skip
                assert (both.operations, both.operation) == (timed, "infer")
                assert both.groups == cmp
            bare = query.compare_with_operations(session=s, groups={"none": ["b1"]}, since_ns=now - 10 * S,
                                                 until_ns=now - 5 * S, wanted="infer")  # fmt: skip
            assert (bare.operations, bare.operation) == ([], None)
            assert bare.groups == query.compare_groups(session=s, groups={"none": ["b1"]}, since_ns=now - 10 * S,
                                                       until_ns=now - 5 * S, operation=None)  # fmt: skip
    finally:
        engine.dispose()


def test_comparison_step_reads_hour_rollups_from_half_a_day() -> None:
    assert comparison_step(24 * H) == 3600
    assert comparison_step(12 * H) == 3600
    assert comparison_step(30 * 24 * H) % 3600 == 0
    assert comparison_step(H) == 60
    assert (24 * H) // (comparison_step(24 * H) * S) <= 120


def test_a_reinstalled_device_counts_its_gpus_once(db_url: str) -> None:
    now = time.time_ns()
    engine = make_engine(db_url)
    try:
        old = _device(engine, "drone-1", "agent-old", now - 5 * H, now - 2 * H)
        new = _device(engine, "drone-1", "agent-new", now - 2 * H, now)
        other = _device(engine, "drone-2", "agent-2", now - 5 * H, now)
        samples = []
        for d, lo, hi, power in ((old, now - 3 * H, now - 2 * H, 10.0), (new, now - 2 * H, now, 12.0),
                                 (other, now - 3 * H, now, 8.0)):
            samples += [{"device_id": d, "ts_ns": t, "gpu_index": 0, "power_w": power, "util_gpu_percent": 50.0}
                        for t in range(lo, hi, 60 * S)]
        hists = [{"device_id": d, "start_ns": t, "end_ns": t + 60 * S, "name": "infer", "labels": "{}",
                  "count": 600, "sum_ns": 600 * 10**7, "errors": 0, "zero_count": 0, "buckets": '{"400": 600}',
                  "scheme": 0} for d in (old, new, other) for t in range(now - 3 * H, now - 60 * S, 60 * S)
                 if d != old or t < now - 2 * H]
        with engine.begin() as conn:
            conn.execute(insert(gpu_samples), samples)
            conn.execute(insert(latency_histograms), hists)
        with Session(engine) as s:
            (one,) = query.compare_groups(session=s, groups={"g": ["drone-1"]}, since_ns=now - 3 * H,
                                          until_ns=now, operation="infer")
            (both,) = query.compare_groups(session=s, groups={"g": ["drone-1", "drone-2"]}, since_ns=now - 3 * H,
                                           until_ns=now, operation="infer")
        assert one.gpu_count == 1 and both.gpu_count == 2
        # 10 calls a second before and after the reinstall: one stream of 10/s on one GPU, not two.
        assert one.latency is not None and one.latency.qps == pytest.approx(10.0)
        assert one.qps_per_gpu == pytest.approx(10.0)
        assert both.latency is not None and both.latency.qps == pytest.approx(20.0)
        # One GPU, its mean power weighted by samples across both installs (60 at 10 W, 120 at 12 W).
        assert one.power_per_device_w == pytest.approx((60 * 10.0 + 120 * 12.0) / 180)
        assert both.power_per_device_w == pytest.approx(((60 * 10.0 + 120 * 12.0) / 180 + 8.0) / 2)
    finally:
        engine.dispose()


def test_a_comparison_starts_on_the_whole_chart_bucket_that_holds_its_start() -> None:
    """What the Compare page and `fleetscope compare` pass: never later than asked, less than one
    chart bucket earlier, and on a boundary of that bucket (an hour for a day, a UTC midnight
    for a month), so that the edges are read from the coarsest rollups."""
    day = 24 * H
    aligned = 1_800_000_000 * S - 1_800_000_000 * S % day  # a UTC midnight
    for span in (10 * 60 * S, H, 6 * H, day, 7 * day, 30 * day):
        for until in (aligned + 5 * day, aligned + 5 * day + 1, aligned + 5 * day + 13 * H + 59 * 60 * S + 999):
            since = until - span
            got = query.comparison_start(since, until)
            step = comparison_step(until - got) * S
            assert got % step == 0 and since - step < got <= since, (span, until)
    assert query.comparison_start(aligned - 30 * day + 3 * H, aligned + 3 * H) == aligned - 30 * day
    assert query.comparison_start(aligned - day + 90 * 60 * S, aligned + 90 * 60 * S) == aligned - day + H
