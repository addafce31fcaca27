"""The benchmarks' fills write rows the current schema accepts: bench_dashboard's incidents carry
the lifecycle columns of revision 0003 (``last_seen_ns`` is NOT NULL)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from sqlalchemy import func, select

from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.schema import Incident
from fleetscope.proto.vocabulary import KIND_TRT_BENCHMARK

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench_dashboard  # noqa: E402  (a script beside the others, not a package)

NS = 10**9


def test_bench_dashboard_fills_incidents_with_their_lifecycle(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        specs = bench_dashboard.device_specs(2, 1)
        now = time.time_ns() // NS * NS
        t0 = now - 13 * 3600 * NS  # an incident every 6 hours per device: one of each in the fill
        bench_dashboard.insert_devices(engine, specs, t0, now)
        bench_dashboard.fill(engine, specs, t0, t0 + 6 * 3600 * NS + 60 * NS, {}, quiet=True)
        bench_dashboard.trt_records(engine, specs, now)
        i = Incident.__table__.c
        with engine.connect() as conn:
            rows = conn.execute(select(i.kind, i.ts_ns, i.last_seen_ns, i.ended_ns, i.state)).all()
            assert conn.execute(select(func.count()).where(i.last_seen_ns.is_(None))).scalar_one() == 0
        assert KIND_TRT_BENCHMARK in {r.kind for r in rows} and len(rows) >= 4
        assert all(r.last_seen_ns == r.ts_ns and r.ended_ns is not None for r in rows)
    finally:
        engine.dispose()


def test_bench_ingest_backlog_stays_inside_the_raw_tier_with_every_job_on() -> None:
    """Retention (raw tier 7 days) runs in the benchmark's collector: a backlog older than the
    tier would be deleted mid-run and fail the exactly-once check."""
    import bench_ingest

    from fleetscope.collector.jobs.retention import RetentionSettings

    age_s = (time.time_ns() - bench_ingest.backlog_start_ns()) / NS
    raw_s = RetentionSettings().raw_s
    assert raw_s is not None and 86_400 < age_s <= raw_s - 86_400
    command = bench_ingest.collector_command("127.0.0.1:1", "sqlite:///x.db", 1, rollups=True)
    assert not [a for a in command if a.startswith("--no-")], command
