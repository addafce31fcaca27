"""Latency bucket schemes through the real pipeline: histograms of an agent from before the
``scheme`` field (legacy base 1.04), of today's SDK (OTel scale 4), and an operation whose
window holds both (an agent upgraded mid-way), sent by a real agent over gRPC to a real
collector, stored, rolled up and read through the query API on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from fleetscope.agent.records import HostSample
from fleetscope.agent.samplers._base import SampleSet
from fleetscope.agent.sdk import Histogram
from fleetscope.collector import query
from fleetscope.collector.jobs.rollup import RollupJob
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.rollup_schema import latency_rollups
from fleetscope.collector.storage.schema import latency_histograms
from fleetscope.proto import buckets as legacy
from fleetscope.proto import exponential as ex
from fleetscope.proto.v1 import telemetry_pb2 as pb
from tests.helpers import IdleSampler, make_agent

S = 10**9
DEVICE = "scheme-node"
WINDOW_S = 20
WINDOWS = 6  # two minutes of 20 s histograms


def _values(seed: int, n: int = 3000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.rint(rng.lognormal(np.log(4e6), 0.5, n)).astype(np.int64)


def _legacy_message(name: str, values: np.ndarray, start: int) -> pb.LatencyHistogram:
    """What an agent from before the ``scheme`` field sends: base-1.04 indexes and no field 11."""
    counts: dict[int, int] = {}
    for v in values.tolist():
        i = legacy.bucket_index(v)
        counts[i] = counts.get(i, 0) + 1
    msg = pb.LatencyHistogram(
        name=name, labels={"model": "m"}, start_ns=start, end_ns=start + WINDOW_S * S, count=len(values),
        sum_ns=int(values.sum()), bucket_index=list(counts), bucket_count=list(counts.values()),
    )
    assert 11 not in [f.number for f, _ in msg.ListFields()], "the old wire form carries no scheme"
    return msg


def _sdk_message(name: str, values: np.ndarray, start: int) -> pb.LatencyHistogram:
    h = Histogram()
    h.record_many(values.tolist())
    msg = h.to_proto(name, {"model": "m"}, start, start + WINDOW_S * S)
    assert msg.scheme == 4
    return msg


@pytest.fixture
def collector(db_url: str) -> Iterator:  # type: ignore[no-untyped-def]
    """A real collector on a free port, its rollup job off: the tests roll when they choose."""
    from fleetscope.collector.ingest.server import Collector, CollectorSettings

    c = Collector(CollectorSettings(listen="127.0.0.1:0", db_url=db_url, tokens=frozenset(["test-token"]),
                                    rollups=False, detectors=None, grace_s=2.0))
    c.start()
    yield c
    c.stop()


@pytest.fixture
def sent(tmp_path: Path, db_url: str, collector) -> dict:  # type: ignore[no-untyped-def]
    t0 = (time.time_ns() - 3 * 3600 * S) // (3600 * S) * (3600 * S)  # an hour boundary, 2-3 h ago
    values: dict[str, list[np.ndarray]] = {"old": [], "new": [], "mixed": []}
    msgs = []
    for k in range(WINDOWS):
        start = t0 + k * WINDOW_S * S
        for name in values:
            v = _values(hash((name, k)) % 2**32)
            values[name].append(v)
            old_form = name == "old" or (name == "mixed" and k % 3 == 0)  # mixed: both in each minute
            msgs.append((_legacy_message if old_form else _sdk_message)(name, v, start))
    agent = make_agent(tmp_path, [f"127.0.0.1:{collector.port}"], IdleSampler(), name=DEVICE)
    # Host samples from the hour's start to past its end: the rollup job rolls a device from its
    # oldest sample up to its newest, so the histograms' minutes and hour get rolled.
    host_s = [0, 1, 3600, 3601, 3602]
    agent.add(SampleSet(host=[HostSample(ts_ns=t0 + k * S, cpu_percent=1.0) for k in host_s]))
    agent.add_sdk_report(pb.SdkReport(latency=msgs))
    agent.flush()
    agent.uplink.start()
    try:
        assert agent.uplink.drain(30), "batches not acknowledged"
    finally:
        agent.uplink.stop()
        agent.spool.close()
    return {"t0": t0, "values": {n: np.concatenate(v) for n, v in values.items()}, "msgs": msgs}


def _stats(db_url: str, t0: int) -> dict[str, query.LatencyStats]:
    engine = make_engine(db_url, create=False)
    try:
        with Session(engine) as s:
            got = query.latency_stats(session=s, devices=[DEVICE], since_ns=t0, until_ns=t0 + 3600 * S)
        return {x.name: x for x in got}
    finally:
        engine.dispose()


def _series(db_url: str, t0: int, step_s: int) -> list[query.LatencySeries]:
    """The Device page's latency series (per label set) at ``step_s``."""
    engine = make_engine(db_url, create=False)
    try:
        with Session(engine) as s:
            return list(
                query.device_series(session=s, device=DEVICE, since_ns=t0, until_ns=t0 + 3600 * S, step_s=step_s).latency
            )
    finally:
        engine.dispose()


def _pcts(x: query.LatencyStats) -> tuple:
    return (x.p50_ms, x.p90_ms, x.p99_ms, x.p999_ms)


def test_an_old_scheme_batch_is_stored_and_read_as_before(sent: dict, db_url: str) -> None:
    t0 = sent["t0"]
    engine = make_engine(db_url, create=False)
    with engine.connect() as conn:
        rows = conn.execute(
            select(latency_histograms.c.name, latency_histograms.c.start_ns, latency_histograms.c.scheme,
                   latency_histograms.c.buckets)
        ).all()
    engine.dispose()
    assert len(rows) == 3 * WINDOWS
    stored = {(n, st): (scheme, {int(k): v for k, v in json.loads(b).items()}) for n, st, scheme, b in rows}
    for m in sent["msgs"]:
        scheme, counts = stored[(m.name, m.start_ns)]
        assert scheme == m.scheme and counts == dict(zip(m.bucket_index, m.bucket_count)), "kept as sent"
    assert {s for (n, _), (s, _) in stored.items() if n == "old"} == {ex.LEGACY}

    stats = _stats(db_url, t0)
    # The legacy operation reads exactly as it did before schemes existed: legacy.quantile over
    # the merged legacy buckets, the computation the query API made then.
    old_counts = legacy.merge(dict(zip(m.bucket_index, m.bucket_count)) for m in sent["msgs"] if m.name == "old")
    assert _pcts(stats["old"]) == tuple(legacy.quantile(old_counts, q) / 1e6 for q in (0.5, 0.9, 0.99, 0.999))
    for name in ("old", "new", "mixed"):
        values = sent["values"][name]
        assert stats[name].count == len(values)
        bound = {"old": ex.relative_error(0), "new": ex.relative_error(4)}.get(
            name, max(ex.relative_error(0), ex.relative_error(4)))
        for q, got in zip((0.5, 0.9, 0.99, 0.999), _pcts(stats[name])):
            exact = float(np.quantile(values, q)) / 1e6
            assert got is not None and abs(got - exact) / exact <= bound + 1e-9, (name, q, got, exact)


def test_rollups_keep_schemes_apart_and_read_the_same(sent: dict, db_url: str) -> None:
    t0 = sent["t0"]
    before_stats = _stats(db_url, t0)
    before = {step: _series(db_url, t0, step) for step in (60, 3600)}
    engine = make_engine(db_url, create=False)
    try:
        report = RollupJob(engine, settle_s=0).run_once(time.time_ns())
        assert report.ran and report.rows[60] > 0 and report.rows[3600] > 0
        with engine.connect() as conn:
            r = latency_rollups.c
            rows = conn.execute(select(r.step_s, r.bucket_ns, r.name, r.scheme, r.count, r.buckets)).all()
    finally:
        engine.dispose()
    by_key: dict[tuple, dict[int, tuple[int, dict]]] = {}
    for step, b, name, scheme, count, buckets in rows:
        assert scheme not in by_key.setdefault((step, b, name), {}), "one row per scheme"
        by_key[(step, b, name)][scheme] = (count, {int(k): v for k, v in json.loads(buckets).items()})
    for (step, b, name), per in by_key.items():
        assert set(per) == {"old": {0}, "new": {4}, "mixed": {0, 4}}[name], (step, b, name)
        for scheme, (count, counts) in per.items():
            src = [m for m in sent["msgs"] if m.name == name and m.scheme == scheme and b <= m.start_ns < b + step * S]
            assert count == sum(m.count for m in src)
            assert counts == legacy.merge(dict(zip(m.bucket_index, m.bucket_count)) for m in src), "merged exactly"
    # Day rows too when the data's hours ended a UTC day (a run between midnight and 3 am): checked above like the rest.
    assert {60, 3600} <= {step for step, _b, _n in by_key} <= {60, 3600, 86400}
    # Read through the rollups, the same figures as from the raw histograms.
    for step in (60, 3600):
        after = _series(db_url, t0, step)
        assert [(x.name, x.count, x.p50_ms, x.p90_ms, x.p99_ms) for x in after] == [
            (x.name, x.count, x.p50_ms, x.p90_ms, x.p99_ms) for x in before[step]]
    assert _stats(db_url, t0) == before_stats


def test_revision_0005_gives_stored_histograms_the_legacy_scheme_and_reads_them_as_before(db_url: str) -> None:
    from sqlalchemy import inspect, text

    from fleetscope.collector.storage import migrations

    engine = make_engine(db_url, create=False)
    try:
        migrations.upgrade(engine, "0004")
        assert "scheme" not in [c["name"] for c in inspect(engine).get_columns("latency_histograms")]
        t0 = (time.time_ns() - 3600 * S) // (60 * S) * (60 * S)
        values = _values(7)
        msg = _legacy_message("infer", values, t0)
        buckets = json.dumps(dict(zip(msg.bucket_index, msg.bucket_count)))
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO devices (agent_id, name, hostname, kind, boot_id, agent_version, labels, "
                              "inventory, capabilities, first_seen_ns, last_seen_ns, clock_skew_ns, counters, "
                              "batches_stored, batches_rejected, last_rejection, simulated) VALUES ('a-1', :n, 'h', "
                              "'server', 'b', '0', '{}', '{}', '[]', :t, :t, 0, '{}', 0, 0, '', false)"),
                         {"n": DEVICE, "t": t0})
            d = conn.execute(text("SELECT id FROM devices")).scalar()
            conn.execute(text("INSERT INTO latency_histograms (device_id, start_ns, end_ns, name, labels, count, sum_ns, "
                              "errors, zero_count, buckets) VALUES (:d, :t, :e, 'infer', '{}', :c, :s, 0, 0, :b)"),
                         {"d": d, "t": t0, "e": t0 + WINDOW_S * S, "c": msg.count, "s": msg.sum_ns, "b": buckets})
            conn.execute(text("INSERT INTO latency_rollups (device_id, step_s, bucket_ns, name, labels, count, sum_ns, "
                              "errors, zero_count, window_ns, buckets) VALUES (:d, 60, :t, 'infer', '{}', :c, :s, 0, 0, "
                              ":w, :b)"), {"d": d, "t": t0, "c": msg.count, "s": msg.sum_ns, "w": WINDOW_S * S, "b": buckets})
        migrations.upgrade(engine)
        with engine.connect() as conn:
            assert conn.execute(select(latency_histograms.c.scheme, latency_histograms.c.buckets)).all() == [(0, buckets)]
            assert conn.execute(select(latency_rollups.c.scheme)).scalars().all() == [0]
        (got,) = _stats(db_url, t0).values()
        counts = dict(zip(msg.bucket_index, msg.bucket_count))
        assert _pcts(got) == tuple(legacy.quantile(counts, q) / 1e6 for q in (0.5, 0.9, 0.99, 0.999))
        # Back down: the column goes, the legacy rows stay.
        migrations.downgrade(engine, "0004")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM latency_histograms")).scalar() == 1
        assert "scheme" not in [c["name"] for c in inspect(engine).get_columns("latency_rollups")]
    finally:
        engine.dispose()


# ------------------------------------------------------------------ detectors across an upgrade


def _hist_row(device_id: int, ts: int, values_ms: list[float], scheme: int) -> dict:
    counts: dict[int, int] = {}
    for v in values_ms:
        i = ex.bucket_index(v * 1e6, scheme)
        counts[i] = counts.get(i, 0) + 1
    return {"device_id": device_id, "start_ns": ts, "end_ns": ts + S, "name": "infer", "labels": "{}",
            "count": len(values_ms), "sum_ns": int(sum(values_ms) * 1e6), "errors": 0, "zero_count": 0,
            "buckets": json.dumps({str(k): v for k, v in counts.items()}), "scheme": scheme}


def test_detectors_read_a_legacy_baseline_against_a_new_scheme_window(db_url: str) -> None:
    """An agent upgraded mid-hour: its baseline is legacy, its new windows scale 4. A steady
    latency is no regression across the change; a 2.5x slowdown still is, with the ratio right."""
    from sqlalchemy import insert

    from tests.collector.test_detectors import T0, _device, _incidents, _job

    engine = make_engine(db_url)
    try:
        d = _device(engine)
        rng = np.random.default_rng(11)
        steady = [_hist_row(d, T0 + k * S, rng.normal(10.0, 0.5, 5).tolist(), 0 if k < 60 else 4) for k in range(70)]
        with engine.begin() as conn:
            conn.execute(insert(latency_histograms), steady)
        job = _job(engine, regression_window_s=10.0, regression_baseline_s=60.0, regression_min_count=50)
        for t in range(10, 71, 10):
            job.run_once(T0 + t * S)
        assert _incidents(engine, "latency_regression") == [], "the scheme change is no regression"
        slow = [_hist_row(d, T0 + (70 + k) * S, [25.0] * 5, 4) for k in range(10)]
        with engine.begin() as conn:
            conn.execute(insert(latency_histograms), slow)
        job.run_once(T0 + 80 * S)
        (inc,) = _incidents(engine, "latency_regression")
        assert inc.state == "open" and 2.2 < inc.facts["ratio"] < 2.8
        p99_new = ex.quantile({ex.bucket_index(25e6, 4): 1}, 0.99, scheme=4) / 1e6
        assert inc.facts["p99_ms"] == round(p99_new, 3)
    finally:
        engine.dispose()


@pytest.mark.parametrize("scheme, ok", [(0, True), (1, True), (4, True), (8, True), (9, False), (2**31, False)])
def test_the_collector_accepts_known_schemes_and_rejects_others_naming_the_field(scheme: int, ok: bool) -> None:
    from fleetscope.collector.errors import BatchInvalid
    from fleetscope.collector.ingest.validation import Limits, validate_batch

    now = time.time_ns()
    h = pb.LatencyHistogram(name="infer", start_ns=now - S, end_ns=now, count=2, sum_ns=2000,
                            bucket_index=[5], bucket_count=[2], scheme=scheme)
    batch = pb.Batch(agent_id="a-1", boot_id="b", seq=1, created_ns=now, sent_ns=now, latency=[h])
    if ok:
        validate_batch(batch, Limits())
    else:
        with pytest.raises(BatchInvalid) as err:
            validate_batch(batch, Limits())
        assert err.value.field == "latency[0].scheme"
